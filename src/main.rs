//! The `sluicegate` command: checks configuration files (and, later, simulates overload).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
  sluicegate check-config config/sluicegate.toml   check a file and print the settings it gives
  sluicegate default-config > sluicegate.toml      start a config of your own from the defaults";

#[derive(Debug, Subcommand)]
enum Command {
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
