//! The body `proxywatch npd --from` reads from an agent's `/findings`
//! (`expose::npd::parse_findings`, lossily decoded as `fetch` decodes bodies),
//! then the plugin's verdict for every area, a finding id, each severity and
//! a few output lengths, and the line as `main` prints it.
//!
//! Beyond panics: the line is never longer than NPD's max_output_length and
//! never holds a line break once printed; exit 1 exactly when a finding the
//! condition covers is at or above the severity asked; 2 only when a failed
//! probe blinds the condition.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::evaluate::{Finding, Severity};
use proxywatch::expose::npd::{self, Area, Selection};

const AREAS: [Area; 5] = [Area::All, Area::Conntrack, Area::KubeProxy, Area::Rules, Area::Kernel];
const SEVERITIES: [Severity; 4] = [Severity::Ok, Severity::Info, Severity::Warning, Severity::Critical];

/// What a selection covers, as the README's NPD table says.
fn covers(selection: &Selection, id: &str) -> bool {
    match selection {
        Selection::Area(Area::All) => id != "probe_failed",
        Selection::Area(a) => npd::area_of(id) == Some(*a),
        Selection::Finding(f) => f == id,
    }
}

fn check(findings: &[Finding], selection: &Selection) {
    for threshold in SEVERITIES {
        for max in [0, 12, 80, 4096] {
            let (code, line) = npd::verdict(findings, selection, threshold, max);
            assert!(
                line.len() <= max,
                "{} bytes where {max} are allowed: {line:?}",
                line.len()
            );
            let problem = findings
                .iter()
                .any(|f| covers(selection, &f.id) && f.severity >= threshold);
            assert_eq!(code == npd::EXIT_PROBLEM, problem, "{code} {line:?}");
            if code == npd::EXIT_UNKNOWN {
                assert!(findings
                    .iter()
                    .any(|f| f.id == "probe_failed" && !f.evidence.is_empty()));
            } else if code != npd::EXIT_PROBLEM {
                assert_eq!(code, npd::EXIT_OK);
            }
            // As main prints it.
            let printed = npd::cut(&line.replace(['\n', '\r'], " "), max);
            assert!(printed.len() <= max && !printed.contains(['\n', '\r']));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let body = String::from_utf8_lossy(data);
    let Ok(findings) = npd::parse_findings(&body) else {
        return;
    };
    for area in AREAS {
        check(&findings, &Selection::Area(area));
    }
    if let Some(f) = findings.first() {
        check(&findings, &Selection::Finding(f.id.clone()));
        let _ = (npd::reason(&f.id), npd::key_number(&f.summary));
    }
});
