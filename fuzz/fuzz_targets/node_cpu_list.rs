//! `/sys/devices/system/cpu/online` (node::parse_cpu_list).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::node::parse_cpu_list("fuzz", &text);
});
