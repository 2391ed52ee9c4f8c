//! ctnetlink statistics answers (netlink::ctnetlink::add_cpu_stats, decode_global).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::ctnetlink;

fuzz_target!(|data: &[u8]| {
    let mut sums = std::collections::BTreeMap::new();
    for m in proxywatch::netlink::messages(data).flatten() {
        let _ = ctnetlink::add_cpu_stats(0x0104, m.payload, &mut sums);
        let _ = ctnetlink::decode_global(0x0105, m.payload);
    }
});
