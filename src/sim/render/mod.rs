//! Renders a simulation [`Report`]: a terminal table, JSON, a timeline CSV, a self-contained HTML page
//! with SVG charts, and a progress bar for the command line.
//!
//! Every renderer is a pure function of the report: equal reports give byte-identical output. None of
//! them prints anything; [`write_all`] is the only one that touches the file system.
//!
//! The charts are drawn with [`plotters`]' SVG backend, whose text needs no system fonts (the viewer's
//! `sans-serif` font is used). Rates on the charts are per-slice counts scaled to requests per second
//! (a slice is [`SLICE_MS`] long), plotted at the start of their slice.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::metrics::{Report, StrategyReport, TimelineSample, SLICE_MS};

mod chart;
pub use chart::chart_svg;
use chart::*;

/// Why a report could not be rendered or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The report could not be serialised to JSON.
    #[error("cannot serialise the report to JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A chart could not be drawn.
    #[error("cannot draw the chart \"{chart}\": {message}")]
    Chart {
        /// The chart's title.
        chart: String,
        /// What the drawing library reported.
        message: String,
    },
    /// A strategy was asked for by name but the report has none of that name.
    #[error("no strategy named \"{name}\" in the report (it has: {known})")]
    UnknownStrategy {
        /// The name asked for.
        name: String,
        /// The report's strategy names, comma-separated.
        known: String,
    },
    /// A directory or file could not be created or written.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The directory or file concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

// ---------------------------------------------------------------------------------------------------
// Table
// ---------------------------------------------------------------------------------------------------

/// The table's column headers, the strategy name first.
const COLUMNS: [&str; 11] = [
    "strategy",
    "goodput",
    "urgent ok",
    "non-urgent ok",
    "p50 ms",
    "p99 ms",
    "wasted",
    "flips",
    "reaction ms",
    "recovery ms",
    "peak mem",
];

/// What the table's columns mean, two lines (plain ASCII, as the rest of the table).
const LEGEND: [&str; 2] = [
    "goodput = answered in time during overload phases (load >= 1) / (capacity x their duration); \
     ok = share answered in time",
    "wasted = backend time spent on answers nobody waited for; reaction = overload onset to first \
     refusal or wait; recovery = overload end to switch off",
];

/// The cells of one strategy's row, in [`COLUMNS`] order.
fn row_cells(s: &StrategyReport) -> [String; 11] {
    [
        s.name.clone(),
        percent(s.goodput_ratio),
        percent(s.urgent_success),
        percent(s.non_urgent_success),
        millis(s.p50_ms),
        millis(s.p99_ms),
        percent(s.wasted_work),
        s.switch_flips.to_string(),
        millis(s.reaction_ms),
        millis(s.recovery_ms),
        percent(s.peak_memory_ratio),
    ]
}

/// A ratio as a percentage with one decimal (`0.973` → `97.3%`); `-` if it is not a finite number.
fn percent(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{:.1}%", ratio * 100.0)
    } else {
        "-".to_owned()
    }
}

/// Milliseconds with one decimal; `-` for none or a value that is not a finite number.
fn millis(ms: Option<f64>) -> String {
    match ms {
        Some(ms) if ms.is_finite() => format!("{ms:.1}"),
        _ => "-".to_owned(),
    }
}

/// A figure without a useless `.0`: `1000`, `1234.5`.
fn figure(x: f64) -> String {
    let s = format!("{x:.1}");
    match s.strip_suffix(".0") {
        Some(whole) => whole.to_owned(),
        None => s,
    }
}

/// A plain-text table of the report's figures, one row per strategy, for a terminal.
///
/// The first line names the scenario, seed, capacity and SLO; then come the column headers, a rule,
/// one row per strategy (names left-aligned, figures right-aligned, columns separated by two spaces,
/// so every row has the same width) and two legend lines. Ratios are shown as percentages with one
/// decimal (`97.3%`), times in milliseconds with one decimal; a missing or non-finite figure is `-`.
/// No colour codes; the text ends with a newline.
pub fn table(report: &Report) -> String {
    let rows: Vec<[String; 11]> = report.strategies.iter().map(row_cells).collect();
    let mut widths = COLUMNS.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 11]| -> String {
        let mut out = String::new();
        for (i, (cell, &width)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<width$}");
            } else {
                let _ = write!(out, "  {cell:>width$}");
            }
        }
        out
    };

    let mut out = format!(
        "scenario: {}   seed: {}   capacity: {} rps   SLO: {} ms\n\n",
        report.scenario,
        report.seed,
        figure(report.capacity_rps),
        figure(report.slo_ms)
    );
    let header = line(&COLUMNS.map(str::to_owned));
    let rule = "-".repeat(header.chars().count());
    out.push_str(&header);
    out.push('\n');
    out.push_str(&rule);
    out.push('\n');
    for row in &rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out.push('\n');
    for line in LEGEND {
        out.push_str(line);
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------------------
// JSON and CSV
// ---------------------------------------------------------------------------------------------------

/// The report as pretty-printed JSON with a trailing newline (timelines left out; see [`Report`]).
///
/// Equal reports give byte-identical text. A non-finite figure is written as `null`.
///
/// # Errors
/// [`RenderError::Json`] if serialisation fails.
pub fn json(report: &Report) -> Result<String, RenderError> {
    let mut out = serde_json::to_string_pretty(report)?;
    out.push('\n');
    Ok(out)
}

/// The header of [`timeline_csv`].
const CSV_HEADER: &str = "strategy,t_ms,load,offered_urgent,offered_non_urgent,answered_urgent,\
answered_non_urgent,refused,timed_out,in_flight,waiting,mean_latency_ms,p99_ms,switch_on,memory_ratio,\
late";

/// Every strategy's timeline as CSV: one header line, then one row per (strategy, slice), strategies in
/// report order.
///
/// Columns: `strategy,t_ms,load,offered_urgent,offered_non_urgent,answered_urgent,answered_non_urgent,
/// refused,timed_out,in_flight,waiting,mean_latency_ms,p99_ms,switch_on,memory_ratio,late`, as in
/// [`TimelineSample`]. A missing `mean_latency_ms` or `p99_ms` is an empty cell, `switch_on` is `0` or
/// `1`, decimals are written in Rust's shortest round-trip form. A strategy name containing a comma,
/// quote or line break is quoted as RFC 4180 says. Lines end with `\n`.
pub fn timeline_csv(report: &Report) -> String {
    let mut out = String::with_capacity(64 * (1 + report.strategies.len()));
    out.push_str(CSV_HEADER);
    out.push('\n');
    for s in &report.strategies {
        let name = csv_field(&s.name);
        for t in &s.timeline {
            let latency = t.mean_latency_ms.map(|l| l.to_string()).unwrap_or_default();
            let p99 = t.p99_ms.map(|l| l.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "{name},{},{},{},{},{},{},{},{},{},{},{latency},{p99},{},{},{}",
                t.t_ms,
                t.load,
                t.offered_urgent,
                t.offered_non_urgent,
                t.answered_urgent,
                t.answered_non_urgent,
                t.refused,
                t.timed_out,
                t.in_flight,
                t.waiting,
                u8::from(t.switch_on),
                t.memory_ratio,
                t.late,
            );
        }
    }
    out
}

/// A CSV field, quoted if it needs to be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

// ---------------------------------------------------------------------------------------------------
// HTML
// ---------------------------------------------------------------------------------------------------

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;\
max-width:960px;padding:0 16px;color:#222;background:#fff}\
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em}\
p.meta{color:#555;margin-top:0}\
div.table{overflow-x:auto;margin:12px 0}table{border-collapse:collapse;font-size:.9em}\
th,td{padding:4px 8px;border-bottom:1px solid #ddd;white-space:nowrap}\
th{text-align:right;vertical-align:bottom;white-space:normal;background:#f4f4f4}\
th:first-child,td:first-child{text-align:left}\
td{text-align:right;font-variant-numeric:tabular-nums}\
p.legend{font-size:.85em;color:#555;max-width:900px}\
figure{margin:10px 0}svg{display:block;max-width:100%;height:auto;border:1px solid #eee}";

/// Whether a strategy gets the urgent vs non-urgent chart.
fn is_sluicegate(name: &str) -> bool {
    name.starts_with("sluicegate")
}

/// The report as one self-contained HTML page: no scripts, no external style sheets, fonts or
/// images; the CSS is inline and the charts are inline SVG drawn with plotters.
///
/// It holds the title (scenario, seed, capacity, SLO), the table of figures and a legend, then the
/// charts (900 × 300 each): per strategy, offered vs answered in time (requests/s) with the capacity
/// line and the switch periods shaded; in flight per strategy; mean latency per strategy with the SLO
/// line; and, for `sluicegate` and every strategy whose name starts with it, urgent vs non-urgent
/// rates.
///
/// # Errors
/// [`RenderError::Chart`] if a chart cannot be drawn.
pub fn html(report: &Report) -> Result<String, RenderError> {
    let title = format!(
        "sluicegate simulation: {} (seed {})",
        report.scenario, report.seed
    );
    let mut out = String::with_capacity(64 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(out, "<title>{}</title>", esc(&title));
    let _ = writeln!(out, "<style>{CSS}</style>\n</head>\n<body>");
    let _ = writeln!(out, "<h1>{}</h1>", esc(&title));
    let _ = writeln!(
        out,
        "<p class=\"meta\">Capacity {} requests/s, SLO {} ms, {} strategies on the same arrivals \
         (virtual time, {} ms slices).</p>",
        esc(&figure(report.capacity_rps)),
        esc(&figure(report.slo_ms)),
        report.strategies.len(),
        SLICE_MS
    );

    out.push_str("<div class=\"table\"><table>\n<thead><tr>");
    for h in COLUMNS {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for s in &report.strategies {
        out.push_str("<tr>");
        for cell in row_cells(s) {
            let _ = write!(out, "<td>{}</td>", esc(&cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n");
    let _ = writeln!(
        out,
        "<p class=\"legend\">{}<br>{}</p>",
        esc(LEGEND[0]),
        esc(LEGEND[1])
    );

    out.push_str("<h2>Offered vs answered in time</h2>\n");
    for s in &report.strategies {
        figure_html(&mut out, &offered_svg(report, s)?);
    }
    out.push_str("<h2>In flight</h2>\n");
    figure_html(
        &mut out,
        &svg_chart("in flight", |area| draw_in_flight(area, report))?,
    );
    out.push_str("<h2>Latency</h2>\n");
    figure_html(
        &mut out,
        &svg_chart("latency", |area| draw_latency(area, report))?,
    );

    let gated: Vec<&StrategyReport> = report
        .strategies
        .iter()
        .filter(|s| is_sluicegate(&s.name))
        .collect();
    if !gated.is_empty() {
        out.push_str("<h2>Urgent vs non-urgent</h2>\n");
        for s in gated {
            let svg = svg_chart(&format!("{}: urgent vs non-urgent", s.name), |area| {
                draw_classes(area, report, s)
            })?;
            figure_html(&mut out, &svg);
        }
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

/// Appends an inline SVG chart to the page.
fn figure_html(out: &mut String, svg: &str) {
    out.push_str("<figure>\n");
    out.push_str(svg.trim_end());
    out.push_str("\n</figure>\n");
}

// ---------------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------------

/// Writes `report.json` ([`json`]), `timeline.csv` ([`timeline_csv`]), `report.html` ([`html`]) and,
/// per strategy, `offered-<strategy>.svg` ([`chart_svg`]) into `dir`, creating it (and its parents)
/// if needed, and returns the paths in that order.
///
/// Everything is rendered before anything is written, so a rendering error leaves no file behind.
/// Existing files of those names are replaced.
///
/// # Errors
/// [`RenderError::Io`] naming the directory or file that could not be created or written;
/// [`RenderError::Json`] or [`RenderError::Chart`] if rendering fails.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, RenderError> {
    let mut files = vec![
        ("report.json".to_owned(), json(report)?),
        ("timeline.csv".to_owned(), timeline_csv(report)),
        ("report.html".to_owned(), html(report)?),
    ];
    for s in &report.strategies {
        files.push((
            format!("offered-{}.svg", s.name),
            chart_svg(report, &s.name)?,
        ));
    }
    std::fs::create_dir_all(dir).map_err(|source| RenderError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths = Vec::with_capacity(files.len());
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| RenderError::Io {
            path: path.clone(),
            source,
        })?;
        paths.push(path);
    }
    Ok(paths)
}

// ---------------------------------------------------------------------------------------------------
// Progress
// ---------------------------------------------------------------------------------------------------

/// How long a run must have lasted before its progress bar appears.
const PROGRESS_DELAY: Duration = Duration::from_secs(1);
/// Resolution of the progress bar: its length in steps.
const PROGRESS_STEPS: u64 = 1000;

/// A progress bar on stderr for the command line, wrapping [`indicatif`].
///
/// It stays hidden for the first second of wall time (so short runs never show one) and is only ever
/// drawn when stderr is a terminal. The bar is revealed by the first [`Progress::set`] call made after
/// that second, so the caller should call `set` regularly. Nothing is written to stdout.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: AtomicBool,
}

impl Progress {
    /// A progress bar titled `label`, hidden until a second has passed.
    pub fn new(label: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(PROGRESS_STEPS), ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template("{prefix} [{bar:40}] {percent:>3}%  {elapsed}")
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(label.to_owned());
        Progress {
            bar,
            started: Instant::now(),
            shown: AtomicBool::new(false),
        }
    }

    /// Sets how much of the work is done, from 0 to 1 (clamped; NaN counts as 0).
    ///
    /// The first call after a second of wall time reveals the bar if stderr is a terminal.
    pub fn set(&self, fraction: f64) {
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        self.bar
            .set_position((fraction * PROGRESS_STEPS as f64).round() as u64);
        if !self.shown.load(Ordering::Relaxed)
            && self.started.elapsed() >= PROGRESS_DELAY
            && !self.shown.swap(true, Ordering::Relaxed)
            && std::io::stderr().is_terminal()
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.tick();
        }
    }

    /// Ends the progress bar and clears it from the terminal (what follows, the table, is the result).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
