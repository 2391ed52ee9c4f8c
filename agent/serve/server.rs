//! The HTTP listener, hardened for a privileged agent on every node.
//!
//! Per connection (`admit`, `conn`): a cap on connections in total and per
//! client address, a few slots held back for `/healthz` so the kubelet's probe
//! gets through when the caps are reached, a header-read timeout, a
//! write-stall timeout (a client that stops reading is cut), a maximum age
//! (ended with `Connection: close` on the next response, never under a request),
//! and small fixed socket buffers (the kernel would otherwise grow each send
//! buffer to 4 MiB, charged to the agent's memory limit).
//!
//! Per request (`guard`): the Host header checked against DNS rebinding,
//! bodies refused, an optional bearer token (re-read on rotation), bounded
//! concurrency with load shedding, a deadline, `nosniff` and `no-store` on
//! every response. Shutdown is graceful and bounded.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;

use super::admit::{Admission, Caps, Slot};
use super::conn::{drive, Aging, StallGuard};
use super::guard::{self, AllowedHosts, RequestLimits};
use super::token::BearerToken;

/// Send buffer of each connection (the kernel doubles it for its bookkeeping:
/// 128 KiB). The largest body (`/snapshot`) goes through it in a few round
/// trips; a client that stops reading pins this much kernel memory, not the
/// 4 MiB autotuning would grow it to.
pub const SEND_BUFFER_BYTES: u32 = 64 * 1024;
/// Receive buffer of each connection (32 KiB in the kernel's count): requests
/// are a few hundred bytes and bodies are refused.
pub const RECEIVE_BUFFER_BYTES: u32 = 16 * 1024;
/// hyper's read and write buffer per connection.
const HTTP_BUFFER_BYTES: usize = 16 * 1024;

/// Limits of the listener; all settable by flags.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time a client has to send its request headers (also: how long an idle
    /// keep-alive connection stays open).
    pub header_read_timeout: Duration,
    /// Deadline of one request, from headers read to response ready.
    pub request_timeout: Duration,
    /// Requests served at once; more get 503 at once.
    pub max_concurrent: usize,
    /// Open connections at once, the reserved ones not counted.
    pub max_connections: usize,
    /// Open connections from one client address (IPv6: one /64).
    pub max_connections_per_address: usize,
    /// Connections held back for `/healthz` when the caps are reached.
    pub reserved_health_connections: usize,
    /// How long a response write may make no progress before the connection is cut.
    pub write_stall_timeout: Duration,
    /// Age after which a connection's next response says `Connection: close`
    /// (and is its last); cut if still open an idle period and a request's deadline later.
    pub max_connection_age: Duration,
    /// Bearer token required on every endpoint but /healthz, when set.
    pub bearer_token: Option<BearerToken>,
    /// Host names accepted besides IP literals and localhost (the node name...).
    pub allowed_hosts: AllowedHosts,
    /// How long in-flight requests may take to finish on shutdown.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_concurrent: 64,
            max_connections: 256,
            max_connections_per_address: 128,
            reserved_health_connections: 8,
            write_stall_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(300),
            bearer_token: None,
            allowed_hosts: AllowedHosts::default(),
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

impl Limits {
    fn request_limits(&self) -> RequestLimits {
        RequestLimits {
            request_timeout: self.request_timeout,
            max_concurrent: self.max_concurrent,
            bearer_token: self.bearer_token.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
        }
    }
}

/// Binds `addr` with the socket buffer sizes every accepted connection inherits.
pub fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(SEND_BUFFER_BYTES)?;
    socket.set_recv_buffer_size(RECEIVE_BUFFER_BYTES)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// What one accepted connection is served with.
#[derive(Clone)]
struct ConnSettings {
    app: Router,
    keep_alive: bool,
    header_read_timeout: Duration,
    write_stall_timeout: Duration,
    max_age: Duration,
    /// How long past its age a connection is cut if it is still open.
    linger: Duration,
    grace: Duration,
}

/// Serves `router` on `listener` (`health`, the `/healthz`-only routes, on
/// the connections held back for it) until `shutdown` completes, then stops
/// accepting and gives in-flight requests `limits.shutdown_grace` to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    health: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let regular = ConnSettings {
        app: guard::harden(router, &limits.request_limits()),
        keep_alive: true,
        header_read_timeout: limits.header_read_timeout,
        write_stall_timeout: limits.write_stall_timeout,
        max_age: limits.max_connection_age,
        // An idle period (hyper closes a kept-alive connection idle this long)
        // and one request's deadline: any client that reads its answers has
        // closed an aged connection by then.
        linger: limits.header_read_timeout + limits.request_timeout,
        grace: limits.request_timeout,
    };
    // A reserved connection: one /healthz request, short-lived whatever the client does.
    let reserved = ConnSettings {
        app: guard::hygiene(health),
        keep_alive: false,
        max_age: limits.header_read_timeout,
        linger: Duration::from_secs(1),
        grace: Duration::from_secs(1),
        ..regular.clone()
    };
    let admission = Admission::new(Caps {
        total: limits.max_connections,
        per_address: limits.max_connections_per_address,
        reserved: limits.reserved_health_connections,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(ticket) = admission.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        let settings = match ticket.slot() {
            Slot::Regular => regular.clone(),
            Slot::Reserved => reserved.clone(),
        };
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, settings, stop).await {
                tracing::debug!(%peer, "connection: {e}");
            }
            drop(ticket);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(limits.shutdown_grace, admission.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(
            "{} connections did not finish within {:?}",
            admission.open(),
            limits.shutdown_grace
        );
    }
    Ok(())
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    s: ConnSettings,
    stop: watch::Receiver<bool>,
) -> Result<(), super::conn::ConnEnd> {
    let io = TokioIo::new(StallGuard::new(stream, s.write_stall_timeout));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(s.header_read_timeout)
        .keep_alive(s.keep_alive)
        .max_buf_size(HTTP_BUFFER_BYTES)
        .serve_connection(io, Aging::new(TowerToHyperService::new(s.app), s.max_age));
    drive(conn, stop, s.max_age, s.linger, s.grace).await
}
