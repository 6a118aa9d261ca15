//! `pricing fetch`: one HTTP GET of a feed, bounded in time and size.

use std::time::Duration;

/// Feeds today are a few megabytes (LiteLLM's file about 1.5); anything far larger is not one.
pub const MAX_FEED_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: not an http:// or https:// URL")]
    BadUrl { url: String },
    #[error("{url}: the server answered HTTP {status}, not a feed")]
    Status { url: String, status: String },
    #[error("{url}: no complete answer within {}", humantime::format_duration(*timeout))]
    Timeout { url: String, timeout: Duration },
    #[error("{url}: the answer is larger than {limit} bytes, too large for a price feed")]
    TooLarge { url: String, limit: usize },
    #[error("{url}: request failed")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

/// Downloads `url` (following redirects), failing on any answer but 2xx, after `timeout` for
/// the whole exchange, or past `max_bytes` of body.
pub async fn fetch_feed(
    url: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Vec<u8>, FetchError> {
    let parsed = reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| FetchError::BadUrl { url: url.into() })?;
    let failed = |source: reqwest::Error| {
        if source.is_timeout() {
            FetchError::Timeout {
                url: url.into(),
                timeout,
            }
        } else {
            FetchError::Http {
                url: url.into(),
                source,
            }
        }
    };
    // One TLS provider at run time, ring, as the receivers use; reqwest would otherwise pick
    // the aws-lc one its rustls feature builds. A provider installed earlier wins.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!(
            env!("CARGO_PKG_NAME"),
            "/",
            env!("CARGO_PKG_VERSION")
        ))
        .build()
        .map_err(failed)?;
    let mut response = client.get(parsed).send().await.map_err(failed)?;
    let status = response.status();
    if !status.is_success() {
        return Err(FetchError::Status {
            url: url.into(),
            status: status.to_string(),
        });
    }
    let too_large = || FetchError::TooLarge {
        url: url.into(),
        limit: max_bytes,
    };
    if response
        .content_length()
        .is_some_and(|length| length > max_bytes as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if body.len() + chunk.len() > max_bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Serves one connection with `answer` (when given) and returns the URL to fetch.
    async fn server(answer: Option<Vec<u8>>) -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/pricing", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            match answer {
                Some(answer) => {
                    let _ = stream.write_all(&answer).await;
                    let _ = stream.shutdown().await;
                }
                // Hold the connection open and silent until the client gives up.
                None => {
                    let _ = stream.read(&mut request).await;
                }
            }
        });
        (url, task)
    }

    fn answer(status: &str, headers: &str, body: &str) -> Option<Vec<u8>> {
        Some(format!("HTTP/1.1 {status}\r\nconnection: close\r\n{headers}\r\n{body}").into_bytes())
    }

    #[tokio::test]
    async fn a_2xx_answer_gives_the_body() {
        let (url, _server) = server(answer("200 OK", "content-length: 7\r\n", "{\"a\":1}")).await;
        let body = fetch_feed(&url, Duration::from_secs(30), 1024)
            .await
            .unwrap();
        assert_eq!(body, b"{\"a\":1}");
    }

    #[tokio::test]
    async fn any_other_status_is_an_error_naming_it() {
        let (url, _server) = server(answer(
            "503 Service Unavailable",
            "content-length: 0\r\n",
            "",
        ))
        .await;
        let e = fetch_feed(&url, Duration::from_secs(30), 1024)
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Status { .. }), "{e:?}");
        assert!(
            e.to_string().contains("HTTP 503 Service Unavailable"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_declared_or_not() {
        let (url, _server) =
            server(answer("200 OK", "content-length: 11\r\n", "12345678901")).await;
        let e = fetch_feed(&url, Duration::from_secs(30), 10)
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::TooLarge { limit: 10, .. }), "{e:?}");

        // No length announced: counted while reading.
        let (url, _server) = server(answer("200 OK", "", "12345678901")).await;
        let e = fetch_feed(&url, Duration::from_secs(30), 10)
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::TooLarge { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let (url, _server) = server(None).await;
        let e = fetch_feed(&url, Duration::from_millis(200), 1024)
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Timeout { .. }), "{e:?}");
        assert!(e.to_string().contains("within 200ms"), "{e}");
    }

    #[tokio::test]
    async fn only_http_urls_are_fetched() {
        for url in ["file:///etc/passwd", "not a url", "ftp://example.com/x"] {
            let e = fetch_feed(url, Duration::from_secs(1), 1024)
                .await
                .unwrap_err();
            assert!(matches!(e, FetchError::BadUrl { .. }), "{url}: {e:?}");
        }
    }
}
