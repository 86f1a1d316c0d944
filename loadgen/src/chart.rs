//! The one chart kit every page draws with (`report.svg`, the run and
//! comparison pages, the capacity curve): an SVG document in the charts'
//! font, a heading wrapped to its width, a frame with round ticks and axis
//! titles on linear or logarithmic scales, lines with a legend under them,
//! marks placed on the drawn scales, the percentile axis of a latency
//! spectrum, the colours, and XML escaping.
//!
//! What is drawn stays readable whatever the numbers: a title too long
//! for its document is wrapped, never clipped; an axis over values that
//! span more than a decade is logarithmic (`Scale::fit`); legends and
//! the names of marks lie outside the plotting area, so no line is hidden
//! under them.

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

/// [`PALETTE`] at half its brightness: a run's offered rate, dashed over
/// its replies (in the run's own colour), told apart from them.
pub const DARK_PALETTE: [&str; 8] = [
    "#0f3b5a", "#7f3f07", "#165016", "#6b1314", "#4a335e", "#462b25", "#713b61", "#3f3f3f",
];

/// About how wide a character of the charts' 12 px sans-serif text is
/// (Chromium's DejaVu Sans averages 6.4 px on their labels).
pub const CHAR_WIDTH: f64 = 6.6;

/// Likewise for a heading's 14 px text.
pub const HEADING_CHAR_WIDTH: f64 = CHAR_WIDTH * 14.0 / 12.0;

/// From one line of a heading to the next.
const HEADING_LINE: f64 = 18.0;

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

/// A document's heading from `x`, wrapped at its spaces into lines of at
/// most `width` px (see [`wrap`]): the first line's baseline 20 px down.
/// Returns how far down the heading reaches.
pub(crate) fn heading(o: &mut String, x: f64, width: f64, text: &str) -> f64 {
    let lines = wrap(text, width, HEADING_CHAR_WIDTH);
    for (i, line) in lines.iter().enumerate() {
        let _ = writeln!(
            o,
            r#"<text x="{x}" y="{}" font-size="14">{}</text>"#,
            20.0 + HEADING_LINE * i as f64,
            xml(line)
        );
    }
    8.0 + HEADING_LINE * lines.len().max(1) as f64
}

/// `text` in lines of at most `width` px (`char_width` a character),
/// broken after a " — " where a part fits a line whole, else at spaces; a
/// word longer than a line is cut short with "…". A title names a run's
/// offered rate and p99 last: they must not be the part that is lost past
/// the document's edge.
pub fn wrap(text: &str, width: f64, char_width: f64) -> Vec<String> {
    let most = ((width / char_width).floor() as usize).max(8);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let parts: Vec<&str> = text.split(" — ").collect();
    for (i, part) in parts.iter().enumerate() {
        let part = match i + 1 < parts.len() {
            true => format!("{part} —"),
            false => (*part).to_owned(),
        };
        let wide = part.chars().count();
        if line.is_empty() && wide <= most {
            line = part;
        } else if wide <= most && line.chars().count() + 1 + wide <= most {
            line.push(' ');
            line.push_str(&part);
        } else if wide <= most {
            lines.push(std::mem::replace(&mut line, part));
        } else {
            words_into(&mut lines, &mut line, &part, most);
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The words of `text` onto `line`, then onto new lines of at most `most`
/// characters.
fn words_into(lines: &mut Vec<String>, line: &mut String, text: &str, most: usize) {
    for word in text.split_whitespace() {
        let word: String = match word.chars().count() > most {
            true => word.chars().take(most - 1).chain(['…']).collect(),
            false => word.to_owned(),
        };
        if line.is_empty() {
            *line = word;
        } else if line.chars().count() + 1 + word.chars().count() <= most {
            line.push(' ');
            line.push_str(&word);
        } else {
            lines.push(std::mem::replace(line, word));
        }
    }
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

/// One chart over time, the warm-up shaded, in an SVG of its own: its
/// time axis to its own last point, its y axis linear from zero.
pub fn series_svg(title: &str, series: &[Line<'_>], warmup_s: f64) -> String {
    let t_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    time_chart(title, Scale::Numbers(y_max), series, warmup_s, t_max)
}

/// One chart over time on the y axis `y`, its time axis from 0 to at
/// least `t_max` seconds: the charts over time of one page are given one
/// `t_max`, so that their seconds line up.
pub(crate) fn time_chart(
    title: &str,
    y: Scale,
    series: &[Line<'_>],
    warmup_s: f64,
    t_max: f64,
) -> String {
    chart_svg(
        Scale::Numbers(t_max),
        y,
        "seconds since the start",
        title,
        (warmup_s > 0.0).then_some(warmup_s),
        series,
    )
}

/// One chart of `series` on the axes `x` and `y`, in an SVG of its own,
/// its legend under it; a line whose name ends in "offered" is dashed.
pub(crate) fn chart_svg(
    x: Scale,
    y: Scale,
    x_title: &str,
    y_title: &str,
    shade: Option<f64>,
    series: &[Line<'_>],
) -> String {
    let w = 760.0;
    let chart = Chart {
        x0: 70.0,
        y0: 10.0,
        width: w - 110.0,
        height: 200.0,
    };
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
    let h = chart.y0 + chart.height + below(&lines, chart.width) + 6.0;
    let mut o = document(w, h);
    let axes = Axes {
        x,
        y,
        x_title,
        y_title,
        shade,
    };
    chart.draw(&mut o, &axes, &lines);
    finish(o)
}

/// A chart's frame (its plotting area) on the page.
pub(crate) struct Chart {
    pub x0: f64,
    pub y0: f64,
    pub width: f64,
    pub height: f64,
}

/// An axis' drawn range, and how a value is placed on it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Range {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Range {
    /// Where `v` lies on the axis: 0 at its start, 1 at its end, values
    /// past either end (and, on a log axis, values not above zero) at
    /// that end.
    fn share(&self, v: f64) -> f64 {
        let s = match self.log {
            true if v > 0.0 => (v / self.lo).log10() / (self.hi / self.lo).log10(),
            true => 0.0,
            false => (v - self.lo) / (self.hi - self.lo),
        };
        if s.is_finite() {
            s.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// Where a drawn chart puts a value, for marks of a caller's own.
pub(crate) struct Plot {
    x0: f64,
    y0: f64,
    width: f64,
    height: f64,
    x: Range,
    y: Range,
}

/// Values whose greatest is more than this many times their least are
/// drawn on a logarithmic axis (see `Scale::fit`).
pub const DECADE: f64 = 10.0;

#[derive(Clone, Debug)]
pub(crate) enum Scale {
    /// Named positions (the spectrum's percentiles) on 0..max.
    Labels(Vec<(f64, String)>, f64),
    /// Linear, round numbers from 0 to at least this.
    Numbers(f64),
    /// Logarithmic, from at most the first to at least the second (both
    /// above zero), ticks at 1, 2 and 5 times the powers of ten.
    Log(f64, f64),
}

impl Scale {
    /// The axis for `values` (latency, rates): logarithmic when those
    /// above zero span more than a decade ([`DECADE`]), linear from zero
    /// otherwise. On a linear axis a 0.6 ms run beside a 30 ms one, or a
    /// 20 ms limit under 1 s of overload, is drawn flat on the x axis; on
    /// a log axis each ratio is one distance. A narrow range (2 to 4 ms)
    /// stays linear: a log axis over it would have a tick or two, and one
    /// from zero reads as proportions. Values not above zero do not widen
    /// a log axis; they are drawn at its foot.
    pub fn fit(values: impl IntoIterator<Item = f64>) -> Scale {
        let (lo, hi) = values
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        if hi > DECADE * lo {
            Scale::Log(lo, hi)
        } else {
            Scale::Numbers(hi)
        }
    }

    /// A linear axis to a twentieth past `max`: a line at its greatest
    /// value is not drawn on the frame's edge (an offered rate of 200/s on
    /// a frame that ends at 200 is hidden by it). A log axis is left as it
    /// is: its next round tick may be 2.5 times further.
    pub fn with_headroom(self) -> Scale {
        match self {
            Scale::Numbers(max) => Scale::Numbers(max * 1.05),
            other => other,
        }
    }

    /// The axis' ticks (value, label) and its range: about `n` ticks on a
    /// linear one.
    fn laid_out(&self, n: usize) -> (Vec<(f64, String)>, Range) {
        let labelled = |t: Vec<f64>| t.into_iter().map(|v| (v, label(v))).collect();
        match self {
            Scale::Labels(l, max) => (l.clone(), range(0.0, *max, false)),
            Scale::Numbers(max) => {
                let t = ticks(*max, n);
                let top = t.last().copied().unwrap_or(1.0);
                (labelled(t), range(0.0, top, false))
            }
            Scale::Log(lo, hi) => {
                let t = log_ticks(*lo, *hi);
                let (first, last) = (t.first().copied(), t.last().copied());
                let r = range(first.unwrap_or(1.0), last.unwrap_or(10.0), true);
                (labelled(t), r)
            }
        }
    }
}

/// A range that is never empty: `hi` above `lo`.
fn range(lo: f64, hi: f64, log: bool) -> Range {
    let hi = match (log, hi > lo) {
        (_, true) => hi,
        (true, false) => lo * DECADE,
        (false, false) => lo + 1e-9,
    };
    Range { lo, hi, log }
}

pub(crate) struct Axes<'a> {
    pub x: Scale,
    pub y: Scale,
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

/// Below a frame: its x ticks' labels (15 px down) and the x axis' title
/// (30 px down).
const AXIS_BELOW: f64 = 38.0;
/// A row of a legend.
const LEGEND_ROW: f64 = 16.0;
/// Between two entries of a legend's row.
const LEGEND_GAP: f64 = 18.0;

/// How far below its frame a chart of `series`, `width` wide, reaches:
/// its x axis, then its legend (none for one line: the y axis' title
/// names it). A caller lays out what follows from it.
pub(crate) fn below(series: &[Series<'_>], width: f64) -> f64 {
    let rows = legend_layout(series, width)
        .last()
        .map_or(0, |(_, row)| row + 1);
    match rows {
        0 => AXIS_BELOW,
        _ => AXIS_BELOW + 8.0 + LEGEND_ROW * rows as f64,
    }
}

/// Where each entry of the legend of `series` goes, under a frame `width`
/// wide: (x from the frame's left edge, row), in rows from left to right;
/// none for one line.
fn legend_layout(series: &[Series<'_>], width: f64) -> Vec<(f64, usize)> {
    if series.len() < 2 {
        return Vec::new();
    }
    let (mut x, mut row) = (0.0, 0);
    series
        .iter()
        .map(|s| {
            // A swatch, a space, the name.
            let wide = 30.0 + CHAR_WIDTH * s.name.chars().count() as f64;
            if x > 0.0 && x + wide > width {
                (x, row) = (0.0, row + 1);
            }
            let at = (x, row);
            x += wide + LEGEND_GAP;
            at
        })
        .collect()
}

impl Chart {
    /// Draws the frame, the axes and `series` into `o`, in the order given
    /// (a caller puts the line that must stay in sight, the offered rate,
    /// last: on top), and their legend under the x axis, off the lines.
    /// The y axis has [`Scale::with_headroom`].
    pub fn draw(&self, o: &mut String, axes: &Axes<'_>, series: &[Series<'_>]) -> Plot {
        let (x_ticks, x) = axes.x.laid_out(8);
        let (y_ticks, y) = axes.y.clone().with_headroom().laid_out(5);
        let plot = Plot {
            x0: self.x0,
            y0: self.y0,
            width: self.width,
            height: self.height,
            x,
            y,
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
        plot.legend(o, series);
        plot
    }
}

impl Plot {
    pub fn x(&self, x: f64) -> f64 {
        self.x0 + self.x.share(x) * self.width
    }

    pub fn y(&self, y: f64) -> f64 {
        self.y0 + self.height - self.y.share(y) * self.height
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

    /// A label under each of `x_ticks`, but none that would run into the
    /// one before it (the ticks of a log axis crowd at its decades' ends);
    /// the last one, at the frame's right edge, ends there and is kept.
    fn x_ticks(&self, o: &mut String, x_ticks: &[(f64, String)]) {
        let right = self.x0 + self.width;
        let mut kept: Vec<(f64, &str, &str, f64, f64)> = Vec::new();
        for (i, (x, text)) in x_ticks.iter().enumerate() {
            let x = self.x(*x);
            let wide = CHAR_WIDTH * text.chars().count() as f64;
            let (anchor, left) = match i > 0 && x >= right - 0.5 {
                true => ("end", x - wide),
                false => ("middle", x - wide / 2.0),
            };
            let last = i + 1 == x_ticks.len();
            while last && kept.last().is_some_and(|k| k.4 + 4.0 > left) {
                kept.pop();
            }
            if kept.last().is_none_or(|k| k.4 + 4.0 <= left) {
                kept.push((x, text, anchor, left, left + wide));
            }
        }
        for (x, text, anchor, _, _) in kept {
            let _ = writeln!(
                o,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
                self.y0 + self.height + 15.0,
                xml(text)
            );
        }
    }

    /// A line across the frame at each of `y_ticks`, and its label left of
    /// the frame unless it would touch the one below it.
    fn y_ticks(&self, o: &mut String, y_ticks: &[(f64, String)]) {
        let x0 = self.x0;
        let mut below = f64::INFINITY;
        for (y, text) in y_ticks {
            let yy = self.y(*y);
            let _ = write!(
                o,
                r##"<line x1="{x0}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#eee"/>"##,
                x0 + self.width
            );
            if below - yy >= 13.0 {
                below = yy;
                let _ = write!(
                    o,
                    r#"<text x="{:.1}" y="{yy:.1}" text-anchor="end" dominant-baseline="middle">{}</text>"#,
                    x0 - 5.0,
                    xml(text)
                );
            }
            o.push('\n');
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

    /// The legend under the x axis' title, outside the frame, so that it
    /// never hides a line: a swatch and a name an entry, in rows.
    fn legend(&self, o: &mut String, series: &[Series<'_>]) {
        let layout = legend_layout(series, self.width);
        if layout.is_empty() {
            return;
        }
        o.push_str("<g class=\"legend\">\n");
        let top = self.y0 + self.height + AXIS_BELOW + 4.0;
        for (s, (dx, row)) in series.iter().zip(layout) {
            let (lx, ly) = (self.x0 + dx, top + LEGEND_ROW * (row as f64 + 0.5));
            let _ = writeln!(
                o,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{}/><text x="{:.1}" y="{ly:.1}" dominant-baseline="middle">{}</text>"#,
                lx + 24.0,
                s.colour,
                s.dash(),
                lx + 30.0,
                xml(s.name)
            );
        }
        o.push_str("</g>\n");
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

    /// Dashed levels across the frame (limits: (value, colour, name)),
    /// each named right of the frame at its height, off the lines; names
    /// that would touch are moved apart, downwards. The chart leaves
    /// [`level_room`] right of its frame for them.
    pub fn levels(&self, o: &mut String, levels: &[(f64, &str, String)]) {
        let (x0, x1) = (self.x0, self.x0 + self.width);
        let mut at: Vec<(f64, &str, &str)> = levels
            .iter()
            .map(|(v, colour, text)| (self.y(*v), *colour, text.as_str()))
            .collect();
        at.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut next = f64::NEG_INFINITY;
        for (yy, colour, text) in at {
            let ty = yy.max(next);
            next = ty + 14.0;
            let _ = writeln!(
                o,
                r#"<line x1="{x0}" y1="{yy:.1}" x2="{x1:.1}" y2="{yy:.1}" stroke="{colour}" stroke-dasharray="6 3"/><text x="{:.1}" y="{ty:.1}" dominant-baseline="middle" fill="{colour}">{}</text>"#,
                x1 + 6.0,
                xml(text)
            );
        }
    }

    /// A dashed upright through the frame at `x` (a mark on the x axis),
    /// `text` above the frame's top edge: over every line, centred on the
    /// upright as far as the frame's width allows. The chart leaves a
    /// line's room above its frame for it.
    pub fn upright(&self, o: &mut String, x: f64, colour: &str, text: &str) {
        let (y0, x1, y1) = (self.y0, self.x0 + self.width, self.y0 + self.height);
        let x = self.x(x);
        let half = CHAR_WIDTH * text.chars().count() as f64 / 2.0;
        let tx = x.min(x1 - half).max(self.x0 + half);
        let _ = writeln!(
            o,
            r#"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1:.1}" stroke="{colour}" stroke-dasharray="4 3"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="{colour}">{}</text>"#,
            y0 - 6.0,
            xml(text)
        );
    }
}

/// The room right of a frame that `Plot::levels` names `texts` in.
pub fn level_room<'a>(texts: impl IntoIterator<Item = &'a str>) -> f64 {
    let longest = texts.into_iter().map(|t| t.chars().count()).max();
    12.0 + CHAR_WIDTH * longest.unwrap_or(0) as f64
}

/// Ticks of a log axis from at most `lo` to at least `hi` (both above
/// zero), the first and last its ends: 1, 2 and 5 times each power of ten
/// over up to three decades, the powers of ten alone over more (else they
/// would crowd).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi > lo { hi } else { lo };
    let (k_lo, k_hi) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let steps: &[f64] = if k_hi - k_lo <= 3 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let all: Vec<f64> = (k_lo..=k_hi)
        .flat_map(|k| steps.iter().map(move |m| m * 10f64.powi(k)))
        .collect();
    // The greatest at or below lo to the least at or above hi.
    let first = all.iter().rposition(|t| *t <= lo * (1.0 + 1e-9));
    let last = all.iter().position(|t| *t >= hi * (1.0 - 1e-9));
    match (first, last) {
        (Some(f), Some(l)) if l > f => all[f..=l].to_vec(),
        _ => all,
    }
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

    #[test]
    fn an_axis_is_logarithmic_where_its_values_span_decades() {
        // 0.6 ms beside 30 ms: log; 2 to 4 ms: linear from zero.
        assert!(matches!(Scale::fit([0.6, 30.0]), Scale::Log(lo, hi) if lo == 0.6 && hi == 30.0));
        assert!(matches!(Scale::fit([2.0, 4.0, 0.0]), Scale::Numbers(m) if m == 4.0));
        assert!(matches!(Scale::fit([]), Scale::Numbers(m) if m == 0.0));
        // Zeros and NaN do not widen it.
        assert!(matches!(
            Scale::fit([0.0, f64::NAN, 3.0, 9.0]),
            Scale::Numbers(_)
        ));
        let labels = |t: Vec<f64>| t.into_iter().map(label).collect::<Vec<_>>().join(" ");
        assert_eq!(labels(log_ticks(0.6, 30.0)), "0.5 1 2 5 10 20 50");
        assert_eq!(
            labels(log_ticks(2.0, 1000.0)),
            "2 5 10 20 50 100 200 500 1000"
        );
        assert_eq!(
            labels(log_ticks(0.04, 8.083)),
            "0.02 0.05 0.1 0.2 0.5 1 2 5 10"
        );
        // Over more than three decades, the powers of ten alone.
        assert_eq!(
            labels(log_ticks(0.05, 3000.0)),
            "0.01 0.1 1 10 100 1000 10000"
        );
        // Not a range: still an axis.
        assert_eq!(labels(log_ticks(f64::NAN, 0.0)), "1 2 5");
        // On the drawn axis, equal ratios are equal distances.
        let (_, r) = Scale::Log(1.0, 1000.0).laid_out(5);
        let (a, b, c) = (r.share(1.0), r.share(10.0), r.share(100.0));
        assert!((b - a - (c - b)).abs() < 1e-9 && a == 0.0 && r.share(1000.0) == 1.0);
        assert_eq!(r.share(0.0), 0.0, "not above zero: at the foot");
    }

    #[test]
    fn a_long_heading_is_wrapped_at_spaces_within_its_width() {
        let title = "quickstart — https://a-gateway-with-a-long-name.example.internal:8443/rpc/v1 — 200 replies/s achieved of 200/s offered, p99 3.025 ms";
        let lines = wrap(title, 740.0, HEADING_CHAR_WIDTH);
        assert!(lines.len() > 1, "{lines:?}");
        for l in &lines {
            assert!(
                HEADING_CHAR_WIDTH * l.chars().count() as f64 <= 740.0,
                "{l}"
            );
        }
        assert_eq!(lines.join(" "), title, "nothing lost");
        // A word longer than a line is cut short.
        let lines = wrap(&"x".repeat(200), 100.0, 10.0);
        assert_eq!(lines, ["xxxxxxxxx…"]);
        let mut o = String::new();
        assert_eq!(heading(&mut o, 10.0, 740.0, title), 8.0 + 18.0 * 2.0);
        assert_eq!(o.matches("<text ").count(), 2);
    }

    #[test]
    fn crowded_x_labels_are_left_out_but_the_last() {
        let plot = Plot {
            x0: 0.0,
            y0: 0.0,
            width: 100.0,
            height: 100.0,
            x: Range {
                lo: 1000.0,
                hi: 10000.0,
                log: true,
            },
            y: Range {
                lo: 0.0,
                hi: 1.0,
                log: false,
            },
        };
        let ticks: Vec<(f64, String)> = [1000.0, 2000.0, 5000.0, 10000.0]
            .into_iter()
            .map(|v| (v, label(v)))
            .collect();
        let mut o = String::new();
        plot.x_ticks(&mut o, &ticks);
        let shown: Vec<&str> = o
            .lines()
            .filter_map(|l| l.split('>').nth(1)?.split('<').next())
            .collect();
        // 2000 at 30 px runs into 1000; 5000 at 70 px into 10000, which ends
        // the axis.
        assert_eq!(shown, ["1000", "10000"]);
    }

    #[test]
    fn a_legend_wraps_into_rows_under_the_frame() {
        let p: [(f64, f64); 0] = [];
        let names = [
            "base: a run with a long name",
            "new: another one",
            "base offered",
            "x",
        ];
        let series: Vec<Series<'_>> = names.iter().map(|n| Series::line(BLUE, n, &p)).collect();
        let layout = legend_layout(&series, 400.0);
        for ((dx, _), n) in layout.iter().zip(names) {
            assert!(
                dx + 30.0 + CHAR_WIDTH * n.chars().count() as f64 <= 400.0,
                "{n}"
            );
        }
        assert_eq!(layout.iter().map(|e| e.1).collect::<Vec<_>>(), [0, 0, 1, 1]);
        assert_eq!(below(&series, 400.0), AXIS_BELOW + 8.0 + 2.0 * LEGEND_ROW);
        assert_eq!(
            below(&series[..1], 400.0),
            AXIS_BELOW,
            "one line: no legend"
        );
    }
}
