//! `/proc/net/ip_vs_stats` (ipvs::proc::parse_proc_ip_vs_stats).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::ipvs::proc::parse_proc_ip_vs_stats("fuzz", &text);
});
