//! `/proc/net/route` (rp_filter::parse_route): the interfaces of the network routes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::probe::rp_filter::parse_route;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(routes) = parse_route("fuzz", &text) {
        // Each interface once, from a line of the input, loopback never.
        assert!(routes.len() <= text.lines().count());
        assert!(routes.iter().all(|(name, _)| name != "lo"));
        let mut names: Vec<&str> = routes.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), routes.len());
    }
});
