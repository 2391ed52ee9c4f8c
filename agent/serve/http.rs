//! HTTP routes. Handlers only read the latest publication: a scrape never
//! waits for a probe and does no work beyond copying bytes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use crate::expose::{Publication, INDEX};
use crate::liveness::Liveness;

/// The latest publication; None until every probe has run once.
pub type Latest = watch::Receiver<Option<Arc<Publication>>>;

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

pub fn router(latest: Latest, liveness: Arc<Liveness>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/snapshot", get(snapshot))
        .route("/findings", get(findings))
        .route("/healthz", get(healthz).with_state(liveness))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(latest)
}

/// The body of a 404: which paths there are (the path asked for is not echoed).
pub(crate) const NOT_FOUND: &str =
    "404 not found: this agent serves /, /metrics, /snapshot, /findings, /healthz and /readyz\n";

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, TEXT)], NOT_FOUND).into_response()
}

/// The routes of a reserved connection (taken when the connection caps are
/// reached): `/healthz`, and 503 for everything else.
pub fn health_only(liveness: Arc<Liveness>) -> Router {
    Router::new()
        .route("/healthz", get(healthz).with_state(liveness))
        .fallback(|| async {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONTENT_TYPE, TEXT)],
                "connection limit reached: this connection may only ask /healthz\n",
            )
        })
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

/// A rendering's body, or a 500 saying it failed (a bug; the next request tries again).
fn rendered(content_type: &'static str, r: Result<bytes::Bytes, &'static str>) -> Response {
    match r {
        Ok(b) => body(content_type, b),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, TEXT)], why).into_response(),
    }
}

fn current(latest: &Latest) -> Option<Arc<Publication>> {
    latest.borrow().clone()
}

/// Whether the client asked for HTML (a browser's Accept header lists text/html).
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/html"))
}

const NOT_YET_HTML: &str = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
    <meta http-equiv=\"refresh\" content=\"2\">\n<title>proxywatch: starting</title>\n<link rel=\"icon\" href=\"data:,\">\n</head>\n\
    <body>\n<main>\n<h1>proxywatch</h1>\n<p>No snapshot yet: the first probe round is still running. This page reloads itself.</p>\n</main>\n</body>\n</html>\n";

/// `/`: the status page for a browser, the route index and a short status for curl.
async fn index(State(latest): State<Latest>, headers: HeaderMap) -> Response {
    let html = wants_html(&headers);
    let (content_type, bytes) = match (current(&latest), html) {
        (Some(p), true) => (HTML, p.page_html()),
        (Some(p), false) => (TEXT, p.index_text()),
        (None, true) => (HTML, Ok(bytes::Bytes::from_static(NOT_YET_HTML.as_bytes()))),
        (None, false) => (
            TEXT,
            Ok(bytes::Bytes::from(format!(
                "status: no snapshot yet: the first probe round is still running\n\n{INDEX}"
            ))),
        ),
    };
    let mut resp = rendered(content_type, bytes);
    let h = resp.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if html {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(crate::expose::page::CSP),
        );
        h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    }
    resp
}

async fn metrics(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        Some(p) => rendered(PROMETHEUS, p.metrics()),
        None => not_yet(),
    }
}

async fn snapshot(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        Some(p) => rendered(JSON, p.snapshot_json()),
        None => not_yet(),
    }
}

async fn findings(State(latest): State<Latest>) -> Response {
    match current(&latest) {
        Some(p) => rendered(JSON, p.findings_json()),
        None => not_yet(),
    }
}

/// 200 while the pipeline moves; 503 with the reason once it has stalled, so
/// that the kubelet's liveness probe restarts the agent.
async fn healthz(State(liveness): State<Arc<Liveness>>) -> Response {
    match liveness.check() {
        Ok(()) => ([(header::CONTENT_TYPE, TEXT)], "ok\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, TEXT)],
            format!("{why}\n"),
        )
            .into_response(),
    }
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
    use crate::evaluate::evaluate;
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
    async fn healthz_fails_with_the_reason_once_the_pipeline_stalls() {
        let (_tx, rx) = watch::channel(None);
        let live = Arc::new(Liveness::new(std::time::Duration::ZERO));
        live.panicked("render on purpose");
        std::thread::sleep(std::time::Duration::from_millis(5));
        for app in [router(rx, live.clone()), health_only(live.clone())] {
            let (status, _, text) = call(&app, "GET", "/healthz").await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert!(
                text.starts_with("pipeline stalled") && text.contains("render on purpose"),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn before_the_first_snapshot() {
        let (_tx, rx) = watch::channel(None);
        let app = router(rx, Arc::new(Liveness::new(std::time::Duration::from_secs(60))));
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
        let (tx, rx) = watch::channel(Some(Arc::new(Publication::new(
            &s,
            evaluate(&s, &crate::config::default_thresholds()),
        ))));
        let app = router(rx, Arc::new(Liveness::new(std::time::Duration::from_secs(60))));

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
        let (st, _, text) = call(&app, "GET", "/nope").await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        for path in ["/metrics", "/snapshot", "/findings", "/healthz", "/readyz"] {
            assert!(text.contains(path), "{path} not in the 404 body: {text}");
        }

        // A critical finding makes /readyz 503 with the reason; /healthz stays 200.
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.ip_forward", 0);
        tx.send(Some(Arc::new(Publication::new(
            &s,
            evaluate(&s, &crate::config::default_thresholds()),
        ))))
        .unwrap();
        let (st, _, text) = call(&app, "GET", "/readyz").await;
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
        assert!(text.contains("net.ipv4.ip_forward is 0"), "{text}");
        assert!(
            text.contains("\n  sysctl_ip_forward: "),
            "/readyz names the finding's id: {text}"
        );
        assert_eq!(call(&app, "GET", "/healthz").await.0, StatusCode::OK);
        let (_, _, text) = call(&app, "GET", "/findings").await;
        let f: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(f[0]["id"], "sysctl_ip_forward");
        assert_eq!(f[0]["severity"], "critical");
    }

    /// GET `path` with an Accept header; returns (status, content type, CSP, body).
    async fn get_accept(app: &Router, path: &str, accept: &str) -> (StatusCode, String, String, String) {
        let resp = app
            .clone()
            .oneshot(
                Request::builder()
                    .uri(path)
                    .header(header::ACCEPT, accept)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let h = |name| {
            resp.headers()
                .get(name)
                .map(|v: &HeaderValue| v.to_str().unwrap().to_string())
                .unwrap_or_default()
        };
        let (status, ct, csp) = (
            resp.status(),
            h(header::CONTENT_TYPE),
            h(header::CONTENT_SECURITY_POLICY),
        );
        assert_eq!(resp.headers()[header::VARY], "Accept");
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, ct, csp, String::from_utf8(bytes.to_vec()).unwrap())
    }

    const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

    #[tokio::test]
    async fn index_negotiates_html_for_browsers_text_for_curl() {
        let (tx, rx) = watch::channel(None);
        let app = router(rx, Arc::new(Liveness::new(std::time::Duration::from_secs(60))));
        // Before the first snapshot: both say so, neither fails.
        let (st, ct, _, text) = get_accept(&app, "/", "*/*").await;
        assert_eq!((st, ct.as_str()), (StatusCode::OK, TEXT));
        assert!(text.contains("/metrics") && text.contains("no snapshot yet"), "{text}");
        let (st, ct, _, html) = get_accept(&app, "/", BROWSER).await;
        assert_eq!((st, ct.as_str()), (StatusCode::OK, HTML));
        assert!(html.contains("No snapshot yet"), "{html}");

        let mut s = crate::evaluate::test_support::healthy();
        s.node = "<script>alert('x')</script>".into();
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.ip_forward", 0);
        tx.send(Some(Arc::new(Publication::new(
            &s,
            evaluate(&s, &crate::config::default_thresholds()),
        ))))
        .unwrap();

        let (st, ct, csp, html) = get_accept(&app, "/", BROWSER).await;
        assert_eq!((st, ct.as_str()), (StatusCode::OK, HTML));
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(html.starts_with("<!doctype html>"));
        assert!(html.contains("id=\"finding-sysctl_ip_forward\""), "{html}");
        assert!(!html.contains("<script>"), "the node name is escaped: {html}");
        assert!(
            html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"),
            "{html}"
        );

        // curl: the index plus a short status, no HTML.
        for accept in ["*/*", "text/plain", "application/json"] {
            let (st, ct, csp, text) = get_accept(&app, "/", accept).await;
            assert_eq!((st, ct.as_str(), csp.as_str()), (StatusCode::OK, TEXT, ""), "{accept}");
            assert!(
                text.starts_with("status: CRITICAL on node <script>alert('x')</script> at "),
                "the verdict first: {text}"
            );
            assert!(text.ends_with(INDEX), "then the routes: {text}");
            assert!(text.contains("  [critical] sysctl_ip_forward: "), "{text}");
            assert!(!text.contains("<!doctype"), "{text}");
        }
    }
}
