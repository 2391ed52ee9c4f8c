//! `nft list table ip kube-proxy` (nftables::parse_list_table).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::nftables::parse_list_table("fuzz", &text);
});
