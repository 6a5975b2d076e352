//! What the demo prints and writes: the setup, a table of both runs, their seconds one by one,
//! and with `--out` an HTML page (the same tables and the chart) and a CSV of the seconds.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::load::Arrivals;
use super::server::{NON_URGENT_PATH, URGENT_PATH};
use super::tally::{Class, Counts};
use super::{chart, Mode, Run, Setup};

/// The setup and why the protected run's gate is configured as it is.
pub(crate) fn preamble(setup: &Setup) -> String {
    let shape = &setup.shape;
    let plan = &setup.plan;
    let arrivals = match plan.arrivals {
        Arrivals::Poisson => "Poisson arrivals",
        Arrivals::Even => "evenly spaced",
    };
    format!(
        "sluicegate demo: an HTTP server on 127.0.0.1 with W = {workers} workers and a service time \
         S = {s}, so a capacity C = W / S = {c}/s;\n\
         each request waiting for a worker adds {cong} % of S to the service of those starting meanwhile.\n\
         Load: {load}x C = {rate}/s, open loop ({arrivals}, seed {seed}), {urgent} % to {URGENT_PATH} (urgent), \
         the rest to {NON_URGENT_PATH};\n\
         a client gives up after {timeout} and closes its connection. {secs} s per run, \
         each on a new server.\n\
         Protected: SluiceLayer with a new gate (cold: it has learned nothing yet) and \
         Config::default() except\n  \
         [routes] urgent = [\"{URGENT_PATH}\"], default_urgency = \"non_urgent\": the default \
         (\"urgent\") counts every route nobody listed as\n  \
         urgent, so {NON_URGENT_PATH} would draw on the urgent tokens as {URGENT_PATH} does; \
         here only {URGENT_PATH} is urgent, so the gate sheds {NON_URGENT_PATH} first.\n\n",
        workers = shape.workers,
        s = millis(shape.service_time),
        c = thousands(shape.capacity()),
        cong = shape.congestion * 100.0,
        load = setup.load,
        rate = thousands(plan.rate),
        seed = plan.seed,
        urgent = plan.urgent_share * 100.0,
        timeout = millis(plan.client_timeout),
        secs = setup.seconds,
    )
}

/// The table of both runs, then each run second by second.
pub(crate) fn text(setup: &Setup, runs: &[Run]) -> String {
    let mut out = summary(setup, runs);
    for run in runs {
        out.push('\n');
        out.push_str(&seconds(setup, run));
    }
    out
}

/// One line per run: what was offered and what came back.
fn summary(setup: &Setup, runs: &[Run]) -> String {
    let c = setup.shape.capacity();
    let secs = setup.seconds as f64;
    let mut out = format!(
        "{:<12} {:>17} {:>8} {:>17} {:>9} {:>10} {:>8} {:>8} {:>7} {:>7} {:>9} {:>6}\n",
        "run",
        "offered",
        "sent",
        "goodput",
        "urgent ok",
        "non-urg ok",
        "p50",
        "p99",
        "429",
        "503",
        "timed out",
        "errors"
    );
    for run in runs {
        let t = &run.tally.total;
        let goodput = t.answered as f64 / secs;
        let _ = writeln!(
            out,
            "{:<12} {:>17} {:>8} {:>17} {:>9} {:>10} {:>8} {:>8} {:>7} {:>7} {:>9} {:>6}",
            run.mode.name(),
            format!(
                "{}/s ({:.2}xC)",
                thousands(run.tally.achieved_rate),
                run.tally.achieved_rate / c
            ),
            thousands(t.sent as f64),
            format!("{}/s ({:.2}xC)", thousands(goodput), goodput / c),
            percent(t.urgent_success()),
            percent(t.non_urgent_success()),
            opt_millis(t.p50),
            opt_millis(t.p99),
            thousands(t.refused_429 as f64),
            thousands(t.refused_503 as f64),
            thousands(t.timed_out as f64),
            thousands(t.errors as f64),
        );
    }
    let _ = writeln!(
        out,
        "\noffered: the rate the load generator achieved (target {}/s; 99 % of requests left within \
         {} of their scheduled time).\n\
         goodput: 2xx answers within the client timeout, per second of the run, and as a share of C.\n\
         p50, p99: latency of those answers, from their scheduled time. Every request is counted in the \
         second it was\nscheduled in: sent = answered + refused (429, 503) + timed out + errors.",
        thousands(setup.plan.rate),
        lags(runs)
    );
    out
}

/// The slowest of the runs' 99th-percentile send lags.
fn lags(runs: &[Run]) -> String {
    opt_millis(runs.iter().filter_map(|r| r.tally.lag_p99).max())
}

/// A run second by second, with the gate's state at the end of each second when there is one.
fn seconds(setup: &Setup, run: &Run) -> String {
    let c = setup.shape.capacity();
    let gate = run.mode == Mode::Protected;
    let mut out = format!("{}, second by second:\n", run.mode.name());
    let _ = write!(
        out,
        "{:>3} {:>6} {:>7} {:>5} {:>9} {:>10} {:>6} {:>6} {:>9} {:>6} {:>8} {:>8}",
        "s",
        "sent",
        "goodput",
        "xC",
        "urgent ok",
        "non-urg ok",
        "429",
        "503",
        "timed out",
        "errors",
        "p50",
        "p99"
    );
    out.push_str(if gate {
        "   switch  in-flight cap  max_qps  learned C\n"
    } else {
        "\n"
    });
    for (i, s) in run.tally.seconds.iter().enumerate() {
        let _ = write!(
            out,
            "{:>3} {:>6} {:>7} {:>5.2} {:>9} {:>10} {:>6} {:>6} {:>9} {:>6} {:>8} {:>8}",
            i,
            s.sent,
            s.answered,
            s.answered as f64 / c,
            percent(s.urgent_success()),
            percent(s.non_urgent_success()),
            s.refused_429,
            s.refused_503,
            s.timed_out,
            s.errors,
            opt_millis(s.p50),
            opt_millis(s.p99),
        );
        match run.gate.get(i).filter(|_| gate) {
            Some(g) => {
                let _ = writeln!(
                    out,
                    "   {:>6}  {:>13}  {:>7}  {:>9}",
                    if g.switch_on { "on" } else { "off" },
                    g.max_in_flight,
                    thousands(g.max_qps),
                    g.capacity.map_or("-".to_owned(), thousands)
                );
            }
            None => out.push('\n'),
        }
    }
    let server = &run.server;
    let _ = writeln!(
        out,
        "server: {} reached the handler, {} served to the end; {} dropped when hyper found their client gone ({} before \
         reaching a worker, {} after: worker time spent in vain); longest queue for a worker {}.",
        thousands(server.arrived as f64),
        thousands(server.completed as f64),
        thousands((server.abandoned_queued + server.abandoned_in_service) as f64),
        thousands(server.abandoned_queued as f64),
        thousands(server.abandoned_in_service as f64),
        thousands(server.max_queued as f64),
    );
    if !run.tally.reasons.is_empty() {
        let reasons: Vec<String> = run
            .tally
            .reasons
            .iter()
            .map(|((class, reason), n)| {
                let class = match class {
                    Class::Urgent => "urgent",
                    Class::NonUrgent => "non-urgent",
                };
                format!("{class} {reason} {}", thousands(*n as f64))
            })
            .collect();
        let _ = writeln!(out, "refusals by reason: {}.", reasons.join(", "));
    }
    if let Some(snapshot) = &run.gate_end {
        let c = &snapshot.counters;
        let _ = writeln!(
            out,
            "gate: admitted {}, refused {}; released {} as succeeded, {} as failed, {} as \
             cancelled; the switch flipped {} times.",
            thousands(c.admitted as f64),
            thousands(c.refused() as f64),
            thousands(c.succeeded as f64),
            thousands(c.failed as f64),
            thousands(c.cancelled as f64),
            snapshot.switch_flips
        );
    }
    out
}

/// Writes report.html and timeline.csv into `dir` (created if missing); returns their paths.
pub(crate) fn write_all(setup: &Setup, runs: &[Run], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create the directory: {e}"))?;
    let html = html(setup, runs)?;
    let csv = csv(runs);
    let mut paths = Vec::new();
    for (name, body) in [("report.html", html), ("timeline.csv", csv)] {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|e| format!("cannot write {name}: {e}"))?;
        paths.push(path);
    }
    Ok(paths)
}

/// The HTML page: the setup, the tables and the chart, in one self-contained file.
fn html(setup: &Setup, runs: &[Run]) -> Result<String, String> {
    let chart = chart::svg(setup, runs)?;
    let text = escape(&format!("{}{}", preamble(setup), text(setup, runs)));
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>sluicegate demo</title>\n\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}\
         pre{{font-size:12px;line-height:1.35;overflow-x:auto}}</style>\n</head>\n<body>\n\
         <h1>sluicegate demo: unprotected vs protected</h1>\n{chart}\n<pre>{text}</pre>\n</body>\n</html>\n"
    ))
}

/// Every second of every run, one line each.
fn csv(runs: &[Run]) -> String {
    let mut out = String::from(
        "run,second,sent,answered,urgent_sent,urgent_answered,non_urgent_sent,non_urgent_answered,\
         refused_429,refused_503,timed_out,errors,p50_ms,p99_ms\n",
    );
    for run in runs {
        for (i, s) in run.tally.seconds.iter().enumerate() {
            let _ = writeln!(out, "{},{i},{}", run.mode.name(), csv_counts(s));
        }
    }
    out
}

fn csv_counts(s: &Counts) -> String {
    let ms =
        |d: Option<Duration>| d.map_or(String::new(), |d| format!("{:.3}", d.as_secs_f64() * 1e3));
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{}",
        s.sent,
        s.answered,
        s.urgent_sent,
        s.urgent_answered,
        s.non_urgent_sent(),
        s.non_urgent_answered(),
        s.refused_429,
        s.refused_503,
        s.timed_out,
        s.errors,
        ms(s.p50),
        ms(s.p99)
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A share as a percentage with one decimal, or `-`.
fn percent(share: Option<f64>) -> String {
    share.map_or("-".to_owned(), |s| format!("{:.1}%", s * 100.0))
}

/// A duration in milliseconds, e.g. `20ms` or `1.5ms`.
fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 10.0 || ms.fract() == 0.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{ms:.1}ms")
    }
}

fn opt_millis(d: Option<Duration>) -> String {
    d.map_or("-".to_owned(), millis)
}

/// A figure rounded to a whole number, with thousands separated by commas.
fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_owned();
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if value < -0.5 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::tally::ratio;

    #[test]
    fn thousands_groups_digits_by_three() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234.0), "1,234");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(f64::NAN), "-");
    }

    #[test]
    fn ratio_of_nothing_is_none() {
        assert_eq!(ratio(1, 0), None);
        assert_eq!(percent(ratio(1, 4)), "25.0%");
    }
}
