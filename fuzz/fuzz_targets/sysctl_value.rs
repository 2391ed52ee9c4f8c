//! A `/proc/sys` value (sysctl::parse_value).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::sysctl::parse_value("fuzz", &text);
});
