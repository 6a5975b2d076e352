//! What the simulator's examples that take only a number of seeds share: reading `--seeds N`.

use std::process::ExitCode;

/// The `N` of `--seeds N` on the command line (at least 1; `default` without it), or, after
/// printing `usage` or what was wrong to stderr, the exit code to leave with (2).
pub(crate) fn seeds_or_exit(usage: &str, default: u64) -> Result<u64, ExitCode> {
    seeds(usage, default).map_err(|message| {
        eprintln!("{message}");
        ExitCode::from(2)
    })
}

fn seeds(usage: &str, default: u64) -> Result<u64, String> {
    let mut seeds = default;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seeds" => {
                seeds = it
                    .next()
                    .ok_or(format!("--seeds needs a value\n{usage}"))?
                    .parse::<u64>()
                    .map_err(|e| format!("--seeds: {e}"))?
                    .max(1);
            }
            "-h" | "--help" => return Err(usage.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{usage}")),
        }
    }
    Ok(seeds)
}
