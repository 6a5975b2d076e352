//! The demo's chart: goodput and urgent success, second by second, for both runs, as SVG
//! (plotters' SVG backend, whose text needs no system fonts).

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::{Mode, Run, Setup};

/// Size of one panel, in pixels; the chart stacks two.
const PANEL: (u32, u32) = (900, 300);
/// Width of the legend on the right of each panel, in pixels.
const LEGEND_WIDTH: u32 = 150;
/// Font of titles and labels.
const FONT: &str = "sans-serif";
/// Okabe–Ito colours (distinguishable with the common colour-vision deficiencies).
const UNPROTECTED: RGBColor = RGBColor(213, 94, 0);
const PROTECTED: RGBColor = RGBColor(0, 114, 178);
const CAPACITY: RGBColor = RGBColor(60, 60, 60);

type DrawError = DrawingAreaErrorKind<std::io::Error>;
/// A panel's plotting area: seconds across, a value up.
type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The chart of `runs` as an SVG document.
pub(crate) fn svg(setup: &Setup, runs: &[Run]) -> Result<String, String> {
    let mut buf = String::new();
    let drawn = (|| -> Result<(), DrawError> {
        let root = SVGBackend::with_string(&mut buf, (PANEL.0, PANEL.1 * 2)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(PANEL.1);
        goodput_panel(&top, setup, runs)?;
        urgent_panel(&bottom, setup, runs)?;
        root.present()
    })();
    drawn.map_err(|e| format!("drawing the chart: {e}"))?;
    Ok(buf)
}

fn colour(mode: Mode) -> RGBColor {
    match mode {
        Mode::Unprotected => UNPROTECTED,
        Mode::Protected => PROTECTED,
    }
}

/// Points at the middle of each second.
fn points(values: impl Iterator<Item = Option<f64>>) -> Vec<(f64, f64)> {
    values
        .enumerate()
        .filter_map(|(s, v)| Some((s as f64 + 0.5, v?)))
        .collect()
}

/// A legend entry: its label, its colour, and whether its line is dashed.
type Key = (String, RGBColor, bool);

/// Sets up a panel: a title, seconds across, `y` up, and the legend `keys` in a panel of their
/// own on the right, where they cannot hide any data.
fn panel<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    seconds: u64,
    y: std::ops::Range<f64>,
    y_desc: &str,
    keys: &[Key],
) -> Result<Plot<'a, 'b>, DrawError> {
    let (plot_area, legend_area) = area.split_horizontally(PANEL.0 - LEGEND_WIDTH);
    let text = TextStyle::from((FONT, 13).into_font()).color(&BLACK);
    for (i, (label, colour, dashed)) in keys.iter().enumerate() {
        let y = 50 + 22 * i32::try_from(i).unwrap_or(0);
        let line = vec![(4, y), (30, y)];
        if *dashed {
            legend_area.draw(&DashedPathElement::new(line, 5, 3, colour.stroke_width(2)))?;
        } else {
            legend_area.draw(&PathElement::new(line, colour.stroke_width(2)))?;
        }
        legend_area.draw(&Text::new(label.clone(), (36, y - 7), text.clone()))?;
    }
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(title, (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..seconds as f64, y)?;
    chart
        .configure_mesh()
        .x_desc("second of the run (requests by their scheduled time)")
        .y_desc(y_desc)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(238, 238, 238))
        .bold_line_style(RGBColor(215, 215, 215))
        .max_light_lines(1)
        .x_labels(usize::try_from(seconds.min(20)).unwrap_or(20) + 1)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .draw()?;
    Ok(chart)
}

/// An axis label: at most one decimal, without a trailing zero (`2`, `2.5`).
fn tick(v: &f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").unwrap_or(&s).to_owned()
}

/// The legend entries of the two runs.
fn run_keys(runs: &[Run]) -> Vec<Key> {
    runs.iter()
        .map(|r| (r.mode.name().to_owned(), colour(r.mode), false))
        .collect()
}

fn goodput_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    setup: &Setup,
    runs: &[Run],
) -> Result<(), DrawError> {
    let capacity = setup.shape.capacity();
    let top = runs
        .iter()
        .flat_map(|r| r.tally.seconds.iter().map(|c| c.answered as f64))
        .fold(capacity, f64::max)
        * 1.15;
    let mut keys = run_keys(runs);
    keys.push((format!("C = {capacity:.0}/s"), CAPACITY, false));
    keys.push((format!("0.9 C = {:.0}/s", capacity * 0.9), CAPACITY, true));
    let title = "goodput: 2xx answers in time per second";
    let mut chart = panel(area, title, setup.seconds, 0.0..top, "requests/s", &keys)?;
    let end = setup.seconds as f64;
    let style = CAPACITY.stroke_width(1);
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, capacity), (end, capacity)],
        style,
    )))?;
    chart.draw_series(std::iter::once(DashedPathElement::new(
        vec![(0.0, capacity * 0.9), (end, capacity * 0.9)],
        6,
        4,
        style,
    )))?;
    for run in runs {
        let data = points(run.tally.seconds.iter().map(|c| Some(c.answered as f64)));
        chart.draw_series(LineSeries::new(data, colour(run.mode).stroke_width(2)).point_size(3))?;
    }
    Ok(())
}

fn urgent_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    setup: &Setup,
    runs: &[Run],
) -> Result<(), DrawError> {
    let title = "urgent success: share of /pay answered in time";
    let keys = run_keys(runs);
    let mut chart = panel(area, title, setup.seconds, 0.0..105.0, "%", &keys)?;
    for run in runs {
        let data = points(
            run.tally
                .seconds
                .iter()
                .map(|c| c.urgent_success().map(|s| s * 100.0)),
        );
        chart.draw_series(LineSeries::new(data, colour(run.mode).stroke_width(2)).point_size(3))?;
    }
    Ok(())
}
