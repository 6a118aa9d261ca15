//! The HTTP endpoint Prometheus scrapes and orchestrators probe.

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::health::Health;
use super::registry::Metrics;

pub const METRICS_PATH: &str = "/metrics";
pub const HEALTH_PATH: &str = "/healthz";
/// The content type of the text exposition format 0.0.4, which Prometheus negotiates down to.
pub const EXPOSITION_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// `GET /metrics` (Prometheus text) and `GET /healthz` (`ok`, or 503 with one problem per line).
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(metrics_page))
        .route(HEALTH_PATH, get(health_page))
        .with_state(Shared { metrics, health })
}

/// Serves `router` on `listener` until `shutdown` resolves, then finishes the requests in flight.
///
/// The caller binds the listener, so a busy port is reported before anything else starts and
/// tests can bind port 0.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics_page(State(shared): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, EXPOSITION_CONTENT_TYPE)],
        shared.metrics.render(),
    )
        .into_response()
}

async fn health_page(State(shared): State<Shared>) -> Response {
    match shared.health.status() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(problems) => (StatusCode::SERVICE_UNAVAILABLE, format!("{problems}\n")).into_response(),
    }
}
