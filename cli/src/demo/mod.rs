//! `sluicegate demo`: a real HTTP server under real load, unprotected and then protected.
//!
//! The demo starts an HTTP server on 127.0.0.1 ([`server`]) with a fixed number of workers W and
//! a service time S, so a capacity C = W / S, and drives it with an open-loop load generator
//! ([`load`]) at a multiple of C. It runs twice on the same arrivals: once with nothing in front
//! of the handler, once behind `SluiceLayer` with a new gate, which has learned nothing yet (so
//! the first seconds show its cold start). Each run is bounded: the schedule lasts `--seconds`,
//! and every request ends by the client timeout. Then it prints what each run achieved
//! ([`report`]) and, with `--out`, writes an HTML report with the per-second chart ([`chart`]).

mod chart;
mod load;
mod report;
mod server;
mod tally;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluicegate::{Gate, Snapshot};
use tokio::sync::oneshot;
use tokio::time::Instant;

use load::{Arrivals, Live, Plan};
use server::{Server, Shape};
use tally::Tally;

/// Highest request rate the demo accepts: far above what a loopback client can offer, low
/// enough that a typo does not start a flood.
const MAX_RATE: f64 = 100_000.0;
/// Longest run the demo accepts, in seconds.
const MAX_SECONDS: u64 = 3600;
/// How long the runtime gets to wind down its tasks after a run.
const SHUTDOWN: Duration = Duration::from_secs(1);
/// How often the progress bar is redrawn.
const PROGRESS_PERIOD: Duration = Duration::from_millis(100);

/// Runs a real HTTP server (W workers, service time S, capacity C = W / S) under an open-loop load
/// of --load × C, first unprotected, then behind sluicegate's tower layer with a new gate, and
/// prints what each achieved: goodput (2xx in time), urgent and non-urgent success, latency,
/// refusals. Loopback only; it stops by itself after --seconds per run (plus the client timeout).
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Workers of the service (W): requests it serves at once; more wait for a worker.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Time a request needs a worker for when nothing queues (S), e.g. 20ms.
    #[arg(long, default_value = "20ms", value_parser = parse_duration)]
    service_time: Duration,
    /// Share of S that each request waiting for a worker adds to the service time of the requests
    /// starting meanwhile: how much a queue slows the service down.
    #[arg(long, default_value_t = 0.005)]
    congestion: f64,
    /// Offered load, as a multiple of the capacity C = W / S.
    #[arg(long, default_value_t = 5.0)]
    load: f64,
    /// Share of the requests that go to the urgent route, /pay (the rest go to /browse).
    #[arg(long, default_value_t = 0.1)]
    urgent_share: f64,
    /// How long each run sends requests, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// How long a client waits for its answer before it gives up and closes the connection
    /// (default: 10 × S).
    #[arg(long, value_parser = parse_duration)]
    client_timeout: Option<Duration>,
    /// How requests are spaced: Poisson arrivals or evenly.
    #[arg(long, value_enum, default_value_t = Arrivals::Poisson)]
    arrivals: Arrivals,
    /// Seed of the arrival times and of which requests are urgent (both runs get the same).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write report.html (tables and the per-second chart) and timeline.csv into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 20ms or 1s)"))
}

/// The two runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Unprotected,
    Protected,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Unprotected => "unprotected",
            Mode::Protected => "protected",
        }
    }
}

/// A demo's settings, checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    pub(crate) shape: Shape,
    pub(crate) load: f64,
    pub(crate) seconds: u64,
    pub(crate) plan: Plan,
}

impl Setup {
    /// Checks the arguments; the message names the option and the rule it breaks.
    fn from_args(args: &DemoArgs) -> Result<Setup, String> {
        if args.workers == 0 || args.workers > 100_000 {
            return Err(format!("--workers {}: must be 1 to 100000", args.workers));
        }
        if args.service_time.is_zero() || args.service_time > Duration::from_secs(10) {
            return Err("--service-time: must be greater than 0 and at most 10s".to_owned());
        }
        if !(args.congestion.is_finite() && args.congestion >= 0.0) {
            return Err(format!(
                "--congestion {}: must be a number >= 0",
                args.congestion
            ));
        }
        if !(0.0..=1.0).contains(&args.urgent_share) {
            return Err(format!(
                "--urgent-share {}: must be 0 to 1",
                args.urgent_share
            ));
        }
        if args.seconds == 0 || args.seconds > MAX_SECONDS {
            return Err(format!(
                "--seconds {}: must be 1 to {MAX_SECONDS}",
                args.seconds
            ));
        }
        let shape = Shape {
            workers: args.workers,
            service_time: args.service_time,
            congestion: args.congestion,
        };
        let rate = args.load * shape.capacity();
        if !(args.load.is_finite() && args.load > 0.0 && rate <= MAX_RATE) {
            return Err(format!(
                "--load {}: must be greater than 0, and at most {MAX_RATE} requests per second \
                 (C = {:.0}/s)",
                args.load,
                shape.capacity()
            ));
        }
        let client_timeout = args.client_timeout.unwrap_or(args.service_time * 10);
        if client_timeout.is_zero() || client_timeout > Duration::from_secs(60) {
            return Err("--client-timeout: must be greater than 0 and at most 60s".to_owned());
        }
        Ok(Setup {
            shape,
            load: args.load,
            seconds: args.seconds,
            plan: Plan {
                rate,
                duration: Duration::from_secs(args.seconds),
                urgent_share: args.urgent_share,
                client_timeout,
                arrivals: args.arrivals,
                seed: args.seed,
            },
        })
    }
}

/// The gate's state at the end of one second of a protected run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateSample {
    pub(crate) switch_on: bool,
    pub(crate) max_in_flight: u64,
    pub(crate) max_qps: f64,
    pub(crate) capacity: Option<f64>,
}

/// What the server saw of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerFigures {
    pub(crate) arrived: u64,
    pub(crate) completed: u64,
    pub(crate) abandoned_queued: u64,
    pub(crate) abandoned_in_service: u64,
    pub(crate) max_queued: u64,
}

/// One run's results.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) mode: Mode,
    pub(crate) tally: Tally,
    pub(crate) server: ServerFigures,
    /// One sample per second, protected runs only.
    pub(crate) gate: Vec<GateSample>,
    /// The gate's view of the run at its end, protected runs only.
    pub(crate) gate_end: Option<Snapshot>,
}

/// Runs `sluicegate demo`: exit status 2 for bad arguments, 1 when a run cannot start or the
/// report cannot be written.
pub(crate) fn run(args: &DemoArgs) -> ExitCode {
    let setup = match Setup::from_args(args) {
        Ok(setup) => setup,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report::preamble(&setup));
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let mut runs = Vec::with_capacity(2);
    for mode in [Mode::Unprotected, Mode::Protected] {
        match run_once(mode, &setup) {
            Ok(run) => runs.push(run),
            Err(error) => {
                eprintln!("demo, {} run: {error}", mode.name());
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{}", report::text(&setup, &runs));
    if let Some(dir) = &args.out {
        match report::write_all(&setup, &runs, dir) {
            Ok(paths) => {
                for path in paths {
                    eprintln!("wrote {}", path.display());
                }
            }
            Err(error) => {
                eprintln!("{}: {error}", dir.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Runs one mode on a runtime of its own, which is shut down afterwards with whatever the run
/// left behind (open connections, the server).
fn run_once(mode: Mode, setup: &Setup) -> Result<Run, Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(drive(mode, setup));
    runtime.shutdown_timeout(SHUTDOWN);
    result
}

/// Starts the server (behind a new gate when protected), sends the load, and gathers the figures.
async fn drive(mode: Mode, setup: &Setup) -> Result<Run, Box<dyn std::error::Error>> {
    let gate = match mode {
        Mode::Unprotected => None,
        Mode::Protected => Some(Gate::new(server::gate_config()?)?),
    };
    let server = Server::start(setup.shape, gate).await?;
    let live = Arc::new(Live::default());
    let start = Instant::now();
    let (stop, stopped) = oneshot::channel();
    let watcher = tokio::spawn(watch(
        mode,
        setup.plan.duration + setup.plan.client_timeout,
        start,
        Arc::clone(&live),
        server.gate.clone(),
        stopped,
    ));
    let generated = load::drive(server.address, setup.plan, start, live).await?;
    let _ = stop.send(());
    let gate_samples = watcher.await.unwrap_or_default();
    let counts = &server.counts;
    let figures = ServerFigures {
        arrived: counts.arrived.load(Ordering::Relaxed),
        completed: counts.completed.load(Ordering::Relaxed),
        abandoned_queued: counts.abandoned_queued.load(Ordering::Relaxed),
        abandoned_in_service: counts.abandoned_in_service.load(Ordering::Relaxed),
        max_queued: counts.max_queued.load(Ordering::Relaxed),
    };
    let gate_end = server.gate.as_ref().map(Gate::snapshot);
    server.stop();
    Ok(Run {
        mode,
        tally: tally::tally(&generated, setup.seconds),
        server: figures,
        gate: gate_samples,
        gate_end,
    })
}

/// Shows the run's progress on stderr (when it is a terminal) and samples the gate at the end of
/// every second, until told to stop.
async fn watch(
    mode: Mode,
    expected: Duration,
    start: Instant,
    live: Arc<Live>,
    gate: Option<Gate>,
    mut stop: oneshot::Receiver<()>,
) -> Vec<GateSample> {
    let millis = u64::try_from(expected.as_millis()).unwrap_or(u64::MAX);
    let bar = ProgressBar::with_draw_target(Some(millis), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>11} [{bar:20}] {elapsed:>3} {wide_msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(mode.name());
    let mut samples = Vec::new();
    let mut ticker = tokio::time::interval(PROGRESS_PERIOD);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = ticker.tick() => {}
        }
        let elapsed = start.elapsed();
        if let Some(gate) = &gate {
            while (samples.len() as u64) < elapsed.as_secs() {
                let snapshot = gate.snapshot();
                samples.push(GateSample {
                    switch_on: snapshot.switch.on,
                    max_in_flight: snapshot.limits.max_in_flight,
                    max_qps: snapshot.limits.max_qps,
                    capacity: snapshot.learned.capacity,
                });
            }
        }
        bar.set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
        let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        bar.set_message(format!(
            "sent {} ok {} refused {} timed out {}",
            count(&live.sent),
            count(&live.answered),
            count(&live.refused),
            count(&live.timed_out)
        ));
    }
    bar.finish_and_clear();
    samples
}
