//! The SVG charts of a report: offered and answered requests, in flight, latency, and the two
//! classes, with the switch shaded, drawn with plotters' SVG backend (no system fonts needed).

use super::*;

/// Size of every chart, in pixels.
pub(super) const CHART_SIZE: (u32, u32) = (900, 300);
/// Width of the legend panel on the right of each chart, in pixels.
pub(super) const LEGEND_WIDTH: u32 = 180;
/// Font of the chart titles.
pub(super) const FONT: &str = "sans-serif";

/// Okabe–Ito colours (distinguishable with the common colour-vision deficiencies), one per strategy.
pub(super) const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(230, 159, 0),   // orange
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(0, 0, 0),       // black
];
pub(super) const OFFERED: RGBColor = RGBColor(50, 50, 50);
pub(super) const ANSWERED: RGBColor = RGBColor(0, 114, 178);
pub(super) const LIMIT: RGBColor = RGBColor(200, 30, 30);
pub(super) const SWITCH: RGBColor = RGBColor(120, 120, 120);
pub(super) const SWITCH_ALPHA: f64 = 0.16;
pub(super) const URGENT: RGBColor = RGBColor(213, 94, 0);
pub(super) const NON_URGENT: RGBColor = RGBColor(86, 180, 233);
pub(super) const URGENT_DARK: RGBColor = RGBColor(120, 40, 0);
pub(super) const NON_URGENT_DARK: RGBColor = RGBColor(0, 60, 110);

/// A strategy's colour on the charts that compare strategies.
pub(super) fn strategy_colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// Slices per second, to turn per-slice counts into rates.
pub(super) fn per_second() -> f64 {
    1000.0 / SLICE_MS as f64
}

/// Seconds since the run began, at the start of a slice.
pub(super) fn seconds(t: &TimelineSample) -> f64 {
    t.t_ms as f64 / 1000.0
}

/// The time axis shared by all charts: from 0 to the end of the last slice of any strategy.
pub(super) fn time_axis(report: &Report) -> Range<f64> {
    let end_ms = report
        .strategies
        .iter()
        .filter_map(|s| s.timeline.last())
        .map(|t| t.t_ms.saturating_add(SLICE_MS))
        .max()
        .unwrap_or(0);
    0.0..(end_ms as f64 / 1000.0).max(SLICE_MS as f64 / 1000.0)
}

/// A value axis from 0 to a little above the largest finite value (at least 1).
pub(super) fn value_axis(values: impl IntoIterator<Item = f64>) -> Range<f64> {
    let max = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    0.0..(max * 1.12).max(1.0)
}

/// The spans of time (in seconds) during which the switch was on.
pub(super) fn switch_spans(timeline: &[TimelineSample]) -> Vec<(f64, f64)> {
    let slice = SLICE_MS as f64 / 1000.0;
    let mut spans: Vec<(f64, f64)> = Vec::new();
    let mut open: Option<f64> = None;
    for t in timeline {
        match (t.switch_on, open) {
            (true, None) => open = Some(seconds(t)),
            (false, Some(start)) => {
                spans.push((start, seconds(t)));
                open = None;
            }
            _ => {}
        }
    }
    if let (Some(start), Some(last)) = (open, timeline.last()) {
        spans.push((start, seconds(last) + slice));
    }
    spans
}

/// The runs of consecutive slices that have a finite mean latency, as (seconds, ms) points.
pub(super) fn latency_runs(timeline: &[TimelineSample]) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut current: Vec<(f64, f64)> = Vec::new();
    for t in timeline {
        match t.mean_latency_ms {
            Some(ms) if ms.is_finite() => current.push((seconds(t), ms)),
            _ => {
                if !current.is_empty() {
                    runs.push(std::mem::take(&mut current));
                }
            }
        }
    }
    if !current.is_empty() {
        runs.push(current);
    }
    runs
}

/// One entry of a chart's legend panel.
pub(super) enum Key {
    /// A line of that colour and stroke width.
    Line(RGBColor, u32),
    /// A dashed line of that colour and stroke width.
    Dashed(RGBColor, u32),
    /// A filled area of that colour and opacity, as on the chart.
    Area(RGBColor, f64),
}

/// The drawing error of the SVG backend.
pub(super) type DrawError = DrawingAreaErrorKind<std::io::Error>;
/// The plotting area of a chart with a time axis and a value axis.
pub(super) type Plot<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws one chart into a fresh SVG document and returns the document.
///
/// `draw` gets the chart area (left of the legend panel) and returns the legend entries, which are
/// then drawn in the panel on the right, where they cannot hide any data.
pub(super) fn svg_chart(
    title: &str,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<Vec<(String, Key)>, DrawError>,
) -> Result<String, RenderError> {
    let mut buf = String::new();
    let drawn = (|| -> Result<(), DrawError> {
        let root = SVGBackend::with_string(&mut buf, CHART_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (chart_area, legend_area) = root.split_horizontally(CHART_SIZE.0 - LEGEND_WIDTH);
        let keys = draw(&chart_area)?;
        draw_legend(&legend_area, &keys)?;
        root.present()
    })();
    drawn.map_err(|e| RenderError::Chart {
        chart: title.to_owned(),
        message: e.to_string(),
    })?;
    Ok(buf)
}

/// Draws the legend entries top-down in the panel.
pub(super) fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    keys: &[(String, Key)],
) -> Result<(), DrawError> {
    let text = TextStyle::from((FONT, 15).into_font()).color(&BLACK);
    for (i, (label, key)) in keys.iter().enumerate() {
        let y = 48 + 24 * i32::try_from(i).unwrap_or(i32::MAX / 48);
        match key {
            Key::Line(colour, width) => area.draw(&PathElement::new(
                vec![(6, y), (34, y)],
                colour.stroke_width(*width + 1),
            ))?,
            Key::Dashed(colour, width) => area.draw(&DashedPathElement::new(
                vec![(6, y), (34, y)],
                6,
                4,
                colour.stroke_width(*width + 1),
            ))?,
            Key::Area(colour, alpha) => area.draw(&Rectangle::new(
                [(6, y - 7), (34, y + 7)],
                colour.mix(*alpha).filled(),
            ))?,
        }
        area.draw(&Text::new(label.clone(), (42, y - 7), text.clone()))?;
    }
    Ok(())
}

/// Sets up a chart with a title, a time axis in seconds and a value axis described by `y_desc`.
pub(super) fn chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    x: Range<f64>,
    y: Range<f64>,
    y_desc: &str,
) -> Result<Plot<'a, 'b>, DrawError> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 20).into_font())
        .margin_top(8)
        .margin_left(10)
        .margin_right(16)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .max_light_lines(1)
        .x_labels(12)
        .y_labels(6)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .draw()?;
    Ok(chart)
}

/// An axis tick label: at most three decimals, without trailing zeros (`2`, `2.5`, `0.125`).
pub(super) fn tick(v: &f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// Shades the spans during which the switch was on, over the whole height of the chart.
pub(super) fn shade_switch(
    plot: &mut Plot<'_, '_>,
    timeline: &[TimelineSample],
    keys: &mut Vec<(String, Key)>,
) -> Result<(), DrawError> {
    let spans = switch_spans(timeline);
    if spans.is_empty() {
        return Ok(());
    }
    let y = plot.y_range();
    plot.draw_series(spans.into_iter().map(|(from, to)| {
        Rectangle::new(
            [(from, y.start), (to, y.end)],
            SWITCH.mix(SWITCH_ALPHA).filled(),
        )
    }))?;
    keys.push(("switch on".to_owned(), Key::Area(SWITCH, SWITCH_ALPHA)));
    Ok(())
}

/// Draws a horizontal line across the chart at `value`.
pub(super) fn horizontal(
    plot: &mut Plot<'_, '_>,
    value: f64,
    colour: RGBColor,
) -> Result<(), DrawError> {
    let x = plot.x_range();
    plot.draw_series(std::iter::once(PathElement::new(
        vec![(x.start, value), (x.end, value)],
        colour.stroke_width(2),
    )))?;
    Ok(())
}

/// The label of the capacity line.
pub(super) fn capacity_label(report: &Report) -> String {
    format!("capacity {} rps", figure(report.capacity_rps))
}

/// Offered and answered-in-time rates of one strategy, with the capacity and the switch periods.
pub(super) fn draw_offered(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    s: &StrategyReport,
) -> Result<Vec<(String, Key)>, DrawError> {
    let k = per_second();
    let offered =
        |t: &TimelineSample| f64::from(t.offered_urgent) * k + f64::from(t.offered_non_urgent) * k;
    let answered = |t: &TimelineSample| {
        f64::from(t.answered_urgent) * k + f64::from(t.answered_non_urgent) * k
    };
    let y = value_axis(
        s.timeline
            .iter()
            .flat_map(|t| [offered(t), answered(t)])
            .chain([report.capacity_rps]),
    );
    let title = format!("{}: offered vs answered in time", s.name);
    let mut plot = chart(area, &title, time_axis(report), y, "requests/s")?;
    let mut keys = Vec::new();
    shade_switch(&mut plot, &s.timeline, &mut keys)?;
    plot.draw_series(LineSeries::new(
        s.timeline.iter().map(|t| (seconds(t), offered(t))),
        OFFERED.stroke_width(2),
    ))?;
    keys.push(("offered".to_owned(), Key::Line(OFFERED, 2)));
    plot.draw_series(LineSeries::new(
        s.timeline.iter().map(|t| (seconds(t), answered(t))),
        ANSWERED.stroke_width(2),
    ))?;
    keys.push(("answered in time".to_owned(), Key::Line(ANSWERED, 2)));
    if report.capacity_rps.is_finite() {
        horizontal(&mut plot, report.capacity_rps, LIMIT)?;
        keys.push((capacity_label(report), Key::Line(LIMIT, 2)));
    }
    Ok(keys)
}

/// Requests in the backend over time, one line per strategy.
pub(super) fn draw_in_flight(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
) -> Result<Vec<(String, Key)>, DrawError> {
    let y = value_axis(
        report
            .strategies
            .iter()
            .flat_map(|s| s.timeline.iter().map(|t| f64::from(t.in_flight))),
    );
    let mut plot = chart(
        area,
        "In flight (in service or queued in the backend)",
        time_axis(report),
        y,
        "requests",
    )?;
    let mut keys = Vec::new();
    for (i, s) in report.strategies.iter().enumerate() {
        let colour = strategy_colour(i);
        plot.draw_series(LineSeries::new(
            s.timeline
                .iter()
                .map(|t| (seconds(t), f64::from(t.in_flight))),
            colour.stroke_width(2),
        ))?;
        keys.push((s.name.clone(), Key::Line(colour, 2)));
    }
    Ok(keys)
}

/// Mean latency of the requests answered in time, one line per strategy, with the SLO.
pub(super) fn draw_latency(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
) -> Result<Vec<(String, Key)>, DrawError> {
    let y = value_axis(
        report
            .strategies
            .iter()
            .flat_map(|s| s.timeline.iter().filter_map(|t| t.mean_latency_ms))
            .chain([report.slo_ms]),
    );
    let mut plot = chart(
        area,
        "Mean latency of the requests answered in time",
        time_axis(report),
        y,
        "latency (ms)",
    )?;
    let mut keys = Vec::new();
    for (i, s) in report.strategies.iter().enumerate() {
        let colour = strategy_colour(i);
        for run in latency_runs(&s.timeline) {
            plot.draw_series(LineSeries::new(run, colour.stroke_width(2)))?;
        }
        keys.push((s.name.clone(), Key::Line(colour, 2)));
    }
    if report.slo_ms.is_finite() {
        horizontal(&mut plot, report.slo_ms, LIMIT)?;
        keys.push((
            format!("SLO {} ms", figure(report.slo_ms)),
            Key::Line(LIMIT, 2),
        ));
    }
    Ok(keys)
}

/// Urgent and non-urgent rates of one strategy: answered in time (thick) and offered (dashed).
pub(super) fn draw_classes(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    s: &StrategyReport,
) -> Result<Vec<(String, Key)>, DrawError> {
    let k = per_second();
    let y = value_axis(s.timeline.iter().flat_map(|t| {
        [
            f64::from(t.offered_urgent) * k,
            f64::from(t.offered_non_urgent) * k,
        ]
    }));
    let title = format!("{}: urgent vs non-urgent", s.name);
    let mut plot = chart(area, &title, time_axis(report), y, "requests/s")?;
    let mut keys = Vec::new();
    shade_switch(&mut plot, &s.timeline, &mut keys)?;
    type Count = fn(&TimelineSample) -> u32;
    let classes: [(&str, RGBColor, RGBColor, Count, Count); 2] = [
        (
            "urgent",
            URGENT,
            URGENT_DARK,
            |t| t.answered_urgent,
            |t| t.offered_urgent,
        ),
        (
            "non-urgent",
            NON_URGENT,
            NON_URGENT_DARK,
            |t| t.answered_non_urgent,
            |t| t.offered_non_urgent,
        ),
    ];
    let rate = |value: Count| {
        s.timeline
            .iter()
            .map(move |t| (seconds(t), f64::from(value(t)) * k))
    };
    // Answered in time as thick lines, offered as dashed lines of a darker shade on top: where a class
    // is fully served the dashes run along its thick line, where it is not they run above it.
    for (class, colour, _, answered, _) in classes {
        plot.draw_series(LineSeries::new(rate(answered), colour.stroke_width(3)))?;
        keys.push((format!("{class} answered"), Key::Line(colour, 3)));
    }
    for (class, _, dark, _, offered) in classes {
        plot.draw_series(DashedLineSeries::new(
            rate(offered),
            6,
            4,
            dark.stroke_width(2),
        ))?;
        keys.push((format!("{class} offered"), Key::Dashed(dark, 2)));
    }
    Ok(keys)
}

/// The "offered vs answered in time" chart of one strategy as a standalone SVG document (900 × 300):
/// offered and answered-in-time requests per second over time, the capacity as a horizontal line and
/// the periods when the strategy's switch was on shaded.
///
/// # Errors
/// [`RenderError::UnknownStrategy`] if the report has no strategy of that name;
/// [`RenderError::Chart`] if drawing fails.
pub fn chart_svg(report: &Report, strategy: &str) -> Result<String, RenderError> {
    let s = report
        .strategies
        .iter()
        .find(|s| s.name == strategy)
        .ok_or_else(|| RenderError::UnknownStrategy {
            name: strategy.to_owned(),
            known: report.strategy_names(),
        })?;
    offered_svg(report, s)
}

pub(super) fn offered_svg(report: &Report, s: &StrategyReport) -> Result<String, RenderError> {
    svg_chart(
        &format!("{}: offered vs answered in time", s.name),
        |area| draw_offered(area, report, s),
    )
}
