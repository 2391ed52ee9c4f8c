//! A fake kube-proxy for the tests: its `/metrics`, `/proxyMode` and `/healthz` on one
//! loopback port (in the test's network namespace or a given one), answered from a table
//! the test edits while the agent runs. Answers start as real captures from
//! `tests/fixtures/kube-proxy/` (see SOURCES.md there).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A real kube-proxy v1.21.1 scrape in iptables mode.
pub const METRICS_FIXTURE: &str = "v1.21.1-iptables-kind-datadog-integrations-core.prom";
/// A real kube-proxy v1.30 `/healthz` body.
pub const HEALTHZ_FIXTURE: &str = "v1.30-kind-nodeEligible-raesene-2024-06-16.json";

/// A file of tests/fixtures/kube-proxy/.
pub fn kube_proxy_fixture(name: &str) -> String {
    let p = super::fixtures().join("kube-proxy").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Arc<Vec<u8>>,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Send the body chunked (no Content-Length), in 64 KiB chunks.
    pub chunked: bool,
}

impl Reply {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            body: Arc::new(body.into()),
            delay: Duration::ZERO,
            chunked: false,
        }
    }

    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(200, body)
    }
}

type Routes = Arc<Mutex<HashMap<String, Reply>>>;

/// kube-proxy's `/metrics`, `/proxyMode` and `/healthz` on one loopback port, answered from a
/// table the test edits while the agent runs. Stops (and joins its accept loop) on drop.
pub struct FakeKubeProxy {
    addr: SocketAddr,
    routes: Routes,
    hits: Arc<Mutex<HashMap<String, u64>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl FakeKubeProxy {
    /// Serves the v1.21.1 iptables scrape, `iptables` and the v1.30 healthz body, all 200,
    /// on 127.0.0.1 of the test's own network namespace.
    pub fn start() -> FakeKubeProxy {
        FakeKubeProxy::start_in(None)
    }

    /// The same, on 127.0.0.1 inside the network namespace `netns` (`/run/netns/<name>`):
    /// the accept thread enters it before it binds, for an agent running in it.
    pub fn start_in(netns: Option<&str>) -> FakeKubeProxy {
        FakeKubeProxy::start_at(netns, 0)
    }

    /// The same on a given port of 127.0.0.1 (0: any): a kube-proxy restarted where it was.
    pub fn start_at(netns: Option<&str>, port: u16) -> FakeKubeProxy {
        let routes: Routes = Arc::new(Mutex::new(HashMap::new()));
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let ns_path = netns.map(|n| format!("/run/netns/{n}"));
        let accept = {
            let (routes, hits, stop) = (routes.clone(), hits.clone(), stop.clone());
            std::thread::spawn(move || {
                if let Some(p) = ns_path {
                    let f = std::fs::File::open(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
                    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                }
                let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the fake kube-proxy");
                tx.send(listener.local_addr().unwrap()).unwrap();
                // Polled, so that drop stops it without a connection from inside the namespace.
                listener.set_nonblocking(true).unwrap();
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            conn.set_nonblocking(false).unwrap();
                            let (routes, hits) = (routes.clone(), hits.clone());
                            // One thread per connection: a slow answer must not hold up the others.
                            std::thread::spawn(move || serve_one(conn, &routes, &hits));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        let addr = rx.recv().expect("the fake kube-proxy listens");
        let fake = FakeKubeProxy {
            addr,
            routes,
            hits,
            stop,
            accept: Some(accept),
        };
        fake.set("/metrics", Reply::ok(kube_proxy_fixture(METRICS_FIXTURE)));
        fake.set("/proxyMode", Reply::ok(kube_proxy_fixture("iptables.txt")));
        fake.set("/healthz", Reply::ok(kube_proxy_fixture(HEALTHZ_FIXTURE)));
        fake
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set(&self, path: &str, reply: Reply) {
        self.routes.lock().unwrap().insert(path.to_string(), reply);
    }

    /// The reply now set for `path`.
    pub fn reply(&self, path: &str) -> Reply {
        self.routes.lock().unwrap()[path].clone()
    }

    pub fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

impl Drop for FakeKubeProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Reads one request, answers it from the routes, closes. Write errors (the client gave up on
/// an oversized body) are expected and ignored.
fn serve_one(mut conn: TcpStream, routes: &Routes, hits: &Mutex<HashMap<String, u64>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut parts = head.lines().next().unwrap_or("").split(' ');
    let (Some("GET"), Some(target)) = (parts.next(), parts.next()) else {
        let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    let path = target.split('?').next().unwrap_or(target).to_string();
    *hits.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
    let reply = routes
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .unwrap_or_else(|| Reply::new(404, "404 page not found\n"));
    std::thread::sleep(reply.delay);
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status)
    );
    if reply.chunked {
        out.push_str("Transfer-Encoding: chunked\r\n\r\n");
        if conn.write_all(out.as_bytes()).is_err() {
            return;
        }
        for chunk in reply.body.chunks(64 * 1024) {
            let mut c = format!("{:x}\r\n", chunk.len()).into_bytes();
            c.extend_from_slice(chunk);
            c.extend_from_slice(b"\r\n");
            if conn.write_all(&c).is_err() {
                return;
            }
        }
        let _ = conn.write_all(b"0\r\n\r\n");
    } else {
        out.push_str(&format!("Content-Length: {}\r\n\r\n", reply.body.len()));
        if conn.write_all(out.as_bytes()).is_ok() {
            let _ = conn.write_all(&reply.body);
        }
    }
    let _ = conn.flush();
}
