//! The report renderer: table, JSON, CSV, HTML, standalone chart and files, on hand-made reports.
#![cfg(feature = "sim")]

use sluicegate::sim::render::{self, RenderError};
use sluicegate::sim::{Report, StrategyReport, TimelineSample, SLICE_MS};

/// A small timeline: `n` slices, overload in the middle third, the switch on during part of it.
fn timeline(n: u64, answered_share: f64, with_switch: bool) -> Vec<TimelineSample> {
    (0..n)
        .map(|i| {
            let overload = i >= n / 3 && i < 2 * n / 3;
            let load = if overload { 2.0 } else { 0.5 };
            let offered_urgent = if overload { 20 } else { 5 };
            let offered_non_urgent = if overload { 180 } else { 45 };
            let answered = |offered: u32| (f64::from(offered) * answered_share).round() as u32;
            TimelineSample {
                t_ms: i * SLICE_MS,
                load,
                offered_urgent,
                offered_non_urgent,
                answered_urgent: answered(offered_urgent),
                answered_non_urgent: answered(offered_non_urgent).min(100),
                refused: if overload { 40 } else { 0 },
                timed_out: if overload { 10 } else { 0 },
                in_flight: if overload { 60 } else { 4 },
                waiting: if overload && with_switch { 3 } else { 0 },
                mean_latency_ms: if i % 7 == 3 {
                    None
                } else {
                    Some(if overload { 180.5 } else { 40.25 })
                },
                p99_ms: if i % 7 == 3 {
                    None
                } else {
                    Some(if overload { 412.0 } else { 95.5 })
                },
                late: if overload { 7 } else { 0 },
                switch_on: with_switch && overload && i > n / 3 + 1,
                memory_ratio: if overload { 0.8 } else { 0.3 },
            }
        })
        .collect()
}

fn strategy(
    name: &str,
    goodput: f64,
    p50: Option<f64>,
    slices: u64,
    with_switch: bool,
) -> StrategyReport {
    StrategyReport {
        name: name.to_owned(),
        goodput_ratio: goodput,
        urgent_success: 0.995,
        non_urgent_success: 0.61234,
        p50_ms: p50,
        p99_ms: p50.map(|p| p * 4.0),
        wasted_work: 0.0,
        switch_flips: if with_switch { 2 } else { 0 },
        reaction_ms: if with_switch { Some(300.0) } else { None },
        recovery_ms: None,
        peak_memory_ratio: 0.8,
        timeline: timeline(slices, goodput.min(1.0), with_switch),
    }
}

fn report() -> Report {
    Report {
        scenario: "spike".to_owned(),
        seed: 42,
        capacity_rps: 1000.0,
        slo_ms: 200.0,
        strategies: vec![
            strategy("unprotected", 0.412, Some(150.0), 30, false),
            strategy("concurrency-limit", 0.8, None, 30, false),
            strategy("sluicegate", 0.973, Some(12.5), 30, true),
        ],
    }
}

#[test]
fn table_shows_every_strategy_and_formatted_figures_aligned() {
    let text = render::table(&report());
    for name in ["unprotected", "concurrency-limit", "sluicegate"] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    for figure in [
        "97.3%", "41.2%", "99.5%", "61.2%", "12.5", "50.0", "0.0%", "80.0%", "300.0",
    ] {
        assert!(text.contains(figure), "{figure} missing from\n{text}");
    }
    assert!(
        text.contains("spike")
            && text.contains("42")
            && text.contains("1000 rps")
            && text.contains("200 ms")
    );
    assert!(text.contains("goodput ="), "legend missing:\n{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in\n{text}");

    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("strategy"))
        .expect("a header line");
    let body: Vec<&str> = lines[header..header + 2 + 3].to_vec();
    // Header, rule and rows have the same width.
    let width = body[0].chars().count();
    assert!(
        body.iter().all(|l| l.chars().count() == width),
        "ragged:\n{text}"
    );
    // The rows are in report order, and `-` stands for the missing figures.
    let rows = &body[2..];
    assert!(rows[0].starts_with("unprotected "));
    assert!(rows[1].starts_with("concurrency-limit "));
    assert!(rows[2].starts_with("sluicegate "));
    let cells: Vec<&str> = rows[1].split_whitespace().collect();
    assert_eq!(cells.len(), 11, "{cells:?}");
    assert_eq!(&cells[4..6], ["-", "-"], "p50 and p99 of concurrency-limit");
    assert_eq!(cells[8], "-", "reaction of concurrency-limit");
    assert_eq!(cells[9], "-", "recovery of concurrency-limit");
    // Each column's cells end at the same place as its header (figures are right-aligned).
    for column in ["goodput", "p99 ms", "flips", "peak mem"] {
        let end = body[0].find(column).expect("column") + column.len();
        for row in rows {
            let cell_end = &row[..end];
            assert!(
                !cell_end.ends_with(' '),
                "{column} not right-aligned in {row:?}"
            );
            assert!(
                row[end..].is_empty() || row[end..].starts_with("  "),
                "{column} overflows in {row:?}"
            );
        }
    }
}

#[test]
fn json_has_the_expected_keys_no_timeline_and_is_stable() {
    let report = report();
    let text = render::json(&report).expect("json");
    assert!(text.ends_with("}\n"));
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    for key in ["scenario", "seed", "capacity_rps", "slo_ms", "strategies"] {
        assert!(value.get(key).is_some(), "{key} missing");
    }
    assert_eq!(value["scenario"], "spike");
    assert_eq!(value["seed"], 42);
    assert_eq!(value["capacity_rps"], 1000.0);
    let strategies = value["strategies"].as_array().expect("array");
    assert_eq!(strategies.len(), 3);
    assert_eq!(strategies[2]["name"], "sluicegate");
    assert_eq!(strategies[2]["goodput_ratio"], 0.973);
    assert_eq!(strategies[1]["p50_ms"], serde_json::Value::Null);
    for s in strategies {
        for key in [
            "name",
            "goodput_ratio",
            "urgent_success",
            "non_urgent_success",
            "p50_ms",
            "p99_ms",
            "wasted_work",
            "switch_flips",
            "reaction_ms",
            "recovery_ms",
            "peak_memory_ratio",
        ] {
            assert!(s.get(key).is_some(), "{key} missing in {s}");
        }
        assert!(s.get("timeline").is_none());
    }
    assert!(!text.contains("timeline"));
    assert_eq!(text, render::json(&report.clone()).expect("json"));
}

#[test]
fn csv_has_one_row_per_strategy_and_slice() {
    let report = report();
    let text = render::timeline_csv(&report);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "strategy,t_ms,load,offered_urgent,offered_non_urgent,answered_urgent,answered_non_urgent,\
         refused,timed_out,in_flight,waiting,mean_latency_ms,p99_ms,switch_on,memory_ratio,late"
    );
    assert_eq!(lines.len(), 1 + 3 * 30);
    assert!(text.ends_with('\n'));
    for line in &lines {
        assert_eq!(line.split(',').count(), 16, "{line}");
    }
    // Slice 3 has no latency: empty mean and p99 cells. Slice 0 has both.
    assert_eq!(
        lines[1],
        "unprotected,0,0.5,5,45,2,19,0,0,4,0,40.25,95.5,0,0.3,0"
    );
    let slice3: Vec<&str> = lines[4].split(',').collect();
    assert_eq!(slice3[1], "300");
    assert_eq!(slice3[11], "");
    assert_eq!(slice3[12], "");
    // The switch is written as 0/1.
    assert!(lines
        .iter()
        .any(|l| l.starts_with("sluicegate,") && l.ends_with(",1,0.8,7")));
    assert!(lines[1..].iter().all(|l| {
        let cells: Vec<&str> = l.split(',').collect();
        cells[13] == "0" || cells[13] == "1"
    }));
}

#[test]
fn csv_quotes_awkward_names() {
    let mut report = report();
    report.strategies.truncate(1);
    report.strategies[0].name = "odd, \"name\"".to_owned();
    report.strategies[0].timeline.truncate(1);
    let text = render::timeline_csv(&report);
    assert!(text
        .lines()
        .nth(1)
        .expect("row")
        .starts_with("\"odd, \"\"name\"\"\",0,"));
}

#[test]
fn html_is_one_self_contained_page() {
    let report = report();
    let page = render::html(&report).expect("html");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("<html").count(), 1);
    assert!(page.trim_end().ends_with("</html>"));
    // 3 offered charts + in flight + latency + 1 urgent/non-urgent chart.
    assert_eq!(page.matches("<svg").count(), 6);
    assert_eq!(page.matches("</svg>").count(), 6);
    for name in ["unprotected", "concurrency-limit", "sluicegate"] {
        assert!(page.contains(name), "{name} missing");
    }
    assert!(
        page.contains("capacity 1000 rps"),
        "capacity line label missing"
    );
    assert!(page.contains("SLO 200 ms"), "SLO line label missing");
    assert!(page.contains("switch on"));
    assert!(
        page.contains("time (s)") && page.contains("requests/s") && page.contains("latency (ms)")
    );
    assert!(page.contains("urgent vs non-urgent"));
    assert!(page.contains("97.3%"));
    let without_xmlns = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!without_xmlns.contains("http://") && !without_xmlns.contains("https://"));
    for external in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!page.contains(external), "{external} in the page");
    }
    assert_eq!(
        page,
        render::html(&report).expect("html"),
        "not deterministic"
    );
}

#[test]
fn html_escapes_names_and_copes_with_empty_timelines() {
    let mut report = report();
    report.scenario = "<b>&".to_owned();
    for s in &mut report.strategies {
        s.timeline.clear();
    }
    report.strategies[0].goodput_ratio = f64::NAN;
    let page = render::html(&report).expect("html");
    assert!(page.contains("&lt;b&gt;&amp;"));
    assert!(!page.contains("<b>&"));
    assert!(render::table(&report)
        .lines()
        .any(|l| l.starts_with("unprotected ") && l.contains(" - ")));

    let empty = Report {
        strategies: Vec::new(),
        ..report
    };
    assert!(render::html(&empty).expect("html").contains("<svg"));
    assert_eq!(render::timeline_csv(&empty).lines().count(), 1);
}

#[test]
fn chart_svg_draws_one_strategy_or_names_the_unknown_one() {
    let report = report();
    let svg = render::chart_svg(&report, "sluicegate").expect("chart");
    assert!(svg.starts_with("<svg"));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("sluicegate: offered vs answered in time"));
    assert!(svg.contains("capacity 1000 rps"));
    assert!(!svg.contains("unprotected"));

    let err = render::chart_svg(&report, "leaky-bucket").expect_err("unknown strategy");
    assert!(matches!(err, RenderError::UnknownStrategy { ref name, .. } if name == "leaky-bucket"));
    assert!(err.to_string().contains("leaky-bucket"), "{err}");
}

#[test]
fn write_all_writes_json_csv_html_and_one_chart_per_strategy() {
    let report = report();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("nested").join("out");
    let paths = render::write_all(&report, &dir).expect("write_all");
    let mut expected = vec![
        dir.join("report.json"),
        dir.join("timeline.csv"),
        dir.join("report.html"),
    ];
    for s in &report.strategies {
        expected.push(dir.join(format!("offered-{}.svg", s.name)));
    }
    assert_eq!(paths, expected);
    let first = &report.strategies[0].name;
    assert_eq!(
        std::fs::read_to_string(dir.join(format!("offered-{first}.svg"))).expect("svg"),
        render::chart_svg(&report, first).expect("chart")
    );
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect(name);
    assert_eq!(read("report.json"), render::json(&report).expect("json"));
    assert_eq!(read("timeline.csv"), render::timeline_csv(&report));
    assert_eq!(read("report.html"), render::html(&report).expect("html"));
    // Again, over the existing files.
    assert_eq!(render::write_all(&report, &dir).expect("rewrite"), paths);
}

#[test]
fn write_all_errors_name_the_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "not a directory").expect("write");
    let dir = file.join("out");
    let err = render::write_all(&report(), &dir).expect_err("a file is in the way");
    assert!(matches!(err, RenderError::Io { .. }));
    assert!(
        err.to_string().contains(&dir.display().to_string()),
        "{err}"
    );
}

#[test]
fn progress_bar_is_silent_and_tolerant() {
    let progress = render::Progress::new("simulating");
    for f in [0.0, 0.5, f64::NAN, -1.0, 2.0, 1.0] {
        progress.set(f);
    }
    progress.finish();
}
