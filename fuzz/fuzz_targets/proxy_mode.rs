//! kube-proxy `/proxyMode` body (probe::kube_proxy::proxy_mode::parse_proxy_mode).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::kube_proxy::proxy_mode::parse_proxy_mode(&text);
});
