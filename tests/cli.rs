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
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/sluicegate.toml");
    let (code, stdout, _) = sluicegate(&["check-config", path]);
    assert_eq!(code, 0);
    assert!(stdout.contains("valid"));
    assert!(stdout.contains("max_qps = 250"));
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
    std::fs::write(&path, "[gate]\nmax_qps = -5.0\nmax_in_flight = 10\n").unwrap();
    let (code, stdout, stderr) = sluicegate(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("gate.max_qps"), "{stderr}");
    assert!(stderr.contains("gate.max_in_flight"), "{stderr}");
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
