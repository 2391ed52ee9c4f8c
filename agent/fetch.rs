//! The one HTTP client: plain-HTTP GET of kube-proxy's local endpoints, with a
//! timeout over the whole exchange and a cap on the body, given per call (each
//! endpoint has its own). A body over the cap is refused as soon as its declared
//! length or the bytes read pass it, so at most the cap is ever held. Built on
//! hyper's low-level HTTP/1 connection, which axum already brings in.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Body;
use hyper_util::rt::TokioIo;

use crate::deadline::Deadline;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: not an http://host:port/path URL")]
    BadUrl { url: String },
    #[error("{url}: connection refused")]
    Refused { url: String },
    #[error("{url}: {message}")]
    Io { url: String, message: String },
    #[error("{url}: no answer within {after:?}")]
    Timeout { url: String, after: Duration },
    #[error("{url}: body exceeds {limit} bytes")]
    TooLarge { url: String, limit: usize },
}

impl FetchError {
    /// Nothing listens there: the service is absent, not broken.
    pub fn is_refused(&self) -> bool {
        matches!(self, FetchError::Refused { .. })
    }
}

/// A response: status code and body text (lossily decoded).
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    pub body: String,
}

/// Splits `http://host:port/path` into (authority, path).
pub fn split_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    (!authority.is_empty() && !authority.contains('@')).then_some((authority, path))
}

/// Joins a base URL (`http://127.0.0.1:10249`) and a path (`/metrics`).
pub fn join(base: &str, path: &str) -> String {
    format!("{}{}", base.trim_end_matches('/'), path)
}

pub async fn get(url: &str, timeout: Duration, max_body: usize) -> Result<Fetched, FetchError> {
    get_authorized(url, timeout, max_body, None).await
}

/// Like [`get`], sending `Authorization: Bearer <token>` when a token is given (an agent
/// started with `--web.bearer-token-file`). The token goes in plain HTTP: for loopback only.
pub async fn get_authorized(
    url: &str,
    timeout: Duration,
    max_body: usize,
    bearer: Option<&str>,
) -> Result<Fetched, FetchError> {
    match tokio::time::timeout(timeout, get_inner(url, max_body, bearer)).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::Timeout {
            url: url.to_string(),
            after: timeout,
        }),
    }
}

/// Like [`get`], ending at a probe's deadline; a timeout names the probe's
/// whole budget, the number the user configured.
pub async fn get_until(url: &str, deadline: Deadline, max_body: usize) -> Result<Fetched, FetchError> {
    match tokio::time::timeout_at(deadline.at().into(), get_inner(url, max_body, None)).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::Timeout {
            url: url.to_string(),
            after: deadline.budget(),
        }),
    }
}

async fn get_inner(url: &str, max_body: usize, bearer: Option<&str>) -> Result<Fetched, FetchError> {
    let bad = || FetchError::BadUrl { url: url.to_string() };
    let (authority, path) = split_url(url).ok_or_else(bad)?;
    let io = |e: &dyn std::fmt::Display| FetchError::Io {
        url: url.to_string(),
        message: e.to_string(),
    };
    let stream = tokio::net::TcpStream::connect(authority).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            FetchError::Refused { url: url.to_string() }
        } else {
            io(&e)
        }
    })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| io(&e))?;
    let driver = tokio::spawn(conn);
    let mut request = hyper::Request::get(path).header(hyper::header::HOST, authority).header(
        hyper::header::USER_AGENT,
        concat!("proxywatch/", env!("CARGO_PKG_VERSION")),
    );
    if let Some(token) = bearer {
        let value = hyper::header::HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| FetchError::Io {
            url: url.to_string(),
            message: "the bearer token is not a valid header value".to_string(),
        })?;
        request = request.header(hyper::header::AUTHORIZATION, value);
    }
    let request = request
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|_| bad())?;
    let result = async {
        let response = sender.send_request(request).await.map_err(|e| io(&e))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        if body.size_hint().lower() as usize > max_body {
            return Err(FetchError::TooLarge {
                url: url.to_string(),
                limit: max_body,
            });
        }
        // A declared length is reserved once (it is within the cap); otherwise the buffer grows.
        let mut buf: Vec<u8> = Vec::with_capacity(body.size_hint().exact().map_or(0, |n| n as usize));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| io(&e))?;
            if let Some(data) = frame.data_ref() {
                if buf.len() + data.len() > max_body {
                    return Err(FetchError::TooLarge {
                        url: url.to_string(),
                        limit: max_body,
                    });
                }
                buf.extend_from_slice(data);
            }
        }
        // Valid UTF-8 (every real answer) is taken as is, not copied.
        let body = match String::from_utf8(buf) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Ok(Fetched { status, body })
    }
    .await;
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            split_url("http://127.0.0.1:10249/metrics"),
            Some(("127.0.0.1:10249", "/metrics"))
        );
        assert_eq!(split_url("http://127.0.0.1:10249"), Some(("127.0.0.1:10249", "/")));
        assert_eq!(split_url("https://x/"), None);
        assert_eq!(split_url("http:///x"), None);
        assert_eq!(join("http://a:1/", "/metrics"), "http://a:1/metrics");
    }

    #[tokio::test]
    async fn refused_timeout_and_cap() {
        // A port nothing listens on: bind, learn the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = get(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(2), 100)
            .await
            .unwrap_err();
        assert!(err.is_refused(), "{err}");

        // A server that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", silent.local_addr().unwrap());
        let err = get(&url, Duration::from_millis(300), 100).await.unwrap_err();
        assert!(matches!(err, FetchError::Timeout { .. }), "{err}");

        // A server with a body over the cap.
        let big = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", big.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut s, _) = big.accept().await.unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).await;
            let body = "x".repeat(5000);
            let _ = s
                .write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len()).as_bytes())
                .await;
        });
        let err = get(&url, Duration::from_secs(2), 1000).await.unwrap_err();
        assert!(matches!(err, FetchError::TooLarge { limit: 1000, .. }), "{err}");
    }
}
