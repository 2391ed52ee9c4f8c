#!/usr/bin/env python3
"""Renders manifests/prometheusrule.yaml for another Prometheus job selector.

    python3 manifests/render-rules.py --selector 'job="node-agents",cluster="eu-1"' > prometheusrule.yaml

The selector is the rules' one configurable part, as monitoring mixins have it
(kubernetes-mixin's `kubeProxySelector`, node-mixin's `nodeExporterSelector`): every
series an alert reads, `up` included, is selected by it, and nothing else in the
file depends on it. The shipped file is the rendering of the default, SELECTOR
below.

The script refuses a file in which a selector of `up` or a `proxywatch_*` series
lacks the default selector: a rendering would then leave that series on the old job.
Needs only the Python standard library.
"""
import argparse
import pathlib
import re
import sys

SELECTOR = 'job="proxywatch"'
RULES = pathlib.Path(__file__).with_name("prometheusrule.yaml")
# A series name and its label matchers, in an expression or a template query.
SERIES = re.compile(r'(?<![A-Za-z0-9_:])(up|proxywatch_[A-Za-z0-9_]+)\s*\{([^}]*)\}')


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
    ap.add_argument("--rules", default=str(RULES), help="the PrometheusRule to render (default: the shipped one)")
    args = ap.parse_args()
    try:
        sys.stdout.write(render(pathlib.Path(args.rules).read_text(encoding="utf-8"), args.selector))
    except ValueError as e:
        print(f"render-rules.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
