//! `ip_local_port_range` and `ip_local_reserved_ports` (node_ports::parse_port_range,
//! parse_reserved_ports), and the reservation value built from what they parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::probe::node_ports;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = node_ports::parse_port_range("fuzz", &text);
    if let Ok(r) = node_ports::parse_reserved_ports("fuzz", &text) {
        let again = node_ports::parse_reserved_ports("fuzz", &node_ports::format_ranges(&r)).expect("its own output parses");
        assert_eq!(again, r, "format and parse agree");
    }
});
