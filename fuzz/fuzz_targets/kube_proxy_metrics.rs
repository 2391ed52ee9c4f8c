//! kube-proxy `/metrics` text (kube_proxy_text::extract), and every histogram of the full exposition.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::kube_proxy_text::extract("fuzz", &text);
    if let Ok(expo) = proxywatch::probe::kube_proxy_text::parse_exposition("fuzz", &text) {
        for family in &expo.families {
            if let Ok(Some(h)) = proxywatch::probe::kube_proxy_text::histogram(&expo, &family.name) {
                let _ = h.quantile(0.99);
                let _ = h.mean();
                let _ = proxywatch::probe::kube_proxy_text::delta(&h, &h);
            }
        }
    }
});
