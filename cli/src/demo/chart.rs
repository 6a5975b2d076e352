//! The demo's chart: goodput and urgent success, second by second, for both runs, as SVG
//! (plotters' SVG backend, whose text needs no system fonts).

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::{Mode, Run, Setup};

/// Size of one panel, in pixels; the chart stacks two.
const PANEL: (u32, u32) = (900, 300);
/// Font of titles and labels.
const FONT: &str = "sans-serif";
/// Okabe–Ito colours (distinguishable with the common colour-vision deficiencies).
const UNPROTECTED: RGBColor = RGBColor(213, 94, 0);
const PROTECTED: RGBColor = RGBColor(0, 114, 178);
const CAPACITY: RGBColor = RGBColor(60, 60, 60);

type DrawError = DrawingAreaErrorKind<std::io::Error>;

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
    let x = 0.0..setup.seconds as f64;
    let mut chart = ChartBuilder::on(area)
        .caption("goodput: 2xx answers in time per second", (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x.clone(), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("second of the run (by scheduled time)")
        .y_desc("requests/s")
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    for (label, level, dashed) in [
        (format!("C = {capacity:.0}/s"), capacity, false),
        (
            format!("0.9 C = {:.0}/s", capacity * 0.9),
            capacity * 0.9,
            true,
        ),
    ] {
        let line = vec![(x.start, level), (x.end, level)];
        let style = CAPACITY.stroke_width(1);
        if dashed {
            chart
                .draw_series(std::iter::once(DashedPathElement::new(line, 6, 4, style)))?
                .label(label)
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 20, y)], 4, 3, style)
                });
        } else {
            chart
                .draw_series(std::iter::once(PathElement::new(line, style)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    for run in runs {
        let style = colour(run.mode).stroke_width(2);
        let data = points(run.tally.seconds.iter().map(|c| Some(c.answered as f64)));
        chart
            .draw_series(LineSeries::new(data, style).point_size(3))?
            .label(run.mode.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    legend(&mut chart)
}

fn urgent_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    setup: &Setup,
    runs: &[Run],
) -> Result<(), DrawError> {
    let mut chart = ChartBuilder::on(area)
        .caption("urgent success: share of /pay answered in time", (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..setup.seconds as f64, 0.0..105.0)?;
    chart
        .configure_mesh()
        .x_desc("second of the run (by scheduled time)")
        .y_desc("%")
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    for run in runs {
        let style = colour(run.mode).stroke_width(2);
        let data = points(
            run.tally
                .seconds
                .iter()
                .map(|c| c.urgent_success().map(|s| s * 100.0)),
        );
        chart
            .draw_series(LineSeries::new(data, style).point_size(3))?
            .label(run.mode.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    legend(&mut chart)
}

/// A panel's plotting area: seconds across, a value up.
type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws the series' legend in the panel's upper right corner.
fn legend<'a, 'b: 'a>(chart: &mut Plot<'a, 'b>) -> Result<(), DrawError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()
}
