//! `sluicegate demo`, run as a user would: a real server and a real client on 127.0.0.1. Only
//! contracts are pinned (both runs happen, every request is counted once, the demo ends by
//! itself), never goodput figures, which depend on the machine.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Far above what the demo below needs (two runs of 2 s, each plus a 100 ms client timeout and a
/// second of shutdown), even in a debug build on a busy machine.
const BOUND: Duration = Duration::from_secs(90);

/// Runs the binary with `args`; fails the test if it has not ended within [`BOUND`].
fn sluicegate_within_bound(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let pid = child.id();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(BOUND) {
        Ok(output) => (output.expect("the binary runs"), started.elapsed()),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("sluicegate {args:?} did not end within {BOUND:?}");
        }
    }
}

/// The per-second rows of timeline.csv, by run: (run, second, columns by name).
fn rows(csv: &str) -> Vec<(String, u64, std::collections::HashMap<String, u64>)> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            assert_eq!(fields.len(), header.len(), "{line}");
            let counts = header
                .iter()
                .zip(&fields)
                .skip(2)
                .filter(|(name, _)| !name.ends_with("_ms"))
                .map(|(name, value)| ((*name).to_owned(), value.parse().expect(line)))
                .collect();
            (fields[0].to_owned(), fields[1].parse().expect(line), counts)
        })
        .collect()
}

#[test]
fn demo_runs_unprotected_then_protected_counts_every_request_once_and_ends_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let (output, took) = sluicegate_within_bound(&[
        "demo",
        "--workers",
        "4",
        "--service-time",
        "10ms",
        "--load",
        "2",
        "--seconds",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(took < BOUND);

    // The setup, the table with both runs, then each run second by second.
    assert!(stdout.contains("C = W / S = 400/s"), "{stdout}");
    assert!(
        stdout.contains("default_urgency = \"non_urgent\""),
        "{stdout}"
    );
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("run "))
        .take(3)
        .collect();
    assert_eq!(table.len(), 3, "{stdout}");
    assert!(table[1].starts_with("unprotected "), "{stdout}");
    assert!(table[2].starts_with("protected "), "{stdout}");
    assert!(
        stdout.contains("unprotected, second by second:"),
        "{stdout}"
    );
    assert!(stdout.contains("protected, second by second:"), "{stdout}");
    // What the server and the gate saw.
    assert_eq!(stdout.matches("\nserver: ").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("\ngate: admitted ").count(), 1, "{stdout}");

    // Every request sent is answered, refused, timed out or an error, once, in every second.
    let csv = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    let rows = rows(&csv);
    let runs: Vec<(&str, u64)> = rows.iter().map(|(r, s, _)| (r.as_str(), *s)).collect();
    assert_eq!(
        runs,
        [
            ("unprotected", 0),
            ("unprotected", 1),
            ("protected", 0),
            ("protected", 1)
        ]
    );
    for (run, second, c) in &rows {
        let outcomes =
            c["answered"] + c["refused_429"] + c["refused_503"] + c["timed_out"] + c["errors"];
        assert_eq!(c["sent"], outcomes, "{run}, second {second}: {c:?}");
        assert_eq!(c["sent"], c["urgent_sent"] + c["non_urgent_sent"]);
        assert_eq!(
            c["answered"],
            c["urgent_answered"] + c["non_urgent_answered"]
        );
        assert!(c["sent"] > 0, "{run}, second {second}: nothing sent");
    }
    // Both runs offer the same arrivals (same seed).
    let sent = |run: &str| -> u64 {
        rows.iter()
            .filter(|(r, _, _)| r == run)
            .map(|(_, _, c)| c["sent"])
            .sum()
    };
    assert_eq!(sent("unprotected"), sent("protected"));

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "the report has its chart");
    assert!(html.contains("second by second"));
}

#[test]
fn demo_with_an_urgent_share_above_one_names_the_option_and_exits_2() {
    let (output, _) = sluicegate_within_bound(&["demo", "--urgent-share", "1.5"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--urgent-share"), "{stderr}");
    assert!(output.stdout.is_empty(), "no run started");
}
