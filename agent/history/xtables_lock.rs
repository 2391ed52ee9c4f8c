//! How long the xtables lock's holder has held it. `/proc/locks` says who holds a lock, not
//! since when: the holder's hold starts when a reading first shows that process (PID and name)
//! holding it, so the time is a lower bound, short of the truth by at most one interval of the
//! xtables_lock probe.

use serde::{Deserialize, Serialize};

use crate::probe::xtables_lock::XtablesLockFacts;

/// The current holder's hold, as the readings saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct XtablesLockHold {
    /// Seconds since a reading first showed this holder (a lower bound).
    pub held_seconds: f64,
    /// Unix time of that first reading, in seconds.
    pub since_timestamp_seconds: f64,
}

/// A holder as told apart: its PID and name.
type HolderKey = (Option<u32>, Option<String>);

/// The holder seen last, with when it was first seen (monotonic and wall clock).
#[derive(Debug, Default)]
pub struct XtablesLockHistory {
    holder: Option<(HolderKey, f64, f64)>,
}

impl XtablesLockHistory {
    pub fn observe(&mut self, f: &XtablesLockFacts, now: f64, mono: f64) -> Option<XtablesLockHold> {
        let Some(h) = &f.holder else {
            self.holder = None;
            return None;
        };
        let key = (h.process.pid, h.process.name.clone());
        match &self.holder {
            Some((k, _, _)) if *k == key => {}
            _ => self.holder = Some((key, mono, now)),
        }
        let (_, first_mono, first_wall) = self.holder.as_ref()?;
        Some(XtablesLockHold {
            held_seconds: (mono - first_mono).max(0.0),
            since_timestamp_seconds: *first_wall,
        })
    }

    /// The probe ran without a reading: the hold it saw is no longer known to go on.
    pub fn missed(&mut self) {
        self.holder = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::xtables_lock::LockProcess;
    use crate::watch::attribute::Writer;

    fn held_by(pid: Option<u32>) -> XtablesLockFacts {
        XtablesLockFacts {
            holder: pid.map(|p| LockProcess {
                process: Writer {
                    pid: Some(p),
                    name: Some("flock".into()),
                    ..Default::default()
                },
                command: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_hold_counts_from_its_first_reading_and_restarts_with_another_holder() {
        let mut h = XtablesLockHistory::default();
        assert_eq!(h.observe(&held_by(None), 1000.0, 0.0), None);
        let first = h.observe(&held_by(Some(7)), 1005.0, 5.0).unwrap();
        assert_eq!((first.held_seconds, first.since_timestamp_seconds), (0.0, 1005.0));
        let later = h.observe(&held_by(Some(7)), 1017.0, 17.0).unwrap();
        assert_eq!((later.held_seconds, later.since_timestamp_seconds), (12.0, 1005.0));
        let other = h.observe(&held_by(Some(8)), 1020.0, 20.0).unwrap();
        assert_eq!(other.held_seconds, 0.0, "another holder starts afresh");
        assert_eq!(h.observe(&held_by(None), 1025.0, 25.0), None);
        assert_eq!(
            h.observe(&held_by(Some(8)), 1030.0, 30.0).unwrap().held_seconds,
            0.0,
            "released in between"
        );
        h.missed();
        assert_eq!(h.observe(&held_by(Some(8)), 1035.0, 35.0).unwrap().held_seconds, 0.0);
    }
}
