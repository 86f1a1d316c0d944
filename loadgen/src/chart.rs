//! The one chart kit every page draws with (`report.svg`, the run and
//! comparison pages, the capacity curve): an SVG document in the charts'
//! font, a frame with round ticks and axis titles, lines with a legend,
//! marks placed on the drawn scales, the percentile axis of a latency
//! spectrum, the colours, and XML escaping.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

pub const BLUE: &str = "#1f77b4";
pub const ORANGE: &str = "#ff7f0e";
pub const GREEN: &str = "#2ca02c";
pub const RED: &str = "#d62728";
pub const PURPLE: &str = "#9467bd";

/// Line colours, in order (one run or one method each).
pub const PALETTE: [&str; 8] = [
    BLUE, ORANGE, GREEN, RED, PURPLE, "#8c564b", "#e377c2", "#7f7f7f",
];

/// About how wide a character of the charts' 12 px sans-serif text is.
pub const CHAR_WIDTH: f64 = 6.6;

/// The opening of an SVG document `width` by `height`, in the charts' font.
pub(crate) fn document(width: f64, height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    )
}

/// The document `o`, closed.
pub(crate) fn finish(mut o: String) -> String {
    o.push_str("</svg>\n");
    o
}

/// A document's heading, on its first line from `x`.
pub(crate) fn heading(o: &mut String, x: f64, text: &str) {
    let _ = writeln!(
        o,
        r#"<text x="{x}" y="20" font-size="14">{}</text>"#,
        xml(text)
    );
}

/// The latency percentile spectrum of `h`, ms: x = log10(1/(1-q)), from
/// 0 (p0) to 5 (p99.999); empty for an empty histogram.
pub fn spectrum(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=100)
        .map(|i| {
            let x = 5.0 * f64::from(i) / 100.0;
            let q = 1.0 - 10f64.powf(-x);
            (x, h.value_at_quantile(q) as f64 / 1e3)
        })
        .collect()
}

/// Where quantile `q` lies on the axis of [`spectrum`].
pub(crate) fn percentile_x(q: f64) -> f64 {
    (1.0 / (1.0 - q)).log10()
}

/// The x axis of [`spectrum`]: its percentiles named.
pub(crate) fn spectrum_scale() -> Scale {
    let quantiles = ["p0", "p90", "p99", "p99.9", "p99.99", "p99.999"]
        .iter()
        .enumerate()
        .map(|(i, l)| (i as f64, (*l).to_owned()))
        .collect();
    Scale::Labels(quantiles, 5.0)
}

/// A named, coloured line: its points.
pub type Line<'a> = (&'a str, &'a str, &'a [(f64, f64)]);

/// One chart over time, the warm-up shaded, in an SVG of its own.
pub fn series_svg(title: &str, series: &[Line<'_>], warmup_s: f64) -> String {
    let t_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    chart_svg(
        Scale::Numbers(t_max),
        "seconds since the start",
        title,
        (warmup_s > 0.0).then_some(warmup_s),
        series,
    )
}

/// One chart of `series` on the x axis `x`, in an SVG of its own; a line
/// whose name ends in "offered" is dashed.
pub(crate) fn chart_svg(
    x: Scale,
    x_title: &str,
    y_title: &str,
    shade: Option<f64>,
    series: &[Line<'_>],
) -> String {
    let (w, h) = (760.0, 250.0);
    let mut o = document(w, h);
    let chart = Chart {
        x0: 70.0,
        y0: 10.0,
        width: w - 110.0,
        height: h - 50.0,
    };
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let lines: Vec<Series<'_>> = series
        .iter()
        .map(|(name, colour, points)| {
            if name.ends_with("offered") {
                Series::dashed(colour, name, points)
            } else {
                Series::line(colour, name, points)
            }
        })
        .collect();
    let axes = Axes {
        x,
        y_max,
        x_title,
        y_title,
        shade,
    };
    chart.draw(&mut o, &axes, &lines);
    finish(o)
}

/// A chart's frame on the page.
pub(crate) struct Chart {
    pub x0: f64,
    pub y0: f64,
    pub width: f64,
    pub height: f64,
}

/// Where a drawn chart puts a value, for marks of a caller's own.
pub(crate) struct Plot {
    x0: f64,
    y0: f64,
    width: f64,
    height: f64,
    x_top: f64,
    y_top: f64,
}

pub(crate) enum Scale {
    /// Named positions (the spectrum's percentiles) on 0..max.
    Labels(Vec<(f64, String)>, f64),
    /// Round numbers from 0 to at least this.
    Numbers(f64),
}

pub(crate) struct Axes<'a> {
    pub x: Scale,
    pub y_max: f64,
    pub x_title: &'a str,
    pub y_title: &'a str,
    /// Shade 0..this on the x axis (the warm-up).
    pub shade: Option<f64>,
}

pub(crate) struct Series<'a> {
    colour: &'a str,
    name: &'a str,
    dashed: bool,
    points: &'a [(f64, f64)],
}

impl<'a> Series<'a> {
    pub fn line(colour: &'a str, name: &'a str, points: &'a [(f64, f64)]) -> Self {
        Self {
            colour,
            name,
            dashed: false,
            points,
        }
    }

    pub fn dashed(colour: &'a str, name: &'a str, points: &'a [(f64, f64)]) -> Self {
        Self {
            dashed: true,
            ..Self::line(colour, name, points)
        }
    }

    /// The stroke's dash attribute, if it has one.
    fn dash(&self) -> &'static str {
        if self.dashed {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        }
    }
}

impl Chart {
    /// Draws the frame, the axes and `series` into `o`.
    pub fn draw(&self, o: &mut String, axes: &Axes<'_>, series: &[Series<'_>]) -> Plot {
        let (x_ticks, x_top): (Vec<(f64, String)>, f64) = match &axes.x {
            Scale::Labels(l, max) => (l.clone(), *max),
            Scale::Numbers(max) => {
                let t = ticks(*max, 8);
                let top = t.last().copied().unwrap_or(1.0);
                (t.into_iter().map(|v| (v, label(v))).collect(), top)
            }
        };
        let y_ticks = ticks(axes.y_max, 5);
        let y_top = y_ticks.last().copied().unwrap_or(1.0).max(1e-9);
        let plot = Plot {
            x0: self.x0,
            y0: self.y0,
            width: self.width,
            height: self.height,
            x_top,
            y_top,
        };
        if let Some(end) = axes.shade {
            plot.shade(o, end);
        }
        plot.frame(o);
        plot.x_ticks(o, &x_ticks);
        plot.y_ticks(o, &y_ticks);
        plot.titles(o, axes);
        for s in series {
            plot.line(o, s);
        }
        if series.len() > 1 {
            plot.legend(o, series);
        }
        plot
    }
}

impl Plot {
    pub fn x(&self, x: f64) -> f64 {
        self.x0 + (x / self.x_top).clamp(0.0, 1.0) * self.width
    }

    pub fn y(&self, y: f64) -> f64 {
        self.y0 + self.height - (y / self.y_top).clamp(0.0, 1.0) * self.height
    }

    /// 0..`end` on the x axis shaded and named: the warm-up.
    fn shade(&self, o: &mut String, end: f64) {
        let Plot { x0, y0, height, .. } = *self;
        let _ = writeln!(
            o,
            r##"<rect x="{x0}" y="{y0}" width="{:.1}" height="{height}" fill="#eee"/><text x="{:.1}" y="{:.1}" fill="#777" text-anchor="middle">warm-up</text>"##,
            self.x(end) - x0,
            (x0 + self.x(end)) / 2.0,
            y0 + 14.0
        );
    }

    fn frame(&self, o: &mut String) {
        let Plot {
            x0,
            y0,
            width,
            height,
            ..
        } = *self;
        let _ = writeln!(
            o,
            r##"<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="none" stroke="#888"/>"##
        );
    }

    fn x_ticks(&self, o: &mut String, x_ticks: &[(f64, String)]) {
        let last = x_ticks.len().saturating_sub(1);
        for (i, (x, text)) in x_ticks.iter().enumerate() {
            // The last label ends at the frame, so it is never clipped.
            let anchor = if i == last && i > 0 { "end" } else { "middle" };
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
                self.x(*x),
                self.y0 + self.height + 15.0,
                xml(text)
            );
        }
    }

    /// A line across the frame and a label at each of `y_ticks`.
    fn y_ticks(&self, o: &mut String, y_ticks: &[f64]) {
        let x0 = self.x0;
        for y in y_ticks {
            let _ = writeln!(
                o,
                r##"<line x1="{x0}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{:.1}" y="{yy:.1}" text-anchor="end" dominant-baseline="middle">{}</text>"##,
                x0 + self.width,
                x0 - 5.0,
                label(*y),
                yy = self.y(*y)
            );
        }
    }

    /// The axes' titles: x's under the ticks, y's turned up the left side.
    fn titles(&self, o: &mut String, axes: &Axes<'_>) {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            self.x0 + self.width / 2.0,
            self.y0 + self.height + 30.0,
            xml(axes.x_title)
        );
        let _ = writeln!(
            o,
            r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
            self.y0 + self.height / 2.0,
            self.y0 + self.height / 2.0,
            xml(axes.y_title)
        );
    }

    fn line(&self, o: &mut String, s: &Series<'_>) {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", self.x(*x), self.y(*y)))
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{} points="{}"/>"#,
            s.colour,
            s.dash(),
            points.join(" ")
        );
    }

    /// The legend over the lines, inside the frame's top right corner, as
    /// wide as its longest name.
    fn legend(&self, o: &mut String, series: &[Series<'_>]) {
        let longest = series
            .iter()
            .map(|s| s.name.chars().count())
            .max()
            .unwrap_or(0);
        let box_w = 34.0 + CHAR_WIDTH * longest as f64;
        let lx = self.x0 + self.width - box_w - 4.0;
        let _ = writeln!(
            o,
            r##"<rect x="{lx:.1}" y="{:.1}" width="{box_w:.1}" height="{:.1}" fill="#fff" fill-opacity="0.85"/>"##,
            self.y0 + 4.0,
            legend_bottom(series.len()) - 4.0
        );
        for (i, s) in series.iter().enumerate() {
            let ly = self.y0 + 14.0 + 15.0 * i as f64;
            let _ = writeln!(
                o,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{}/><text x="{:.1}" y="{ly:.1}" dominant-baseline="middle">{}</text>"#,
                lx + 4.0,
                lx + 24.0,
                s.colour,
                s.dash(),
                lx + 30.0,
                xml(s.name)
            );
        }
    }

    /// A point at (`x`, `y`): a circle in `colour`, hollow when asked,
    /// `tip` shown when hovered.
    pub fn point(&self, o: &mut String, (x, y): (f64, f64), colour: &str, hollow: bool, tip: &str) {
        let fill = if hollow { "white" } else { colour };
        let _ = writeln!(
            o,
            r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{fill}" stroke="{colour}"><title>{}</title></circle>"#,
            self.x(x),
            self.y(y),
            xml(tip)
        );
    }

    /// A dashed level across the frame at `y` (a limit), `text` above its
    /// right end.
    pub fn level(&self, o: &mut String, y: f64, colour: &str, text: &str) {
        let (x0, x1) = (self.x0, self.x0 + self.width);
        let _ = writeln!(
            o,
            r#"<line x1="{x0}" y1="{yy:.1}" x2="{x1:.1}" y2="{yy:.1}" stroke="{colour}" stroke-dasharray="6 3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{colour}">{}</text>"#,
            x1 - 4.0,
            self.y(y) - 4.0,
            xml(text),
            yy = self.y(y)
        );
    }

    /// A dashed upright through the frame at `x` (a mark on the x axis),
    /// `text` beside it below a legend of `legend` lines (which takes the
    /// frame's top right corner): right of the line, or left of it where
    /// it would run out of the frame.
    pub fn upright(&self, o: &mut String, x: f64, colour: &str, text: &str, legend: usize) {
        let (y0, x1, y1) = (self.y0, self.x0 + self.width, self.y0 + self.height);
        let x = self.x(x);
        let wide = CHAR_WIDTH * text.chars().count() as f64;
        let (tx, anchor) = if x + 4.0 + wide > x1 {
            (x - 4.0, "end")
        } else {
            (x + 4.0, "start")
        };
        let _ = writeln!(
            o,
            r#"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1:.1}" stroke="{colour}" stroke-dasharray="4 3"/><text x="{tx:.1}" y="{:.1}" text-anchor="{anchor}" fill="{colour}">{}</text>"#,
            y0 + legend_bottom(legend) + 14.0,
            xml(text)
        );
    }
}

/// How far below the frame's top the legend of `series` lines ends.
pub fn legend_bottom(series: usize) -> f64 {
    15.0 * series as f64 + 8.0
}

/// Round tick values from 0 to at least `max`: 1, 2 or 5 times a power of
/// ten apart, about `n` of them.
pub fn ticks(max: f64, n: usize) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let n = n.max(1);
    let power = 10f64.powf((max / n as f64).log10().floor());
    // The smallest round step that needs at most n + 1 ticks.
    let step = [1.0, 2.0, 5.0, 10.0, 20.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| (max / s).ceil() as usize <= n + 1)
        .unwrap_or(20.0 * power);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// A tick label without needless digits (`2.5`, `10`, `0.05`).
pub fn label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    // Three significant digits at most, then no trailing zeros.
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let text = format!("{v:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// `s` as XML text.
pub(crate) fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            ticks(10075.0, 5),
            vec![0.0, 2000.0, 4000.0, 6000.0, 8000.0, 10000.0, 12000.0]
        );
        assert_eq!(ticks(5.0, 5), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(
            ticks(0.37, 4),
            vec![0.0, 0.1, 0.2, 0.30000000000000004, 0.4]
        );
        assert_eq!(label(0.30000000000000004), "0.3");
        assert_eq!(label(12000.0), "12000");
        assert_eq!(label(2.5), "2.5");
        assert_eq!(label(0.05), "0.05");
    }
}
