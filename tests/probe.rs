//! Behaviour of `sluicegate::probe` through its public API.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::probe::{
    cgroup_memory_limit, LimitSource, MemoryGauge, MemoryProbe, MemoryReading, ProbeError,
    ProbeThread, SystemMemoryProbe,
};
use tempfile::TempDir;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

const WAIT: Duration = Duration::from_secs(10);
const GIB: u64 = 1 << 30;
const HOUR: Duration = Duration::from_secs(3600);

/// Writes `content` to `path` below `root`, creating directories on the way.
fn write(root: &Path, path: &str, content: &str) {
    let path = root.join(path);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("create fake directory");
    }
    fs::write(path, content).expect("write fake file");
}

fn fake_root() -> TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// A fake root with `/proc/meminfo` (MemTotal in kB) and `/proc/self/statm` (resident pages).
fn fake_machine(mem_total_kb: u64, resident_pages: u64) -> TempDir {
    let root = fake_root();
    write(
        root.path(),
        "proc/meminfo",
        &format!("MemTotal:       {mem_total_kb} kB\nMemFree:         1234 kB\n"),
    );
    write(
        root.path(),
        "proc/self/statm",
        &format!("100000 {resident_pages} 300 40 0 500 0\n"),
    );
    root
}

fn reading(used_bytes: u64, limit_bytes: u64) -> MemoryReading {
    MemoryReading {
        used_bytes,
        limit_bytes,
    }
}

// ---------------------------------------------------------------------------------------------------------
// cgroup limits

#[test]
fn cgroup_v1_unlimited_is_none() {
    let root = fake_root();
    write(
        root.path(),
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "9223372036854771712\n",
    );
    assert_eq!(cgroup_memory_limit(root.path()).expect("readable"), None);
}

#[test]
fn cgroup_v1_limit_is_some() {
    let root = fake_root();
    write(
        root.path(),
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "536870912\n",
    );
    assert_eq!(
        cgroup_memory_limit(root.path()).expect("readable"),
        Some(536_870_912)
    );
}

#[test]
fn cgroup_v2_max_is_none() {
    let root = fake_root();
    write(root.path(), "sys/fs/cgroup/memory.max", "max\n");
    assert_eq!(cgroup_memory_limit(root.path()).expect("readable"), None);
}

#[test]
fn cgroup_v2_number_is_some() {
    let root = fake_root();
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    assert_eq!(
        cgroup_memory_limit(root.path()).expect("readable"),
        Some(GIB)
    );
}

#[test]
fn no_cgroup_files_is_none() {
    let root = fake_root();
    assert_eq!(cgroup_memory_limit(root.path()).expect("readable"), None);
}

#[test]
fn garbage_cgroup_v2_file_is_an_error() {
    let root = fake_root();
    write(root.path(), "sys/fs/cgroup/memory.max", "lots\n");
    let result = cgroup_memory_limit(root.path());
    assert!(
        matches!(result, Err(ProbeError::Unparsable { .. })),
        "{result:?}"
    );
}

#[test]
fn garbage_cgroup_v1_file_is_an_error() {
    let root = fake_root();
    write(
        root.path(),
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "\u{0}\u{1}binary junk",
    );
    let result = cgroup_memory_limit(root.path());
    assert!(
        matches!(result, Err(ProbeError::Unparsable { .. })),
        "{result:?}"
    );
}

#[test]
fn cgroup_v2_nested_cgroup_of_the_process_is_used() {
    let root = fake_root();
    write(
        root.path(),
        "proc/self/cgroup",
        "0::/app.slice/web.service\n",
    );
    write(root.path(), "sys/fs/cgroup/memory.max", "max\n");
    write(
        root.path(),
        "sys/fs/cgroup/app.slice/web.service/memory.max",
        "268435456\n",
    );
    assert_eq!(
        cgroup_memory_limit(root.path()).expect("readable"),
        Some(268_435_456)
    );
}

#[test]
fn cgroup_v2_limit_of_a_parent_binds_the_nested_cgroup() {
    let root = fake_root();
    write(
        root.path(),
        "proc/self/cgroup",
        "0::/app.slice/web.service\n",
    );
    write(
        root.path(),
        "sys/fs/cgroup/app.slice/memory.max",
        "134217728\n",
    );
    write(
        root.path(),
        "sys/fs/cgroup/app.slice/web.service/memory.max",
        "max\n",
    );
    assert_eq!(
        cgroup_memory_limit(root.path()).expect("readable"),
        Some(134_217_728)
    );
}

#[test]
fn cgroup_v2_missing_nested_directory_falls_back_to_the_top_level_file() {
    let root = fake_root();
    write(
        root.path(),
        "proc/self/cgroup",
        "0::/elsewhere/not-mounted\n",
    );
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    assert_eq!(
        cgroup_memory_limit(root.path()).expect("readable"),
        Some(GIB)
    );
}

#[test]
fn cgroup_v2_path_leaving_the_mount_is_ignored() {
    let root = fake_root();
    write(root.path(), "proc/self/cgroup", "0::/../../outside\n");
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    // A file the `..` path would reach if it were followed.
    write(root.path(), "sys/outside/memory.max", "4096\n");
    assert_eq!(
        cgroup_memory_limit(root.path()).expect("readable"),
        Some(GIB)
    );
}

#[test]
fn cgroup_v2_is_preferred_over_v1() {
    let root = fake_root();
    write(root.path(), "sys/fs/cgroup/memory.max", "max\n");
    write(
        root.path(),
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "536870912\n",
    );
    assert_eq!(cgroup_memory_limit(root.path()).expect("readable"), None);
}

proptest! {
    // Each case writes files, so fewer cases than the default; half of them near the threshold.
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn cgroup_v1_value_is_a_limit_below_two_to_the_sixty(
        value in prop_oneof![any::<u64>(), (1u64 << 60) - 4096..(1u64 << 60) + 4096],
    ) {
        let root = fake_root();
        write(root.path(), "sys/fs/cgroup/memory/memory.limit_in_bytes", &format!("{value}\n"));
        let expected = (value < 1 << 60).then_some(value);
        prop_assert_eq!(cgroup_memory_limit(root.path()).expect("readable"), expected);
    }
}

// ---------------------------------------------------------------------------------------------------------
// SystemMemoryProbe over fake files

#[test]
fn limit_is_the_cgroup_limit_when_below_physical_memory() {
    let root = fake_machine(4 * 1024 * 1024, 10); // 4 GiB
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert_eq!(probe.limit().expect("limit"), (GIB, LimitSource::CgroupV2));
}

#[test]
fn limit_is_physical_memory_when_below_the_cgroup_limit() {
    let root = fake_machine(512 * 1024, 10); // 512 MiB
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert_eq!(
        probe.limit().expect("limit"),
        (512 * 1024 * 1024, LimitSource::Physical)
    );
}

#[test]
fn limit_reports_a_cgroup_v1_source() {
    let root = fake_machine(4 * 1024 * 1024, 10);
    write(
        root.path(),
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "536870912\n",
    );
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert_eq!(
        probe.limit().expect("limit"),
        (536_870_912, LimitSource::CgroupV1)
    );
}

#[test]
fn limit_is_physical_memory_without_a_cgroup_limit() {
    let root = fake_machine(2 * 1024 * 1024, 10);
    write(root.path(), "sys/fs/cgroup/memory.max", "max\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert_eq!(
        probe.limit().expect("limit"),
        (2 * GIB, LimitSource::Physical)
    );
}

#[test]
fn configured_limit_overrides_cgroup_and_physical_memory() {
    let root = fake_machine(512 * 1024, 10);
    write(root.path(), "sys/fs/cgroup/memory.max", "268435456\n");
    let probe = SystemMemoryProbe::with_root(root.path(), Some(3 * GIB));
    assert_eq!(
        probe.limit().expect("limit"),
        (3 * GIB, LimitSource::Configured)
    );
}

#[test]
fn configured_limit_of_zero_becomes_one_byte() {
    let probe = SystemMemoryProbe::with_root(fake_root().path(), Some(0));
    assert_eq!(probe.limit().expect("limit"), (1, LimitSource::Configured));
}

#[test]
fn limit_follows_a_resized_cgroup() {
    let root = fake_machine(4 * 1024 * 1024, 10);
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert_eq!(probe.limit().expect("limit").0, GIB);
    write(root.path(), "sys/fs/cgroup/memory.max", "2147483648\n");
    assert_eq!(probe.limit().expect("limit").0, 2 * GIB);
}

#[test]
fn page_size_is_4096_without_an_auxiliary_vector() {
    let probe = SystemMemoryProbe::with_root(fake_root().path(), None);
    assert_eq!(probe.page_size(), 4096);
}

#[test]
fn reading_is_resident_pages_times_page_size_over_the_limit() {
    let root = fake_machine(4 * 1024 * 1024, 65_536); // 65 536 pages × 4 KiB = 256 MiB
    write(root.path(), "sys/fs/cgroup/memory.max", "1073741824\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    let got = probe.read().expect("reading");
    assert_eq!(got, reading(256 * 1024 * 1024, GIB));
    assert_eq!(got.ratio(), 0.25);
}

#[test]
fn page_size_comes_from_the_auxiliary_vector() {
    let root = fake_machine(4 * 1024 * 1024, 1000);
    // (AT_HWCAP, 0), (AT_PAGESZ, 16384), (AT_NULL, 0), as native machine words.
    let mut auxv = Vec::new();
    for word in [16usize, 0, 6, 16384, 0, 0] {
        auxv.extend_from_slice(&word.to_ne_bytes());
    }
    fs::create_dir_all(root.path().join("proc/self")).expect("dir");
    fs::write(root.path().join("proc/self/auxv"), auxv).expect("auxv");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert_eq!(probe.page_size(), 16384);
    assert_eq!(probe.read().expect("reading").used_bytes, 1000 * 16384);
}

#[test]
fn unreadable_proc_under_a_fake_root_is_an_error() {
    let probe = SystemMemoryProbe::with_root(fake_root().path(), None);
    let result = probe.read();
    assert!(
        matches!(result, Err(ProbeError::Unreadable { .. })),
        "{result:?}"
    );
}

#[test]
fn missing_statm_is_an_error_even_with_a_configured_limit() {
    let probe = SystemMemoryProbe::with_root(fake_root().path(), Some(GIB));
    assert!(matches!(probe.read(), Err(ProbeError::Unreadable { .. })));
}

#[test]
fn garbage_statm_is_an_error() {
    let root = fake_machine(1024 * 1024, 1);
    write(root.path(), "proc/self/statm", "garbage\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert!(matches!(probe.read(), Err(ProbeError::Unparsable { .. })));
}

#[test]
fn meminfo_without_mem_total_is_an_error() {
    let root = fake_machine(1024 * 1024, 1);
    write(root.path(), "proc/meminfo", "MemFree: 12 kB\n");
    let probe = SystemMemoryProbe::with_root(root.path(), None);
    assert!(matches!(probe.limit(), Err(ProbeError::Unparsable { .. })));
}

#[test]
fn failing_system_probe_makes_the_gauge_unknown() {
    let probe = SystemMemoryProbe::with_root(fake_root().path(), None);
    let gauge = MemoryGauge::new();
    gauge.set(Some(0.5));
    assert_eq!(gauge.refresh_from(&probe), None);
    assert_eq!(gauge.ratio(), None);
}

#[test]
fn real_probe_reads_some_use_below_the_limit() {
    let probe = SystemMemoryProbe::new(None);
    let got = match probe.read() {
        Ok(got) => got,
        Err(error) if !cfg!(target_os = "linux") => {
            eprintln!("skipped: no memory reading on this platform: {error}");
            return;
        }
        Err(error) => panic!("memory reading on Linux failed: {error}"),
    };
    assert!(got.used_bytes > 0, "{got:?}");
    assert!(got.limit_bytes > got.used_bytes, "{got:?}");
}

// ---------------------------------------------------------------------------------------------------------
// MemoryReading and MemoryGauge

#[test]
fn reading_ratio_treats_a_zero_limit_as_one_byte() {
    assert_eq!(reading(3, 0).ratio(), 3.0);
    assert_eq!(reading(0, 0).ratio(), 0.0);
}

#[test]
fn gauge_is_unknown_by_default() {
    assert_eq!(MemoryGauge::new().ratio(), None);
    assert_eq!(MemoryGauge::default().ratio(), None);
}

#[test]
fn gauge_returns_what_was_set() {
    let gauge = MemoryGauge::new();
    gauge.set(Some(0.73));
    assert_eq!(gauge.ratio(), Some(0.73));
    gauge.set(None);
    assert_eq!(gauge.ratio(), None);
}

#[test]
fn gauge_stores_nan_as_unknown() {
    let gauge = MemoryGauge::new();
    gauge.set(Some(0.5));
    gauge.set(Some(f64::NAN));
    assert_eq!(gauge.ratio(), None);
}

#[test]
fn gauge_stores_negative_as_unknown() {
    let gauge = MemoryGauge::new();
    gauge.set(Some(-0.1));
    assert_eq!(gauge.ratio(), None);
}

proptest! {
    #[test]
    fn gauge_round_trips_any_non_negative_ratio(ratio in 0.0f64..=f64::MAX) {
        let gauge = MemoryGauge::new();
        gauge.set(Some(ratio));
        prop_assert_eq!(gauge.ratio(), Some(ratio));
    }
}

#[test]
fn refresh_publishes_the_probe_ratio() {
    let gauge = MemoryGauge::new();
    let probe = || Ok(reading(300, 1200));
    assert_eq!(gauge.refresh_from(&probe), Some(0.25));
    assert_eq!(gauge.ratio(), Some(0.25));
}

#[test]
fn refresh_from_a_failing_probe_makes_the_gauge_unknown() {
    let gauge = MemoryGauge::new();
    gauge.set(Some(0.5));
    let probe = || {
        Err(ProbeError::Unsupported {
            what: "memory in a test",
        })
    };
    assert_eq!(gauge.refresh_from(&probe), None);
    assert_eq!(gauge.ratio(), None);
}

#[test]
fn refresh_from_a_panicking_probe_makes_the_gauge_unknown() {
    let gauge = MemoryGauge::new();
    gauge.set(Some(0.5));
    let probe = || -> Result<MemoryReading, ProbeError> {
        panic!("probe exploded (expected by this test)")
    };
    assert_eq!(gauge.refresh_from(&probe), None);
    assert_eq!(gauge.ratio(), None);
}

/// Counts `warn` events.
#[derive(Clone, Default)]
struct WarnCounter(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> Layer<S> for WarnCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A probe that succeeds or fails according to `script`, in turn.
fn scripted(script: &'static [bool]) -> impl MemoryProbe {
    let step = AtomicUsize::new(0);
    move || {
        let ok = script
            .get(step.fetch_add(1, Ordering::SeqCst))
            .copied()
            .unwrap_or(false);
        if ok {
            Ok(reading(1, 2))
        } else {
            Err(ProbeError::Unavailable {
                what: "memory in a test",
                reason: "scripted failure".to_owned(),
            })
        }
    }
}

#[test]
fn failing_probe_warns_once_each_time_it_starts_failing() {
    let warnings = WarnCounter::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        let gauge = MemoryGauge::new();
        let probe = scripted(&[false, false, false, true, false, false]);
        for _ in 0..3 {
            gauge.refresh_from(&probe);
        }
        assert_eq!(
            warnings.0.load(Ordering::SeqCst),
            1,
            "three failures in a row"
        );
        for _ in 0..3 {
            gauge.refresh_from(&probe);
        }
        assert_eq!(
            warnings.0.load(Ordering::SeqCst),
            2,
            "recovered, then failed again"
        );
    });
}

#[test]
fn each_gauge_warns_for_its_own_failing_probe() {
    let warnings = WarnCounter::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        let probe = scripted(&[]);
        let first = MemoryGauge::new();
        let second = MemoryGauge::new();
        first.refresh_from(&probe);
        second.refresh_from(&probe);
        first.refresh_from(&probe);
        assert_eq!(warnings.0.load(Ordering::SeqCst), 2);
    });
}

// ---------------------------------------------------------------------------------------------------------
// ProbeThread

#[derive(Debug, PartialEq)]
enum Event {
    /// The probe was called, for the n-th time (from 1), on the thread with this name.
    Called(usize, Option<String>),
    /// The probe was dropped.
    Dropped,
}

/// Sends `Event::Dropped` when dropped, i.e. when the probe that owns it is released.
struct DropSignal(Mutex<Sender<Event>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Ok(events) = self.0.lock() {
            let _ = events.send(Event::Dropped);
        }
    }
}

/// A probe that reports each call on `events` and returns ratio n/10 on its n-th call.
fn reporting_probe(events: Sender<Event>) -> Arc<dyn MemoryProbe> {
    let calls = AtomicUsize::new(0);
    let signal = DropSignal(Mutex::new(events.clone()));
    let events = Mutex::new(events);
    Arc::new(move || {
        let _owned = &signal;
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        let name = std::thread::current().name().map(str::to_owned);
        if let Ok(events) = events.lock() {
            let _ = events.send(Event::Called(n, name));
        }
        Ok(reading(n as u64, 10))
    })
}

fn called(n: usize) -> Event {
    Event::Called(n, Some("sluicegate-probe".to_owned()))
}

#[test]
fn probe_thread_reads_at_once_on_a_thread_named_sluicegate_probe() {
    let (events, seen) = mpsc::channel();
    let gauge = Arc::new(MemoryGauge::new());
    let _thread = ProbeThread::spawn(gauge, reporting_probe(events), HOUR).expect("spawn");
    assert_eq!(seen.recv_timeout(WAIT), Ok(called(1)));
}

/// [`reporting_probe`] whose third call waits until `release` is dropped: with no interval
/// between reads, the gauge then holds the first or the second reading whenever the test looks,
/// not whichever read the thread has reached by then.
fn probe_held_at_its_third_call(events: Sender<Event>) -> (Arc<dyn MemoryProbe>, Sender<()>) {
    let inner = reporting_probe(events);
    let (release, held) = mpsc::channel::<()>();
    let held = Mutex::new(held);
    let calls = AtomicUsize::new(0);
    let probe: Arc<dyn MemoryProbe> = Arc::new(move || {
        if calls.fetch_add(1, Ordering::SeqCst) + 1 >= 3 {
            if let Ok(held) = held.lock() {
                let _ = held.recv();
            }
        }
        inner.read()
    });
    (probe, release)
}

#[test]
fn probe_thread_publishes_readings_to_the_gauge() {
    let (events, seen) = mpsc::channel();
    let gauge = Arc::new(MemoryGauge::new());
    let (probe, release) = probe_held_at_its_third_call(events);
    let _thread = ProbeThread::spawn(gauge.clone(), probe, Duration::ZERO).expect("spawn");
    // Dropped before the thread (declared after it), so that the held read ends and it can stop.
    let _release = release;
    assert_eq!(seen.recv_timeout(WAIT), Ok(called(1)));
    // The second read starts only after the first one has been published.
    assert_eq!(seen.recv_timeout(WAIT), Ok(called(2)));
    let ratio = gauge.ratio().expect("a published reading");
    assert!((0.1..=0.2).contains(&ratio), "{ratio}");
}

#[test]
fn set_interval_brings_the_next_read_forward() {
    let (events, seen) = mpsc::channel();
    let gauge = Arc::new(MemoryGauge::new());
    let thread = ProbeThread::spawn(gauge, reporting_probe(events), HOUR).expect("spawn");
    assert_eq!(seen.recv_timeout(WAIT), Ok(called(1)));
    thread.set_interval(Duration::from_millis(1));
    assert_eq!(seen.recv_timeout(WAIT), Ok(called(2)));
}

#[test]
fn dropped_probe_thread_releases_the_probe_and_reads_no_more() {
    let (events, seen) = mpsc::channel();
    let gauge = Arc::new(MemoryGauge::new());
    let thread = ProbeThread::spawn(gauge.clone(), reporting_probe(events), HOUR).expect("spawn");
    assert_eq!(seen.recv_timeout(WAIT), Ok(called(1)));
    drop(thread);
    // The thread held the only reference to the probe: its release means the thread has stopped.
    assert_eq!(seen.recv_timeout(WAIT), Ok(Event::Dropped));
    // Every sender is gone with the probe, so no further call can ever be reported.
    assert_eq!(seen.recv_timeout(WAIT), Err(RecvTimeoutError::Disconnected));
    assert_eq!(
        Arc::strong_count(&gauge),
        1,
        "the thread released the gauge too"
    );
}

#[test]
fn configured_limit_can_be_changed_after_construction_for_a_config_reload() {
    let probe = SystemMemoryProbe::new(Some(1 << 30));
    assert_eq!(probe.limit().unwrap(), (1 << 30, LimitSource::Configured));
    probe.set_configured_limit(Some(2 << 30));
    assert_eq!(probe.configured_limit(), Some(2 << 30));
    assert_eq!(probe.limit().unwrap(), (2 << 30, LimitSource::Configured));
    probe.set_configured_limit(None);
    assert_eq!(probe.configured_limit(), None);
    if let Ok((_, source)) = probe.limit() {
        assert_ne!(source, LimitSource::Configured);
    }
}
