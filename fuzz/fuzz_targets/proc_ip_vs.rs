//! `/proc/net/ip_vs` (ipvs::proc::parse_proc_ip_vs, and with a HZ taken from the first byte).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::ipvs::proc::parse_proc_ip_vs("fuzz", &text);
    let hz = data.first().map(|b| u32::from(*b) * 4).unwrap_or(0);
    let _ = proxywatch::probe::ipvs::proc::parse_proc_ip_vs_with_hz("fuzz", &text, hz);
});
