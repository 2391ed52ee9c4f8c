//! Is the pipeline still moving? The kubelet's liveness probe asks `/healthz`,
//! which answers from here: the aggregator (history, evaluation, rendering)
//! marks progress after every probe report it folds in; a report whose
//! folding panicked is counted instead. When no report has gone through for
//! longer than the bound, `/healthz` fails, so the kubelet restarts an agent
//! whose `/metrics` would otherwise stay frozen on its last publication.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Liveness {
    origin: Instant,
    /// Milliseconds after `origin` of the latest report folded in without a panic.
    last_progress_ms: AtomicU64,
    bound: Duration,
    panics: AtomicU64,
    last_panic: Mutex<Option<String>>,
}

impl Liveness {
    /// `bound`: how long the pipeline may go without progress before `/healthz` fails.
    pub fn new(bound: Duration) -> Self {
        Liveness {
            origin: Instant::now(),
            last_progress_ms: AtomicU64::new(0),
            bound,
            panics: AtomicU64::new(0),
            last_panic: Mutex::new(None),
        }
    }

    pub fn bound(&self) -> Duration {
        self.bound
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }

    /// A report went through the pipeline.
    pub fn progressed(&self) {
        self.progressed_at(self.elapsed());
    }

    fn progressed_at(&self, at: Duration) {
        self.last_progress_ms.store(at.as_millis() as u64, Ordering::Relaxed);
    }

    /// Folding a report in panicked with `message`.
    pub fn panicked(&self, message: &str) {
        self.panics.fetch_add(1, Ordering::Relaxed);
        *self.last_panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.to_string());
    }

    /// Panics caught in the pipeline since the agent started.
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    pub fn last_panic(&self) -> Option<String> {
        self.last_panic.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ok while the pipeline has moved within the bound; the error says since when it has not.
    pub fn check(&self) -> Result<(), String> {
        self.check_at(self.elapsed())
    }

    pub(crate) fn check_at(&self, now: Duration) -> Result<(), String> {
        let last = Duration::from_millis(self.last_progress_ms.load(Ordering::Relaxed));
        let quiet = now.saturating_sub(last);
        if quiet <= self.bound {
            return Ok(());
        }
        let mut why = format!(
            "pipeline stalled: no probe report went through history, evaluation and rendering for {}s (bound {}s)",
            quiet.as_secs(),
            self.bound.as_secs()
        );
        if let Some(p) = self.last_panic() {
            why.push_str(&format!("; {} panic(s), the latest: {p}", self.panics()));
        }
        Err(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fails_only_past_the_bound_and_names_the_panic() {
        let l = Liveness::new(Duration::from_secs(30));
        l.progressed_at(Duration::from_secs(10));
        assert!(l.check_at(Duration::from_secs(40)).is_ok());
        l.panicked("render: boom");
        let e = l.check_at(Duration::from_secs(41)).unwrap_err();
        assert!(
            e.contains("for 31s (bound 30s)") && e.contains("1 panic(s), the latest: render: boom"),
            "{e}"
        );
        l.progressed_at(Duration::from_secs(42));
        assert!(l.check_at(Duration::from_secs(42)).is_ok(), "progress again: healthy");
    }
}
