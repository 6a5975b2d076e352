//! Helpers shared by the integration tests: a gate on a manual clock with a memory probe the test controls.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluicegate::clock::ManualClock;
use sluicegate::probe::{MemoryReading, ProbeError};
use sluicegate::{Config, Gate, Permit, Request};

/// A memory figure the test sets; `u64::MAX` means "unreadable".
#[derive(Clone, Default)]
pub struct FakeMemory(pub Arc<AtomicU64>);

pub const UNREADABLE: u64 = u64::MAX;

impl FakeMemory {
    /// Sets used bytes out of a 1000-byte limit.
    pub fn set_used(&self, used_of_1000: u64) {
        self.0.store(used_of_1000, Ordering::SeqCst);
    }
    pub fn probe(&self) -> impl Fn() -> Result<MemoryReading, ProbeError> + Send + Sync + 'static {
        let cell = Arc::clone(&self.0);
        move || match cell.load(Ordering::SeqCst) {
            UNREADABLE => Err(ProbeError::Unsupported {
                what: "fake memory",
            }),
            used => Ok(MemoryReading {
                used_bytes: used,
                limit_bytes: 1000,
            }),
        }
    }
}

/// A small, quick-reacting config for tests.
pub fn small_config() -> Config {
    let mut c = Config::default();
    c.gate.max_running = (5).into();
    c.gate.max_avg_latency = (Duration::from_millis(100)).into();
    c.gate.max_qps = (100.0).into();
    c.gate.non_urgent_qps = 10.0;
    c.gate.request_timeout = Duration::from_millis(500);
    c.gate.max_waiters = 50;
    c.gate.max_in_flight = (1000).into();
    c.gate.burst = Duration::from_millis(10); // capacity 1 at 100/s
    c.sampler.window = 10;
    c.sampler.min_samples = 5;
    c.sampler.trim = 0.1;
    c.sampler.tick = Duration::from_millis(100);
    c
}

/// The default config with its learned in-flight ceiling held at `min` or more: for tests that
/// pin another rule (memory, rates) and hold more requests than a cold gate's first ceiling.
pub fn ceiling_at_least(min: u64) -> Config {
    let mut config = Config::default();
    config.gate.max_in_flight = sluicegate::config::Limit::Auto {
        min: Some(min),
        max: None,
    };
    config
}

/// Every figure fixed (a hand-set config, as in the simulator's scenarios), with an in-flight
/// ceiling of `ceiling`, a rate no test reaches, a non-urgent floor of one request a second that
/// banks one token, and a tick so long that none runs unless a test asks for it.
pub fn fixed_ceiling(ceiling: u64) -> Config {
    let mut c = Config::default();
    c.gate.max_in_flight = ceiling.into();
    c.gate.max_running = ceiling.into();
    c.gate.max_avg_latency = ms(100).into();
    c.gate.max_qps = 1e6.into();
    c.gate.non_urgent_qps = 1.0;
    c.gate.burst = ms(10);
    c.sampler.tick = Duration::from_secs(3600);
    c
}

/// A gate on a fresh manual clock whose memory the test controls (read only on `refresh_memory`).
pub fn gate_with(config: Config) -> (Gate<ManualClock>, ManualClock, FakeMemory) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let memory = FakeMemory::default();
    let gate = Gate::builder(config)
        .clock(clock.clone())
        .manual_memory_probe(memory.probe())
        .build()
        .expect("valid test config");
    (gate, clock, memory)
}

/// Takes `n` permits for `request` now, each of which must be admitted.
pub fn hold<'g>(
    gate: &'g Gate<ManualClock>,
    request: &Request<'_>,
    n: usize,
) -> Vec<Permit<'g, ManualClock>> {
    (0..n)
        .map(|i| {
            gate.try_acquire(request)
                .unwrap_or_else(|r| panic!("permit {i} of {n} refused: {r:?}"))
        })
        .collect()
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
