//! `ipvsadm -Ln --stats --exact` (ipvs::ipvsadm::parse_ipvsadm_stats), merged into `ipvsadm -Ln` output as the probe does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let stats = proxywatch::probe::ipvs::ipvsadm::parse_ipvsadm_stats("fuzz", &text);
    if let Ok(stats) = stats {
        // The probe merges these into the list it parsed; the same text may parse as both.
        if let Ok(mut services) = proxywatch::probe::ipvs::ipvsadm::parse_ipvsadm_list("fuzz", &text) {
            let _ = proxywatch::probe::ipvs::merge_stats(&mut services, stats);
        }
    }
});
