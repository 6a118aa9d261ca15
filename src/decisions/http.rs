//! `POST /v1/retry-decision` on the HTTP address: the decision messages in the proto3 JSON
//! mapping (the `json` module beside this one).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use super::json::{request_from_json, response_to_json};
use super::{DecideError, Decider, HTTP_PATH};
use crate::server::auth::{self, Authenticator};

const JSON: &str = "application/json";
/// gRPC codes in the error body, as OTLP/HTTP answers errors with a `google.rpc.Status`.
const CODE_INVALID_ARGUMENT: i32 = 3;
const CODE_RESOURCE_EXHAUSTED: i32 = 8;
const CODE_INTERNAL: i32 = 13;
const CODE_UNAUTHENTICATED: i32 = 16;

#[derive(Clone)]
struct DecisionsState {
    decider: Decider,
    max_request_bytes: usize,
    auth: Option<Arc<Authenticator>>,
}

/// The route, to merge into the OTLP/HTTP receiver's router; with `auth`, every request must
/// carry an accepted bearer token, as exports must.
pub fn router(
    decider: Decider,
    max_request_bytes: usize,
    auth: Option<Arc<Authenticator>>,
) -> Router {
    Router::new()
        .route(HTTP_PATH, post(decide))
        // The limit is enforced in the handler, after the token is checked.
        .layer(DefaultBodyLimit::disable())
        .with_state(DecisionsState {
            decider,
            max_request_bytes,
            auth,
        })
}

async fn decide(State(state): State<DecisionsState>, headers: HeaderMap, body: Body) -> Response {
    // Before the body is read: an unauthenticated caller costs nothing more.
    if let Some(auth) = &state.auth {
        if !auth.accepts(headers.get(header::AUTHORIZATION)) {
            let mut response = error(
                StatusCode::UNAUTHORIZED,
                CODE_UNAUTHENTICATED,
                auth::REFUSAL_MESSAGE,
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    let limit = state.max_request_bytes;
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return if std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
            {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    CODE_RESOURCE_EXHAUSTED,
                    &format!("request body is larger than the {limit}-byte limit"),
                )
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    CODE_INVALID_ARGUMENT,
                    &format!("cannot read request body: {e}"),
                )
            };
        }
    };
    let answer = request_from_json(&bytes)
        .map_err(DecideError::from)
        .and_then(|question| state.decider.decide(question));
    match answer {
        Ok(response) => {
            ([(header::CONTENT_TYPE, JSON)], response_to_json(&response)).into_response()
        }
        Err(DecideError::Malformed(malformed)) => error(
            StatusCode::BAD_REQUEST,
            CODE_INVALID_ARGUMENT,
            &malformed.to_string(),
        ),
        Err(e @ DecideError::NoDecision) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            CODE_INTERNAL,
            &e.to_string(),
        ),
    }
}

/// A `google.rpc.Status` in JSON, as OTLP/HTTP answers errors.
fn error(status: StatusCode, code: i32, message: &str) -> Response {
    let body = serde_json::json!({ "code": code, "message": message });
    let mut response = ([(header::CONTENT_TYPE, JSON)], body.to_string()).into_response();
    *response.status_mut() = status;
    response
}
