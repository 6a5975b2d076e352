//! No growth: millions of requests over a million distinct names keep the urgency-lookup cache within
//! its bound and the process's memory flat.
//!
//! The big run is `#[ignore]`d because it takes too long in a debug build; run it with
//! `cargo test --release --test no_growth -- --ignored`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluicegate::clock::ManualClock;
use sluicegate::lookup::{LookupCache, LookupFuture, UrgencyLookup};
use sluicegate::{Config, Gate, Request, SwitchMode, Urgency};

/// The tests here measure the whole process: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The documented bound of the gate's cache with the default `lookup_cache_entries` (1000): the
/// cache keeps `max(capacity, 16)` rounded up to a multiple of 16 (16 shards).
const CACHE_BOUND: u64 = 1008;

/// Ids ending in an odd digit are non-urgent; counts its calls. Answers at once.
struct OddIsNonUrgent {
    calls: Arc<AtomicU64>,
}

impl UrgencyLookup for OddIsNonUrgent {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let odd = name.as_bytes().last().is_some_and(|b| b % 2 == 1);
        let urgency = if odd {
            Urgency::NonUrgent
        } else {
            Urgency::Urgent
        };
        Box::pin(std::future::ready(Ok(urgency)))
    }
}

/// Drives a gate (switch forced on, so the lookup is consulted; rates so high that every request
/// finds a token) with requests for `/item/{id}`, visiting the ids `0..urls` in a fixed permutation,
/// cycle after cycle: consecutive visits of one id are exactly `urls` requests apart.
struct Driver {
    gate: Gate<ManualClock>,
    clock: ManualClock,
    lookups: Arc<AtomicU64>,
    urls: u64,
    sent: u64,
    name: String,
}

impl Driver {
    fn new(urls: u64) -> Self {
        let mut config = Config::default();
        config.gate.max_qps = (1e9).into();
        config.gate.non_urgent_qps = 1e9;
        config.gate.request_timeout = Duration::ZERO;
        config.gate.switch = SwitchMode::ForceOn;
        assert_eq!(config.routes.lookup_cache_entries, 1000);
        let clock = ManualClock::new();
        let lookups = Arc::new(AtomicU64::new(0));
        let gate = Gate::builder(config)
            .clock(clock.clone())
            .without_memory_probe()
            .urgency_lookup(OddIsNonUrgent {
                calls: Arc::clone(&lookups),
            })
            .build()
            .expect("valid config");
        // Switching on left one token; let the bucket fill (burst 100 ms at 1e9/s: 1e8 tokens).
        clock.advance(Duration::from_millis(100));
        Driver {
            gate,
            clock,
            lookups,
            urls,
            sent: 0,
            name: String::with_capacity(32),
        }
    }

    fn send(&mut self, n: u64) {
        // 7919 is prime and does not divide 10^k: i ↦ 7919·i mod urls permutes 0..urls.
        assert!(!self.urls.is_multiple_of(7919));
        for _ in 0..n {
            let id = self.sent * 7919 % self.urls;
            self.name.clear();
            write!(self.name, "/item/{id}").expect("writing to a String");
            let permit = self
                .gate
                .try_acquire(&Request::url(&self.name))
                .unwrap_or_else(|r| panic!("request {} refused: {r:?}", self.sent));
            drop(permit);
            self.sent += 1;
            if self.sent.is_multiple_of(1000) {
                // 1 ms per 1000 requests: at 1e9/s the bucket is never short of tokens.
                self.clock.advance(Duration::from_millis(1));
            }
        }
    }

    fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// Whatever a cache holding at most `CACHE_BOUND` entries does, it cannot answer more than that
    /// many requests of one cycle from memory: an id answered from the cache in a cycle was cached
    /// since its visit in the previous cycle, so it was in the cache at the cycle boundary. The first
    /// cycle is all misses.
    fn assert_lookups_consistent_with_a_bounded_cache(&self) {
        let later_cycles = self.sent.saturating_sub(self.urls).div_ceil(self.urls);
        let max_hits = CACHE_BOUND * later_cycles;
        let hits = self.sent - self.lookups();
        assert!(
            hits <= max_hits,
            "{hits} of {} requests answered from the cache: more than a cache of {CACHE_BOUND} \
             entries can answer ({max_hits}) when ids repeat only every {} requests",
            self.sent,
            self.urls
        );
        let c = self.gate.snapshot().counters;
        assert_eq!(c.admitted, self.sent);
        assert_eq!(c.released(), self.sent);
    }
}

/// Resident set size of this process, from `/proc/self/statm` (second field, pages of 4096 bytes).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[test]
fn lookup_cache_answers_repeated_names_from_memory() {
    let _serial = serial();
    // A check on the counting below: with few names, the lookup is asked once per name.
    let mut driver = Driver::new(200);
    driver.send(20_000);
    assert_eq!(driver.lookups(), 200);
}

#[test]
fn lookup_cache_stays_bounded_over_many_distinct_urls() {
    let _serial = serial();
    let mut driver = Driver::new(100_000);
    driver.send(300_000);
    driver.assert_lookups_consistent_with_a_bounded_cache();
    eprintln!(
        "{} requests over {} URLs: {} lookups",
        driver.sent,
        driver.urls,
        driver.lookups()
    );
}

#[test]
fn lookup_cache_len_never_exceeds_its_capacity_over_a_million_inserts() {
    let _serial = serial();
    for (entries, bound) in [(1000, 1008), (0, 16), (1, 16), (17, 32), (1024, 1024)] {
        assert_eq!(
            LookupCache::new(entries, 1).capacity(),
            bound,
            "{entries} entries"
        );
    }
    // A million inserts with entries that stay fresh, and more with entries that expire at once.
    for (ttl, inserts) in [(300_000_000_000, 1_000_000u64), (1_000, 100_000)] {
        let cache = LookupCache::new(1000, ttl);
        let mut name = String::new();
        for i in 0..inserts {
            name.clear();
            write!(name, "/item/{i}").unwrap();
            let answer = if i % 2 == 1 {
                Ok(Urgency::NonUrgent)
            } else {
                Ok(Urgency::Urgent)
            };
            cache.insert(&name, &answer, i * 100);
            if i % 10_000 == 0 {
                assert!(
                    cache.len() <= cache.capacity(),
                    "{} entries after {i} inserts, capacity {}",
                    cache.len(),
                    cache.capacity()
                );
            }
        }
        assert_eq!(cache.len(), cache.capacity(), "ttl {ttl}");
        assert_eq!(cache.get("/item/0", 100_000_000), None, "evicted long ago");
        let last = inserts - 1;
        assert_eq!(
            cache.get(&format!("/item/{last}"), last * 100),
            Some(Urgency::NonUrgent)
        );
    }
}

#[test]
#[ignore = "5 million requests: run in release (cargo test --release --test no_growth -- --ignored)"]
fn five_million_requests_over_a_million_urls_neither_grow_the_cache_nor_memory() {
    let _serial = serial();
    if !cfg!(target_os = "linux") || resident_bytes().is_none() {
        eprintln!(
            "skipped: resident memory is read from /proc/self/statm, which this system lacks"
        );
        return;
    }
    let mut driver = Driver::new(1_000_000);
    driver.send(100_000); // warm-up: the cache fills, per-thread counters exist
    let before = resident_bytes().expect("statm");
    let started = Instant::now();
    driver.send(5_000_000);
    let after = resident_bytes().expect("statm");
    let growth = after.saturating_sub(before);
    eprintln!(
        "{} requests over {} URLs in {:?}: {} lookups; resident {} -> {} bytes (growth {:.1} KiB)",
        driver.sent,
        driver.urls,
        started.elapsed(),
        driver.lookups(),
        before,
        after,
        growth as f64 / 1024.0
    );
    driver.assert_lookups_consistent_with_a_bounded_cache();
    assert!(
        growth < 10 << 20,
        "resident memory grew by {growth} bytes over 5 million requests"
    );
}
