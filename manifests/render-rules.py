#!/usr/bin/env python3
"""Renders manifests/prometheusrule.yaml for another Prometheus job selector and runbook location.

    python3 manifests/render-rules.py --selector 'job="node-agents",cluster="eu-1"' > prometheusrule.yaml
    python3 manifests/render-rules.py \
        --runbook-url-pattern 'https://git.example.com/ops/proxywatch/-/blob/main/docs/alerts.md#%s'

The selector is the rules' one configurable part, as monitoring mixins have it
(kubernetes-mixin's `kubeProxySelector`, node-mixin's `nodeExporterSelector`): every
series an alert reads, `up` included, is selected by it, and nothing else in the
file depends on it. The shipped file is the rendering of the default, SELECTOR
below.

The runbook links are the other one, as the mixins' `runbookURLPattern`: every alert's
`runbook_url` is the pattern with `%s` replaced by its anchor in docs/alerts.md (the alert's
name in lower case, the heading of its section). The shipped file has the default,
RUNBOOK_URL_PATTERN, relative to the repository's root: it resolves in a checkout and in a
Git forge's view of it; point it at where your copy of the repository is served so that
Alertmanager and Grafana link to it.

The script refuses a file in which a selector of `up` or a `proxywatch_*` series
lacks the default selector: a rendering would then leave that series on the old job.
Needs only the Python standard library.
"""
import argparse
import pathlib
import re
import sys

SELECTOR = 'job="proxywatch"'
RUNBOOK_URL_PATTERN = "docs/alerts.md#%s"
RULES = pathlib.Path(__file__).with_name("prometheusrule.yaml")
# A series name and its label matchers, in an expression or a template query.
SERIES = re.compile(r'(?<![A-Za-z0-9_:])(up|proxywatch_[A-Za-z0-9_]+)\s*\{([^}]*)\}')
# An alert's runbook link, whatever its location: the anchor after the last '#'.
RUNBOOK_URL = re.compile(r'^(\s*runbook_url:\s*)"?([^"\s#]*#)([a-z0-9-]+)"?\s*$', re.M)


def render_runbooks(text: str, pattern: str) -> str:
    if pattern.count("%s") != 1 or "%" in pattern.replace("%s", "") or '"' in pattern or any(c.isspace() for c in pattern):
        raise ValueError(f"not a runbook URL pattern: {pattern!r} (one %s for the anchor, e.g. https://git.example.com/proxywatch/blob/main/docs/alerts.md#%s)")
    n = len(RUNBOOK_URL.findall(text))
    if n != text.count("runbook_url:"):
        raise ValueError("a runbook_url without an anchor in docs/alerts.md (...#anchor)")
    return RUNBOOK_URL.sub(lambda m: m.group(1) + pattern.replace("%s", m.group(3)), text)


def render(text: str, selector: str) -> str:
    if not re.fullmatch(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*"(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*")*\s*', selector):
        raise ValueError(f"not a label selector: {selector!r} (e.g. job=\"proxywatch\",cluster=\"eu-1\")")
    escaped_default = SELECTOR.replace('"', '\\"')
    for m in SERIES.finditer(text):
        matchers = m.group(2)
        if SELECTOR not in matchers and escaped_default not in matchers:
            raise ValueError(f"{m.group(0)!r} does not carry {SELECTOR}")
    out = text.replace(escaped_default, selector.replace('"', '\\"'))
    return out.replace(SELECTOR, selector)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selector", default=SELECTOR, help=f"label matchers for the agent's series (default {SELECTOR})")
    ap.add_argument("--runbook-url-pattern", default=RUNBOOK_URL_PATTERN, metavar="PATTERN",
                    help=f"runbook_url of each alert, %%s = its anchor in docs/alerts.md (default {RUNBOOK_URL_PATTERN.replace('%', '%%')})")
    ap.add_argument("--rules", default=str(RULES), help="the PrometheusRule to render (default: the shipped one)")
    args = ap.parse_args()
    try:
        text = render(pathlib.Path(args.rules).read_text(encoding="utf-8"), args.selector)
        sys.stdout.write(render_runbooks(text, args.runbook_url_pattern))
    except ValueError as e:
        print(f"render-rules.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
