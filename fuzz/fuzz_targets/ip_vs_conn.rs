//! `/proc/net/ip_vs_conn` (ipvs::templates::count): the persistence templates of weight-0 real
//! servers, counted from untrusted bytes; no panic, and no count above what was read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::probe::ipvs::templates::{count, MAX_ENTRIES};
use proxywatch::probe::ipvs::{ServiceKey, WeightZeroRealServer};

fn rs(protocol: &str, vip: &str, vport: u16, fwmark: Option<u32>, addr: &str, port: u16) -> WeightZeroRealServer {
    WeightZeroRealServer {
        service: ServiceKey {
            protocol: protocol.into(),
            address: vip.into(),
            port: vport,
            fwmark,
        },
        address: addr.into(),
        port,
        persistent: true,
        ..Default::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut wz = vec![
        rs("TCP", "127.0.0.1", 80, None, "127.0.0.3", 8080),
        rs("TCP", "fd00::1", 443, None, "fd00::5", 8080),
        rs("FWM", "", 0, Some(7), "10.0.0.5", 80),
        // Not addresses: never matched, never a panic.
        rs("UDP", "not-an-ip", 53, None, "", 0),
    ];
    // One not persistent: never counted.
    let mut plain = rs("TCP", "127.0.0.1", 80, None, "127.0.0.3", 8080);
    plain.persistent = false;
    wz.push(plain);
    let scan = count(&mut wz, data).expect("reading from memory does not fail");
    assert!(scan.entries_read <= MAX_ENTRIES);
    assert!(scan.templates <= scan.entries_read);
    assert!(scan.unparsed <= scan.entries_read);
    assert_eq!(wz[4].templates, None);
    for r in &wz[..4] {
        assert!(r.templates.is_some_and(|n| n <= scan.templates), "{r:?} {scan:?}");
    }
});
