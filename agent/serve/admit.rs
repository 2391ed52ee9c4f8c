//! Who gets a connection slot: a cap on all connections, a cap per client
//! address, and a few slots held back for `/healthz`, so that the kubelet's
//! probe still gets through when a client has taken every other slot.
//!
//! A new connection takes a regular slot when both caps allow it. Otherwise it
//! takes a reserved slot if one is free and its address holds fewer than
//! `RESERVED_PER_ADDRESS` of them: that connection may ask `/healthz` only,
//! once. Otherwise it is closed at accept. Refusals are logged as a warning at
//! most once every `WARN_EVERY`, with the count since the previous one.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Reserved slots one client address may hold (the kubelet's liveness and readiness probes).
pub const RESERVED_PER_ADDRESS: usize = 2;
/// At most one "connection limit reached" warning this often.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The caps.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub total: usize,
    pub per_address: usize,
    pub reserved: usize,
}

/// The kind of slot a connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Every route.
    Regular,
    /// One `/healthz` request.
    Reserved,
}

/// Which cap kept a connection from a regular slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Total,
    PerAddress,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Full::Total => "--web.max-connections",
            Full::PerAddress => "--web.max-connections-per-address",
        })
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    regular: usize,
    reserved: usize,
}

#[derive(Debug, Default)]
struct Counts {
    regular: usize,
    reserved: usize,
    by_address: HashMap<IpAddr, Held>,
}

#[derive(Debug, Default)]
struct Warned {
    last: Option<Instant>,
    to_reserved: u64,
    closed: u64,
}

/// Slot accounting for one listener.
#[derive(Debug)]
pub struct Admission {
    caps: Caps,
    counts: Mutex<Counts>,
    warned: Mutex<Warned>,
    open: watch::Sender<usize>,
}

/// A slot, given back on drop.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    key: IpAddr,
    slot: Slot,
}

impl Ticket {
    pub fn slot(&self) -> Slot {
        self.slot
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.release(self.key, self.slot);
    }
}

/// The address a cap counts by: IPv4 as is (IPv4-mapped IPv6 too), IPv6 by
/// its /64, since one host usually holds a whole /64.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mask = !0u128 << 64;
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
        v4 => v4,
    }
}

impl Admission {
    pub fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Admission {
            caps: Caps {
                total: caps.total.max(1),
                per_address: caps.per_address.max(1),
                reserved: caps.reserved,
            },
            counts: Mutex::default(),
            warned: Mutex::default(),
            open: watch::Sender::new(0),
        })
    }

    /// A slot for a connection from `peer`, or None: close it.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let key = address_key(peer);
        let (slot, full) = {
            let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            let held = c.by_address.get(&key).copied().unwrap_or_default();
            let (slot, full) = if c.regular >= self.caps.total {
                (None, Some(Full::Total))
            } else if held.regular >= self.caps.per_address {
                (None, Some(Full::PerAddress))
            } else {
                (Some(Slot::Regular), None)
            };
            let slot = slot.or_else(|| {
                (c.reserved < self.caps.reserved && held.reserved < RESERVED_PER_ADDRESS).then_some(Slot::Reserved)
            });
            if let Some(slot) = slot {
                let entry = c.by_address.entry(key).or_default();
                match slot {
                    Slot::Regular => entry.regular += 1,
                    Slot::Reserved => entry.reserved += 1,
                }
                match slot {
                    Slot::Regular => c.regular += 1,
                    Slot::Reserved => c.reserved += 1,
                }
                self.open.send_replace(c.regular + c.reserved);
            }
            (slot, full)
        };
        if let Some(full) = full {
            self.warn(peer, full, slot.is_some());
        }
        slot.map(|slot| Ticket {
            admission: self.clone(),
            key,
            slot,
        })
    }

    fn release(&self, key: IpAddr, slot: Slot) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        match slot {
            Slot::Regular => c.regular = c.regular.saturating_sub(1),
            Slot::Reserved => c.reserved = c.reserved.saturating_sub(1),
        }
        if let Some(held) = c.by_address.get_mut(&key) {
            match slot {
                Slot::Regular => held.regular = held.regular.saturating_sub(1),
                Slot::Reserved => held.reserved = held.reserved.saturating_sub(1),
            }
            if held.regular == 0 && held.reserved == 0 {
                c.by_address.remove(&key);
            }
        }
        self.open.send_replace(c.regular + c.reserved);
    }

    /// A warning at most every WARN_EVERY, counting what happened since the last one.
    fn warn(&self, peer: IpAddr, full: Full, reserved: bool) {
        let mut w = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if reserved {
            w.to_reserved += 1;
        } else {
            w.closed += 1;
        }
        if w.last.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        tracing::warn!(
            %peer,
            cap = %full,
            health_only = w.to_reserved,
            closed = w.closed,
            "connection limit reached: connections beyond the cap may only ask /healthz (health_only) or are closed \
             at accept (closed), counted since the previous warning; logged at most every {}s",
            WARN_EVERY.as_secs()
        );
        *w = Warned {
            last: Some(Instant::now()),
            to_reserved: 0,
            closed: 0,
        };
    }

    /// Connections open now (both kinds).
    pub fn open(&self) -> usize {
        *self.open.borrow()
    }

    /// Resolves when no connection is open.
    pub async fn all_closed(&self) {
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_address_then_total_then_reserved_then_closed() {
        let a = Admission::new(Caps {
            total: 4,
            per_address: 2,
            reserved: 3,
        });
        let x1 = a.admit(ip("10.0.0.1")).unwrap();
        let x2 = a.admit(ip("10.0.0.1")).unwrap();
        assert_eq!((x1.slot(), x2.slot()), (Slot::Regular, Slot::Regular));
        // 10.0.0.1 is at its cap: reserved slots, at most RESERVED_PER_ADDRESS of them.
        let r: Vec<Ticket> = (0..RESERVED_PER_ADDRESS)
            .map(|_| a.admit(ip("10.0.0.1")).unwrap())
            .collect();
        assert!(r.iter().all(|t| t.slot() == Slot::Reserved));
        assert!(a.admit(ip("10.0.0.1")).is_none(), "closed at accept");
        // Another address still gets regular slots, until the total cap.
        let y1 = a.admit(ip("10.0.0.2")).unwrap();
        let y2 = a.admit(ip("10.0.0.2")).unwrap();
        assert_eq!((y1.slot(), y2.slot()), (Slot::Regular, Slot::Regular));
        let z = a.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(z.slot(), Slot::Reserved, "total cap reached");
        assert!(a.admit(ip("10.0.0.4")).is_none(), "every reserved slot taken");
        assert_eq!(a.open(), 7);
        // Slots come back on drop.
        drop(x1);
        assert_eq!(a.admit(ip("10.0.0.4")).unwrap().slot(), Slot::Regular);
        drop((x2, r, y1, y2, z));
        assert_eq!(a.open(), 0);
        assert!(a.counts.lock().unwrap().by_address.is_empty(), "no entry left behind");
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(address_key(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(address_key(ip("2001:db8:1:2:ffff::1")), ip("2001:db8:1:2::"));
        assert_eq!(address_key(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        let a = Admission::new(Caps {
            total: 10,
            per_address: 1,
            reserved: 0,
        });
        let _t = a.admit(ip("2001:db8::1")).unwrap();
        assert!(a.admit(ip("2001:db8::2")).is_none(), "same /64");
        assert!(a.admit(ip("2001:db8:0:1::2")).is_some(), "another /64");
    }

    #[tokio::test]
    async fn all_closed_resolves_when_the_last_ticket_goes() {
        let a = Admission::new(Caps {
            total: 2,
            per_address: 2,
            reserved: 0,
        });
        let t = a.admit(ip("127.0.0.1")).unwrap();
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { a.all_closed().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(t);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("all_closed resolved")
            .unwrap();
    }
}
