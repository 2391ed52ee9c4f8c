//! RTM_NEWNEIGHTBL payloads (neighbour_tables::decode_table): whatever the
//! bytes, an error or a table, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(t)) = proxywatch::probe::neighbour_tables::decode_table(data) {
        let _ = t.fill();
    }
});
