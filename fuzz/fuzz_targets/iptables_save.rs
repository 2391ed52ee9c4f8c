//! `iptables-save` output fed line by line to `iptables::SaveParser`, exactly
//! as the exec runner hands it over: split on `\n`, each line lossily decoded,
//! a last line without newline still emitted; each line also to the legacy
//! service-table decoder (`service_endpoints::iptables::SaveText`), as the
//! iptables probe does with its legacy saves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::nft::Family;
use proxywatch::probe::iptables::SaveParser;
use proxywatch::probe::service_endpoints::iptables::SaveText;

fuzz_target!(|data: &[u8]| {
    let mut parser = SaveParser::new("fuzz");
    let mut text = SaveText::new(if data.first().is_some_and(|b| b & 1 == 1) { Family::Ip6 } else { Family::Ip });
    let mut decoding = true;
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    // As the probe runs its legacy saves: with -c, the counters taken off each line first.
    let mut counted = proxywatch::probe::rule_counters::LegacyLines::new(false);
    for line in lines {
        let raw = String::from_utf8_lossy(line);
        let line_text = counted.feed_line(&raw);
        if decoding && text.feed_line(line_text).is_err() {
            decoding = false;
        }
        if parser.feed_line(&raw).is_err() {
            return; // the runner stops at the first refused line
        }
    }
    let _ = parser.finish();
    if decoding {
        let _ = text.finish(None);
    }
});
