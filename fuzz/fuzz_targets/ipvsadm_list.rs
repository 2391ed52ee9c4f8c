//! `ipvsadm -Ln` (ipvs::ipvsadm::parse_ipvsadm_list).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::ipvs::ipvsadm::parse_ipvsadm_list("fuzz", &text);
});
