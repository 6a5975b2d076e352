//! Hot reload of the config file: real files in a temporary directory, the real file system
//! watcher, and SIGHUP. No test sleeps: each waits on the reloader's attempts, bounded by a timeout
//! that fails it.
#![cfg(feature = "reload")]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluicegate::clock::ManualClock;
use sluicegate::reload::{ReloadError, ReloadStats, Reloader};
use sluicegate::{Config, ConfigError, Gate, Request, SwitchMode};

/// The longest a test waits for the watcher: far beyond its debounce, on a loaded machine.
const WAIT: Duration = Duration::from_secs(10);

fn qps(rate: u32) -> String {
    format!("[gate]\nmax_qps = {rate}\n")
}

/// A gate loaded from `path`, on a manual clock and without the memory probe's thread.
fn gate_from(path: &Path) -> Gate<ManualClock> {
    Gate::builder(Config::from_file(path).expect("valid config file"))
        .clock(ManualClock::new())
        .without_memory_probe()
        .build()
        .expect("valid config")
}

fn max_qps(gate: &Gate<ManualClock>) -> f64 {
    gate.config()
        .gate
        .max_qps
        .fixed()
        .copied()
        .unwrap_or(f64::NAN)
}

/// A directory holding `sluicegate.toml` with `max_qps = 100`, a gate loaded from it, and a
/// reloader watching it.
struct Setup {
    dir: tempfile::TempDir,
    path: PathBuf,
    gate: Gate<ManualClock>,
    reloader: Reloader,
}

fn watched() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluicegate.toml");
    fs::write(&path, qps(100)).unwrap();
    let gate = gate_from(&path);
    let reloader = gate.watch(&path).expect("watch starts");
    assert!(reloader.is_watching());
    Setup {
        dir,
        path,
        gate,
        reloader,
    }
}

/// Waits until `done` holds, waking on each reload attempt; fails the test after [`WAIT`].
fn wait_until(reloader: &Reloader, what: &str, mut done: impl FnMut(&ReloadStats) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = reloader.stats();
        if done(&stats) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if !reloader.wait_for_attempts(stats.attempts() + 1, left) {
            let stats = reloader.stats();
            assert!(done(&stats), "{what}: not seen within {WAIT:?}; {stats:?}");
            return;
        }
    }
}

fn wait_for_qps(s: &Setup, rate: f64) {
    wait_until(&s.reloader, &format!("max_qps = {rate}"), |_| {
        max_qps(&s.gate) == rate
    });
}

/// Waits until the last attempt failed with an error that says `what`.
fn wait_for_error(s: &Setup, what: &str) {
    wait_until(&s.reloader, &format!("an error about {what}"), |stats| {
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(what))
    });
}

/// Writes `text` to a new file beside `path` and renames it over `path`, as editors save.
fn save_by_rename(path: &Path, text: &str) {
    let tmp = path.with_file_name(".sluicegate.toml.tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_valid_edit_in_place_is_put_in_force() {
    let s = watched();
    assert_eq!(max_qps(&s.gate), 100.0);
    fs::write(&s.path, qps(250)).unwrap();
    wait_for_qps(&s, 250.0);
    // (A reading between the truncation and the write would find the file empty and fail; the
    // write's end is read again.)
    let stats = s.reloader.stats();
    assert!(stats.succeeded >= 1, "{stats:?}");
    assert_eq!(stats.last_error, None);
}

#[test]
fn an_editor_save_by_rename_over_the_file_is_put_in_force() {
    let s = watched();
    save_by_rename(&s.path, &qps(300));
    wait_for_qps(&s, 300.0);
    // And again: the watch did not stay on the replaced file.
    save_by_rename(&s.path, &qps(310));
    wait_for_qps(&s, 310.0);
    assert_eq!(s.reloader.stats().failed, 0);
}

/// The layout of a Kubernetes ConfigMap volume: `sluicegate.toml -> ..data/sluicegate.toml`,
/// `..data -> ..<version>`; an update writes a new version directory and swaps `..data` by
/// renaming a new symlink over it. The watched path itself never changes.
#[cfg(unix)]
#[test]
fn a_kubernetes_style_data_symlink_swap_is_put_in_force() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let version = |name: &str, text: &str| {
        fs::create_dir(root.join(name)).unwrap();
        fs::write(root.join(name).join("sluicegate.toml"), text).unwrap();
    };
    version("..2026_01_01_v1", &qps(100));
    symlink("..2026_01_01_v1", root.join("..data")).unwrap();
    let path = root.join("sluicegate.toml");
    symlink("..data/sluicegate.toml", &path).unwrap();
    let gate = gate_from(&path);
    let reloader = gate.watch(&path).unwrap();

    let swap = |from: &str, to: &str, text: &str| {
        version(to, text);
        symlink(to, root.join("..data_tmp")).unwrap();
        fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        fs::remove_dir_all(root.join(from)).unwrap();
    };
    swap("..2026_01_01_v1", "..2026_01_02_v2", &qps(400));
    let s = Setup {
        dir,
        path,
        gate,
        reloader,
    };
    wait_for_qps(&s, 400.0);
    swap("..2026_01_02_v2", "..2026_01_03_v3", &qps(450));
    wait_for_qps(&s, 450.0);
    assert!(fs::symlink_metadata(&s.path).unwrap().is_symlink());
    assert_eq!(s.reloader.stats().failed, 0, "{:?}", s.reloader.stats());
}

#[test]
fn a_file_that_does_not_parse_keeps_the_config_is_counted_and_the_next_good_file_is_put_in_force() {
    let s = watched();
    save_by_rename(&s.path, "[gate\nmax_qps = 800\n");
    wait_for_error(&s, "line 1");
    assert_eq!(
        max_qps(&s.gate),
        100.0,
        "the last good config stays in force"
    );
    let stats = s.reloader.stats();
    assert_eq!(stats.succeeded, 0, "{stats:?}");
    assert!(stats.failed >= 1, "{stats:?}");
    let error = stats.last_error.expect("the failure is kept");
    assert!(error.contains("sluicegate.toml"), "{error}");

    save_by_rename(&s.path, &qps(800));
    wait_for_qps(&s, 800.0);
    assert_eq!(s.reloader.stats().last_error, None, "a success clears it");
}

#[test]
fn a_value_that_breaks_a_rule_keeps_the_config_names_the_key_and_is_counted() {
    let s = watched();
    save_by_rename(&s.path, "[gate]\nmax_qps = -5\n");
    wait_for_error(
        &s,
        "`gate.max_qps` = -5: must be a finite number greater than 0",
    );
    assert_eq!(max_qps(&s.gate), 100.0);
    assert_eq!(s.reloader.stats().succeeded, 0);

    // A second bad edit is counted too; then a good one is put in force.
    let failed = s.reloader.stats().failed;
    save_by_rename(&s.path, "[gate]\nmax_qps = 100\nmax_memory_ratio = 1.5\n");
    wait_for_error(&s, "gate.max_memory_ratio");
    assert!(s.reloader.stats().failed > failed);
    assert_eq!(max_qps(&s.gate), 100.0);
    save_by_rename(&s.path, &qps(120));
    wait_for_qps(&s, 120.0);
}

#[test]
fn an_empty_file_keeps_the_config_and_is_counted_but_a_file_of_comments_means_the_defaults() {
    let s = watched();
    fs::write(&s.path, "").unwrap();
    wait_for_error(&s, "is empty");
    assert_eq!(max_qps(&s.gate), 100.0);
    assert_eq!(s.reloader.stats().succeeded, 0);
    assert!(matches!(
        s.reloader.reload_now(),
        Err(ReloadError::Empty { .. })
    ));
    fs::write(&s.path, "# all defaults\n").unwrap();
    wait_until(&s.reloader, "the defaults", |_| {
        s.gate.config() == Config::default()
    });
}

#[test]
fn deleting_the_file_keeps_the_config_and_re_creating_it_is_put_in_force() {
    let s = watched();
    fs::remove_file(&s.path).unwrap();
    wait_for_error(&s, "cannot read config file");
    assert_eq!(max_qps(&s.gate), 100.0, "a delete alone changes nothing");
    assert_eq!(s.reloader.stats().succeeded, 0);

    fs::write(&s.path, qps(600)).unwrap();
    wait_for_qps(&s, 600.0);
    // The watch goes on after that.
    save_by_rename(&s.path, &qps(610));
    wait_for_qps(&s, 610.0);
    assert_eq!(s.reloader.stats().last_error, None);
}

#[test]
fn a_new_directory_or_other_file_beside_the_config_does_not_stop_the_watch() {
    let s = watched();
    fs::write(s.dir.path().join(".sluicegate.toml.swp"), "x").unwrap();
    fs::create_dir(s.dir.path().join("other")).unwrap();
    fs::write(&s.path, qps(130)).unwrap();
    wait_for_qps(&s, 130.0);
}

#[test]
fn counters_in_flight_requests_and_the_switch_override_survive_a_reload_from_the_file() {
    let s = watched();
    for _ in 0..5 {
        drop(s.gate.try_acquire(&Request::url("/x")).unwrap());
    }
    let held = s.gate.try_acquire(&Request::url("/held")).unwrap();
    s.gate.set_switch(SwitchMode::ForceOff);
    let before = s.gate.snapshot();
    assert_eq!(before.counters.admitted, 6);

    fs::write(&s.path, qps(700)).unwrap();
    wait_for_qps(&s, 700.0);
    let after = s.gate.snapshot();
    assert_eq!(after.counters, before.counters);
    assert_eq!(after.learned, before.learned);
    assert_eq!(after.in_flight, 1);
    assert_eq!(after.switch, before.switch, "reloading keeps a set_switch");
    assert_eq!(after.limits.max_qps, 700.0);
    drop(held);
    assert_eq!(s.gate.snapshot().in_flight, 0);
    assert_eq!(s.gate.snapshot().counters.admitted, 6);
}

#[test]
fn measured_latencies_survive_a_reload_from_the_file() {
    let s = watched();
    let clock = s.gate.clock();
    for _ in 0..60 {
        let permit = s.gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(Duration::from_millis(10));
        drop(permit);
    }
    clock.advance(Duration::from_millis(100)); // the sampler's tick falls due
    let before = s.gate.snapshot();
    assert_eq!(before.trimmed_mean, Some(Duration::from_millis(10)));

    fs::write(&s.path, qps(710)).unwrap();
    wait_for_qps(&s, 710.0);
    let after = s.gate.snapshot();
    assert_eq!(after.trimmed_mean, before.trimmed_mean);
    assert_eq!(after.latency_samples, before.latency_samples);
    assert_eq!(after.learned, before.learned);
    assert_eq!(after.counters, before.counters);
    // And at the next tick, from the same window of latencies.
    clock.advance(Duration::from_millis(100));
    let next = s.gate.snapshot();
    assert_eq!(next.trimmed_mean, Some(Duration::from_millis(10)));
    assert_eq!(next.latency_samples, before.latency_samples);
}

#[test]
fn reload_now_applies_the_file_at_once_and_returns_the_error_naming_the_key() {
    let s = watched();
    fs::write(&s.path, "[gate]\nmax_qps = 0\n").unwrap();
    match s.reloader.reload_now() {
        Err(ReloadError::Config {
            path,
            source: ConfigError::Invalid(violations),
        }) => {
            assert_eq!(path, s.path);
            assert_eq!(violations[0].key, "gate.max_qps");
        }
        other => panic!("expected the config refused, got {other:?}"),
    }
    assert_eq!(max_qps(&s.gate), 100.0);
    fs::write(&s.path, qps(140)).unwrap();
    s.reloader.reload_now().unwrap();
    assert_eq!(max_qps(&s.gate), 140.0);
    let stats = s.reloader.stats();
    assert!(stats.failed >= 1 && stats.succeeded >= 1, "{stats:?}");
}

#[test]
#[tracing_test::traced_test]
fn a_refused_file_is_logged_as_an_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluicegate.toml");
    fs::write(&path, qps(100)).unwrap();
    let gate = gate_from(&path);
    let reloader = Reloader::on_demand(&gate, &path).unwrap();
    fs::write(&path, "[gate]\nmax_qps = nan\n").unwrap();
    assert!(reloader.reload_now().is_err());
    assert!(logs_contain("ERROR"));
    assert!(logs_contain("sluicegate::reload"));
    assert!(logs_contain(
        "config file refused, the config in force is kept"
    ));
    assert!(logs_contain("gate.max_qps"));
    fs::write(&path, qps(150)).unwrap();
    reloader.reload_now().unwrap();
    assert!(logs_contain("config file reloaded"));
}

#[test]
fn watching_a_missing_file_or_a_path_that_names_no_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::builder(Config::default())
        .without_memory_probe()
        .build()
        .unwrap();
    let missing = dir.path().join("missing.toml");
    match gate.watch(&missing) {
        Err(ReloadError::Read { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected a read error, got {other:?}"),
    }
    let root = if cfg!(windows) { "C:\\" } else { "/" };
    assert!(matches!(
        Reloader::on_demand(&gate, root),
        Err(ReloadError::NotAFile { .. })
    ));
}

#[test]
fn a_relative_path_is_made_absolute() {
    // Tests run in the package's directory.
    let gate = Gate::builder(Config::default())
        .without_memory_probe()
        .build()
        .unwrap();
    let reloader = Reloader::on_demand(&gate, "Cargo.toml").unwrap();
    assert!(reloader.path().is_absolute());
    assert_eq!(
        reloader.path(),
        std::env::current_dir().unwrap().join("Cargo.toml")
    );
    assert!(!reloader.is_watching());
}

#[test]
fn a_reloader_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Reloader>();
    shared::<ReloadError>();
}

/// SIGHUP reloads, on a reloader that does not watch the file (so nothing else triggers it), and
/// the signal's thread stops when the reloader is dropped. The handler is installed before the
/// signal is raised: an unhandled SIGHUP would end the test process.
#[cfg(unix)]
#[test]
fn sighup_reloads_the_file_and_its_thread_stops_with_the_reloader() {
    use signal_hook::consts::SIGHUP;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluicegate.toml");
    fs::write(&path, qps(100)).unwrap();
    let gate = gate_from(&path);
    let reloader = Reloader::on_demand(&gate, &path).unwrap();
    reloader.reload_on_sighup().unwrap();
    reloader.reload_on_sighup().unwrap(); // a second call changes nothing

    fs::write(&path, qps(900)).unwrap();
    signal_hook::low_level::raise(SIGHUP).unwrap();
    assert!(reloader.wait_for_attempts(1, WAIT), "no reload on SIGHUP");
    assert_eq!(max_qps(&gate), 900.0);
    assert_eq!(reloader.stats().succeeded, 1);
    // (Named before it first reloaded.)
    assert_ne!(
        sighup_threads(),
        Some(0),
        "the signal's thread is not found"
    );

    drop(reloader);
    // The drop joined the thread. The kernel wakes a join as the thread exits, a moment before
    // it takes the thread's entry out of /proc: yield until it has (bounded, never a sleep).
    let mut left = sighup_threads();
    for _ in 0..100_000 {
        if left == Some(0) {
            break;
        }
        std::thread::yield_now();
        left = sighup_threads();
    }
    assert_eq!(left, Some(0), "the signal's thread outlived its reloader");
}

/// The threads of this process named as the SIGHUP thread (the kernel keeps 15 bytes of a name),
/// where the system says.
#[cfg(unix)]
fn sighup_threads() -> Option<usize> {
    let tasks = fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim_end() == "sluicegate-sigh")
            .count(),
    )
}
