//! kube-proxy `/metrics` text (probe::kube_proxy::metrics::extract), and every histogram of the full
//! exposition (promtext::parse_exposition, histogram, quantile, mean, delta).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = proxywatch::probe::kube_proxy::metrics::extract("fuzz", &text);
    if let Ok(expo) = proxywatch::promtext::parse_exposition("fuzz", &text) {
        for family in &expo.families {
            if let Ok(Some(h)) = proxywatch::promtext::histogram(&expo, &family.name) {
                let _ = h.quantile(0.99);
                let _ = h.mean();
                let _ = proxywatch::promtext::delta(&h, &h);
            }
        }
    }
});
