//! One connection's timers, beyond hyper's header-read timeout:
//!
//! - a write-stall timeout: `StallGuard` fails a write (or flush) that has made
//!   no progress for the limit, so a client that pipelines requests and never
//!   reads loses its connection instead of holding it forever (hyper has no
//!   timer while it waits to flush, and TCP zero-window probes keep the socket
//!   alive);
//! - a maximum age: `drive` asks the connection to close after its current
//!   response once it is that old, and cuts it a grace period later, so a
//!   client reading a byte now and then cannot keep it either.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

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

/// Serves `conn` until it ends, it reaches `max_age`, or `stop` turns true;
/// in the last two cases it may finish its current response within `grace`.
pub async fn drive<C: Graceful>(
    conn: C,
    mut stop: watch::Receiver<bool>,
    max_age: Duration,
    grace: Duration,
) -> Result<(), ConnEnd> {
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return r.map_err(ConnEnd::from),
        () = tokio::time::sleep(max_age) => {}
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
        let served = tokio::spawn(drive(conn, stop, Duration::from_secs(3600), Duration::from_secs(1)));
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
        let served = tokio::spawn(drive(conn, stop, Duration::from_secs(3600), Duration::from_secs(1)));
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

    #[tokio::test]
    async fn an_old_connection_is_closed_after_its_response_then_cut() {
        // Idle keep-alive connection past its age: closed at once, cleanly.
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve(server, Duration::from_secs(60));
        let served = tokio::spawn(drive(conn, stop, Duration::from_millis(200), Duration::from_secs(5)));
        client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
        assert!(r.is_ok(), "{r:?}");
        let mut all = Vec::new();
        client.read_to_end(&mut all).await.unwrap();
        assert!(all.starts_with(b"HTTP/1.1 200"), "the response in flight was finished");

        // A response that cannot be delivered past the age: cut after the grace.
        let (mut client, server) = tokio::io::duplex(4096);
        let (_stop_tx, stop) = watch::channel(false);
        let conn = serve(server, Duration::from_secs(60));
        let served = tokio::spawn(drive(
            conn,
            stop,
            Duration::from_millis(200),
            Duration::from_millis(300),
        ));
        client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(r, Err(ConnEnd::Cut(_))), "{r:?}");
    }

    #[tokio::test]
    async fn stop_closes_idle_connections() {
        let (_client, server) = tokio::io::duplex(4096);
        let (stop_tx, stop) = watch::channel(false);
        let conn = serve(server, Duration::from_secs(60));
        let served = tokio::spawn(drive(conn, stop, Duration::from_secs(3600), Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
        assert!(r.is_ok(), "{r:?}");
    }
}
