//! When one probe run must be over: the single bound every probe, command and
//! request of that run shares.

use std::time::{Duration, Instant};

/// When one probe run must be over. The budget is the probe's `--*.timeout`
/// flag; it is kept for messages ("no answer within 2s").
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// A deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Deadline {
            at: Instant::now() + budget,
            budget,
        }
    }

    pub fn at(&self) -> Instant {
        self.at
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Time left; at least a millisecond, so a command started late fails at
    /// once with a timeout instead of running unbounded.
    pub fn remaining(&self) -> Duration {
        self.at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_shrinks_and_never_reaches_zero() {
        let d = Deadline::after(Duration::from_millis(30));
        assert!(d.remaining() <= Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(d.remaining(), Duration::from_millis(1));
        assert_eq!(d.budget(), Duration::from_millis(30));
    }
}
