//! `iptables-save` output fed line by line to `iptables::SaveParser`, exactly
//! as the exec runner hands it over: split on `\n`, each line lossily decoded,
//! a last line without newline still emitted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::probe::iptables::SaveParser;

fuzz_target!(|data: &[u8]| {
    let mut parser = SaveParser::new("fuzz");
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    for line in lines {
        if parser.feed_line(&String::from_utf8_lossy(line)).is_err() {
            return; // the runner stops at the first refused line
        }
    }
    let _ = parser.finish();
});
