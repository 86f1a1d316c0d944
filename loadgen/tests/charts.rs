//! Reports worth reading (issue 54, item 7): the charts of `report.svg`,
//! `report.html`, `compare.html` and `capacity.svg`, read back from the SVG
//! text as a browser would place it: nothing clipped, latency on a log
//! axis where it spans decades with 1-2-5 ticks, the capacity curve in
//! order of rate with its knee label clear of it, the offered rate drawn
//! over the replies, legends off the plotting area, and one time axis for
//! all the charts over time of a page.
//!
//! Text widths are estimated as the kit estimates them: 0.55 em a
//! character (Chromium's DejaVu Sans averages 0.53 em on these labels).

use std::collections::BTreeMap;
use std::path::Path;

use npamp_loadgen::capacity::{self, Capacity, Step};
use npamp_loadgen::html::{self, Compared};
use npamp_loadgen::merge::{self, Measured};
use npamp_loadgen::report;

/// One element of an SVG: its attributes and the text it holds.
#[derive(Debug)]
struct El {
    attrs: BTreeMap<String, String>,
    text: String,
}

impl El {
    fn num(&self, name: &str) -> f64 {
        self.attrs
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} of {self:?}"))
    }

    fn get(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("", String::as_str)
    }

    /// The text's estimated box: (left, top, right, bottom).
    fn text_box(&self) -> (f64, f64, f64, f64) {
        let size: f64 = self
            .attrs
            .get("font-size")
            .and_then(|v| v.parse().ok())
            .unwrap_or(12.0);
        let wide = 0.55 * size * unescaped(&self.text).chars().count() as f64;
        let (x, y) = (self.num("x"), self.num("y"));
        let left = match self.get("text-anchor") {
            "end" => x - wide,
            "middle" => x - wide / 2.0,
            _ => x,
        };
        let top = match self.get("dominant-baseline") {
            "middle" => y - size / 2.0,
            _ => y - size * 0.8,
        };
        (left, top, left + wide, top + size)
    }

    /// A polyline's points.
    fn points(&self) -> Vec<(f64, f64)> {
        self.get("points")
            .split_whitespace()
            .filter_map(|p| {
                let (x, y) = p.split_once(',')?;
                Some((x.parse().ok()?, y.parse().ok()?))
            })
            .collect()
    }
}

fn unescaped(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// Every `<tag …>` of `svg`, in document order.
fn elements(svg: &str, tag: &str) -> Vec<El> {
    let open = format!("<{tag} ");
    svg.split(&open)
        .skip(1)
        .map(|rest| {
            let end = rest.find('>').unwrap_or(rest.len());
            let mut attrs = BTreeMap::new();
            let mut head = &rest[..end];
            while let Some(eq) = head.find("=\"") {
                let name = head[..eq].trim().trim_end_matches('/').to_owned();
                let after = &head[eq + 2..];
                let close = after.find('"').unwrap_or(after.len());
                attrs.insert(name, after[..close].to_owned());
                head = after.get(close + 1..).unwrap_or("");
            }
            let body = rest.get(end + 1..).unwrap_or("");
            let text = body.split('<').next().unwrap_or("").to_owned();
            El { attrs, text }
        })
        .collect()
}

/// The SVG documents of a page (or the one an SVG is).
fn svgs(page: &str) -> Vec<String> {
    page.split("<svg ")
        .skip(1)
        .map(|s| {
            let end = s.find("</svg>").unwrap_or(s.len());
            format!("<svg {}", &s[..end])
        })
        .collect()
}

/// A chart's plotting area: the frame (x, y, width, height).
fn frames(svg: &str) -> Vec<(f64, f64, f64, f64)> {
    elements(svg, "rect")
        .into_iter()
        .filter(|r| r.get("fill") == "none" && r.get("stroke") == "#888")
        .map(|r| (r.num("x"), r.num("y"), r.num("width"), r.num("height")))
        .collect()
}

fn overlaps(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// The labels under frame `f`: its x ticks, left to right.
fn x_ticks(svg: &str, f: (f64, f64, f64, f64)) -> Vec<String> {
    elements(svg, "text")
        .into_iter()
        .filter(|t| (t.num("y") - (f.1 + f.3 + 15.0)).abs() < 0.5 && t.num("x") >= f.0 - 1.0)
        .filter(|t| t.num("x") <= f.0 + f.2 + 1.0)
        .map(|t| t.text)
        .collect()
}

/// The labels left of frame `f`: its y ticks, as (y, value).
fn y_ticks(svg: &str, f: (f64, f64, f64, f64)) -> Vec<(f64, f64)> {
    elements(svg, "text")
        .into_iter()
        .filter(|t| t.get("text-anchor") == "end" && (t.num("x") - (f.0 - 5.0)).abs() < 0.5)
        .filter(|t| t.num("y") >= f.1 - 0.5 && t.num("y") <= f.1 + f.3 + 0.5)
        .filter_map(|t| Some((t.num("y"), t.text.parse().ok()?)))
        .collect()
}

/// 1, 2 or 5 times a power of ten.
fn one_two_five(v: f64) -> bool {
    let m = v / 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().any(|r| (m - r).abs() < 1e-6)
}

fn pages() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pages")
}

fn shard(i: usize) -> Measured {
    Measured::read(&pages().join(format!("shard{i}"))).expect("a recorded worker")
}

fn merged() -> Measured {
    merge::merge(&[shard(0), shard(1)]).expect("the workers merge")
}

/// A search as a user ran it: p99 from 2 ms to 1 s, a 20 ms SLO, the
/// overloaded steps answering fewer replies than the one below them, and
/// a generator-bound step run twice.
fn overloaded() -> Capacity {
    let step = |rate: f64, achieved: f64, p99_ms: f64| Step {
        rate,
        achieved,
        p50_ms: p99_ms / 2.0,
        p99_ms,
        p999_ms: p99_ms * 1.2,
        error_share: 0.0,
        generator_bound: false,
        pass: p99_ms < 20.0 && achieved >= 0.97 * rate,
        why: (p99_ms >= 20.0).then(|| format!("p99 {p99_ms:.3} ms > 20 ms")),
        not_served: None,
    };
    Capacity {
        slo: "p99<20ms".parse().expect("slo"),
        knee: Some(3000.0),
        failed_at: Some(3200.0),
        generator_bound: false,
        not_served: None,
        steps: vec![
            step(500.0, 500.0, 2.1),
            step(1000.0, 1000.0, 2.4),
            step(2000.0, 1999.0, 3.0),
            step(4000.0, 2600.0, 1000.0),
            step(3000.0, 2990.0, 9.0),
            step(3500.0, 2500.0, 800.0),
            step(3200.0, 2800.0, 300.0),
            step(3200.0, 2900.0, 250.0),
        ],
    }
}

/// Every text of `svg` (but the y axis' title, turned up the side) lies
/// within the document's width: nothing is clipped.
fn nothing_clipped(svg: &str, what: &str) {
    let doc = &elements(svg, "svg")[0];
    let width = doc.num("width");
    for t in elements(svg, "text") {
        if t.attrs.contains_key("transform") {
            continue;
        }
        let (left, _, right, _) = t.text_box();
        assert!(
            left >= 0.0 && right <= width,
            "{what}: {:?} runs from {left:.0} to {right:.0} px, out of {width} px",
            t.text
        );
    }
}

#[test]
fn titles_are_wrapped_not_clipped() {
    let mut m = merged();
    m.summary.target = "https://a-gateway-with-a-long-name.example.internal:8443/rpc/v1".into();
    let svg = report::svg(&m.summary, &m.overall, &m.intervals);
    nothing_clipped(&svg, "report.svg");
    // The title still says the offered rate and the p99.
    let title: String = elements(&svg, "text")
        .iter()
        .filter(|t| t.get("font-size") == "14")
        .map(|t| t.text.clone())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        title.contains("200/s offered") && title.contains("p99 3.025 ms"),
        "{title}"
    );
    for (name, c) in [("overloaded", overloaded()), ("recorded", recorded())] {
        nothing_clipped(&capacity::svg(&c, "quickstart"), name);
    }
    let page = html::page(&m, None);
    for svg in svgs(&page) {
        nothing_clipped(&svg, "report.html");
    }
}

fn recorded() -> Capacity {
    let text = std::fs::read_to_string(pages().join("capacity.json")).expect("capacity.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    serde_json::from_value(v["capacity"].clone()).expect("a capacity search")
}

#[test]
fn capacity_latency_spanning_decades_is_on_a_log_axis_with_round_ticks() {
    let svg = capacity::svg(&overloaded(), "quickstart");
    let f = frames(&svg)[0];
    let ticks = y_ticks(&svg, f);
    assert!(ticks.len() >= 3, "{ticks:?}");
    for (_, v) in &ticks {
        assert!(*v > 0.0 && one_two_five(*v), "tick {v} in {ticks:?}");
    }
    // Equal ratios are equal distances: 1 → 10 as far as 10 → 100.
    let at = |v: f64| {
        ticks
            .iter()
            .find(|t| (t.1 - v).abs() < 1e-9)
            .map(|t| t.0)
            .unwrap_or_else(|| panic!("no tick {v} in {ticks:?}"))
    };
    assert!(((at(1.0) - at(10.0)) - (at(10.0) - at(100.0))).abs() < 1.0);
    // The 20 ms SLO line is well clear of the x axis.
    let slo = elements(&svg, "line")
        .into_iter()
        .find(|l| l.get("stroke-dasharray") == "6 3" && l.num("y1") == l.num("y2"))
        .expect("the SLO's line");
    let above_axis = (f.1 + f.3 - slo.num("y1")) / f.3;
    assert!(
        above_axis > 0.3,
        "the SLO line {above_axis:.2} of the way up"
    );
}

#[test]
fn capacity_points_are_joined_in_order_of_rate_and_the_knee_label_is_clear() {
    for (name, c) in [("overloaded", overloaded()), ("recorded", recorded())] {
        let svg = capacity::svg(&c, "quickstart");
        let lines: Vec<Vec<(f64, f64)>> =
            elements(&svg, "polyline").iter().map(El::points).collect();
        assert_eq!(lines.len(), 2, "{name}: p50 and p99");
        for line in &lines {
            assert!(
                line.windows(2).all(|w| w[1].0 > w[0].0),
                "{name}: the line runs back: {line:?}"
            );
        }
        let knee = elements(&svg, "text")
            .into_iter()
            .find(|t| t.text.starts_with("knee "))
            .expect("a knee label");
        let b = knee.text_box();
        for line in &lines {
            for w in line.windows(2) {
                // Along each segment, a point a pixel.
                let n = ((w[1].0 - w[0].0).hypot(w[1].1 - w[0].1)).ceil().max(1.0) as usize;
                for i in 0..=n {
                    let s = i as f64 / n as f64;
                    let (x, y) = (
                        w[0].0 + s * (w[1].0 - w[0].0),
                        w[0].1 + s * (w[1].1 - w[0].1),
                    );
                    assert!(
                        !(x > b.0 && x < b.2 && y > b.1 && y < b.3),
                        "{name}: the knee label {b:?} is over the line at {x:.0},{y:.0}"
                    );
                }
            }
        }
    }
}

/// Two runs known by their summaries: base p50 0.3 ms, p99 0.6 ms; new
/// 20 ms and 30 ms.
fn fast_and_slow() -> [Compared; 2] {
    let side = |label: &str, p50: f64, p99: f64| {
        let mut s = shard(0).summary;
        let l = &mut s.latency_ms;
        (l.p50, l.p90, l.p99, l.p999) = (p50, p50 * 1.5, p99, p99 * 1.1);
        Compared {
            label: label.into(),
            run: Measured::of_summary(s),
            histograms: false,
        }
    };
    [side("fast", 0.3, 0.6), side("slow", 20.0, 30.0)]
}

#[test]
fn a_fast_baseline_is_not_drawn_flat_at_zero() {
    let page = html::compare_page(&fast_and_slow(), "t", true);
    let svg = &svgs(&page)[0];
    let f = frames(svg)[0];
    for (_, v) in y_ticks(svg, f) {
        assert!(v > 0.0 && one_two_five(v), "tick {v}");
    }
    // The fast run's own shape is read: its p99, twice its p50, a tenth
    // of the frame's height above it (on a linear axis to 30 ms, 2 %).
    let base = elements(svg, "polyline")[0].points();
    let (top, foot) = base.iter().fold((f64::INFINITY, 0.0_f64), |(t, b), p| {
        (t.min(p.1), b.max(p.1))
    });
    assert!(foot < f.1 + f.3, "the fast run on the x axis: {base:?}");
    assert!((foot - top) / f.3 > 0.1, "the fast run flat: {base:?}");
}

/// A polyline: its stroke, whether it is dashed, its points.
type Stroke = (String, bool, Vec<(f64, f64)>);

/// The polylines of `svg`.
fn strokes(svg: &str) -> Vec<Stroke> {
    elements(svg, "polyline")
        .into_iter()
        .map(|p| {
            (
                p.get("stroke").to_owned(),
                p.attrs.contains_key("stroke-dasharray"),
                p.points(),
            )
        })
        .collect()
}

#[test]
fn the_offered_rate_is_drawn_over_the_replies_in_a_colour_of_its_own() {
    let m = shard(0);
    let svg = report::svg(&m.summary, &m.overall, &m.intervals);
    let lines = strokes(&svg);
    // Spectrum; then the rates: replies, errors, offered (dashed, last).
    let offered = lines.iter().position(|l| l.1).expect("a dashed line");
    assert_eq!(offered, 3, "{lines:?}");
    assert_ne!(lines[offered].0, lines[1].0);
    // Each run's offered rate over its replies, in a shade of its own.
    let two = [
        Compared {
            label: "a".into(),
            run: shard(0),
            histograms: true,
        },
        Compared {
            label: "b".into(),
            run: merged(),
            histograms: true,
        },
    ];
    let page = html::compare_page(&two, "t", false);
    let rates = strokes(&svgs(&page)[1]);
    assert_eq!(rates.len(), 4, "{rates:?}");
    assert!(!rates[0].1 && !rates[1].1 && rates[2].1 && rates[3].1);
    assert!(rates[2].0 != rates[0].0 && rates[3].0 != rates[1].0);
}

#[test]
fn legends_lie_outside_the_plotting_area() {
    let m = merged();
    let two = [
        Compared {
            label: "a".into(),
            run: shard(0),
            histograms: true,
        },
        Compared {
            label: "b".into(),
            run: merged(),
            histograms: true,
        },
    ];
    let mut drawn = vec![
        report::svg(&m.summary, &m.overall, &m.intervals),
        capacity::svg(&overloaded(), "quickstart"),
    ];
    drawn.extend(svgs(&html::compare_page(&two, "t", false)));
    let names = [
        "replies", "offered", "errors", "p50", "p99", "base: a", "new: b",
    ];
    for svg in &drawn {
        let texts = elements(svg, "text");
        let legend: Vec<&El> = texts
            .iter()
            .filter(|t| names.iter().any(|n| t.text.starts_with(n)))
            .filter(|t| !t.text.starts_with("p99 ") && !t.text.contains(" — "))
            .collect();
        for f in frames(svg) {
            let area = (f.0, f.1, f.0 + f.2, f.1 + f.3);
            for t in &legend {
                assert!(
                    !overlaps(t.text_box(), area),
                    "{:?} inside the plotting area {area:?}",
                    t.text
                );
            }
        }
    }
}

#[test]
fn the_charts_over_time_of_a_page_share_one_time_axis() {
    let two = [
        Compared {
            label: "a".into(),
            run: shard(0),
            histograms: true,
        },
        Compared {
            label: "b".into(),
            run: merged(),
            histograms: true,
        },
    ];
    let over_time = |page: &str| -> Vec<Vec<String>> {
        svgs(page)
            .iter()
            .flat_map(|svg| {
                frames(svg)
                    .into_iter()
                    .filter(|f| {
                        elements(svg, "text").iter().any(|t| {
                            t.text == "seconds since the start"
                                && (t.num("y") - (f.1 + f.3 + 30.0)).abs() < 0.5
                        })
                    })
                    .map(|f| x_ticks(svg, f))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let compared = over_time(&html::compare_page(&two, "t", false));
    assert_eq!(compared.len(), 2, "replies and p99 each second");
    assert_eq!(compared[0], compared[1]);
    let run = over_time(&html::page(&merged(), None));
    assert_eq!(run.len(), 3, "rates, latency each second, outstanding");
    assert!(run.iter().all(|t| *t == run[0]), "{run:?}");
}
