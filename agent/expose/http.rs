//! HTTP routes. Handlers only read the latest publication: a scrape never
//! waits for a probe and does no work beyond copying bytes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use super::Publication;

/// The latest publication; None until every probe has run once.
pub type Latest = watch::Receiver<Option<Arc<Publication>>>;

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";

const INDEX: &str = "proxywatch: is this node's kube-proxy data plane healthy?

  /metrics   Prometheus metrics
  /snapshot  facts, probe outcomes and findings (JSON)
  /findings  active findings (JSON)
  /healthz   200 while the agent runs
  /readyz    200 when the first snapshot exists and no critical finding is active
";

pub fn router(latest: Latest) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/snapshot", get(snapshot))
        .route("/findings", get(findings))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(latest)
}

fn body(content_type: &'static str, bytes: bytes::Bytes) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static(content_type))], bytes).into_response()
}

fn not_yet() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, TEXT)],
        "no snapshot yet: the first probe round is still running\n",
    )
        .into_response()
}

fn current(latest: &Latest) -> Option<Arc<Publication>> {
    latest.borrow().clone()
}

async fn index() -> Response {
    ([(header::CONTENT_TYPE, TEXT)], INDEX).into_response()
}

async fn metrics(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        Some(p) => body(PROMETHEUS, p.metrics.clone()),
        None => not_yet(),
    }
}

async fn snapshot(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        Some(p) => body(JSON, p.snapshot_json.clone()),
        None => not_yet(),
    }
}

async fn findings(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        Some(p) => body(JSON, p.findings_json.clone()),
        None => not_yet(),
    }
}

async fn healthz() -> Response {
    ([(header::CONTENT_TYPE, TEXT)], "ok\n").into_response()
}

async fn readyz(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        None => not_yet(),
        Some(p) => match p.readiness() {
            Ok(()) => ([(header::CONTENT_TYPE, TEXT)], "ready\n").into_response(),
            Err(reasons) => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONTENT_TYPE, TEXT)],
                format!("not ready: critical findings:\n{reasons}\n"),
            )
                .into_response(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::Thresholds;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn call(app: &Router, method: &str, path: &str) -> (StatusCode, String, String) {
        let resp = app
            .clone()
            .oneshot(Request::builder().method(method).uri(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn before_the_first_snapshot() {
        let (_tx, rx) = watch::channel(None);
        let app = router(rx);
        assert_eq!(call(&app, "GET", "/healthz").await.0, StatusCode::OK);
        for path in ["/metrics", "/snapshot", "/findings", "/readyz"] {
            assert_eq!(
                call(&app, "GET", path).await.0,
                StatusCode::SERVICE_UNAVAILABLE,
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn every_endpoint() {
        let mut s = crate::evaluate::test_support::healthy();
        let (tx, rx) = watch::channel(Some(Arc::new(Publication::new(&s, &Thresholds::default()))));
        let app = router(rx);

        let (st, ct, text) = call(&app, "GET", "/").await;
        assert_eq!((st, ct.as_str()), (StatusCode::OK, TEXT));
        assert!(text.contains("/metrics"));
        let (st, ct, text) = call(&app, "GET", "/metrics").await;
        assert_eq!((st, ct.as_str()), (StatusCode::OK, PROMETHEUS));
        assert!(text.contains("proxywatch_node_ready 1"));
        let (st, ct, text) = call(&app, "GET", "/snapshot").await;
        assert_eq!((st, ct.as_str()), (StatusCode::OK, JSON));
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["node"], "node-a");
        assert_eq!(doc["status"], "ok");
        assert_eq!(doc["facts"]["conntrack"]["entries"], 1000);
        let (st, _, text) = call(&app, "GET", "/findings").await;
        assert_eq!((st, text.trim()), (StatusCode::OK, "[]"));
        assert_eq!(call(&app, "GET", "/readyz").await.0, StatusCode::OK);
        assert_eq!(call(&app, "HEAD", "/metrics").await.0, StatusCode::OK);
        assert_eq!(call(&app, "POST", "/metrics").await.0, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(call(&app, "GET", "/nope").await.0, StatusCode::NOT_FOUND);

        // A critical finding makes /readyz 503 with the reason; /healthz stays 200.
        s.facts
            .sysctls
            .as_mut()
            .unwrap()
            .values
            .insert("net.ipv4.ip_forward".into(), Some(0));
        tx.send(Some(Arc::new(Publication::new(&s, &Thresholds::default()))))
            .unwrap();
        let (st, _, text) = call(&app, "GET", "/readyz").await;
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
        assert!(text.contains("net.ipv4.ip_forward is 0"), "{text}");
        assert_eq!(call(&app, "GET", "/healthz").await.0, StatusCode::OK);
        let (_, _, text) = call(&app, "GET", "/findings").await;
        let f: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(f[0]["id"], "sysctl_ip_forward");
        assert_eq!(f[0]["severity"], "critical");
    }
}
