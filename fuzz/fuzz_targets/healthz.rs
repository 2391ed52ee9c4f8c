//! kube-proxy `/healthz` JSON (probe::kube_proxy::healthz::parse_healthz) and its staleness.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(h) = proxywatch::probe::kube_proxy::healthz::parse_healthz(&text) {
        let _ = h.staleness_seconds();
    }
});
