//! The `sluicegate` binary, run as a user would.

use std::process::Command;

fn sluicegate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_prints_the_effective_config_of_the_shipped_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/sluicegate.toml");
    let (code, stdout, _) = sluicegate(&["check-config", path]);
    assert_eq!(code, 0);
    assert!(stdout.contains("valid"));
    assert!(stdout.contains("max_qps = \"auto\""), "{stdout}");
    // What it prints is itself a valid config equal to the defaults.
    let body: String = stdout.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(
        sluicegate::Config::from_toml_str(&body).unwrap(),
        sluicegate::Config::default()
    );
}

#[test]
fn check_config_lists_every_error_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[gate]\nmax_qps = -5.0\nmax_running = 20\nmax_in_flight = 10\n",
    )
    .unwrap();
    let (code, stdout, stderr) = sluicegate(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("gate.max_qps"), "{stderr}");
    assert!(stderr.contains("gate.max_in_flight"), "{stderr}");
}

#[test]
fn check_config_warns_when_urgent_routes_are_listed_but_everything_else_is_urgent_too() {
    let dir = tempfile::tempdir().unwrap();
    let trap = dir.path().join("trap.toml");
    std::fs::write(&trap, "[routes]\nurgent = [\"/pay/*\"]\n").unwrap();
    let (code, _, stderr) = sluicegate(&["check-config", trap.to_str().unwrap()]);
    assert_eq!(code, 0, "a warning is not an error");
    assert!(stderr.contains("warning: `routes.urgent`"), "{stderr}");
    assert!(stderr.contains("default_urgency"), "{stderr}");

    let meant = dir.path().join("meant.toml");
    std::fs::write(
        &meant,
        "[routes]\nurgent = [\"/pay/*\"]\ndefault_urgency = \"non_urgent\"\n",
    )
    .unwrap();
    let (code, _, stderr) = sluicegate(&["check-config", meant.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn check_config_names_a_missing_file_and_exits_2() {
    let (code, _, stderr) = sluicegate(&["check-config", "/no/such/sluicegate.toml"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("/no/such/sluicegate.toml"), "{stderr}");
}

#[test]
fn help_explains_what_the_tool_is_and_shows_examples() {
    let (code, stdout, _) = sluicegate(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("overload"));
    assert!(stdout.contains("check-config"));
    assert!(stdout.contains("Examples:"));
}

#[test]
fn default_config_prints_the_shipped_file() {
    let (code, stdout, _) = sluicegate(&["default-config"]);
    assert_eq!(code, 0);
    assert_eq!(stdout, sluicegate::Config::default_toml());
}

const TINY_SCENARIO: &str = r#"
name = "tiny-flood"
seed = 7
[backend]
workers = 4
service_time = "10ms"
congestion = 1.0
[clients]
timeout = "500ms"
slo = "200ms"
[[phase]]
duration = "1s"
load = 0.5
[[phase]]
duration = "2s"
load = 4.0
[[phase]]
duration = "1s"
load = 0.5
[gate]
max_running = 4
max_avg_latency = "25ms"
max_qps = 400
non_urgent_qps = 40
request_timeout = "200ms"
max_in_flight = 16
[sampler]
window = 20
min_samples = 10
tick = "50ms"
"#;

fn tiny_scenario_file(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("tiny.toml");
    std::fs::write(&path, TINY_SCENARIO).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn simulate_prints_a_table_with_every_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let file = tiny_scenario_file(&dir);
    let (code, stdout, stderr) = sluicegate(&["simulate", "--scenario", &file]);
    assert_eq!(code, 0, "{stderr}");
    for name in [
        "unprotected",
        "token-bucket",
        "concurrency-limit",
        "gradient2",
        "bbr",
        "sluicegate",
        "sluicegate-auto",
    ] {
        assert!(stdout.contains(name), "{name} missing from\n{stdout}");
    }
    assert!(stdout.contains("tiny-flood"));
}

#[test]
fn simulate_json_is_the_same_for_the_same_seed_and_differs_for_another() {
    let dir = tempfile::tempdir().unwrap();
    let file = tiny_scenario_file(&dir);
    let (code, first, stderr) = sluicegate(&["simulate", "--scenario", &file, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, second, _) = sluicegate(&["simulate", "--scenario", &file, "--json"]);
    assert_eq!(first, second, "same seed, same bytes");
    let (_, other, _) = sluicegate(&["simulate", "--scenario", &file, "--json", "--seed", "8"]);
    assert_ne!(first, other);
    assert!(first.contains("\"capacity_rps\": 400.0"), "{first}");
}

#[test]
fn simulate_out_writes_json_csv_and_html() {
    let dir = tempfile::tempdir().unwrap();
    let file = tiny_scenario_file(&dir);
    let out = dir.path().join("report");
    let (code, _, stderr) = sluicegate(&[
        "simulate",
        "--scenario",
        &file,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    for name in ["report.json", "timeline.csv", "report.html"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(!text.is_empty(), "{name} is empty");
    }
}

#[test]
fn simulate_with_an_unknown_scenario_lists_the_built_in_ones_and_exits_2() {
    let (code, _, stderr) = sluicegate(&["simulate", "--scenario", "no-such-scenario"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("flash-crowd"), "{stderr}");
}

#[test]
fn simulate_with_an_invalid_base_config_names_the_key_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = tiny_scenario_file(&dir);
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[gate]\nmax_qsp = 5\n").unwrap();
    let (code, _, stderr) = sluicegate(&[
        "simulate",
        "--scenario",
        &file,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("max_qsp"), "{stderr}");
}
