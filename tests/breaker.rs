//! Circuit breakers through the public API, on a `ManualClock`: exact, no sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::breaker::{
    BackoffConfig, Breaker, BreakerConfig, Call, CallError, ConsecutiveConfig, HalfOpenConfig,
    KeyedBreaker, KeyedBreakerConfig, Outcome, Policy, PolicyConfig, RateConfig, SlowCallConfig,
    State, Trip, WindowConfig,
};
use sluicegate::clock::ManualClock;
use sluicegate::RejectReason;

const S: Duration = Duration::from_secs(1);

fn breaker(config: BreakerConfig) -> (ManualClock, Breaker<ManualClock>) {
    let clock = ManualClock::new();
    let b = Breaker::new(config, clock.clone()).unwrap();
    (clock, b)
}

fn fail(b: &Breaker<ManualClock>, n: usize) {
    for _ in 0..n {
        b.try_acquire().unwrap().failure();
    }
}

fn succeed(b: &Breaker<ManualClock>, n: usize) {
    for _ in 0..n {
        b.try_acquire().unwrap().success();
    }
}

#[test]
fn five_consecutive_failures_open_it_and_refusals_say_when_probing_starts() {
    let (clock, b) = breaker(BreakerConfig::default());
    fail(&b, 4);
    assert_eq!(b.state(), State::Closed);
    fail(&b, 1);
    assert_eq!(b.state(), State::Open);
    clock.advance(3 * S);
    let r = b.try_acquire().unwrap_err();
    assert_eq!(r.reason, RejectReason::CircuitOpen);
    assert_eq!(r.reason.as_str(), "circuit_open");
    assert_eq!(r.retry_after, Some(7 * S));
    assert_eq!(b.retry_after(), Some(7 * S));
    clock.advance(7 * S - Duration::from_nanos(1));
    assert!(b.try_acquire().is_err());
    clock.advance(Duration::from_nanos(1));
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn a_success_starts_the_consecutive_count_again_and_ignored_calls_do_not_count() {
    let (_clock, b) = breaker(BreakerConfig::default());
    fail(&b, 4);
    succeed(&b, 1);
    fail(&b, 4);
    for _ in 0..10 {
        b.try_acquire().unwrap().ignore();
    }
    assert_eq!(b.state(), State::Closed);
    fail(&b, 1);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn half_open_lets_exactly_the_probes_through_and_refuses_the_rest_without_retry_after() {
    let (clock, b) = breaker(BreakerConfig::default());
    fail(&b, 5);
    clock.advance(10 * S);
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    let r = b.try_acquire().unwrap_err();
    assert_eq!((r.reason, r.retry_after), (RejectReason::CircuitOpen, None));
    assert_eq!(b.state(), State::HalfOpen);
    drop(probes);
}

#[test]
fn two_failed_probes_of_three_reopen_it_at_once() {
    let (clock, b) = breaker(BreakerConfig::default());
    fail(&b, 5);
    clock.advance(10 * S);
    let mut probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    probes.pop().unwrap().failure();
    assert_eq!(b.state(), State::HalfOpen);
    probes.pop().unwrap().failure();
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.retry_after(), Some(10 * S));
    // The last probe reports late, from an earlier state: it moves nothing.
    probes.pop().unwrap().success();
    assert_eq!(b.state(), State::Open);
}

#[test]
fn two_successful_probes_of_three_close_it_and_clear_the_failure_count() {
    let (clock, b) = breaker(BreakerConfig::default());
    fail(&b, 5);
    clock.advance(10 * S);
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    let p3 = b.try_acquire().unwrap();
    p1.failure();
    p2.success();
    assert_eq!(b.state(), State::HalfOpen);
    p3.success();
    assert_eq!(b.state(), State::Closed);
    fail(&b, 4);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_dropped_probe_permit_counts_as_a_failure() {
    let (clock, b) = breaker(BreakerConfig::default());
    fail(&b, 5);
    clock.advance(10 * S);
    drop(b.try_acquire().unwrap());
    drop(b.try_acquire().unwrap());
    assert_eq!(b.state(), State::Open);
}

#[test]
fn an_ignored_probe_frees_its_slot_for_another_probe() {
    let config = BreakerConfig {
        half_open: HalfOpenConfig {
            probes: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let (clock, b) = breaker(config);
    fail(&b, 5);
    clock.advance(10 * S);
    let p = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
    p.ignore();
    b.try_acquire().unwrap().success();
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_hung_probe_times_out_as_a_failure_and_its_late_report_is_not_counted() {
    let config = BreakerConfig {
        half_open: HalfOpenConfig {
            probes: 1,
            probe_timeout: 2 * S,
            ..Default::default()
        },
        ..Default::default()
    };
    let (clock, b) = breaker(config);
    fail(&b, 5);
    clock.advance(10 * S);
    let hung = b.try_acquire().unwrap();
    clock.advance(2 * S - Duration::from_nanos(1));
    assert_eq!(b.state(), State::HalfOpen);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(b.state(), State::Open);
    hung.success();
    assert_eq!(b.state(), State::Open);
}

#[test]
fn a_call_started_closed_and_finished_after_the_breaker_opened_moves_nothing() {
    let (clock, b) = breaker(BreakerConfig::default());
    let early = b.try_acquire().unwrap();
    fail(&b, 5);
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    early.success(); // from the closed epoch: not a probe, not counted
    probe.failure();
    let probe = b.try_acquire().unwrap();
    probe.failure();
    assert_eq!(b.state(), State::Open);
}

#[test]
fn backoff_multiplies_the_open_time_up_to_its_maximum_and_a_close_forgets_it() {
    let config = BreakerConfig {
        backoff: Some(BackoffConfig {
            multiplier: 2.0,
            max: 25 * S,
        }),
        half_open: HalfOpenConfig {
            probes: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let (clock, b) = breaker(config);
    fail(&b, 5);
    for expected in [10, 20, 25, 25] {
        assert_eq!(b.retry_after(), Some(expected * S));
        clock.advance(expected * S);
        b.try_acquire().unwrap().failure();
    }
    clock.advance(25 * S);
    b.try_acquire().unwrap().success();
    fail(&b, 5);
    assert_eq!(b.retry_after(), Some(10 * S));
}

#[test]
fn force_open_refuses_until_reset_and_force_closed_admits_without_counting() {
    let (_clock, b) = breaker(BreakerConfig::default());
    let in_flight = b.try_acquire().unwrap();
    b.force_open();
    assert_eq!(b.state(), State::ForcedOpen);
    let r = b.try_acquire().unwrap_err();
    assert_eq!((r.reason, r.retry_after), (RejectReason::CircuitOpen, None));
    in_flight.failure();
    b.force_closed();
    fail(&b, 50);
    assert_eq!(b.state(), State::ForcedClosed);
    b.reset();
    assert_eq!(b.state(), State::Closed);
    fail(&b, 4);
    assert_eq!(b.state(), State::Closed);
}

fn rate(window: WindowConfig, minimum_calls: u32) -> BreakerConfig {
    BreakerConfig {
        policies: vec![PolicyConfig::FailureRate(RateConfig {
            threshold: 0.5,
            minimum_calls,
            window,
        })],
        ..Default::default()
    }
}

#[test]
fn failure_rate_trips_at_the_threshold_only_once_minimum_calls_are_in() {
    let (_clock, b) = breaker(rate(WindowConfig::Count { calls: 100 }, 20));
    for _ in 0..9 {
        succeed(&b, 1);
        fail(&b, 1);
    }
    assert_eq!(b.state(), State::Closed); // 9 of 18: below minimum_calls
    succeed(&b, 1);
    assert_eq!(b.state(), State::Closed); // 9 of 19
    fail(&b, 1);
    assert_eq!(b.state(), State::Open); // 10 of 20 = 50 %
}

#[test]
fn failure_rate_below_the_threshold_keeps_it_closed_and_the_count_window_forgets() {
    let (_clock, b) = breaker(rate(WindowConfig::Count { calls: 10 }, 10));
    fail(&b, 4);
    succeed(&b, 6); // 4 of 10
    succeed(&b, 4); // the 4 failures left the window
    fail(&b, 4); // 4 of 10 again
    assert_eq!(b.state(), State::Closed);
    fail(&b, 1);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn a_time_window_forgets_calls_older_than_its_span() {
    let window = WindowConfig::Time {
        span: 10 * S,
        buckets: 10,
    };
    let (clock, b) = breaker(rate(window, 4));
    fail(&b, 3);
    clock.advance(10 * S);
    fail(&b, 1);
    succeed(&b, 3);
    assert_eq!(b.state(), State::Closed); // 1 of 4: the old failures are gone
    fail(&b, 1);
    assert_eq!(b.state(), State::Closed); // 2 of 5
    fail(&b, 1);
    assert_eq!(b.state(), State::Open); // 3 of 6
}

fn slow_calls() -> BreakerConfig {
    BreakerConfig {
        policies: vec![PolicyConfig::SlowCallRate(SlowCallConfig {
            minimum_calls: 3,
            window: WindowConfig::Count { calls: 3 },
            ..Default::default()
        })],
        half_open: HalfOpenConfig {
            probes: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn slow_call_rate_trips_when_every_call_is_slow_and_fails_a_slow_probe() {
    let (clock, b) = breaker(slow_calls());
    for i in 0..3 {
        let p = b.try_acquire().unwrap();
        clock.advance(S);
        p.success();
        let expected = if i < 2 { State::Closed } else { State::Open };
        assert_eq!(b.state(), expected);
    }
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    clock.advance(S);
    probe.success();
    assert_eq!(b.state(), State::Open);
    clock.advance(10 * S);
    b.try_acquire().unwrap().success();
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn several_policies_trip_when_any_of_them_does() {
    let mut config = rate(WindowConfig::Count { calls: 100 }, 100);
    config
        .policies
        .push(PolicyConfig::ConsecutiveFailures(ConsecutiveConfig {
            failures: 3,
        }));
    let (_clock, b) = breaker(config);
    fail(&b, 3);
    assert_eq!(b.state(), State::Open);
}

#[derive(Debug)]
struct Counting(Arc<AtomicU64>);

impl Policy for Counting {
    fn record(&mut self, _call: &Call) -> Option<Trip> {
        self.0.fetch_add(1, Ordering::SeqCst);
        None
    }

    fn reset(&mut self) {}
}

#[test]
fn a_custom_policy_sees_each_outcome_exactly_once() {
    let seen = Arc::new(AtomicU64::new(0));
    let b = Breaker::with_policy(
        BreakerConfig::default(),
        Counting(seen.clone()),
        ManualClock::new(),
    )
    .unwrap();
    let p = b.try_acquire().unwrap();
    p.success();
    drop(b.try_acquire().unwrap());
    b.try_acquire().unwrap().record(Outcome::Failure);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn call_counts_errors_as_failures_and_returns_the_refusal_once_open() {
    let (_clock, b) = breaker(BreakerConfig::default());
    for _ in 0..5 {
        let r = b.call(|| async { Err::<(), _>("down") }).await;
        assert!(matches!(r, Err(CallError::Failed("down"))));
    }
    let r = b.call(|| async { Ok::<_, ()>(1) }).await;
    assert!(matches!(r, Err(CallError::Rejected(r)) if r.reason == RejectReason::CircuitOpen));
}

#[tokio::test]
async fn a_classifier_can_ignore_caller_errors() {
    let (_clock, b) = breaker(BreakerConfig::default());
    let by_status = |r: &Result<u16, ()>| match r {
        Ok(status) => Outcome::from_http_status(*status),
        Err(()) => Outcome::Failure,
    };
    for _ in 0..10 {
        let r = b.call_with(&by_status, || async { Ok(404) }).await;
        assert_eq!(r.unwrap(), 404);
    }
    assert_eq!(b.state(), State::Closed);
    for _ in 0..5 {
        let _ = b.call_with(&by_status, || async { Ok(503) }).await;
    }
    assert_eq!(b.state(), State::Open);
}

#[test]
fn call_blocking_counts_the_result() {
    let (_clock, b) = breaker(BreakerConfig::default());
    for _ in 0..5 {
        assert!(b.call_blocking(|| Err::<(), _>(())).is_err());
    }
    assert_eq!(b.state(), State::Open);
}

#[tracing_test::traced_test]
#[test]
fn opening_is_an_info_event_with_the_figures() {
    let (_clock, b) = breaker(BreakerConfig::default());
    let b = b.with_name("payments");
    fail(&b, 5);
    assert!(logs_contain(
        "circuit opened: consecutive_failures reached 5"
    ));
    assert!(logs_contain("payments"));
}

#[test]
fn invalid_figures_are_refused_naming_the_key() {
    let mut config = BreakerConfig::default();
    config.half_open.probes = 0;
    let err = Breaker::new(config, ManualClock::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`half_open.probes` = 0: must be at least 1"
    );
    let err = Breaker::new(
        rate(WindowConfig::Count { calls: 10 }, 20),
        ManualClock::new(),
    )
    .unwrap_err();
    assert_eq!(err.key, "policies[0].minimum_calls");
}

#[test]
fn config_from_toml_refuses_unknown_keys_and_bare_numbers() {
    let unknown = toml::from_str::<BreakerConfig>("open_fr = \"1s\"").unwrap_err();
    assert!(unknown.to_string().contains("open_fr"), "{unknown}");
    let bare = toml::from_str::<BreakerConfig>("open_for = 10").unwrap_err();
    assert!(bare.to_string().contains("has no unit"), "{bare}");
    let policy = toml::from_str::<BreakerConfig>(
        "[[policies]]\nkind = \"consecutive_failures\"\nfailurs = 3",
    )
    .unwrap_err();
    assert!(policy.to_string().contains("failurs"), "{policy}");
}

fn keyed(max_keys: usize) -> (ManualClock, KeyedBreaker<&'static str, ManualClock>) {
    let clock = ManualClock::new();
    let config = KeyedBreakerConfig {
        max_keys,
        idle_after: 60 * S,
        ..Default::default()
    };
    (clock.clone(), KeyedBreaker::new(config, clock).unwrap())
}

fn trip(k: &KeyedBreaker<&'static str, ManualClock>, key: &'static str) {
    for _ in 0..5 {
        k.try_acquire(&key).unwrap().failure();
    }
}

#[test]
fn keyed_breakers_cut_off_only_the_failing_target() {
    let (_clock, k) = keyed(10);
    trip(&k, "a");
    assert!(k.try_acquire(&"a").is_err());
    assert!(k.try_acquire(&"b").is_ok());
    assert_eq!(k.len(), 2);
}

#[test]
fn a_full_table_evicts_the_least_recently_used_closed_breaker_before_an_open_one() {
    let (clock, k) = keyed(3);
    trip(&k, "open");
    clock.advance(S);
    k.breaker(&"old");
    clock.advance(S);
    k.breaker(&"new");
    k.breaker(&"another");
    assert!(k.get(&"old").is_none());
    assert!(k.get(&"open").is_some());
    assert!(k.try_acquire(&"open").is_err());
}

#[test]
fn idle_closed_breakers_are_dropped_but_open_ones_stay_until_their_time_ends() {
    let (clock, k) = keyed(10);
    k.breaker(&"idle");
    trip(&k, "open");
    k.get(&"open").unwrap().force_open();
    clock.advance(60 * S);
    assert_eq!(k.evict_idle(), 1);
    assert!(k.get(&"open").is_some());
}

#[test]
fn when_every_key_is_open_the_one_whose_open_time_ends_soonest_goes() {
    let (clock, k) = keyed(2);
    trip(&k, "first");
    clock.advance(S);
    trip(&k, "second");
    k.breaker(&"third");
    assert!(k.get(&"first").is_none());
    assert!(k.get(&"second").is_some());
    assert_eq!(k.len(), 2);
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Success,
    Failure,
    Ignore,
    Drop,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Acquire),
        2 => Just(Op::Success),
        2 => Just(Op::Failure),
        1 => Just(Op::Ignore),
        1 => Just(Op::Drop),
        2 => (0u64..4_000).prop_map(Op::Advance),
    ]
}

/// 2,000 cases per property. Cases are drawn with XorShift rather than proptest's default ChaCha,
/// which, unoptimised in a test build, took most of a property's time.
fn cases() -> ProptestConfig {
    ProptestConfig {
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::with_cases(2000)
    }
}

/// Ops per case: enough for several openings and half-open spells, few enough that 2,000 cases run
/// in a second or two unoptimised.
const OPS: usize = 200;

fn nanos(clock: &ManualClock) -> u64 {
    clock.elapsed().as_nanos() as u64
}

fn half_open_config(probes: u32) -> BreakerConfig {
    BreakerConfig {
        open_for: 2 * S,
        half_open: HalfOpenConfig {
            probes,
            probe_timeout: 3 * S,
            ..Default::default()
        },
        policies: vec![PolicyConfig::ConsecutiveFailures(ConsecutiveConfig {
            failures: 2,
        })],
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(cases())]

    /// Whatever happened before, once `probe_timeout` passes with no report the breaker is not
    /// stuck half-open refusing everyone: it is open or closed, or has a free probe slot.
    #[test]
    fn the_breaker_never_stays_half_open_past_probe_timeout_without_a_report(
        ops in proptest::collection::vec(op(), 0..OPS),
    ) {
        let (clock, b) = breaker(half_open_config(3));
        let mut held = Vec::new();
        for op in ops {
            match op {
                Op::Acquire => held.extend(b.try_acquire().ok()),
                Op::Success => if let Some(p) = held.pop() { p.success() },
                Op::Failure => if let Some(p) = held.pop() { p.failure() },
                Op::Ignore => if let Some(p) = held.pop() { p.ignore() },
                Op::Drop => drop(held.pop()),
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            }
        }
        clock.advance(3 * S);
        if b.state() == State::HalfOpen {
            prop_assert!(b.try_acquire().is_ok());
        }
        drop(held);
    }

    /// However calls, reports, drops and time interleave, one half-open spell lets at most
    /// `probes` probes decide: the probes granted in it, less those ignored while it lasted (an
    /// ignored probe frees its slot), never exceed `probes`.
    #[test]
    fn a_half_open_spell_never_lets_more_than_its_probes_decide(
        ops in proptest::collection::vec(op(), 0..OPS), probes in 1u32..5,
    ) {
        let (clock, b) = breaker(half_open_config(probes));
        let timeout = Duration::from_secs(3).as_nanos() as u64;
        // Each held permit, with the spell it was granted in (a probe) and when.
        let mut held: Vec<(sluicegate::breaker::BreakerPermit<ManualClock>, Option<u64>, u64)> = Vec::new();
        let (mut spell, mut granted, mut ignored) = (0u64, 0u32, 0u32);
        let mut last = State::Closed;
        for op in ops {
            match op {
                Op::Acquire => {
                    if let Ok(p) = b.try_acquire() {
                        if p.is_probe() && last != State::HalfOpen {
                            // The call itself turned the breaker half-open: a new spell.
                            spell += 1;
                            (granted, ignored) = (0, 0);
                            last = State::HalfOpen;
                        }
                        let probe = p.is_probe().then_some(spell);
                        granted += u32::from(probe.is_some());
                        held.push((p, probe, nanos(&clock)));
                    }
                }
                Op::Success => if let Some((p, ..)) = held.pop() { p.success() },
                Op::Failure => if let Some((p, ..)) = held.pop() { p.failure() },
                Op::Ignore => if let Some((p, probe, at)) = held.pop() {
                    // It frees a slot only if it is still one of this spell's probes in time.
                    if probe == Some(spell) && last == State::HalfOpen && nanos(&clock) < at + timeout {
                        ignored += 1;
                    }
                    p.ignore();
                },
                Op::Drop => drop(held.pop()),
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            }
            let now = b.state();
            if now == State::HalfOpen && last != State::HalfOpen {
                spell += 1;
                (granted, ignored) = (0, 0);
            }
            last = now;
            prop_assert!(granted - ignored.min(granted) <= probes, "{} probes granted, {} ignored", granted, ignored);
        }
    }

    /// Every permit granted closed is recorded once, whatever order the reports and drops come in.
    #[test]
    fn each_permit_records_its_outcome_exactly_once(
        ends in proptest::collection::vec(0u8..4, 1..100),
    ) {
        let seen = Arc::new(AtomicU64::new(0));
        let b = Breaker::with_policy(BreakerConfig::default(), Counting(seen.clone()), ManualClock::new()).unwrap();
        let permits: Vec<_> = ends.iter().map(|_| b.try_acquire().unwrap()).collect();
        for (p, end) in permits.into_iter().rev().zip(&ends) {
            match end {
                0 => p.success(),
                1 => p.failure(),
                2 => p.ignore(),
                _ => drop(p),
            }
        }
        prop_assert_eq!(seen.load(Ordering::SeqCst), ends.len() as u64);
    }
}

#[test]
fn breakers_and_their_permits_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Breaker<ManualClock>>();
    send_sync::<sluicegate::breaker::BreakerPermit<ManualClock>>();
    send_sync::<KeyedBreaker<String, ManualClock>>();
}

#[test]
fn failures_reported_from_many_threads_open_it_once_and_refuse_everyone_after() {
    let (_clock, b) = breaker(BreakerConfig::default());
    let mut permits: Vec<_> = (0..40).map(|_| b.try_acquire().unwrap()).collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let chunk: Vec<_> = permits.drain(..10).collect();
            s.spawn(move || chunk.into_iter().for_each(|p| p.failure()));
        }
    });
    assert_eq!(b.state(), State::Open);
    // Opened once: the failures after the fifth came from the closed epoch and did not reopen it.
    assert_eq!(b.retry_after(), Some(10 * S));
    assert!(b.try_acquire().is_err());
}

/// 32 threads released together (a barrier) at the open → half-open edge of a breaker with
/// `probes` probes, 200 times over: exactly `probes` of them get a permit each time, and the rest
/// are refused as circuit-open. The clock is already past the open time when they are released,
/// so every one of them finds the breaker open with its time up and races to turn it half-open.
fn race_at_the_half_open_edge(probes: u32) {
    const THREADS: usize = 32;
    const ROUNDS: usize = 200;
    let open_for = 2 * S;
    let config = BreakerConfig {
        open_for,
        half_open: HalfOpenConfig {
            probes,
            ..Default::default()
        },
        policies: vec![PolicyConfig::ConsecutiveFailures(ConsecutiveConfig {
            failures: 1,
        })],
        ..Default::default()
    };
    let (clock, b) = breaker(config);
    fail(&b, 1);
    let start = Barrier::new(THREADS + 1);
    let done = Barrier::new(THREADS + 1);
    let granted = std::sync::Mutex::new(Vec::new());
    let refused = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    start.wait();
                    match b.try_acquire() {
                        Ok(p) => granted.lock().unwrap().push(p),
                        Err(r) => {
                            assert_eq!(r.reason, RejectReason::CircuitOpen);
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    done.wait();
                }
            });
        }
        for round in 0..ROUNDS {
            assert_eq!(b.state(), State::Open, "round {round}");
            clock.advance(open_for);
            start.wait();
            done.wait();
            let probes_now: Vec<_> = std::mem::take(&mut *granted.lock().unwrap());
            assert_eq!(probes_now.len(), probes as usize, "round {round}");
            assert!(probes_now.iter().all(|p| p.is_probe()), "round {round}");
            assert_eq!(
                refused.swap(0, Ordering::SeqCst),
                (THREADS - probes as usize) as u64,
                "round {round}"
            );
            assert_eq!(b.state(), State::HalfOpen, "round {round}");
            // Failing the probes reopens it for the next round.
            probes_now.into_iter().for_each(|p| p.failure());
        }
    });
}

#[test]
fn thirty_two_threads_racing_into_half_open_get_exactly_one_probe() {
    race_at_the_half_open_edge(1);
}

#[test]
fn thirty_two_threads_racing_into_half_open_get_exactly_the_three_default_probes() {
    race_at_the_half_open_edge(3);
}

#[test]
fn thirty_two_threads_racing_into_half_open_get_exactly_ten_probes() {
    race_at_the_half_open_edge(10);
}
