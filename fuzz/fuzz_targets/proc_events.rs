//! The kernel's process events (watch::proc_events): every message of a datagram through
//! `decode`, and each event into kube-proxy's children.
//!
//! Beyond panics: a message is one event or one error; a thread is never remembered as a
//! child; the children stay within their bound, and every one remembered descends from the
//! kube-proxy followed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::watch::proc_events::{decode, Children, ProcEvent, MAX_CHILDREN};

fuzz_target!(|data: &[u8]| {
    let mut children = Children::default();
    children.follow(Some(1));
    for e in decode(data).into_iter().flatten() {
        let before = children.len();
        children.take(e);
        if matches!(e, ProcEvent::Fork { thread: true, .. }) || !matches!(e, ProcEvent::Fork { .. }) {
            assert_eq!(children.len(), before, "only a new process is remembered: {e:?}");
        }
        assert!(children.len() <= MAX_CHILDREN);
    }
    for pid in [0, 1, 2, -1, i32::MAX] {
        assert!(children.root_of(pid).is_none_or(|root| root == 1));
    }
});
