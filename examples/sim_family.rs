//! The randomized family of services (`sluicegate::sim::family`) with a prototype strategy of your
//! own next to the built-in ones: what `sluicegate simulate --family N` prints, with one extra
//! strategy, `free-worker-only` (admits a request only while a worker is free), judged by the
//! same bars. Replace it with your prototype to compare it with `sluicegate-auto`.
//!
//! ```sh
//! cargo run --release --example sim_family                                  # 60 draws of seed 1
//! cargo run --release --example sim_family -- --draws 200 --seed 3 --threads 2
//! cargo run --release --example sim_family -- --subject sluicegate-auto     # the gate instead
//! ```

use std::process::ExitCode;

use sluicegate::clock::Nanos;
use sluicegate::sim::family::{self, bars, report, StrategyFactory};
use sluicegate::sim::{AttemptId, BackendView, Offer, Strategy};

const USAGE: &str =
    "usage: sim_family [--draws N] [--seed S] [--threads T] [--subject NAME] (default subject: free-worker-only)";

/// The prototype: admits only while a worker is free (a limit at W, read from the backend).
struct FreeWorkerOnly;

impl Strategy for FreeWorkerOnly {
    fn offer(&mut self, _: AttemptId, _: bool, _: Nanos, backend: &BackendView) -> Offer {
        if backend.in_flight() < u64::from(backend.workers) {
            Offer::Admit
        } else {
            Offer::Refuse { retry_after: None }
        }
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        self.offer(id, true, now, backend)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {}
}

struct Args {
    draws: usize,
    seed: u64,
    threads: usize,
    subject: String,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        draws: 60,
        seed: 1,
        threads: 2,
        subject: "free-worker-only".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--draws" => {
                args.draws = value("--draws")?
                    .parse()
                    .map_err(|e| format!("--draws: {e}"))?
            }
            "--seed" => {
                args.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--threads" => {
                args.threads = value("--threads")?
                    .parse()
                    .map_err(|e| format!("--threads: {e}"))?
            }
            "--subject" => args.subject = value("--subject")?,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let prototype: StrategyFactory = &|| Box::new(FreeWorkerOnly) as Box<dyn Strategy>;
    let results = family::run_family(
        args.seed,
        args.draws,
        args.threads,
        &[("free-worker-only", prototype)],
    );
    match bars::check_family(&results, &args.subject) {
        Ok(checked) => {
            print!("{}", report::render(&results, &checked));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(2)
        }
    }
}
