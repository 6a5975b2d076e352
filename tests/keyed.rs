//! Keyed limits through the public API, on a `ManualClock`: exact, no sleeping.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::clock::ManualClock;
use sluicegate::keyed::{
    FixedWindowRule, KeySource, KeyedConfig, KeyedLimiter, TokenBucketRule, WhenFull,
};
use sluicegate::limit::{Gcra, GcraConfig, Limiter, TokenBucketConfig, WindowLimitConfig};
use sluicegate::{RejectReason, Rejection};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn gcra(rate: u64, burst: u64) -> GcraConfig {
    GcraConfig {
        rate,
        per: S,
        burst,
    }
}

fn retry(r: Result<(), Rejection>) -> Option<Duration> {
    r.unwrap_err().retry_after
}

fn limiter(
    config: GcraConfig,
    max_keys: usize,
) -> (
    ManualClock,
    KeyedLimiter<u64, sluicegate::keyed::GcraRule, ManualClock>,
) {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::builder(config)
        .max_keys(max_keys)
        .build(clock.clone())
        .unwrap();
    (clock, l)
}

#[test]
fn a_key_is_refused_past_its_burst_with_the_exact_retry_after() {
    let (clock, l) = limiter(gcra(10, 3), 100);
    l.try_acquire(&1, 3).unwrap();
    assert_eq!(l.available(&1), 0);
    assert_eq!(retry(l.try_acquire(&1, 2)), Some(200 * MS));
    clock.advance(200 * MS - Duration::from_nanos(1));
    assert_eq!(
        l.try_acquire(&1, 2).unwrap_err().reason,
        RejectReason::RateLimited
    );
    clock.advance(Duration::from_nanos(1));
    l.try_acquire(&1, 2).unwrap();
}

#[test]
fn every_key_has_its_own_limit() {
    let (_clock, l) = limiter(gcra(10, 2), 100);
    for key in 0..50 {
        l.try_acquire(&key, 2).unwrap();
        assert!(l.try_acquire(&key, 1).is_err());
    }
    assert_eq!(l.len(), 50);
    assert_eq!(l.available(&999), 2, "a key never seen has its whole burst");
    assert_eq!(l.len(), 50, "asking about a key does not add it");
}

#[test]
fn a_request_above_a_keys_capacity_is_refused_and_adds_no_key() {
    let (_clock, l) = limiter(gcra(10, 3), 100);
    let r = l.try_acquire(&7, 4).unwrap_err();
    assert_eq!(
        (r.reason, r.retry_after),
        (RejectReason::ExceedsCapacity, None)
    );
    assert!(l.is_empty());
    l.try_acquire(&7, 0).unwrap();
    assert!(
        l.is_empty(),
        "a call of 0 changes no state, so it keeps none"
    );
}

#[test]
fn string_keys_are_looked_up_by_str_without_allocating_a_key() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<String>::builder(gcra(1, 1))
        .build(clock)
        .unwrap();
    l.try_acquire("tenant-a", 1).unwrap();
    assert!(l.try_acquire("tenant-a", 1).is_err());
    assert!(l.try_acquire(&"tenant-b".to_owned(), 1).is_ok());
}

#[test]
fn overrides_give_listed_keys_their_own_limit() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<String>::builder(gcra(10, 2))
        .override_key("gold".into(), gcra(100, 20))
        .override_key("platinum".into(), gcra(100, 20))
        .build(clock.clone())
        .unwrap();
    assert_eq!(l.capacity("gold"), 20);
    assert_eq!(l.capacity("free"), 2);
    l.try_acquire("gold", 20).unwrap();
    l.try_acquire("platinum", 20).unwrap();
    assert_eq!(retry(l.try_acquire("gold", 1)), Some(10 * MS));
    l.try_acquire("free", 2).unwrap();
    assert_eq!(retry(l.try_acquire("free", 1)), Some(100 * MS));
}

#[test]
fn a_resolver_names_a_new_keys_tier_once_per_arrival() {
    let clock = ManualClock::new();
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = asked.clone();
    let l = KeyedLimiter::<String>::builder(gcra(10, 1))
        .override_with(move |k: &String| {
            seen.fetch_add(1, Ordering::SeqCst);
            k.starts_with("paid-").then(|| gcra(100, 10))
        })
        .build(clock)
        .unwrap();
    for tenant in ["paid-1", "paid-2", "free-1"] {
        for _ in 0..5 {
            let _ = l.try_acquire(tenant, 1);
        }
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        3,
        "asked once per key, not per call"
    );
    assert_eq!(l.available("paid-1"), 5);
    assert_eq!(l.available("paid-2"), 5);
    assert_eq!(l.available("free-1"), 0);
}

#[test]
fn the_key_cap_holds_and_keys_full_again_make_room_without_loss() {
    let (clock, l) = limiter(gcra(10, 5), 3);
    for key in 0..3 {
        l.try_acquire(&key, 1).unwrap();
    }
    clock.advance(100 * MS); // every key is full again
    for key in 3..100 {
        l.try_acquire(&key, 5).unwrap();
        clock.advance(500 * MS);
        assert!(l.len() <= 3);
    }
    let s = l.stats();
    assert_eq!(s.evicted_in_debt, 0);
    assert!(s.dropped_full >= 97, "{s:?}");
}

#[test]
fn refuse_mode_keeps_new_keys_out_while_every_key_is_in_use_and_says_when() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::builder(gcra(1, 1))
        .max_keys(2)
        .when_full(WhenFull::Refuse)
        .build(clock.clone())
        .unwrap();
    l.try_acquire(&1, 1).unwrap();
    clock.advance(300 * MS);
    l.try_acquire(&2, 1).unwrap();
    // Key 1 is full again at 1 s, key 2 at 1.3 s: the new key may come in at 1 s.
    let r = l.try_acquire(&3, 1).unwrap_err();
    assert_eq!(
        (r.reason, r.retry_after),
        (RejectReason::RateLimited, Some(700 * MS))
    );
    assert_eq!(l.stats().refused_new_keys, 1);
    clock.advance(700 * MS);
    l.try_acquire(&3, 1).unwrap();
    assert_eq!(l.len(), 2);
    // Key 1 was full again when it was dropped: it decides as before.
    assert_eq!(l.available(&1), 1);
    assert_eq!(l.stats().evicted_in_debt, 0);
}

#[test]
fn evict_mode_evicts_the_key_closest_to_full_and_counts_it() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::builder(gcra(1, 2))
        .max_keys(2)
        .build(clock.clone())
        .unwrap();
    l.try_acquire(&1, 2).unwrap(); // full again at 2 s
    l.try_acquire(&2, 1).unwrap(); // full again at 1 s: closest to full
    l.try_acquire(&3, 1).unwrap();
    assert_eq!(l.stats().evicted_in_debt, 1);
    assert_eq!(l.len(), 2);
    assert_eq!(l.available(&1), 0, "the key furthest from full is kept");
    // Key 2 comes back fresh: one more than its limit, at most its capacity.
    assert_eq!(l.available(&2), 2);
}

#[test]
fn evict_idle_drops_keys_full_again_for_idle_and_changes_no_decision() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::builder(gcra(10, 10))
        .idle(S)
        .build(clock.clone())
        .unwrap();
    l.try_acquire(&1, 10).unwrap(); // full again at 1 s
    l.try_acquire(&2, 1).unwrap(); // full again at 0.1 s
    clock.advance(S + 100 * MS);
    assert_eq!(
        l.evict_idle(),
        1,
        "key 2 has been full for 1 s, key 1 for 0.1 s"
    );
    assert_eq!(l.len(), 1);
    assert_eq!(l.available(&2), 10);
    clock.advance(S);
    assert_eq!(l.evict_idle(), 1);
    assert!(l.is_empty());
    l.shrink_to_fit();
    l.try_acquire(&3, 10).unwrap();
    assert!(!l.remove(&5), "a key not held");
    assert!(l.remove(&3));
    assert_eq!(l.available(&3), 10, "a removed key starts again fresh");
}

#[test]
fn keys_full_again_for_idle_are_dropped_as_new_keys_arrive() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::builder(gcra(10, 10))
        .max_keys(256) // one shard: every new key sweeps the same keys
        .idle(S)
        .build(clock.clone())
        .unwrap();
    for key in 0..10 {
        l.try_acquire(&key, 1).unwrap();
    }
    clock.advance(S + 100 * MS); // full again at 0.1 s, idle for 1 s
    for key in 100..110 {
        l.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(
        l.len(),
        10,
        "each new key checked two keys and dropped the idle ones"
    );
    assert_eq!(l.stats().dropped_full, 10);
    assert_eq!(l.available(&100), 9);
}

#[test]
fn eight_threads_on_one_key_admit_exactly_its_burst() {
    let clock = ManualClock::new();
    let l = Arc::new(
        KeyedLimiter::<u64>::builder(gcra(1, 1_000))
            .build(clock)
            .unwrap(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(8));
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (l, admitted, start) = (l.clone(), admitted.clone(), start.clone());
            s.spawn(move || {
                start.wait();
                for _ in 0..1_000 {
                    if l.try_acquire(&42, 1).is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 1_000);
    assert_eq!(l.len(), 1);
}

#[test]
fn a_token_bucket_per_key_refills_one_token_per_interval() {
    let clock = ManualClock::new();
    let config = TokenBucketConfig {
        capacity: 4,
        refill: 2,
        per: S,
    };
    let l = KeyedLimiter::<IpAddr, TokenBucketRule>::builder(config)
        .build(clock.clone())
        .unwrap();
    let ip: IpAddr = "192.0.2.7".parse().unwrap();
    l.try_acquire(&ip, 4).unwrap();
    assert_eq!(retry(l.try_acquire(&ip, 1)), Some(500 * MS));
    clock.advance(S);
    assert_eq!(l.available(&ip), 2);
}

#[test]
fn a_fixed_window_per_key_counts_again_at_the_next_window() {
    let clock = ManualClock::new();
    clock.advance(700 * MS);
    let window = WindowLimitConfig {
        limit: 3,
        window: S,
    };
    let l = KeyedLimiter::<u64, FixedWindowRule>::builder(window)
        .build(clock.clone())
        .unwrap();
    l.try_acquire(&1, 3).unwrap();
    assert_eq!(retry(l.try_acquire(&1, 1)), Some(300 * MS));
    clock.advance(300 * MS);
    assert_eq!(l.available(&1), 3);
    let too_big = WindowLimitConfig {
        limit: 1 << 24,
        window: S,
    };
    let e = KeyedLimiter::<u64, FixedWindowRule>::builder(too_big)
        .build(ManualClock::new())
        .unwrap_err();
    assert_eq!((e.key.as_str(), e.value.as_str()), ("limit", "16777216"));
}

#[test]
fn the_toml_form_builds_a_limiter_with_its_overrides() {
    let config = KeyedConfig::from_toml_str(
        r#"
        key = "ip"
        rate = "100/s"
        burst = 20
        max_keys = 100000
        idle = "10m"
        when_full = "refuse"
        [overrides]
        "192.0.2.1" = { rate = "6000/min", burst = 200 }
        "#,
    )
    .unwrap();
    assert_eq!(config.key, KeySource::Ip);
    assert_eq!(config.gcra(), gcra(100, 20));
    assert_eq!(config.idle, Duration::from_secs(600));
    let l = KeyedLimiter::<IpAddr, _, _>::from_config(&config, ManualClock::new()).unwrap();
    assert_eq!(l.capacity(&"192.0.2.1".parse::<IpAddr>().unwrap()), 200);
    assert_eq!(l.capacity(&"192.0.2.2".parse::<IpAddr>().unwrap()), 20);
    assert_eq!(l.max_keys(), 100_000);
    let text = toml::to_string(&config).unwrap();
    assert_eq!(KeyedConfig::from_toml_str(&text).unwrap(), config);
    let header: KeyedConfig = KeyedConfig::from_toml_str(r#"key = "header:X-Tenant""#).unwrap();
    assert_eq!(header.key, KeySource::Header("x-tenant".into()));
    assert_eq!(
        header.gcra(),
        gcra(100, 100),
        "burst defaults to the rate's count"
    );
}

#[test]
fn invalid_figures_are_refused_naming_the_key_and_the_value() {
    let invalid = |text: &str| {
        let config = KeyedConfig::from_toml_str(text).unwrap();
        KeyedLimiter::<IpAddr, _, _>::from_config(&config, ManualClock::new()).unwrap_err()
    };
    let e = invalid(r#"rate = "0/s""#);
    assert_eq!((e.key.as_str(), e.value.as_str()), ("rate", "\"0/1s\""));
    let e = invalid("burst = 0");
    assert_eq!((e.key.as_str(), e.value.as_str()), ("burst", "0"));
    let e = invalid("max_keys = 0");
    assert_eq!((e.key.as_str(), e.value.as_str()), ("max_keys", "0"));
    let e = invalid("[overrides]\n\"192.0.2.1\" = { rate = \"5/s\", burst = 0 }");
    assert_eq!(e.key, r#"overrides."192.0.2.1".burst"#);
    let e = invalid("[overrides]\n\"tenant-a\" = { rate = \"5/s\" }");
    assert_eq!(
        (e.key.as_str(), e.value.as_str()),
        (r#"overrides."tenant-a""#, "\"tenant-a\"")
    );
    assert!(e.to_string().contains("is not a key"), "{e}");
    for (text, says) in [
        (r#"rate = "100""#, "not a rate"),
        (r#"rate = "x/s""#, "not a whole number"),
        (r#"rate = "5/fortnight""#, "not a duration"),
        (r#"key = "header:""#, "not a header name"),
        (r#"key = "a b""#, "not a key"),
        ("idle = 600", "no unit"),
        ("ratee = \"5/s\"", "unknown field"),
    ] {
        let e = KeyedConfig::from_toml_str(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
}

#[test]
fn keyed_limiters_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<KeyedLimiter<String>>();
    send_sync::<KeyedLimiter<IpAddr, TokenBucketRule, ManualClock>>();
}

/// Calls: (key, time step in ms, n).
fn calls() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    prop::collection::vec((0u64..6, 0u64..40, 0u64..4), 1..120)
}

/// Whether, per key, every span between two admissions holds at most `burst + span/T` (plus
/// `slack` calls): the GCRA bound, in integers.
fn within_bound(
    admits: &HashMap<u64, Vec<(u64, u64)>>,
    burst: impl Fn(u64) -> u64,
    interval: impl Fn(u64) -> u64,
    slack: u64,
) -> bool {
    admits.iter().all(|(&key, list)| {
        let (b, t) = (burst(key), interval(key));
        (0..list.len()).all(|i| {
            let mut sum = 0;
            (i..list.len()).all(|j| {
                sum += list[j].1;
                let span = list[j].0 - list[i].0;
                sum * t <= (b + slack) * t + span
            })
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn per_key_admissions_never_exceed_burst_plus_rate_times_span_and_the_cap_holds(
        calls in calls(),
        max_keys in 1usize..8,
        refuse in any::<bool>(),
    ) {
        let clock = ManualClock::new();
        let l = KeyedLimiter::<u64>::builder(gcra(50, 3))
            .max_keys(max_keys)
            .idle(Duration::ZERO)
            .when_full(if refuse { WhenFull::Refuse } else { WhenFull::Evict })
            .override_key(0, gcra(500, 6))
            .build(clock.clone())
            .unwrap();
        let mut admits: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        for (key, step, n) in calls {
            clock.advance(Duration::from_millis(step));
            if l.try_acquire(&key, n).is_ok() && n > 0 {
                admits.entry(key).or_default().push((clock.elapsed().as_nanos() as u64, n));
            }
            prop_assert!(l.len() <= max_keys);
        }
        let burst = |k| if k == 0 { 6 } else { 3 };
        let interval = |k| if k == 0 { 2_000_000 } else { 20_000_000 };
        let stats = l.stats();
        if refuse {
            prop_assert_eq!(stats.evicted_in_debt, 0);
        }
        // Each eviction in debt may give one key up to its capacity more: at most 6.
        prop_assert!(within_bound(&admits, burst, interval, 6 * stats.evicted_in_debt));
    }

    #[test]
    fn dropping_keys_full_again_changes_no_decision(
        calls in calls(),
        sweeps in prop::collection::vec(any::<bool>(), 120),
        max_keys in 1usize..8,
    ) {
        // Against one unkeyed GCRA per key, never dropped: every decision, every retry_after and
        // every `available` agree, however keys are dropped when full again (idle = 0: as new
        // keys arrive, by sweeps, or to make room), except the calls of a new key refused for want
        // of room (refuse mode), which change nothing and which the reference does not see.
        let clock = ManualClock::new();
        let l = KeyedLimiter::<u64>::builder(gcra(50, 3))
            .max_keys(max_keys)
            .idle(Duration::ZERO)
            .when_full(WhenFull::Refuse)
            .override_key(0, gcra(500, 6))
            .build(clock.clone())
            .unwrap();
        let mut reference: HashMap<u64, Gcra<ManualClock>> = HashMap::new();
        for (i, (key, step, n)) in calls.into_iter().enumerate() {
            clock.advance(Duration::from_millis(step));
            if sweeps[i] {
                l.evict_idle();
            }
            let config = if key == 0 { gcra(500, 6) } else { gcra(50, 3) };
            let r = reference.entry(key).or_insert_with(|| Gcra::new(config, clock.clone()).unwrap());
            prop_assert_eq!(l.available(&key), r.available());
            let refused_before = l.stats().refused_new_keys;
            let got = l.try_acquire(&key, n);
            if l.stats().refused_new_keys > refused_before {
                prop_assert_eq!(got.unwrap_err().reason, RejectReason::RateLimited);
            } else {
                prop_assert_eq!(got, r.try_acquire(n));
            }
            prop_assert!(l.len() <= max_keys);
        }
        prop_assert_eq!(l.stats().evicted_in_debt, 0);
    }
}
