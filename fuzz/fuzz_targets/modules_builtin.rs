//! `modules.builtin` (modules::parse_modules_builtin).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::modules::parse_modules_builtin("fuzz", &text);
});
