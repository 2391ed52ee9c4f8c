//! Rendering only: Prometheus text (`metrics`), the `/snapshot` and `/findings`
//! JSON (`json`), the status page (`page`), the terminal report (`report`) and
//! the NPD plugin's reading of findings (`npd`). Serving them over HTTP is
//! `crate::serve`'s.
//!
//! A `Publication` renders a snapshot and its verdict once; HTTP handlers only
//! copy its bytes. Nothing here evaluates: the verdict comes in whole.

pub mod json;
pub mod metrics;
pub mod npd;
pub mod page;
pub mod report;

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use crate::evaluate::{Severity, Verdict};
use crate::snapshot::Snapshot;

pub use json::Document;

/// The route list, the start of `/` for curl.
pub(crate) const INDEX: &str = "proxywatch: is this node's kube-proxy data plane healthy?

  /metrics   Prometheus metrics
  /snapshot  facts, probe outcomes and findings (JSON)
  /findings  active findings (JSON)
  /healthz   200 while the agent's pipeline moves (503 when it has stalled)
  /readyz    200 when the first snapshot exists and no critical finding is active
";

/// How long a rendering was the last time, so that the next one is written into a buffer of
/// about its size at once: rendered after every probe run and kept until the next, a body grown
/// by doubling held up to twice its size and left the smaller buffers it grew through behind in
/// the heap (docs/benchmarks.md, issue 37). One per rendering; shared by every agent in the
/// process (tests), where it only sizes buffers.
pub(crate) struct SizeHint(AtomicUsize);

impl SizeHint {
    pub(crate) const fn new() -> Self {
        SizeHint(AtomicUsize::new(0))
    }

    /// The buffer to write the next rendering into: the last one's size and an eighth more,
    /// `floor` at least.
    pub(crate) fn buffer(&self, floor: usize) -> Vec<u8> {
        let last = self.0.load(Ordering::Relaxed);
        Vec::with_capacity((last + last / 8).max(floor))
    }

    /// Remembers this rendering's size and gives its bytes, the buffer shrunk to them when it
    /// grew past the hint (what Bytes keeps is what was written, not what growing left).
    pub(crate) fn done(&self, mut v: Vec<u8>) -> Bytes {
        self.0.store(v.len(), Ordering::Relaxed);
        if v.capacity() - v.len() > v.len() / 8 + 64 {
            v.shrink_to_fit();
        }
        Bytes::from(v)
    }
}

static METRICS_SIZE: SizeHint = SizeHint::new();
static PAGE_SIZE: SizeHint = SizeHint::new();

/// A snapshot, its findings, and every rendering of them.
#[derive(Debug, Clone)]
pub struct Publication {
    pub document: Document,
    /// `/metrics` body (Prometheus text format 0.0.4).
    pub metrics: Bytes,
    /// `/snapshot` body.
    pub snapshot_json: Bytes,
    /// `/findings` body.
    pub findings_json: Bytes,
    /// `/` for a browser: the status page (HTML).
    pub page_html: Bytes,
    /// `/` for everything else (curl): the index of routes and a short status.
    pub index_text: Bytes,
}

impl Publication {
    /// Renders a snapshot and its verdict, every form once.
    pub fn new(snapshot: &Snapshot, verdict: Verdict) -> Self {
        let metrics = METRICS_SIZE.done(metrics::render_into(
            snapshot,
            &verdict.findings,
            METRICS_SIZE.buffer(8192),
        ));
        let document = Document::new(snapshot, verdict);
        let snapshot_json = document.to_json_bytes();
        let findings_json = Bytes::from(serde_json::to_vec_pretty(&document.findings).expect("findings serialize"));
        let page = String::from_utf8(PAGE_SIZE.buffer(16 * 1024)).unwrap_or_default();
        let page_html = PAGE_SIZE.done(page::render_into(&document, snapshot.collected_at, page).into_bytes());
        let index_text = Bytes::from(format!("{}\n{}", page::text_status(&document), INDEX));
        Publication {
            document,
            metrics,
            snapshot_json,
            findings_json,
            page_html,
            index_text,
        }
    }

    /// Ready unless a critical finding is active; the error lists the critical findings, one
    /// `  id: summary` line each.
    pub fn readiness(&self) -> Result<(), String> {
        let critical: Vec<String> = self
            .document
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Critical)
            .map(|f| format!("  {}: {}", f.id, f.summary))
            .collect();
        if critical.is_empty() {
            Ok(())
        } else {
            Err(critical.join("\n"))
        }
    }
}
