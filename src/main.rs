//! The `sluicegate` command: simulates overload with and without protection, and checks
//! configuration files.

use std::path::PathBuf;
use std::process::ExitCode;

use std::path::Path;

use clap::{Parser, Subcommand};
use sluicegate::sim::{self, render, Scenario};
use sluicegate::Config;

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
        /// The gate configuration the scenario's own [gate] and [sampler] settings are laid over
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
    },
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
        } => simulate(&scenario, config.as_deref(), seed, json, out.as_deref()),
        Command::CheckConfig { file } => match Config::from_file(&file) {
            Ok(config) => {
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
    let base = match config {
        Some(path) => match Config::from_file(path) {
            Ok(c) => c,
            Err(error) => {
                eprintln!("{}: invalid configuration", path.display());
                eprintln!("{error}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    let seed = seed.unwrap_or(scenario.seed);
    let progress = render::Progress::new(&format!("simulating {}", scenario.name));
    let result = sim::run_with_seed(&scenario, &base, seed, &mut |f| progress.set(f));
    progress.finish();
    let report = match result {
        Ok(r) => r,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    if json {
        match render::json(&report) {
            Ok(text) => print!("{text}"),
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", render::table(&report));
    }
    if let Some(dir) = out {
        match render::write_all(&report, dir) {
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
