//! Rendering only: Prometheus text (`metrics`), the `/snapshot` and `/findings`
//! JSON (`json`), the status page (`page`), the terminal report (`report`) and
//! the NPD plugin's reading of findings (`npd`). Serving them over HTTP is
//! `crate::serve`'s.
//!
//! A `Publication` renders a snapshot and its verdict once per form, when that form is
//! first asked for; HTTP handlers then only copy its bytes. Nothing here evaluates: the
//! verdict comes in whole.

pub mod json;
pub mod metrics;
pub mod npd;
pub mod page;
pub mod report;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

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

/// A snapshot, its verdict, and every rendering of them, each made the first time it is asked
/// for and kept: a publication no one reads (a rule churn publishes several a second, a scrape
/// comes every 15 s or more) costs its evaluation and one copy of the snapshot, not five
/// renderings (docs/benchmarks.md, issue 36).
#[derive(Debug, Clone)]
pub struct Publication {
    snapshot: Snapshot,
    verdict: Verdict,
    document: OnceLock<Document>,
    metrics: OnceLock<Bytes>,
    snapshot_json: OnceLock<Bytes>,
    findings_json: OnceLock<Bytes>,
    page_html: OnceLock<Bytes>,
    index_text: OnceLock<Bytes>,
}

/// What a rendering that panicked (a bug) gives instead of its body: one line, and the next
/// request tries again. The panic itself is in the agent's log (the panic hook).
pub const RENDER_FAILED: &str = "proxywatch: rendering this publication failed (a bug: see the agent's log)\n";

/// `cell`'s rendering, made by `f` the first time (requests that come meanwhile wait for it
/// rather than render again); a panic in `f` is an error and leaves the cell empty.
fn once(cell: &OnceLock<Bytes>, f: impl FnOnce() -> Bytes) -> Result<Bytes, &'static str> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cell.get_or_init(f).clone())).map_err(|_| RENDER_FAILED)
}

impl Publication {
    /// A snapshot and its verdict, rendered later, on demand.
    pub fn new(snapshot: &Snapshot, verdict: Verdict) -> Self {
        Publication {
            snapshot: snapshot.clone(),
            verdict,
            document: OnceLock::new(),
            metrics: OnceLock::new(),
            snapshot_json: OnceLock::new(),
            findings_json: OnceLock::new(),
            page_html: OnceLock::new(),
            index_text: OnceLock::new(),
        }
    }

    /// The findings, as the verdict made them.
    pub fn findings(&self) -> &[crate::evaluate::Finding] {
        &self.verdict.findings
    }

    /// The `/snapshot` document.
    pub fn document(&self) -> &Document {
        self.document
            .get_or_init(|| Document::new(&self.snapshot, self.verdict.clone()))
    }

    /// `/metrics` body (Prometheus text format 0.0.4).
    pub fn metrics(&self) -> Result<Bytes, &'static str> {
        once(&self.metrics, || {
            METRICS_SIZE.done(metrics::render_into(
                &self.snapshot,
                &self.verdict.findings,
                METRICS_SIZE.buffer(8192),
            ))
        })
    }

    /// `/snapshot` body.
    pub fn snapshot_json(&self) -> Result<Bytes, &'static str> {
        once(&self.snapshot_json, || self.document().to_json_bytes())
    }

    /// `/findings` body.
    pub fn findings_json(&self) -> Result<Bytes, &'static str> {
        once(&self.findings_json, || {
            Bytes::from(serde_json::to_vec_pretty(&self.verdict.findings).expect("findings serialize"))
        })
    }

    /// `/` for a browser: the status page (HTML).
    pub fn page_html(&self) -> Result<Bytes, &'static str> {
        once(&self.page_html, || {
            let page = String::from_utf8(PAGE_SIZE.buffer(16 * 1024)).unwrap_or_default();
            PAGE_SIZE.done(page::render_into(self.document(), self.snapshot.collected_at, page).into_bytes())
        })
    }

    /// `/` for everything else (curl): the index of routes and a short status.
    pub fn index_text(&self) -> Result<Bytes, &'static str> {
        once(&self.index_text, || {
            Bytes::from(format!("{}\n{}", page::text_status(self.document()), INDEX))
        })
    }

    /// Ready unless a critical finding is active; the error lists the critical findings, one
    /// `  id: summary` line each.
    pub fn readiness(&self) -> Result<(), String> {
        let critical: Vec<String> = self
            .verdict
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A rendering that panics is an error for that request, keeps nothing, and the next
    /// request renders again; one that worked is kept (the same bytes, not made twice).
    #[test]
    fn a_rendering_is_made_once_when_asked_and_a_panic_is_an_error_not_kept() {
        let cell = OnceLock::new();
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let failed = once(&cell, || panic!("a bug"));
        std::panic::set_hook(quiet);
        assert_eq!(failed, Err(RENDER_FAILED));
        assert!(cell.get().is_none());
        let mut made = 0;
        for _ in 0..3 {
            let b = once(&cell, || {
                made += 1;
                Bytes::from_static(b"x")
            });
            assert_eq!(b.as_deref(), Ok(&b"x"[..]));
        }
        assert_eq!(made, 1);
    }

    /// Rendered on demand, every form is what rendering the snapshot and verdict gives.
    #[test]
    fn each_form_is_the_snapshot_s_rendering() {
        let s = Snapshot {
            node: "n1".into(),
            collected_at: 120.0,
            ..Default::default()
        };
        let verdict = crate::evaluate::evaluate(&s, &crate::config::default_thresholds());
        let p = Publication::new(&s, verdict.clone());
        // Less the agent's own process gauges, read when rendered.
        let own = |b: &[u8]| {
            String::from_utf8_lossy(b)
                .lines()
                .filter(|l| !l.starts_with("process_"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            own(&p.metrics().unwrap()),
            own(metrics::render(&s, &verdict.findings).as_bytes())
        );
        let doc = Document::new(&s, verdict);
        assert_eq!(p.snapshot_json().unwrap(), doc.to_json());
        assert_eq!(
            p.findings_json().unwrap(),
            serde_json::to_vec_pretty(&doc.findings).unwrap()
        );
        assert_eq!(p.page_html().unwrap(), page::render(&doc, 120.0).into_bytes());
        assert_eq!(p.document(), &doc);
        assert!(p.index_text().unwrap().starts_with(page::text_status(&doc).as_bytes()));
    }
}
