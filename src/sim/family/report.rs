//! The family's report in plain text: one row per draw, then the distribution of the goodput
//! ratio, the goodput bar by kind of service (workers, warm or cold), every family bar with its
//! counts, and the ten worst draws with the command that reruns each alone.
//!
//! # What it decides, and why
//! Only what to show and how: the figures come from [`super::bars`]. A draw's row carries what
//! makes the draw hard (workers, service time and its distribution, congestion, the flood, urgent
//! traffic, the timeout in service times, the warm-up) next to how each strategy fared, so that a
//! failure can be read off the row before it is rerun. Columns are aligned and the text is plain
//! ASCII (microseconds are `us`), so it diffs and greps well. Equal inputs give equal text.

use std::fmt::Write as _;
use std::time::Duration;

use super::bars::{show, BarKind, DrawBars, FamilyBars, GOODPUT_RATIO};
use super::draw::Draw;
use super::{DrawResult, STATIC, UNPROTECTED};

/// How many of the worst draws the summary lists.
pub const WORST: usize = 10;

/// `d` in the unit that suits it: `250us`, `12.5ms`, `1.25s`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    let trim = |x: String| {
        if x.contains('.') {
            x.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            x
        }
    };
    if s < 1e-3 {
        format!("{}us", trim(format!("{:.1}", s * 1e6)))
    } else if s < 1.0 {
        format!("{}ms", trim(format!("{:.2}", s * 1e3)))
    } else {
        format!("{}s", trim(format!("{s:.2}")))
    }
}

/// The command that reruns `draw` alone, with every built-in strategy and its bars.
pub fn reproduce_command(draw: &Draw) -> String {
    format!(
        "sluicegate simulate --seed {} --draw {}",
        draw.seed, draw.index
    )
}

/// Rows under a header, each column as wide as its widest cell; columns listed in `left` are
/// aligned left, the others right.
fn aligned(header: &[&str], rows: &[Vec<String>], left: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            if left.contains(&i) {
                let _ = write!(out, "{cell:<w$}");
            } else {
                let _ = write!(out, "{cell:>w$}");
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// The urgent traffic of a draw: its steady share, or `flood 3.2x` (the urgent load of an urgent
/// flood, a multiple of C).
fn urgent_label(draw: &Draw) -> String {
    if draw.urgent_flood {
        format!("flood {:.1}x", draw.urgent_load)
    } else {
        format!("{:.0}%", draw.urgent_share * 100.0)
    }
}

/// The warm-up of a draw: `-` for a cold start, else `12.3s@0.55`.
fn warm_label(draw: &Draw) -> String {
    if draw.is_cold() {
        "-".to_owned()
    } else {
        format!("{}@{:.2}", duration(draw.warm_up), draw.warm_load)
    }
}

/// The codes of the bars a draw missed, comma-separated, or `-`.
fn failed_label(bars: &DrawBars) -> String {
    let codes: Vec<&str> = bars.failed().map(|b| b.kind.code()).collect();
    if codes.is_empty() {
        "-".to_owned()
    } else {
        codes.join(",")
    }
}

/// The goodput of `name` on `result`, three decimals, or `-` if it did not run.
fn goodput(result: &DrawResult, name: &str) -> String {
    result
        .strategy(name)
        .map_or("-".to_owned(), |s| format!("{:.3}", s.goodput_ratio))
}

/// One row of the draw table.
fn row(result: &DrawResult, bars: &DrawBars, subject: &str) -> Vec<String> {
    let d = &result.draw;
    let s = result.strategy(subject);
    let urgent_ok = bars
        .bar(BarKind::UrgentSuccess)
        .filter(|b| !b.figure.is_nan())
        .or_else(|| bars.bar(BarKind::UrgentShare))
        .filter(|b| !b.figure.is_nan())
        .map_or("-".to_owned(), |b| format!("{:.2}%", b.figure * 100.0));
    vec![
        d.index.to_string(),
        d.workers.to_string(),
        duration(d.service_time),
        format!("{:.0}", d.capacity()),
        d.distribution_label(),
        format!("{:.2}", d.congestion),
        format!("{:.1}", d.load),
        urgent_label(d),
        format!(
            "{:.0}",
            d.client_timeout.as_secs_f64() / d.service_time.as_secs_f64()
        ),
        warm_label(d),
        goodput(result, subject),
        goodput(result, STATIC),
        goodput(result, UNPROTECTED),
        show(bars.ratio),
        urgent_ok,
        s.map_or("-".to_owned(), |s| s.switch_flips.to_string()),
        s.and_then(|s| s.reaction_ms)
            .map_or("-".to_owned(), |r| format!("{r:.1}")),
        failed_label(bars),
    ]
}

/// The draw table: one row per draw, in the order of `results` (matched to `bars` by index).
pub fn table(results: &[DrawResult], bars: &FamilyBars) -> String {
    let header = [
        "#",
        "W",
        "S",
        "C rps",
        "dist",
        "cong",
        "load",
        "urgent",
        "to/S",
        "warm-up",
        bars.subject.as_str(),
        "static",
        "unprot",
        "ratio",
        "urgent ok",
        "flips",
        "react ms",
        "failed",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .filter_map(|r| {
            let b = bars.draws.iter().find(|b| b.index == r.draw.index)?;
            Some(row(r, b, &bars.subject))
        })
        .collect();
    let mut out = aligned(&header, &rows, &[4, 7, 9, 17]);
    let _ = writeln!(
        out,
        "\n{} / static / unprot = goodput (answered in time in the flood / C x its length); ratio = {} / static \
         (static = concurrency-limit at W)",
        bars.subject, bars.subject
    );
    let _ = writeln!(
        out,
        "urgent = steady urgent share, or the urgent load of an urgent flood; to/S = client timeout in service \
         times; warm-up = length@load"
    );
    let _ = writeln!(
        out,
        "urgent ok = share of the urgent requests arriving in the flood answered in time, where an urgent bar \
         applies; failed = codes of the bars missed:"
    );
    for kind in BarKind::ALL {
        let _ = writeln!(out, "  {:<3} {}", kind.code(), kind.description());
    }
    out
}

/// The summary: the distribution of the ratio, the share of draws at the bar, every family bar
/// and the [`WORST`] draws by ratio with the command to rerun each.
pub fn summary(results: &[DrawResult], bars: &FamilyBars) -> String {
    let r = &bars.ratio;
    let n = bars.draws.len();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "goodput ratio of {} to {STATIC} over {n} draws:",
        bars.subject
    );
    let _ = writeln!(
        out,
        "  min {}  p5 {}  p10 {}  median {}  mean {}",
        show(r.min),
        show(r.p5),
        show(r.p10),
        show(r.median),
        show(r.mean)
    );
    let at_bar = bars
        .draws
        .iter()
        .filter(|d| d.ratio >= GOODPUT_RATIO)
        .count();
    let _ = writeln!(
        out,
        "  draws with ratio >= {GOODPUT_RATIO}: {at_bar} of {n} ({})",
        if n == 0 {
            "n/a".to_owned()
        } else {
            format!("{:.1}%", r.share_at_bar * 100.0)
        }
    );
    let clean = bars
        .draws
        .iter()
        .filter(|d| d.failed().next().is_none())
        .count();
    let _ = writeln!(out, "  draws meeting every bar: {clean} of {n}");
    out.push_str(&by_kind(results, bars));
    let _ = writeln!(out, "\nfamily bars ({}):", bars.subject);
    for bar in &bars.family {
        let _ = writeln!(out, "{bar}");
    }
    let _ = writeln!(
        out,
        "overall: {}",
        if bars.all_pass() { "PASS" } else { "FAIL" }
    );
    let mut worst: Vec<&DrawBars> = bars.draws.iter().collect();
    worst.sort_by(|a, b| a.ratio.total_cmp(&b.ratio).then(a.index.cmp(&b.index)));
    let rows: Vec<Vec<String>> = worst
        .iter()
        .take(WORST)
        .filter_map(|b| {
            let result = results.iter().find(|r| r.draw.index == b.index)?;
            let d = &result.draw;
            Some(vec![
                d.index.to_string(),
                show(b.ratio),
                d.workers.to_string(),
                duration(d.service_time),
                d.distribution_label(),
                format!("{:.1}", d.load),
                urgent_label(d),
                warm_label(d),
                failed_label(b),
                reproduce_command(d),
            ])
        })
        .collect();
    let _ = writeln!(out, "\n{} worst draws by ratio:", rows.len());
    let header = [
        "#", "ratio", "W", "S", "dist", "load", "urgent", "warm-up", "failed", "rerun",
    ];
    out.push_str(&aligned(&header, &rows, &[4, 6, 7, 8, 9]));
    out
}

/// Upper bounds of the worker classes [`by_kind`] counts by, and their labels.
const WORKER_CLASSES: [(u32, &str); 4] = [
    (3, "1-3"),
    (30, "4-30"),
    (300, "31-300"),
    (u32::MAX, "301+"),
];

/// The goodput bar by kind of service: per class of workers, warm and cold (no warm-up), the
/// draws at the bar of those drawn, so that a miss shows whom it concerns.
fn by_kind(results: &[DrawResult], bars: &FamilyBars) -> String {
    // [class][warm, cold] = (at the bar, drawn)
    let mut counts = [[(0usize, 0usize); 2]; WORKER_CLASSES.len()];
    for b in &bars.draws {
        let Some(d) = results
            .iter()
            .find(|r| r.draw.index == b.index)
            .map(|r| &r.draw)
        else {
            continue;
        };
        let class = WORKER_CLASSES
            .iter()
            .position(|&(most, _)| d.workers <= most)
            .unwrap_or(WORKER_CLASSES.len() - 1);
        let cell = &mut counts[class][usize::from(d.is_cold())];
        cell.1 += 1;
        cell.0 += usize::from(b.ratio >= GOODPUT_RATIO);
    }
    let cell = |(at, of): (usize, usize)| {
        if of == 0 {
            "-".to_owned()
        } else {
            format!("{at} of {of}")
        }
    };
    let rows: Vec<Vec<String>> = WORKER_CLASSES
        .iter()
        .zip(counts)
        .map(|(&(_, label), [warm, cold])| vec![label.to_owned(), cell(warm), cell(cold)])
        .collect();
    let mut out = format!("\ndraws with ratio >= {GOODPUT_RATIO} by kind of service:\n");
    out.push_str(&aligned(&["workers", "warm", "cold"], &rows, &[0]));
    out
}

/// The whole report: a heading, the draw table and the summary.
pub fn render(results: &[DrawResult], bars: &FamilyBars) -> String {
    let seed = results
        .first()
        .map_or(String::new(), |r| format!("seed {}, ", r.draw.seed));
    let mut out = format!(
        "# family: {seed}{} draws, bars for {} against {STATIC} and {UNPROTECTED}\n\n",
        results.len(),
        bars.subject
    );
    out.push_str(&table(results, bars));
    out.push('\n');
    out.push_str(&summary(results, bars));
    out
}

/// One draw in full: its parameters, its phases and every bar for the strategy judged.
pub fn draw_detail(result: &DrawResult, bars: &DrawBars, subject: &str) -> String {
    let d = &result.draw;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "draw {} of seed {} ({}, scenario seed {}):",
        d.index,
        d.seed,
        d.name(),
        d.scenario_seed()
    );
    let _ = writeln!(
        out,
        "  W {}  S {}  C {:.1} rps  distribution {}  congestion {:.3}",
        d.workers,
        duration(d.service_time),
        d.capacity(),
        d.distribution_label(),
        d.congestion
    );
    let _ = writeln!(
        out,
        "  client timeout {} ({:.1} S)  SLO {}  memory per request {} B",
        duration(d.client_timeout),
        d.client_timeout.as_secs_f64() / d.service_time.as_secs_f64(),
        duration(d.slo()),
        d.memory_per_request()
    );
    let warm = if d.is_cold() {
        "none (cold start)".to_owned()
    } else {
        format!("{} at {:.2} C", duration(d.warm_up), d.warm_load)
    };
    let _ = writeln!(out, "  warm-up {warm}");
    let _ = writeln!(
        out,
        "  flood {} at {:.2} C ({}urgent {:.2} C = {:.1} rps, non-urgent {:.2} C; {:.0} arrivals expected)",
        duration(d.flood()),
        d.load,
        if d.urgent_flood { "urgent flood: " } else { "" },
        d.urgent_load,
        d.urgent_demand(),
        d.non_urgent_load(),
        d.flood_arrivals()
    );
    let _ = writeln!(
        out,
        "  cool-down {} at 0.5 C; steady urgent share {:.1}%",
        duration(d.cool_down()),
        d.urgent_share * 100.0
    );
    let _ = writeln!(out, "\nbars for {subject} (ratio {}):", show(bars.ratio));
    for bar in &bars.bars {
        let _ = writeln!(out, "{bar}");
    }
    let _ = writeln!(out, "\nrerun: {}", reproduce_command(d));
    out
}
