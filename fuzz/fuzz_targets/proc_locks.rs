//! `/proc/locks` (xtables_lock::parse_locks), for a file that some lines name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::probe::xtables_lock::{parse_locks, FileId};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let file = FileId { major: 0xfe, minor: 0, inode: 10059897 };
    if let Ok(l) = parse_locks("fuzz", &text, file) {
        // Only the file's own lines are kept, each from a line of the input.
        assert!(l.locks.len() <= text.lines().count());
        assert!(l.locks.iter().all(|x| x.line >= 1 && x.line <= text.lines().count()));
    }
});
