//! Request-level checks, in this order: no request body, the bearer token,
//! load shedding, a deadline. `/healthz` skips the token check: the kubelet
//! must always reach it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::Semaphore;

/// Request-level limits, all settable by flags.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// Deadline of one request, from headers read to response ready.
    pub request_timeout: Duration,
    /// Requests served at once; more get 503 at once.
    pub max_concurrent: usize,
    /// Bearer token required on every endpoint but /healthz, when set.
    pub bearer_token: Option<String>,
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// Wraps the routes with every request-level check.
pub fn harden(router: Router, limits: &RequestLimits) -> Router {
    let slots = Arc::new(Semaphore::new(limits.max_concurrent.max(1)));
    let deadline = limits.request_timeout;
    let token: Option<Arc<str>> = limits.bearer_token.as_deref().map(Arc::from);
    router.layer(middleware::from_fn(move |req: Request, next: Next| {
        let slots = slots.clone();
        let token = token.clone();
        async move {
            // Requests carry no body here; refuse one rather than read it.
            let has_body = req
                .headers()
                .get(header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0")
                || req.headers().contains_key(header::TRANSFER_ENCODING);
            if has_body {
                return plain(StatusCode::PAYLOAD_TOO_LARGE, "request bodies are not accepted\n");
            }
            if let Some(token) = &token {
                if req.uri().path() != "/healthz" && !bearer_matches(&req, token) {
                    let mut r = plain(StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n");
                    r.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    return r;
                }
            }
            // Shed load instead of queueing without end.
            let Ok(_permit) = slots.try_acquire() else {
                return plain(StatusCode::SERVICE_UNAVAILABLE, "too many concurrent requests\n");
            };
            match tokio::time::timeout(deadline, next.run(req)).await {
                Ok(r) => r,
                Err(_) => plain(StatusCode::SERVICE_UNAVAILABLE, "request deadline exceeded\n"),
            }
        }
    }))
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
fn bearer_matches(req: &Request, token: &str) -> bool {
    let Some(given) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    fn limits() -> RequestLimits {
        RequestLimits {
            request_timeout: Duration::from_secs(10),
            max_concurrent: 64,
            bearer_token: None,
        }
    }

    fn app(limits: &RequestLimits) -> Router {
        let r = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/metrics", get(|| async { "m" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            );
        harden(r, limits)
    }

    async fn status(app: &Router, req: axum::http::Request<Body>) -> StatusCode {
        app.clone().oneshot(req).await.unwrap().status()
    }

    fn get_req(path: &str) -> axum::http::Request<Body> {
        axum::http::Request::get(path).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn bearer_token_guards_all_but_healthz() {
        let limits = RequestLimits {
            bearer_token: Some("s3cret".into()),
            ..limits()
        };
        let a = app(&limits);
        assert_eq!(status(&a, get_req("/healthz")).await, StatusCode::OK);
        assert_eq!(status(&a, get_req("/metrics")).await, StatusCode::UNAUTHORIZED);
        let wrong = axum::http::Request::get("/metrics")
            .header("authorization", "Bearer nope!!")
            .body(Body::empty())
            .unwrap();
        assert_eq!(status(&a, wrong).await, StatusCode::UNAUTHORIZED);
        let right = axum::http::Request::get("/metrics")
            .header("authorization", "Bearer s3cret")
            .body(Body::empty())
            .unwrap();
        assert_eq!(status(&a, right).await, StatusCode::OK);
    }

    #[tokio::test]
    async fn bodies_deadlines_and_shedding() {
        let limits = RequestLimits {
            request_timeout: Duration::from_millis(200),
            max_concurrent: 1,
            ..limits()
        };
        let a = app(&limits);
        let with_body = axum::http::Request::get("/metrics")
            .header("content-length", "5")
            .body(Body::from("hello"))
            .unwrap();
        assert_eq!(status(&a, with_body).await, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(status(&a, get_req("/slow")).await, StatusCode::SERVICE_UNAVAILABLE);
        // One slot: a second request while the first is in flight is shed at once.
        let busy = tokio::spawn({
            let a = a.clone();
            async move { status(&a, get_req("/slow")).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(status(&a, get_req("/metrics")).await, StatusCode::SERVICE_UNAVAILABLE);
        busy.await.unwrap();
        assert_eq!(status(&a, get_req("/metrics")).await, StatusCode::OK);
    }
}
