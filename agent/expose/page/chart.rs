//! The status page's charts: the history the agent keeps, drawn as inline SVG (axes, the
//! series, the conntrack forecast), with a text description for screen readers.

use std::fmt::Write;

use super::{esc, section};
use crate::expose::json::Document;
use crate::history::series::Point;
use crate::snapshot::ProbeStatus;

/// What a chart's values are, for its axis labels.
#[derive(Clone, Copy)]
enum Unit {
    /// 0 to 1, shown as a percentage.
    Ratio,
    Seconds,
    Count,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Ratio => format!("{:.0}%", v * 100.0),
            Unit::Seconds if v == 0.0 => "0".into(),
            Unit::Seconds if v < 1.0 => format!("{} ms", trim_num(v * 1000.0)),
            Unit::Seconds => format!("{} s", trim_num(v)),
            Unit::Count => trim_num(v),
        }
    }

    /// The value of the newest point, precise.
    fn show_exact(self, v: f64) -> String {
        match self {
            Unit::Ratio => format!("{:.1}%", v * 100.0),
            Unit::Seconds if v < 1.0 => format!("{:.0} ms", v * 1000.0),
            Unit::Seconds => format!("{v:.2} s"),
            Unit::Count => format!("{v:.0}"),
        }
    }
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The smallest of 1, 2, 5 × 10^k at or above `v` (an axis' top).
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || v.is_infinite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|c| *c >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// A time offset for an axis label: `-12 min`, `now`, `+2 h`.
fn offset(seconds: f64) -> String {
    let a = seconds.abs();
    if a < 1.0 {
        return "now".into();
    }
    let sign = if seconds < 0.0 { "−" } else { "+" };
    let body = if a < 120.0 {
        format!("{a:.0} s")
    } else if a < 7200.0 {
        format!("{:.0} min", a / 60.0)
    } else {
        format!("{:.1} h", a / 3600.0)
    };
    format!("{sign}{body}")
}

// The drawing area inside the SVG's 560 × 210 view box.
const VIEW_W: f64 = 560.0;
const VIEW_H: f64 = 210.0;
const PLOT_X0: f64 = 64.0;
const PLOT_X1: f64 = 540.0;
const PLOT_Y0: f64 = 14.0;
const PLOT_Y1: f64 = 170.0;

/// One chart: `series` as a solid line with its points marked, `forecast` dashed,
/// on a time axis relative to `now` (the snapshot time). Readable without colour:
/// solid vs dashed, every line labelled in text, values in the title and caption.
/// The SVG carries its axes' domains (data-t0/t1, data-v0/v1) and plot box
/// (data-x0/x1/y0/y1) so a test can map each drawn point back to its value.
struct Chart<'a> {
    id: &'a str,
    title: &'a str,
    unit: Unit,
    /// The snapshot key the series comes from (`derived.series.<key>`).
    key: &'a str,
    series: &'a [Point],
    forecast: &'a [Point],
    /// Text for the forecast line's label, e.g. "full in about 2 hours".
    forecast_label: String,
    now: f64,
    /// Why there is nothing to draw, when the series is empty.
    empty: String,
}

fn chart(o: &mut String, c: &Chart) {
    let _ = writeln!(o, "<figure class=\"chart\" id=\"{}\">", c.id);
    let _ = writeln!(o, "<figcaption><strong>{}</strong></figcaption>", esc(c.title));
    if c.series.is_empty() {
        let _ = writeln!(o, "<p class=\"muted\">{}</p>\n</figure>", esc(&c.empty));
        return;
    }
    let p = Plot::of(c);
    let desc = description(c, &p);
    let _ = writeln!(
        o,
        "<svg class=\"chart\" viewBox=\"0 0 {VIEW_W} {VIEW_H}\" role=\"img\" aria-labelledby=\"{id}-t {id}-d\" \
         data-t0=\"{t0}\" data-t1=\"{t1}\" data-v0=\"{v0}\" data-v1=\"{v1}\" \
         data-x0=\"{PLOT_X0}\" data-x1=\"{PLOT_X1}\" data-y0=\"{PLOT_Y1}\" data-y1=\"{PLOT_Y0}\">\n\
         <title id=\"{id}-t\">{title}</title>\n<desc id=\"{id}-d\">{desc}</desc>",
        id = c.id,
        t0 = p.t0,
        t1 = p.t1,
        v0 = p.v0,
        v1 = p.v1,
        title = esc(c.title),
        desc = esc(&desc),
    );
    value_axis(o, c, &p);
    time_axis(o, c, &p);
    measured_line(o, c, &p);
    forecast_line(o, c, &p);
    legend(o, c);
    o.push_str("</svg>\n");
    let _ = writeln!(o, "<p class=\"caption\">{}</p>\n</figure>", esc(&desc));
}

/// A chart's domains, time `t0..t1` and value `v0..v1`, and where they map to
/// in the drawing area.
struct Plot {
    t0: f64,
    t1: f64,
    v0: f64,
    v1: f64,
}

impl Plot {
    /// From the oldest point to now or the forecast's end, whichever is later; from 0
    /// to 100% for a ratio, else to a round number at or above the highest value.
    fn of(c: &Chart) -> Plot {
        let t0 = c.series[0][0];
        let t1 = c
            .forecast
            .iter()
            .chain(c.series.iter())
            .map(|p| p[0])
            .fold(c.now, f64::max);
        let t1 = if t1 > t0 { t1 } else { t0 + 1.0 };
        let (v0, v1) = match c.unit {
            Unit::Ratio => (0.0, 1.0),
            _ => (
                0.0,
                nice_ceiling(c.series.iter().chain(c.forecast).map(|p| p[1]).fold(0.0, f64::max)),
            ),
        };
        Plot { t0, t1, v0, v1 }
    }

    fn x(&self, t: f64) -> f64 {
        PLOT_X0 + (t - self.t0) / (self.t1 - self.t0) * (PLOT_X1 - PLOT_X0)
    }

    fn y(&self, v: f64) -> f64 {
        PLOT_Y1 - (v - self.v0) / (self.v1 - self.v0) * (PLOT_Y1 - PLOT_Y0)
    }

    /// The points of a polyline: `x,y x,y …`.
    fn points(&self, ps: &[Point]) -> String {
        ps.iter()
            .map(|p| format!("{:.2},{:.2}", self.x(p[0]), self.y(p[1])))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The chart in words, for the SVG's `<desc>` and the caption: how many points over
/// what time, the newest value and the forecast.
fn description(c: &Chart, p: &Plot) -> String {
    let last = c.series[c.series.len() - 1];
    format!(
        "{} points from {} to {}; newest {}{}",
        c.series.len(),
        offset(p.t0 - c.now),
        offset(last[0] - c.now),
        c.unit.show_exact(last[1]),
        if c.forecast.is_empty() {
            String::new()
        } else {
            format!("; forecast (dashed): {}", c.forecast_label)
        }
    )
}

/// Horizontal grid with value labels: bottom, middle, top.
fn value_axis(o: &mut String, c: &Chart, p: &Plot) {
    for f in [0.0, 0.5, 1.0] {
        let v = p.v0 + f * (p.v1 - p.v0);
        let _ = writeln!(
            o,
            "<line class=\"grid\" x1=\"{PLOT_X0}\" x2=\"{PLOT_X1}\" y1=\"{yy:.2}\" y2=\"{yy:.2}\"/>\
             <text class=\"axis\" x=\"{:.0}\" y=\"{:.2}\" text-anchor=\"end\">{}</text>",
            PLOT_X0 - 6.0,
            p.y(v) + 4.0,
            esc(&c.unit.show(v)),
            yy = p.y(v),
        );
    }
}

/// Time axis: the oldest point, now, and the forecast's end.
fn time_axis(o: &mut String, c: &Chart, p: &Plot) {
    let mut ticks = vec![(p.t0, "start"), (c.now, "middle")];
    if p.t1 > c.now + 1.0 {
        ticks.push((p.t1, "end"));
    }
    let _ = writeln!(
        o,
        "<line class=\"axisline\" x1=\"{PLOT_X0}\" x2=\"{PLOT_X1}\" y1=\"{PLOT_Y1}\" y2=\"{PLOT_Y1}\"/>"
    );
    for (t, anchor) in ticks {
        let _ = writeln!(
            o,
            "<line class=\"tick\" x1=\"{xx:.2}\" x2=\"{xx:.2}\" y1=\"{PLOT_Y1}\" y2=\"{:.0}\"/>\
             <text class=\"axis\" x=\"{xx:.2}\" y=\"{:.0}\" text-anchor=\"{anchor}\">{}</text>",
            PLOT_Y1 + 5.0,
            PLOT_Y1 + 19.0,
            esc(&offset(t - c.now)),
            xx = p.x(t),
        );
    }
}

/// The measured series: its line, its points while they are few, its newest value.
fn measured_line(o: &mut String, c: &Chart, p: &Plot) {
    let _ = writeln!(
        o,
        "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" points=\"{}\"/>",
        c.key,
        p.points(c.series)
    );
    // Point markers while they are few enough to tell apart.
    if c.series.len() <= 60 {
        for pt in c.series {
            let _ = write!(
                o,
                "<circle class=\"dot\" cx=\"{:.2}\" cy=\"{:.2}\" r=\"2.5\"/>",
                p.x(pt[0]),
                p.y(pt[1])
            );
        }
        o.push('\n');
    }
    let last = c.series[c.series.len() - 1];
    let (lx, ly) = (p.x(last[0]), p.y(last[1]));
    let _ = writeln!(
        o,
        "<text class=\"label\" x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\">{}</text>",
        lx - 4.0,
        (ly - 8.0).max(PLOT_Y0 + 10.0),
        esc(&c.unit.show_exact(last[1]))
    );
}

/// The forecast, dashed, with its last value; nothing when it has fewer than two points.
fn forecast_line(o: &mut String, c: &Chart, p: &Plot) {
    if c.forecast.len() < 2 {
        return;
    }
    let end = c.forecast[c.forecast.len() - 1];
    let _ = writeln!(
        o,
        "<polyline class=\"forecast\" data-series=\"{}_forecast\" fill=\"none\" stroke-dasharray=\"7 5\" points=\"{}\"/>\
         \n<text class=\"label\" x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\">{}</text>",
        c.key,
        p.points(c.forecast),
        p.x(end[0]),
        (p.y(end[1]) - 8.0).max(PLOT_Y0 + 10.0),
        esc(&c.unit.show_exact(end[1]))
    );
}

/// Legend, in words and line styles.
fn legend(o: &mut String, c: &Chart) {
    let _ = writeln!(
        o,
        "<line class=\"series\" x1=\"{PLOT_X0}\" x2=\"{:.0}\" y1=\"203\" y2=\"203\"/>\
         <text class=\"axis\" x=\"{:.0}\" y=\"207\">measured</text>{}",
        PLOT_X0 + 24.0,
        PLOT_X0 + 30.0,
        if c.forecast.is_empty() {
            String::new()
        } else {
            format!(
                "<line class=\"forecast\" x1=\"{:.0}\" x2=\"{:.0}\" y1=\"203\" y2=\"203\" stroke-dasharray=\"7 5\"/>\
                 <text class=\"axis\" x=\"{:.0}\" y=\"207\">forecast from the trend: {}</text>",
                PLOT_X0 + 110.0,
                PLOT_X0 + 134.0,
                PLOT_X0 + 140.0,
                esc(&c.forecast_label)
            )
        }
    );
}

/// The history the agent keeps, drawn: conntrack fill with its forecast, kube-proxy's
/// sync p99, stale conntrack entries. Everything comes from `derived.series`.
pub(super) fn charts(o: &mut String, doc: &Document, collected_at: f64) {
    section(o, "history", "Over time");
    o.push_str("<div class=\"charts\">\n");
    let s = &doc.derived.series;
    let trend = doc.derived.conntrack.as_ref().and_then(|c| c.trend.as_ref());
    let forecast_label = match trend.and_then(|t| t.seconds_to_full) {
        Some(ttf) => format!("full in about {}", crate::timefmt::human_duration(ttf)),
        None => "not growing".into(),
    };
    let why = |probe: &str, what: &str| match doc.probes.get(probe).map(|p| p.status) {
        Some(ProbeStatus::Ok) | None => format!("Collecting: the chart needs two {what}."),
        Some(ProbeStatus::Absent) => format!("No {what}: the {probe} probe is absent (see Probes)."),
        Some(ProbeStatus::Failed) => format!("No recent {what}: the {probe} probe failed (see Probes)."),
    };
    chart(
        o,
        &Chart {
            id: "chart-conntrack-fill",
            title: "Conntrack table fill",
            unit: Unit::Ratio,
            key: "conntrack_fill",
            series: &s.conntrack_fill,
            forecast: &s.conntrack_fill_forecast,
            forecast_label,
            now: collected_at,
            empty: why("conntrack", "conntrack readings"),
        },
    );
    chart(
        o,
        &Chart {
            id: "chart-sync-p99",
            title: "kube-proxy sync duration, p99 per interval",
            unit: Unit::Seconds,
            key: "kube_proxy_sync_p99_seconds",
            series: &s.kube_proxy_sync_p99_seconds,
            forecast: &[],
            forecast_label: String::new(),
            now: collected_at,
            empty: why("kube_proxy", "kube-proxy readings with syncs between them"),
        },
    );
    chart(
        o,
        &Chart {
            id: "chart-stale",
            title: "Stale conntrack entries",
            unit: Unit::Count,
            key: "stale_entries",
            series: &s.stale_entries,
            forecast: &[],
            forecast_label: String::new(),
            now: collected_at,
            empty: why("conntrack_stale", "stale-entry checks"),
        },
    );
    service_connect(o, doc);
    o.push_str("</div>\n</section>\n");
}

// The Service tries' chart: one row per target, 30 units high, under a 24-unit value axis.
const ROW_H: f64 = 30.0;
const ROWS_Y0: f64 = 28.0;

/// The Service tries (`--service-traffic.interval`), drawn from `derived.service_traffic`:
/// per target, the p50 (solid bar) and p99 (outlined bar) of its latest successful tries,
/// the window the history keeps, values in words beside each bar. Nothing when the probe
/// does not run (it is off by default). Bounded: one row per target the history keeps.
fn service_connect(o: &mut String, doc: &Document) {
    let Some(d) = doc.derived.service_traffic.as_ref().filter(|d| !d.targets.is_empty()) else {
        return;
    };
    // The probe's order (the API server, DNS, the flags' targets), then any the latest run left out.
    let order: Vec<&str> = doc
        .facts
        .service_traffic
        .iter()
        .flat_map(|f| f.tries.iter().map(|t| t.target.as_str()))
        .collect();
    let mut rows: Vec<&crate::history::service_traffic::TargetHistory> = d.targets.iter().collect();
    rows.sort_by_key(|h| order.iter().position(|t| *t == h.target).unwrap_or(usize::MAX));
    let v1 = nice_ceiling(rows.iter().filter_map(|h| h.p99_seconds).fold(0.0, f64::max));
    let x = |v: f64| PLOT_X0 + v / v1 * (PLOT_X1 - PLOT_X0);
    let height = ROWS_Y0 + ROW_H * rows.len() as f64 + 24.0;
    let words = |h: &crate::history::service_traffic::TargetHistory| match (h.p50_seconds, h.p99_seconds) {
        (Some(p50), Some(p99)) => format!(
            "p50 {}, p99 {} over {} {}",
            crate::expose::report::try_ms(p50),
            crate::expose::report::try_ms(p99),
            h.window_tries,
            if h.window_tries == 1 { "try" } else { "tries" }
        ),
        _ => "no successful try yet".into(),
    };
    let desc: Vec<String> = rows.iter().map(|h| format!("{}: {}", h.target, words(h))).collect();
    let desc = desc.join("; ");
    let title = "Service connect time, p50 and p99 over the latest tries";
    let id = "chart-service-connect";
    let _ = writeln!(
        o,
        "<figure class=\"chart\" id=\"{id}\">\n<figcaption><strong>{title}</strong></figcaption>\n\
         <svg class=\"chart\" viewBox=\"0 0 {VIEW_W} {height}\" role=\"img\" aria-labelledby=\"{id}-t {id}-d\" \
         data-v0=\"0\" data-v1=\"{v1}\" data-x0=\"{PLOT_X0}\" data-x1=\"{PLOT_X1}\">\n\
         <title id=\"{id}-t\">{title}</title>\n<desc id=\"{id}-d\">{}</desc>",
        esc(&desc)
    );
    // The value axis on top: 0, half, the top, with vertical grid lines through the rows.
    let bottom = ROWS_Y0 + ROW_H * rows.len() as f64;
    for f in [0.0, 0.5, 1.0] {
        let xx = x(f * v1);
        let anchor = ["start", "middle", "end"][(f * 2.0) as usize];
        let _ = writeln!(
            o,
            "<line class=\"grid\" x1=\"{xx:.2}\" x2=\"{xx:.2}\" y1=\"{:.0}\" y2=\"{bottom:.0}\"/>\
             <text class=\"axis\" x=\"{xx:.2}\" y=\"14\" text-anchor=\"{anchor}\">{}</text>",
            ROWS_Y0 - 6.0,
            esc(&Unit::Seconds.show(f * v1)),
        );
    }
    for (i, h) in rows.iter().enumerate() {
        let top = ROWS_Y0 + ROW_H * i as f64;
        let _ = write!(
            o,
            "<text class=\"axis\" x=\"{PLOT_X0}\" y=\"{:.0}\">{}: {}</text>",
            top + 11.0,
            esc(&h.target),
            esc(&words(h))
        );
        if let (Some(p50), Some(p99)) = (h.p50_seconds, h.p99_seconds) {
            let _ = write!(
                o,
                "<rect class=\"p99\" data-target=\"{t}\" data-seconds=\"{p99}\" x=\"{PLOT_X0}\" y=\"{:.0}\" width=\"{:.2}\" height=\"10\"/>\
                 <rect class=\"p50\" data-target=\"{t}\" data-seconds=\"{p50}\" x=\"{PLOT_X0}\" y=\"{:.0}\" width=\"{:.2}\" height=\"10\"/>",
                top + 15.0,
                x(p99) - PLOT_X0,
                top + 15.0,
                x(p50) - PLOT_X0,
                t = esc(&h.target),
            );
        }
        o.push('\n');
    }
    // Legend, in words and fills: solid p50, outlined p99.
    let _ = writeln!(
        o,
        "<rect class=\"p50\" x=\"{PLOT_X0}\" y=\"{:.0}\" width=\"18\" height=\"10\"/>\
         <text class=\"axis\" x=\"{:.0}\" y=\"{:.0}\">p50 (solid)</text>\
         <rect class=\"p99\" x=\"{:.0}\" y=\"{:.0}\" width=\"18\" height=\"10\"/>\
         <text class=\"axis\" x=\"{:.0}\" y=\"{:.0}\">p99 (outlined), of each target's latest {} successful tries</text>\n</svg>",
        bottom + 8.0,
        PLOT_X0 + 24.0,
        bottom + 17.0,
        PLOT_X0 + 110.0,
        bottom + 8.0,
        PLOT_X0 + 134.0,
        bottom + 17.0,
        crate::history::service_traffic::WINDOW_TRIES,
    );
    let _ = writeln!(o, "<p class=\"caption\">{}</p>\n</figure>", esc(&desc));
}

#[cfg(test)]
mod tests {
    use super::super::render;
    use super::super::tests::doc;
    use super::*;

    /// The numbers of `name="..."` in the first tag of `html` that starts with `start`.
    fn attr<'a>(html: &'a str, start: &str, name: &str) -> &'a str {
        let tag = &html[html.find(start).unwrap_or_else(|| panic!("no {start}"))..];
        let tag = &tag[..tag.find('>').unwrap()];
        let at = tag
            .find(&format!(" {name}=\""))
            .unwrap_or_else(|| panic!("no {name} in {tag}"))
            + name.len()
            + 3;
        &tag[at..at + tag[at..].find('"').unwrap()]
    }

    #[test]
    fn charts_draw_the_series_of_the_snapshot() {
        let mut s = crate::evaluate::test_support::healthy();
        s.collected_at = 10_000.0;
        let fill: Vec<Point> = (0..30)
            .map(|i| [8_200.0 + 60.0 * i as f64, 0.2 + 0.01 * i as f64])
            .collect();
        s.derived.series.conntrack_fill = fill.clone();
        s.derived.series.conntrack_fill_forecast = vec![[9_940.0, 0.49], [11_740.0, 0.8]];
        s.derived.series.kube_proxy_sync_p99_seconds = vec![[9_000.0, 0.05], [9_500.0, 0.7], [9_990.0, 0.1]];
        let html = render(&doc(&s), s.collected_at);
        let svg = &html[html
            .find("<figure class=\"chart\" id=\"chart-conntrack-fill\"")
            .unwrap()..];
        let num = |n: &str| attr(svg, "<svg", n).parse::<f64>().unwrap();
        let (t0, t1, v0, v1) = (num("data-t0"), num("data-t1"), num("data-v0"), num("data-v1"));
        let (x0, x1, y0, y1) = (num("data-x0"), num("data-x1"), num("data-y0"), num("data-y1"));
        assert_eq!(
            (t0, t1, v0, v1),
            (8_200.0, 11_740.0, 0.0, 1.0),
            "from the oldest point to the forecast's end"
        );
        let drawn: Vec<Point> = attr(svg, "<polyline class=\"series\"", "points")
            .split(' ')
            .map(|xy| {
                let (x, y) = xy.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                [
                    t0 + (x - x0) / (x1 - x0) * (t1 - t0),
                    v0 + (y - y0) / (y1 - y0) * (v1 - v0),
                ]
            })
            .collect();
        assert_eq!(drawn.len(), fill.len());
        for (d, f) in drawn.iter().zip(&fill) {
            assert!(
                (d[0] - f[0]).abs() < 0.01 * (t1 - t0) / (x1 - x0) * 2.0,
                "{d:?} vs {f:?}"
            );
            assert!(
                (d[1] - f[1]).abs() < 0.01 * (v1 - v0) / (y0 - y1).abs() * 2.0,
                "{d:?} vs {f:?}"
            );
        }
        assert!(
            svg.contains("class=\"forecast\" data-series=\"conntrack_fill_forecast\""),
            "{svg}"
        );
        assert!(
            svg.contains("stroke-dasharray"),
            "the forecast is dashed, not only coloured"
        );
        assert!(svg.contains(">forecast from the trend: not growing</text>"), "{svg}");
        assert!(
            html.contains("<desc id=\"chart-sync-p99-d\">3 points from −17 min to −10 s; newest 100 ms</desc>"),
            "{html}"
        );
        // The sync axis tops at a round value above the slowest sync.
        let sync = &html[html.find("id=\"chart-sync-p99\"").unwrap()..];
        assert_eq!(attr(sync, "<svg", "data-v1"), "1");
        // Nothing to draw yet: said in words.
        assert!(html.contains("id=\"chart-stale\""));
        assert!(
            html.contains("No stale-entry checks: the conntrack_stale probe is absent")
                || html.contains("Collecting: the chart needs two stale-entry checks."),
            "{html}"
        );
        assert!(!html.contains("<script"));
        if let Ok(p) = std::env::var("PROXYWATCH_PAGE_OUT") {
            std::fs::write(p, &html).unwrap();
        }
    }

    /// A known series of tries through the history: the chart's bars and words, and `check`'s
    /// text, give the history's nearest-rank p50 and p99 of the latest tries.
    #[test]
    fn service_connect_chart_and_text_show_the_windows_quantiles() {
        use crate::history::service_traffic::{quantile, ServiceTrafficHistory, WINDOW_TRIES};
        use crate::probe::service_traffic::{Path, Role, ServiceTrafficFacts, Try};
        let try_ = |target: &str, result: &str, s: f64| Try {
            target: target.into(),
            role: Role::Target,
            service: Some("10.96.0.10:53/udp".into()),
            result: result.into(),
            detail: (result != "ok").then(|| "connection refused".into()),
            seconds: Some(s),
            answer_seconds: None,
            source: None,
            endpoint: Some("10.244.0.7:53".into()),
            path: Path::Current,
            path_detail: None,
            rule_endpoints: vec![],
        };
        // 80 runs: the API server's connect time a saw tooth of 1..=17 ms; DNS's 2 ms but
        // every 9th run 300 ms; a third target refused every time.
        let mut h = ServiceTrafficHistory::default();
        let (mut api, mut dns) = (Vec::new(), Vec::new());
        let mut facts = ServiceTrafficFacts::default();
        let mut derived = Default::default();
        for i in 0..80u32 {
            let a = f64::from(1 + i % 17) / 1000.0;
            let d = if i % 9 == 0 { 0.3 } else { 0.002 };
            api.push(a);
            dns.push(d);
            facts.tries = std::sync::Arc::new(vec![
                try_("default/kubernetes:443/tcp", "ok", a),
                try_("kube-system/kube-dns:53/udp", "ok", d),
                try_("default/web:80/tcp", "refused", 0.0004),
            ]);
            derived = h.observe(&facts);
        }
        let window = |v: &[f64]| {
            let mut w = v[v.len() - WINDOW_TRIES..].to_vec();
            w.sort_by(f64::total_cmp);
            (quantile(&w, 0.5).unwrap(), quantile(&w, 0.99).unwrap())
        };
        let (api_q, dns_q) = (window(&api), window(&dns));
        assert_ne!(api_q.0, api_q.1);
        let mut s = crate::evaluate::test_support::healthy();
        s.collected_at = 5_080.0;
        s.facts.service_traffic = Some(facts);
        s.derived.service_traffic = Some(derived);
        let html = render(&doc(&s), s.collected_at);
        let svg = &html[html
            .find("<figure class=\"chart\" id=\"chart-service-connect\"")
            .unwrap()..];
        let svg = &svg[..svg.find("</figure>").unwrap()];
        let num = |n: &str| attr(svg, "<svg", n).parse::<f64>().unwrap();
        let (v1, x0, x1) = (num("data-v1"), num("data-x0"), num("data-x1"));
        assert_eq!(v1, 0.5, "the axis tops at a round value above the slowest p99");
        // Each bar, mapped back through the axis, is the window's quantile.
        for (target, (p50, p99)) in [
            ("default/kubernetes:443/tcp", api_q),
            ("kube-system/kube-dns:53/udp", dns_q),
        ] {
            for (class, want) in [("p50", p50), ("p99", p99)] {
                let bar = &svg[svg
                    .find(&format!("<rect class=\"{class}\" data-target=\"{target}\""))
                    .unwrap_or_else(|| panic!("no {class} bar for {target}: {svg}"))..];
                let width: f64 = attr(bar, "<rect", "width").parse().unwrap();
                let drawn = width / (x1 - x0) * v1;
                assert!(
                    (drawn - want).abs() < 0.01 / (x1 - x0) * v1 * 2.0,
                    "{target} {class}: {drawn} vs {want}"
                );
            }
            let words = format!(
                "{target}: p50 {:.2} ms, p99 {:.2} ms over {WINDOW_TRIES} tries",
                p50 * 1000.0,
                p99 * 1000.0
            );
            assert!(svg.contains(&format!(">{words}</text>")), "{words} not drawn: {svg}");
            assert!(svg.contains(&words), "{words} not in the description");
        }
        // A target with no success has no bar, and says so.
        assert!(!svg.contains("data-target=\"default/web:80/tcp\""));
        assert!(
            svg.contains(">default/web:80/tcp: no successful try yet</text>"),
            "{svg}"
        );
        // Rows in the probe's order.
        assert!(svg.find("default/kubernetes:443/tcp:").unwrap() < svg.find("kube-system/kube-dns:53/udp:").unwrap());

        // `check`'s text, the same numbers.
        let text = crate::expose::report::render(&doc(&s));
        // Wrapped to 80 columns: each try's continuation lines are indented by 4.
        let flat = text.replace("\n    ", " ");
        let want_api = format!(
            "  default/kubernetes:443/tcp: ok in {:.2} ms to 10.244.0.7:53; p50 {:.2} ms, p99 {:.2} ms over 60 tries",
            api.last().unwrap() * 1000.0,
            api_q.0 * 1000.0,
            api_q.1 * 1000.0
        );
        assert!(flat.contains(&want_api), "{want_api}\nnot in\n{text}");
        assert!(
            flat.contains("  default/web:80/tcp: refused (connection refused) to 10.244.0.7:53; no successful try yet"),
            "{text}"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

        // No tries (the probe off, the default): no chart.
        let html = render(&doc(&crate::evaluate::test_support::healthy()), 0.0);
        assert!(!html.contains("chart-service-connect"));
    }

    #[test]
    fn nice_axis_tops() {
        assert_eq!(
            [0.07, 0.7, 1.0, 1.2, 3.0, 7.0, 0.0].map(nice_ceiling),
            [0.1, 1.0, 1.0, 2.0, 5.0, 10.0, 1.0]
        );
    }
}
