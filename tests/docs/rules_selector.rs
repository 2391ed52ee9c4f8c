//! The rules' job selector is configurable in one place (manifests/render-rules.py, as
//! monitoring mixins have it): rendered for `job="pw",cluster="eu-1"`, no series is left on the
//! default job, promtool accepts the rules, and they fire on the new job's series only.
use crate::common;

use std::path::Path;
use std::process::Command;

fn repo(p: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn render(selector: &str, rules: &Path) -> std::process::Output {
    Command::new("python3")
        .arg(repo("manifests/render-rules.py"))
        .args(["--selector", selector, "--rules"])
        .arg(rules)
        .output()
        .unwrap()
}

#[test]
fn rules_rendered_for_another_selector_follow_it_everywhere() {
    if !common::can_run(&["python3", "promtool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let selector = r#"job="pw",cluster="eu-1""#;
    let out = render(selector, &repo("manifests/prometheusrule.yaml"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains(r#"job="proxywatch""#) && !text.contains(r#"job=\"proxywatch\""#));
    // Every alert's expression carries it (31 rules; ProxywatchAbsent twice).
    let exprs = text.matches("expr: |").count();
    assert!(text.matches(selector).count() > exprs, "{exprs} expressions");
    let manifest = dir.path().join("prometheusrule.yaml");
    std::fs::write(&manifest, &text).unwrap();
    let rules = dir.path().join("proxywatch-rules.yaml");
    common::run(
        "python3",
        &[
            repo("tests/manifests/extract_rules.py").to_str().unwrap(),
            manifest.to_str().unwrap(),
            rules.to_str().unwrap(),
        ],
    );
    common::run("promtool", &["check", "rules", rules.to_str().unwrap()]);
    // kube-proxy down on the new job fires; the same series on the default job does not, and
    // the new job scraped (up) keeps ProxywatchAbsent quiet.
    let test = dir.path().join("selector_test.yaml");
    std::fs::write(
        &test,
        r#"rule_files: [proxywatch-rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="pw",cluster="eu-1",instance="n1"}'
        values: '1x10'
      - series: 'proxywatch_finding_severity{job="pw",cluster="eu-1",instance="n1",id="kube_proxy_down"}'
        values: '3x10'
      - series: 'proxywatch_finding_severity{job="proxywatch",instance="n2",id="kube_proxy_down"}'
        values: '3x10'
    promql_expr_test:
      - expr: 'ALERTS{alertstate="firing"}'
        eval_time: 5m
        exp_samples:
          - labels: 'ALERTS{alertname="ProxywatchKubeProxyDown",alertstate="firing",severity="critical",job="pw",cluster="eu-1",instance="n1",id="kube_proxy_down"}'
            value: 1
"#,
    )
    .unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&test)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_series_without_the_default_selector_is_refused() {
    if !common::can_run(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("rules.yaml");
    std::fs::write(&bad, "expr: |\n  proxywatch_node_ready{job=\"other\"} == 0\n").unwrap();
    let out = render(r#"job="pw""#, &bad);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not carry"));
    let out = render("not a selector", &repo("manifests/prometheusrule.yaml"));
    assert!(!out.status.success());
}
