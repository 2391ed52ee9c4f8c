//! One connection's timers, beyond hyper's header-read timeout:
//!
//! - a write-stall timeout: `StallGuard` fails a write (or flush) that has made
//!   no progress for the limit, so a client that pipelines requests and never
//!   reads loses its connection instead of holding it forever (hyper has no
//!   timer while it waits to flush, and TCP zero-window probes keep the socket
//!   alive);
//! - a maximum age, ended the way HTTP/1.1 clients expect (RFC 9112 §9.6):
//!   once the connection is that old, [`Aging`] puts `Connection: close` on
//!   its next response and hyper closes it after writing that response; an
//!   aged connection that stays idle is left to hyper's idle timeout (the
//!   header-read timeout), as any kept-alive connection is. It is never
//!   closed at the age itself: a request already on its way would meet EOF
//!   instead of its answer. `drive` cuts it only if it is still open `linger`
//!   past its age (longer than an idle period and a request's deadline), so
//!   a client reading a byte now and then cannot keep it either.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::{Either, FutureExt, Map};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// A transport that can drop what it holds at once when it is given up on.
pub trait Abort {
    /// Called when a write stalled: the connection is about to be dropped.
    fn abort(&self);
}

impl Abort for tokio::net::TcpStream {
    // Zero linger: the close sends a reset and frees the socket's buffers now,
    // instead of the kernel probing a zero window for minutes.
    fn abort(&self) {
        let _ = self.set_zero_linger();
    }
}

#[cfg(test)]
impl Abort for tokio::io::DuplexStream {
    fn abort(&self) {}
}

/// Fails writes that make no progress for `limit`.
#[derive(Debug)]
pub struct StallGuard<T> {
    inner: T,
    limit: Duration,
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl<T> StallGuard<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        StallGuard {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }
}

impl<T: Abort> StallGuard<T> {
    /// The write is pending: start the clock if it is not running, fail once it ran out.
    fn stalled<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if !self.armed {
            self.timer.as_mut().reset(Instant::now() + self.limit);
            self.armed = true;
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.inner.abort();
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("write stalled for {:?}: the client stopped reading", self.limit),
                )))
            }
        }
    }

    fn progressed<R>(&mut self, r: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => self.stalled(cx),
            ready => {
                self.armed = false;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Abort + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progressed(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progressed(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.progressed(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progressed(r, cx)
    }
}

/// How a connection ended, for the debug log.
#[derive(Debug, thiserror::Error)]
pub enum ConnEnd {
    #[error("{}", chain(.0))]
    Http(#[from] hyper::Error),
    #[error("still open {0:?} after it was asked to close; cut")]
    Cut(Duration),
    #[error("still open {0:?} past its maximum age (its last response said `Connection: close`); cut")]
    Aged(Duration),
}

/// An error and its causes, `a: b: c` (hyper's own message alone hides the I/O error).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// A connection hyper serves that can be asked to finish its current response and close.
pub trait Graceful: Future<Output = Result<(), hyper::Error>> {
    fn close_after_response(self: Pin<&mut Self>);
}

impl<I, S, B> Graceful for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn close_after_response(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// The response future of [`Aging`]: unchanged while the connection is young.
type AgingFuture<F, R, E> = Either<F, Map<F, fn(Result<R, E>) -> Result<R, E>>>;

/// A connection's service that answers `Connection: close` once the
/// connection is `max_age` old (the response that says so is its last).
#[derive(Debug, Clone)]
pub struct Aging<S> {
    inner: S,
    born: Instant,
    max_age: Duration,
}

impl<S> Aging<S> {
    pub fn new(inner: S, max_age: Duration) -> Self {
        Aging {
            inner,
            born: Instant::now(),
            max_age,
        }
    }
}

fn close<B, E>(r: Result<axum::http::Response<B>, E>) -> Result<axum::http::Response<B>, E> {
    r.map(|mut resp| {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        resp
    })
}

impl<S, Req, B> hyper::service::Service<Req> for Aging<S>
where
    S: hyper::service::Service<Req, Response = axum::http::Response<B>>,
{
    type Response = axum::http::Response<B>;
    type Error = S::Error;
    type Future = AgingFuture<S::Future, axum::http::Response<B>, S::Error>;

    fn call(&self, req: Req) -> Self::Future {
        let fut = self.inner.call(req);
        if self.born.elapsed() >= self.max_age {
            Either::Right(fut.map(close::<B, S::Error> as fn(_) -> _))
        } else {
            Either::Left(fut)
        }
    }
}

/// Serves `conn` until it ends, or `stop` turns true (then it may finish its
/// current response within `grace`), or it is still open `linger` past
/// `max_age` (cut: its responses have said `Connection: close` since its age,
/// see [`Aging`]).
pub async fn drive<C: Graceful>(
    conn: C,
    mut stop: watch::Receiver<bool>,
    max_age: Duration,
    linger: Duration,
    grace: Duration,
) -> Result<(), ConnEnd> {
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return r.map_err(ConnEnd::from),
        () = tokio::time::sleep(max_age + linger) => return Err(ConnEnd::Aged(max_age + linger)),
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().close_after_response();
    match tokio::time::timeout(grace, conn).await {
        Ok(r) => r.map_err(ConnEnd::from),
        Err(_) => Err(ConnEnd::Cut(grace)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn app() -> axum::Router {
        axum::Router::new().route("/big", get(|| async { "x".repeat(64 * 1024) }))
    }

    fn serve(
        io: tokio::io::DuplexStream,
        stall: Duration,
    ) -> hyper::server::conn::http1::Connection<
        TokioIo<StallGuard<tokio::io::DuplexStream>>,
        TowerToHyperService<axum::Router>,
    > {
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .serve_connection(
                TokioIo::new(StallGuard::new(io, stall)),
                TowerToHyperService::new(app()),
            )
    }

    #[tokio::test]
    async fn a_client_that_never_reads_loses_the_connection() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve(server, Duration::from_millis(300));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_secs(3600),
            Duration::from_secs(1),
            Duration::from_secs(1),
        ));
        // Pipelined requests, nothing read.
        client
            .write_all(&b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n".repeat(20))
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the stalled connection ended")
            .unwrap();
        let e = r.unwrap_err();
        assert!(e.to_string().contains("write stalled"), "{e}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_slow_but_steady_reader_is_not_cut_by_the_stall_timer() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve(server, Duration::from_millis(300));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_secs(3600),
            Duration::from_secs(1),
            Duration::from_secs(1),
        ));
        client
            .write_all(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        // 64 KiB through a 4 KiB pipe, a chunk every 50 ms: each write progresses.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let n = client.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.len() > 64 * 1024, "{}", got.len());
        served.await.unwrap().unwrap();
    }

    /// A connection with [`Aging`] and an idle (header-read) timeout of `idle`.
    fn serve_aging(
        io: tokio::io::DuplexStream,
        max_age: Duration,
        idle: Duration,
    ) -> hyper::server::conn::http1::Connection<
        TokioIo<StallGuard<tokio::io::DuplexStream>>,
        Aging<TowerToHyperService<axum::Router>>,
    > {
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(idle)
            .serve_connection(
                TokioIo::new(StallGuard::new(io, Duration::from_secs(60))),
                Aging::new(TowerToHyperService::new(app()), max_age),
            )
    }

    /// Reads one response (headers and a Content-Length body); None at EOF.
    async fn response(client: &mut tokio::io::DuplexStream) -> Option<String> {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if client.read(&mut byte).await.unwrap() == 0 {
                assert!(
                    buf.is_empty(),
                    "EOF inside a response: {:?}",
                    String::from_utf8_lossy(&buf)
                );
                return None;
            }
            buf.push(byte[0]);
        }
        let head = String::from_utf8(buf).unwrap().to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut body = vec![0u8; len];
        client.read_exact(&mut body).await.unwrap();
        Some(head)
    }

    #[tokio::test]
    async fn an_aged_connection_answers_its_next_request_with_connection_close_then_closes() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve_aging(server, Duration::from_millis(200), Duration::from_secs(30));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_millis(200),
            Duration::from_secs(30),
            Duration::from_secs(1),
        ));
        client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let first = response(&mut client).await.expect("an answer");
        assert!(
            first.starts_with("http/1.1 200") && !first.contains("connection: close"),
            "{first}"
        );
        // Past the age, idle: not closed under a request on its way.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            !served.is_finished(),
            "an idle aged connection is not closed at its age"
        );
        client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let last = response(&mut client)
            .await
            .expect("the request sent past the age is answered");
        assert!(last.contains("connection: close"), "{last}");
        assert_eq!(response(&mut client).await, None, "then EOF");
        let r = tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
        assert!(r.is_ok(), "{r:?}");
    }

    #[tokio::test]
    async fn an_aged_idle_connection_ends_at_the_idle_timeout_and_a_slow_reader_is_cut() {
        // Idle past its age: hyper's idle timeout ends it, as any kept-alive connection.
        let (_client, server) = tokio::io::duplex(4096);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve_aging(server, Duration::from_millis(100), Duration::from_millis(300));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_millis(100),
            Duration::from_secs(30),
            Duration::from_secs(1),
        ));
        let r = tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(r, Err(ConnEnd::Http(_))), "{r:?}");

        // A response that cannot be delivered: cut `linger` past the age.
        let (mut client, server) = tokio::io::duplex(4096);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve_aging(server, Duration::from_millis(100), Duration::from_secs(30));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_millis(100),
            Duration::from_millis(300),
            Duration::from_secs(1),
        ));
        client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(r, Err(ConnEnd::Aged(_))), "{r:?}");
    }

    #[tokio::test]
    async fn stop_closes_idle_connections() {
        let (_client, server) = tokio::io::duplex(4096);
        let (stop_tx, stop) = watch::channel(false);
        let conn = serve(server, Duration::from_secs(60));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_secs(3600),
            Duration::from_secs(5),
            Duration::from_secs(5),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
        assert!(r.is_ok(), "{r:?}");
    }
}
