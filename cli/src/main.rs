//! The `sluicegate` command: simulates overload with and without protection, demonstrates it on
//! a real HTTP server, and checks configuration files.

mod demo;

use std::path::PathBuf;
use std::process::ExitCode;

use std::path::Path;

use clap::{Parser, Subcommand};
use sluicegate::sim::family::{self, bars, report};
use sluicegate::sim::{self, render, Bbr, Gradient2, Report, Scenario, Strategy};
use sluicegate::Config;

/// The family's seed when `--seed` is not given.
const FAMILY_SEED: u64 = 1;

/// sluicegate protects a service from overload from inside its own process.
///
/// The library wraps your request handlers in a gate that watches in-flight requests, latency and
/// memory. When the service is drowning, urgent requests keep a token bucket of their own, non-urgent
/// ones slow to a trickle, and anything above a hard ceiling is refused at once. This command helps
/// you get its configuration right before it reaches production.
#[derive(Debug, Parser)]
#[command(name = "sluicegate", version, about, long_about, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "\
Examples:
  sluicegate simulate                              the flash-crowd scenario: table of what each strategy achieves
  sluicegate simulate --scenario priority-flood --out report/   also write JSON, CSV and an HTML report with charts
  sluicegate simulate --scenario my.toml --config config/sluicegate.toml --json
  sluicegate simulate --family 60 --seed 1         60 random services and floods, and the bars of sluicegate-auto
  sluicegate simulate --seed 1 --draw 17           one of them alone: every strategy, its parameters and bars
  sluicegate demo                                  a real HTTP server at 5x its capacity, unprotected then protected
  sluicegate demo --load 0.5 --out demo/           a light load; also write an HTML report with the per-second chart
  sluicegate check-config config/sluicegate.toml   check a file and print the settings it gives
  sluicegate default-config > sluicegate.toml      start a config of your own from the defaults";

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate a scenario in virtual time: the real gate against a modelled backend and clients, next
    /// to no protection, a static token bucket and a static concurrency limit, all on the same
    /// arrivals. Prints a table (or JSON); the same scenario and seed always give the same figures.
    Simulate {
        /// A built-in scenario name or a scenario TOML file. Built-in: flash-crowd (the default),
        /// sweep, slow-backend, priority-flood, urgent-overload, hover, memory-pressure, retry-storm,
        /// heavy-tail.
        #[arg(long, default_value = "flash-crowd")]
        scenario: String,
        /// The gate configuration the scenario's own `[gate]` and `[sampler]` settings are laid over
        /// (default: the built-in defaults).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Use this seed instead of the scenario's.
        #[arg(long)]
        seed: Option<u64>,
        /// Print the figures as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write report.json, timeline.csv (100 ms slices) and report.html (charts) into DIR.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Run a randomized family of N services instead of a scenario: draws 0 to N-1 of the
        /// family of --seed (default 1), each with unprotected, concurrency-limit and
        /// sluicegate-auto, then print every draw, the bars and the worst draws. Exit status 0
        /// whether the bars are met or not.
        #[arg(long, value_name = "N", conflicts_with_all = ["scenario", "config", "json", "out"])]
        family: Option<usize>,
        /// Run draw I of the family of --seed (default 1) alone, with every built-in strategy: its
        /// table (or --json, --out) like a scenario's, then its parameters and its bars.
        #[arg(long, value_name = "I", conflicts_with = "scenario")]
        draw: Option<usize>,
        /// Threads the family runs on.
        #[arg(long, value_name = "T", default_value_t = 2)]
        threads: usize,
        /// The strategy the family's bars judge.
        #[arg(long, value_name = "NAME", default_value = family::SUBJECT)]
        subject: String,
    },
    /// Run a real HTTP server on 127.0.0.1 under an open-loop load, first unprotected, then behind
    /// sluicegate's tower layer with a new gate, and print what each run achieved: goodput, urgent
    /// and non-urgent success, latency, refusals, second by second. Stops by itself.
    ///
    /// The server has W workers busy S each (capacity C = W / S; by default 8 / 20ms = 400
    /// requests per second, so that one 2-core machine can run the server, the gate and a client
    /// offering 5 x C); the table shows the rate the client actually achieved. Each run lasts
    /// --seconds plus the client timeout.
    Demo(demo::DemoArgs),
    /// Check a config file: print the effective configuration (every key, defaults filled in), or
    /// every error with the key, the value and the rule it breaks. Exit status 0 when valid, 2 when not.
    CheckConfig {
        /// The TOML file to check, e.g. config/sluicegate.toml.
        file: PathBuf,
    },
    /// Print the shipped, fully commented default configuration.
    DefaultConfig,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate {
            scenario,
            config,
            seed,
            json,
            out,
            family,
            draw,
            threads,
            subject,
        } => match (draw, family) {
            (Some(index), _) => {
                let base = match load_config(config.as_deref()) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let seed = seed.unwrap_or(FAMILY_SEED);
                simulate_draw(seed, index, &base, &subject, json, out.as_deref())
            }
            (None, Some(n)) => simulate_family(seed.unwrap_or(FAMILY_SEED), n, threads, &subject),
            (None, None) => simulate(&scenario, config.as_deref(), seed, json, out.as_deref()),
        },
        Command::Demo(args) => demo::run(&args),
        Command::CheckConfig { file } => match Config::from_file(&file) {
            Ok(config) => {
                for warning in config.warnings() {
                    eprintln!("warning: {warning}");
                }
                println!("# {}: valid. Effective configuration:", file.display());
                print!("{}", config.to_toml_string());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{}: invalid configuration", file.display());
                eprintln!("{error}");
                ExitCode::from(2)
            }
        },
        Command::DefaultConfig => {
            print!("{}", Config::default_toml());
            ExitCode::SUCCESS
        }
    }
}

/// Reads the base gate configuration (the defaults without a file); exit status 2 when invalid.
fn load_config(config: Option<&Path>) -> Result<Config, ExitCode> {
    match config {
        Some(path) => Config::from_file(path).map_err(|error| {
            eprintln!("{}: invalid configuration", path.display());
            eprintln!("{error}");
            ExitCode::from(2)
        }),
        None => Ok(Config::default()),
    }
}

/// Runs `sluicegate simulate`. Exit status 2 for bad input (scenario or config), 1 when the report
/// cannot be written.
fn simulate(
    spec: &str,
    config: Option<&Path>,
    seed: Option<u64>,
    json: bool,
    out: Option<&Path>,
) -> ExitCode {
    let scenario = match Scenario::load(spec) {
        Ok(s) => s,
        Err(error) => {
            eprintln!("scenario `{spec}`: {error}");
            eprintln!(
                "built-in scenarios: {}",
                Scenario::builtin_names().join(", ")
            );
            return ExitCode::from(2);
        }
    };
    let base = match load_config(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let seed = seed.unwrap_or(scenario.seed);
    let report = match with_progress(&scenario, |p| sim::run_with_seed(&scenario, &base, seed, p)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    print_report(&report, json, out)
}

/// Runs `run` on `scenario` behind a progress bar; a run that cannot start is reported on stderr
/// with exit status 2.
fn with_progress(
    scenario: &Scenario,
    run: impl FnOnce(&mut dyn FnMut(f64)) -> Result<Report, sim::SimError>,
) -> Result<Report, ExitCode> {
    let progress = render::Progress::new(&format!("simulating {}", scenario.name));
    let result = run(&mut |f| progress.set(f));
    progress.finish();
    result.map_err(|error| {
        eprintln!("{error}");
        ExitCode::from(2)
    })
}

/// Prints `report` as a table or JSON and writes the files of `--out`; exit status 1 when the
/// report cannot be rendered or written.
fn print_report(report: &Report, json: bool, out: Option<&Path>) -> ExitCode {
    if json {
        match render::json(report) {
            Ok(text) => print!("{text}"),
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", render::table(report));
    }
    if let Some(dir) = out {
        match render::write_all(report, dir) {
            Ok(paths) => {
                for p in paths {
                    eprintln!("wrote {}", p.display());
                }
            }
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// A factory of an extra strategy, owned.
type Factory = Box<dyn Fn() -> Box<dyn Strategy> + Sync>;

/// The extra strategy the family must run for the bars of `subject`: none for the strategies it
/// always runs, the built-in peers that need no knowledge of the draw (`gradient2`, `bbr`), and
/// an error (exit status 2) for any other name.
fn extra_subject(subject: &str) -> Result<Vec<(&'static str, Factory)>, ExitCode> {
    match subject {
        s if family::BUILT_IN.contains(&s) => Ok(Vec::new()),
        "gradient2" => Ok(vec![(
            "gradient2",
            Box::new(|| Box::new(Gradient2::new()) as Box<dyn Strategy>) as Factory,
        )]),
        "bbr" => Ok(vec![(
            "bbr",
            Box::new(|| Box::new(Bbr::new()) as Box<dyn Strategy>) as Factory,
        )]),
        other => {
            eprintln!(
                "--subject: the family cannot judge `{other}` (it can: {}, gradient2, bbr)",
                family::BUILT_IN.join(", ")
            );
            Err(ExitCode::from(2))
        }
    }
}

/// Runs `sluicegate simulate --draw I`: draw `index` of the family of `seed` with every built-in
/// strategy, printed like a scenario, then its parameters and the bars of `subject` (on stderr
/// with `--json`, so that stdout stays JSON). Exit status 2 for bad input.
fn simulate_draw(
    seed: u64,
    index: usize,
    base: &Config,
    subject: &str,
    json: bool,
    out: Option<&Path>,
) -> ExitCode {
    let draw = family::draw(seed, index);
    let scenario = draw.scenario();
    let report = match with_progress(&scenario, |p| sim::run(&scenario, base, p)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let code = print_report(&report, json, out);
    let extra = match extra_subject(subject) {
        Ok(extra) => extra,
        Err(code) => return code,
    };
    let extra: Vec<(&str, family::StrategyFactory)> =
        extra.iter().map(|(n, f)| (*n, f.as_ref())).collect();
    let result = family::run_draw(&draw, &extra);
    let detail = match bars::check_draw(&result, subject) {
        Ok(checked) => report::draw_detail(&result, &checked, subject),
        Err(error) => {
            eprintln!("--subject: {error}");
            return ExitCode::from(2);
        }
    };
    if json {
        eprint!("\n{detail}");
    } else {
        print!("\n{detail}");
    }
    code
}

/// Runs `sluicegate simulate --family N`: prints the family's report, and on stderr how long it
/// took and its slowest draws. Exit status 0 whether the bars are met or not, 2 for an unknown
/// `subject`.
fn simulate_family(seed: u64, n: usize, threads: usize, subject: &str) -> ExitCode {
    let started = std::time::Instant::now();
    let progress = render::Progress::new(&format!("family of {n} draws"));
    let times = std::sync::Mutex::new(Vec::with_capacity(n));
    let extra = match extra_subject(subject) {
        Ok(extra) => extra,
        Err(code) => return code,
    };
    let extra: Vec<(&str, family::StrategyFactory)> =
        extra.iter().map(|(n, f)| (*n, f.as_ref())).collect();
    let results = family::run_family_with(seed, n, threads, &extra, &|done, result, took| {
        progress.set(done as f64 / n.max(1) as f64);
        if let Ok(mut times) = times.lock() {
            times.push((took, result.draw.index));
        }
    });
    progress.finish();
    let checked = match bars::check_family(&results, subject) {
        Ok(checked) => checked,
        Err(error) => {
            eprintln!("--subject: {error}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report::render(&results, &checked));
    let mut times = times.into_inner().unwrap_or_else(|e| e.into_inner());
    times.sort_by(|a, b| b.cmp(a));
    let slowest: Vec<String> = times
        .iter()
        .take(3)
        .map(|(took, index)| format!("#{index} {:.1}s", took.as_secs_f64()))
        .collect();
    eprintln!(
        "{n} draws in {:.1}s on {} threads; slowest: {}",
        started.elapsed().as_secs_f64(),
        threads.clamp(1, n.max(1)),
        if slowest.is_empty() {
            "-".to_owned()
        } else {
            slowest.join(", ")
        }
    );
    ExitCode::SUCCESS
}
