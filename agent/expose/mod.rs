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
        let metrics = metrics::render(snapshot, &verdict.findings);
        let document = Document::new(snapshot, verdict);
        let snapshot_json = Bytes::from(document.to_json());
        let findings_json = Bytes::from(serde_json::to_vec_pretty(&document.findings).expect("findings serialize"));
        let page_html = Bytes::from(page::render(&document, snapshot.collected_at));
        let index_text = Bytes::from(format!("{}\n{}", page::text_status(&document), INDEX));
        Publication {
            document,
            metrics: Bytes::from(metrics),
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
