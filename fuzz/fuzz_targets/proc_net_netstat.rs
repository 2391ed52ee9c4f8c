//! `/proc/net/netstat` (rp_filter::parse_netstat): one section's counters by name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::probe::rp_filter::parse_netstat;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(counters) = parse_netstat("fuzz", &text, "TcpExt") {
        // Every name is a word of the section's first line.
        assert!(counters.keys().all(|k| text.contains(k.as_str())));
    }
});
