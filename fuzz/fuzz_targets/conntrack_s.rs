//! `conntrack -S` output (conntrack::parse_conntrack_s).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::conntrack::parse_conntrack_s("fuzz", &text);
});
