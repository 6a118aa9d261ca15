//! A pricing feed served on 127.0.0.1, like a gateway's `/api/pricing`, for `pricing fetch`.

use std::net::SocketAddr;

/// Serves `body` at `/api/pricing` and a 503 at `/down` on 127.0.0.1, for the test's lifetime.
pub fn serve(body: Vec<u8>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new()
                .route(
                    "/api/pricing",
                    axum::routing::get(move || async move { body }),
                )
                .route(
                    "/down",
                    axum::routing::get(|| async {
                        (
                            http::StatusCode::SERVICE_UNAVAILABLE,
                            "upstream unavailable",
                        )
                    }),
                );
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}
