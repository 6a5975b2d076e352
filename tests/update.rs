//! `Gate::update`: the config in force changed from code, validated, atomically.

use std::sync::{Arc, Barrier};

use sluicegate::clock::ManualClock;
use sluicegate::{Config, ConfigError, Gate, Request};

fn gate() -> Gate<ManualClock> {
    Gate::builder(Config::default())
        .clock(ManualClock::new())
        .without_memory_probe()
        .build()
        .unwrap()
}

#[test]
fn update_puts_the_changed_config_in_force_and_keeps_the_counters() {
    let gate = gate();
    drop(gate.try_acquire(&Request::url("/x")).unwrap());
    let held = gate.try_acquire(&Request::url("/held")).unwrap();
    gate.update(|config| {
        config.gate.max_qps = 400.0.into();
        config.gate.max_in_flight = 64.into();
    })
    .unwrap();
    let s = gate.snapshot();
    assert_eq!(gate.config().gate.max_qps, 400.0);
    assert_eq!(s.limits.max_qps, 400.0);
    assert_eq!(s.limits.max_in_flight, 64);
    assert_eq!(s.counters.admitted, 2);
    assert_eq!(s.in_flight, 1);
    drop(held);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn an_update_whose_result_is_invalid_changes_nothing_and_names_every_broken_key() {
    let gate = gate();
    gate.update(|config| config.gate.max_waiters = 7).unwrap();
    let before = gate.config();
    let err = gate
        .update(|config| {
            config.gate.max_waiters = 9;
            config.gate.max_qps = f64::NAN.into();
            config.sampler.trim = 0.5;
        })
        .unwrap_err();
    let keys: Vec<_> = err.violations().iter().map(|v| v.key.as_str()).collect();
    assert_eq!(keys, ["gate.max_qps", "sampler.trim"]);
    assert!(matches!(err, ConfigError::Invalid(_)));
    assert_eq!(
        gate.config(),
        before,
        "not even the valid part of the change"
    );
    assert_eq!(gate.config().gate.max_waiters, 7);
}

#[test]
fn updates_from_many_threads_all_take_effect() {
    let gate = Arc::new(gate());
    let threads = 4;
    let each = 200;
    let start = Arc::new(Barrier::new(threads as usize));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let gate = Arc::clone(&gate);
            let start = Arc::clone(&start);
            scope.spawn(move || {
                start.wait();
                for _ in 0..each {
                    gate.update(|config| config.gate.max_waiters += 1).unwrap();
                }
            });
        }
    });
    assert_eq!(
        gate.config().gate.max_waiters,
        Config::default().gate.max_waiters + threads * each
    );
}

#[test]
fn a_change_may_reload_the_gate_itself_without_deadlock() {
    let gate = gate();
    gate.update(|config| {
        config.gate.max_waiters = 3;
        let mut other = config.clone();
        other.gate.max_waiters = 4;
        gate.reload(other).unwrap();
    })
    .unwrap();
    // The update's own result is applied last.
    assert_eq!(gate.config().gate.max_waiters, 3);
}
