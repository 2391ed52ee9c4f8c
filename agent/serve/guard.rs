//! Request-level checks, in this order: the Host header (against DNS
//! rebinding), no request body, the bearer token, load shedding, a deadline.
//! Every response, refusals included, says `X-Content-Type-Options: nosniff`
//! and `Cache-Control: no-store`. `/healthz` skips the Host and token checks:
//! it reveals nothing, and the kubelet must always reach it.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::Semaphore;

use super::token::BearerToken;

/// Host names (besides IP literals and `localhost`) a request may be addressed to.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// Lowercase, without a trailing dot.
    names: Vec<String>,
}

impl AllowedHosts {
    /// The node name and any extra names (`--web.allowed-hosts`).
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut names: Vec<String> = names
            .into_iter()
            .map(normalize_name)
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        names.dedup();
        AllowedHosts { names }
    }

    fn allows(&self, host: &str) -> bool {
        let name = normalize_name(host);
        name == "localhost" || self.names.contains(&name)
    }
}

fn normalize_name(n: &str) -> String {
    n.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Why a request's Host was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRefusal {
    /// Not a syntactically valid `host[:port]`, or several Host headers: 400.
    Malformed,
    /// A name this agent does not answer to (DNS rebinding, a stray proxy): 421.
    NotServedHere,
}

/// Checks the Host header and an absolute-form request target. A request with
/// neither (an HTTP/1.0 tool) is served: browsers, the DNS-rebinding vector,
/// always send Host.
pub fn check_host(headers: &HeaderMap, uri: &Uri, allowed: &AllowedHosts) -> Result<(), HostRefusal> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(HostRefusal::Malformed);
    }
    if let Some(v) = first {
        let v = v.to_str().map_err(|_| HostRefusal::Malformed)?;
        check_authority(v, allowed)?;
    }
    if let Some(a) = uri.authority() {
        check_authority(a.as_str(), allowed)?;
    }
    Ok(())
}

fn check_authority(authority: &str, allowed: &AllowedHosts) -> Result<(), HostRefusal> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        // [IPv6]:port
        let (v6, after) = rest.split_once(']').ok_or(HostRefusal::Malformed)?;
        v6.parse::<Ipv6Addr>().map_err(|_| HostRefusal::Malformed)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(HostRefusal::Malformed)?),
        };
        check_port(port)?;
        return Ok(());
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    check_port(port)?;
    let valid_name = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !valid_name {
        return Err(HostRefusal::Malformed);
    }
    if host.parse::<Ipv4Addr>().is_ok() || allowed.allows(host) {
        Ok(())
    } else {
        Err(HostRefusal::NotServedHere)
    }
}

fn check_port(port: Option<&str>) -> Result<(), HostRefusal> {
    match port {
        None => Ok(()),
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().map(|_| ()).map_err(|_| HostRefusal::Malformed)
        }
        Some(_) => Err(HostRefusal::Malformed),
    }
}

/// Request-level limits, all settable by flags.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// Deadline of one request, from headers read to response ready.
    pub request_timeout: Duration,
    /// Requests served at once; more get 503 at once.
    pub max_concurrent: usize,
    /// Bearer token required on every endpoint but /healthz, when set.
    pub bearer_token: Option<BearerToken>,
    /// Names the Host header may carry besides IP literals and localhost.
    pub allowed_hosts: AllowedHosts,
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

/// Sets the headers every response carries.
fn hygiene_headers(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Snapshots of a node's state: no cache (browser, proxy) keeps them.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Only the response headers: for the routes of the reserved /healthz connections.
pub fn hygiene(router: Router) -> Router {
    router.layer(middleware::map_response(|mut resp: Response| async move {
        hygiene_headers(&mut resp);
        resp
    }))
}

/// Wraps the routes with every request-level check.
pub fn harden(router: Router, limits: &RequestLimits) -> Router {
    let slots = Arc::new(Semaphore::new(limits.max_concurrent.max(1)));
    let deadline = limits.request_timeout;
    let token = limits.bearer_token.clone();
    let hosts = Arc::new(limits.allowed_hosts.clone());
    router.layer(middleware::from_fn(move |req: Request, next: Next| {
        let slots = slots.clone();
        let token = token.clone();
        let hosts = hosts.clone();
        async move {
            let mut resp = checked(req, next, &slots, deadline, token.as_ref(), &hosts).await;
            hygiene_headers(&mut resp);
            resp
        }
    }))
}

async fn checked(
    req: Request,
    next: Next,
    slots: &Semaphore,
    deadline: Duration,
    token: Option<&BearerToken>,
    hosts: &AllowedHosts,
) -> Response {
    let open = req.uri().path() == "/healthz";
    if !open {
        match check_host(req.headers(), req.uri(), hosts) {
            Ok(()) => {}
            Err(HostRefusal::Malformed) => return plain(StatusCode::BAD_REQUEST, "malformed Host header\n"),
            Err(HostRefusal::NotServedHere) => {
                return plain(
                    StatusCode::MISDIRECTED_REQUEST,
                    "this agent answers only to an IP address, localhost, the node name or --web.allowed-hosts\n",
                )
            }
        }
    }
    // Requests carry no body here; refuse one rather than read it.
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    if has_body {
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "request bodies are not accepted\n");
    }
    if let Some(token) = token {
        if !open && !token.accepts(req.headers().get(header::AUTHORIZATION)) {
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
            allowed_hosts: AllowedHosts::new(["node-a"]),
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

    async fn call(app: &Router, req: axum::http::Request<Body>) -> Response {
        app.clone().oneshot(req).await.unwrap()
    }

    async fn status(app: &Router, req: axum::http::Request<Body>) -> StatusCode {
        call(app, req).await.status()
    }

    fn get_req(path: &str) -> axum::http::Request<Body> {
        axum::http::Request::get(path).body(Body::empty()).unwrap()
    }

    fn with(path: &str, name: &str, value: &str) -> axum::http::Request<Body> {
        axum::http::Request::get(path)
            .header(name, value)
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn bearer_token_guards_all_but_healthz() {
        let limits = RequestLimits {
            bearer_token: Some(BearerToken::fixed("s3cret")),
            ..limits()
        };
        let a = app(&limits);
        assert_eq!(status(&a, get_req("/healthz")).await, StatusCode::OK);
        let denied = call(&a, get_req("/metrics")).await;
        assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(denied.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let wrong = with("/metrics", "authorization", "Bearer nope!!");
        assert_eq!(status(&a, wrong).await, StatusCode::UNAUTHORIZED);
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let right = with("/metrics", "authorization", &format!("{scheme} s3cret"));
            assert_eq!(status(&a, right).await, StatusCode::OK, "{scheme}");
        }
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

    #[tokio::test]
    async fn every_response_says_nosniff_and_no_store() {
        let limits = RequestLimits {
            request_timeout: Duration::from_millis(100),
            bearer_token: Some(BearerToken::fixed("t")),
            ..limits()
        };
        let a = app(&limits);
        let auth = |path: &str| with(path, "authorization", "Bearer t");
        let post = axum::http::Request::post("/metrics")
            .header("authorization", "Bearer t")
            .body(Body::empty())
            .unwrap();
        let body = axum::http::Request::get("/metrics")
            .header("content-length", "1")
            .body(Body::from("x"))
            .unwrap();
        let cases = [
            (get_req("/healthz"), StatusCode::OK),
            (auth("/metrics"), StatusCode::OK),
            (get_req("/metrics"), StatusCode::UNAUTHORIZED),
            (auth("/nope"), StatusCode::NOT_FOUND),
            (post, StatusCode::METHOD_NOT_ALLOWED),
            (body, StatusCode::PAYLOAD_TOO_LARGE),
            (auth("/slow"), StatusCode::SERVICE_UNAVAILABLE),
            (
                with("/metrics", "host", "evil.example"),
                StatusCode::MISDIRECTED_REQUEST,
            ),
            (with("/metrics", "host", "a b"), StatusCode::BAD_REQUEST),
        ];
        for (req, want) in cases {
            let what = format!("{} {}", req.method(), req.uri());
            let r = call(&a, req).await;
            assert_eq!(r.status(), want, "{what}");
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store", "{what}");
        }
        // The routes of the reserved /healthz connections too.
        let lane = hygiene(Router::new().route("/healthz", get(|| async { "ok" })));
        for path in ["/healthz", "/metrics"] {
            let r = call(&lane, get_req(path)).await;
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store", "{path}");
        }
    }

    #[test]
    fn host_header_rules() {
        let allowed = AllowedHosts::new(["Node-A.", "metrics.example.com"]);
        let check = |host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            check_host(&h, &Uri::from_static("/metrics"), &allowed)
        };
        for ok in [
            "127.0.0.1",
            "127.0.0.1:9877",
            "10.1.2.3:80",
            "[::1]",
            "[::1]:9877",
            "[fe80::1]:9877",
            "localhost",
            "LOCALHOST:9877",
            "localhost.",
            "node-a",
            "NODE-A:9877",
            "node-a.:9877",
            "metrics.example.com",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for rebound in [
            "evil.example",
            "evil.example:9877",
            "node-a.evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "node-b",
            "0x7f000001",
        ] {
            assert_eq!(check(rebound), Err(HostRefusal::NotServedHere), "{rebound}");
        }
        for malformed in [
            "",
            ":9877",
            "node-a:",
            "node-a:99999",
            "node-a:98x",
            "[::1",
            "[not-v6]:1",
            "[::1]x",
            "a b",
            "a/b",
            "node-a:9877:1",
        ] {
            assert_eq!(check(malformed), Err(HostRefusal::Malformed), "{malformed:?}");
        }
        // Several Host headers: refused, whatever they say.
        let mut h = HeaderMap::new();
        h.append(header::HOST, HeaderValue::from_static("127.0.0.1"));
        h.append(header::HOST, HeaderValue::from_static("127.0.0.1"));
        assert_eq!(
            check_host(&h, &Uri::from_static("/"), &allowed),
            Err(HostRefusal::Malformed)
        );
        // No Host (HTTP/1.0 tools): served. An absolute-form target is checked like a Host.
        assert_eq!(check_host(&HeaderMap::new(), &Uri::from_static("/"), &allowed), Ok(()));
        let absolute = Uri::from_static("http://evil.example/metrics");
        assert_eq!(
            check_host(&HeaderMap::new(), &absolute, &allowed),
            Err(HostRefusal::NotServedHere)
        );
    }

    #[tokio::test]
    async fn healthz_answers_any_host() {
        let a = app(&limits());
        assert_eq!(
            status(&a, with("/healthz", "host", "evil.example")).await,
            StatusCode::OK
        );
        assert_eq!(
            status(&a, with("/metrics", "host", "node-a:9877")).await,
            StatusCode::OK
        );
    }
}
