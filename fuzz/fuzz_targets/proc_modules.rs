//! `/proc/modules` (modules::parse_proc_modules).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::modules::parse_proc_modules("fuzz", &text);
});
