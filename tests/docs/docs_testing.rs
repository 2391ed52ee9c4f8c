//! docs/testing.md's table "Every finding, end to end" stays true: one row per id of
//! `CHECKS`, no other row, and every `file::test` it names is a `#[test]` function in
//! `tests/<file>.rs` (or `tests/<group>/<file>.rs`, a module of a grouped test binary). A row that says **none yet** names no test.
use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The rows of the table: (id, the `file::test` names of its second column).
fn rows() -> Vec<(String, Vec<(String, String)>)> {
    let doc = std::fs::read_to_string(root().join("docs/testing.md")).unwrap();
    let start = doc
        .find("## Every finding, end to end")
        .expect("docs/testing.md has the section");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let id = cells[1].trim_matches('`').to_string();
            let tests = cells[2]
                .split(", ")
                .filter(|t| t.starts_with('`'))
                .map(|t| {
                    let t = t.trim_matches('`');
                    let (file, test) = t
                        .split_once("::")
                        .unwrap_or_else(|| panic!("{id}: {t} is not file::test"));
                    (file.to_string(), test.to_string())
                })
                .collect();
            (id, tests)
        })
        .collect()
}

/// `tests/<file>.rs`, or `tests/<group>/<file>.rs` for a file that is a module of a grouped
/// test binary (`tests/<group>/main.rs`).
fn test_file(file: &str) -> Option<std::path::PathBuf> {
    let tests = root().join("tests");
    let top = tests.join(format!("{file}.rs"));
    if top.is_file() {
        return Some(top);
    }
    std::fs::read_dir(&tests)
        .ok()?
        .filter_map(Result::ok)
        .map(|d| d.path().join(format!("{file}.rs")))
        .find(|p| p.is_file() && p.parent().is_some_and(|g| g.join("main.rs").is_file()))
}

#[test]
fn the_finding_table_lists_every_check_and_real_tests() {
    let rows = rows();
    let ids: BTreeSet<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
    let checks: BTreeSet<&str> = proxywatch::evaluate::CHECKS.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), rows.len(), "an id listed twice");
    assert_eq!(ids, checks, "docs/testing.md's finding table vs CHECKS");
    for (id, tests) in &rows {
        for (file, test) in tests {
            let path = test_file(file).unwrap_or_else(|| panic!("{id}: no tests/{file}.rs nor tests/*/{file}.rs"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{id}: {}: {e}", path.display()));
            let at = text
                .find(&format!("\nfn {test}() {{"))
                .unwrap_or_else(|| panic!("{id}: no fn {test}() in {}", path.display()));
            assert!(
                text[..at].trim_end().ends_with("#[test]"),
                "{id}: {file}::{test} is not a #[test]"
            );
        }
    }
    let untested: Vec<&str> = rows
        .iter()
        .filter(|(_, t)| t.is_empty())
        .map(|(id, _)| id.as_str())
        .collect();
    eprintln!("findings without an end-to-end test: {untested:?}");
}
