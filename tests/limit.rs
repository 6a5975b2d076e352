//! Limiters through the public API, on a `ManualClock`: exact, no sleeping.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::limit::{
    ConcurrencyConfig, ConcurrencyLimiter, ConcurrencyPermit, FixedWindow, Gcra, GcraConfig,
    Limiter, MutexStore, Quota, QuotaAlert, QuotaConfig, SlidingLog, SlidingWindow, TokenBucket,
    TokenBucketConfig, TokenStore, WaitConfig, WaitOrder, Waiting, WindowLimitConfig,
};
use sluicegate::RejectReason;
use tokio_test::{assert_pending, assert_ready, task};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn window(limit: u64) -> WindowLimitConfig {
    WindowLimitConfig { limit, window: S }
}

fn retry(r: Result<(), sluicegate::Rejection>) -> Option<Duration> {
    r.unwrap_err().retry_after
}

#[test]
fn token_bucket_refills_exactly_and_says_when_n_tokens_exist() {
    let clock = ManualClock::new();
    let config = TokenBucketConfig {
        capacity: 5,
        refill: 3,
        per: S,
    };
    let b = TokenBucket::new(config, clock.clone()).unwrap();
    b.try_acquire(5).unwrap();
    // 2 tokens at 3 per second: 666_666_667 ns (rounded up), not a nanosecond less.
    assert_eq!(
        retry(b.try_acquire(2)),
        Some(Duration::from_nanos(666_666_667))
    );
    clock.advance(Duration::from_nanos(666_666_666));
    assert_eq!(b.available(), 1);
    assert!(b.try_acquire(2).is_err());
    clock.advance(Duration::from_nanos(1));
    b.try_acquire(2).unwrap();
    clock.advance(100 * S);
    assert_eq!(b.available(), 5);
}

#[test]
fn a_token_bucket_counted_in_nanoseconds_refuses_a_take_past_584_years_with_the_exact_wait() {
    // One token a century: three of them bring the state within a word's reach of its end, three
    // more would carry it past `u64::MAX` nanoseconds.
    let century = Duration::from_secs(100 * 365 * 86_400);
    let clock = ManualClock::new();
    let config = TokenBucketConfig {
        capacity: 3,
        refill: 1,
        per: century,
    };
    let b = TokenBucket::new(config, clock.clone()).unwrap();
    b.try_acquire(3).unwrap();
    assert_eq!(retry(b.try_acquire(1)), Some(century));
    assert_eq!(retry(b.try_acquire(3)), Some(3 * century));
    assert_eq!(b.available(), 0);
}

#[test]
fn every_limiter_refuses_more_than_its_capacity_and_never_admits_it() {
    let clock = ManualClock::new();
    let limiters: Vec<Box<dyn Limiter<Clock = ManualClock>>> = vec![
        Box::new(
            TokenBucket::new(
                TokenBucketConfig {
                    capacity: 3,
                    ..Default::default()
                },
                clock.clone(),
            )
            .unwrap(),
        ),
        Box::new(
            Gcra::new(
                GcraConfig {
                    burst: 3,
                    ..Default::default()
                },
                clock.clone(),
            )
            .unwrap(),
        ),
        Box::new(FixedWindow::new(window(3), clock.clone()).unwrap()),
        Box::new(SlidingWindow::new(window(3), clock.clone()).unwrap()),
        Box::new(SlidingLog::new(window(3), clock.clone()).unwrap()),
        Box::new(
            Quota::new(
                QuotaConfig {
                    limit: 3,
                    ..Default::default()
                },
                clock.clone(),
            )
            .unwrap(),
        ),
    ];
    for l in &limiters {
        let r = l.try_acquire(4).unwrap_err();
        assert_eq!(
            (r.reason, r.retry_after),
            (RejectReason::ExceedsCapacity, None)
        );
        assert_eq!(l.capacity(), 3);
        assert_eq!(l.available(), 3);
        l.try_acquire(3).unwrap();
        assert_eq!(l.available(), 0);
    }
}

#[test]
fn a_clock_gone_back_refills_nothing_and_admits_nothing_extra() {
    let clock = ManualClock::new();
    let config = TokenBucketConfig {
        capacity: 2,
        refill: 3,
        per: S,
    };
    let limiters: Vec<Box<dyn Limiter<Clock = ManualClock>>> = vec![
        Box::new(TokenBucket::new(config, clock.clone()).unwrap()),
        Box::new(
            TokenBucket::new(
                TokenBucketConfig {
                    refill: 4,
                    ..config
                },
                clock.clone(),
            )
            .unwrap(),
        ),
        Box::new(
            Gcra::new(
                GcraConfig {
                    rate: 4,
                    per: S,
                    burst: 2,
                },
                clock.clone(),
            )
            .unwrap(),
        ),
    ];
    for l in &limiters {
        clock.set(10 * S);
        l.try_acquire(2).unwrap();
        clock.set(5 * S);
        assert!(l.try_acquire(1).is_err());
        assert_eq!(l.available(), 0);
        // Back where it was, nothing was taken meanwhile: the same answers as if it never left.
        clock.set(10 * S);
        let r = l.try_acquire(1).unwrap_err();
        clock.advance(r.retry_after.unwrap());
        l.try_acquire(1).unwrap();
    }
}

#[test]
fn gcra_admits_the_burst_then_one_per_interval() {
    let clock = ManualClock::new();
    let g = Gcra::new(
        GcraConfig {
            rate: 4,
            per: S,
            burst: 2,
        },
        clock.clone(),
    )
    .unwrap();
    g.try_acquire(2).unwrap();
    let r = g.try_acquire(1).unwrap_err();
    assert_eq!(
        (r.reason, r.retry_after),
        (RejectReason::RateLimited, Some(250 * MS))
    );
    clock.advance(250 * MS);
    g.try_acquire(1).unwrap();
    assert_eq!(retry(g.try_acquire(2)), Some(500 * MS));
}

#[test]
fn fixed_window_starts_counting_again_at_the_next_window() {
    let clock = ManualClock::new();
    let f = FixedWindow::new(window(3), clock.clone()).unwrap();
    clock.advance(900 * MS);
    f.try_acquire(3).unwrap();
    assert_eq!(retry(f.try_acquire(1)), Some(100 * MS));
    clock.advance(100 * MS);
    f.try_acquire(3).unwrap();
}

#[test]
fn sliding_window_weighs_the_previous_window_by_its_overlap() {
    let clock = ManualClock::new();
    let s = SlidingWindow::new(window(10), clock.clone()).unwrap();
    s.try_acquire(8).unwrap();
    clock.advance(S + 250 * MS); // previous 8 weigh 6
    assert_eq!(s.available(), 4);
    s.try_acquire(4).unwrap();
    // 1 more needs the previous weight down to 5: 375 ms into this window.
    assert_eq!(retry(s.try_acquire(1)), Some(125 * MS));
    clock.advance(125 * MS);
    s.try_acquire(1).unwrap();
    // 10 at once must wait for the next window and for this one's 5 to weigh nothing.
    assert_eq!(retry(s.try_acquire(10)), Some(625 * MS + S));
}

#[test]
fn sliding_log_frees_room_when_the_oldest_calls_leave_the_window() {
    let clock = ManualClock::new();
    let l = SlidingLog::new(window(3), clock.clone()).unwrap();
    l.try_acquire(1).unwrap();
    clock.advance(300 * MS);
    l.try_acquire(2).unwrap();
    assert_eq!(retry(l.try_acquire(1)), Some(700 * MS));
    assert_eq!(retry(l.try_acquire(3)), Some(S));
    clock.advance(700 * MS);
    assert_eq!(l.available(), 1);
}

#[test]
fn quota_refuses_until_the_next_period_and_alerts_once_per_period() {
    let clock = ManualClock::new();
    let alerts = Arc::new(AtomicU64::new(0));
    let seen = alerts.clone();
    let q = Quota::new(
        QuotaConfig {
            limit: 10,
            period: 30 * 86_400 * S,
            alert_at: 0.8,
        },
        clock.clone(),
    )
    .unwrap()
    .on_alert(move |a| {
        assert_eq!((a.used, a.limit), (9, 10));
        seen.fetch_add(1, Ordering::SeqCst);
    });
    q.try_acquire(5).unwrap();
    q.try_acquire(4).unwrap();
    q.try_acquire(1).unwrap();
    assert_eq!(alerts.load(Ordering::SeqCst), 1);
    clock.advance(86_400 * S);
    let r = q.try_acquire(1).unwrap_err();
    assert_eq!(
        (r.reason, r.retry_after),
        (RejectReason::QuotaExhausted, Some(29 * 86_400 * S))
    );
    clock.advance(29 * 86_400 * S);
    assert!(!q.alerted());
    assert_eq!(q.available(), 10);
}

fn gcra_waiting(order: WaitOrder, max_waiters: usize) -> (ManualClock, Waiting<Gcra<ManualClock>>) {
    let clock = ManualClock::new();
    let g = Gcra::new(
        GcraConfig {
            rate: 10,
            per: S,
            burst: 1,
        },
        clock.clone(),
    )
    .unwrap();
    let w = Waiting::new(
        g,
        WaitConfig {
            max_wait: 250 * MS,
            max_waiters,
            order,
        },
    )
    .unwrap();
    (clock, w)
}

#[test]
fn a_waiter_sleeps_until_the_computed_time_and_not_a_nanosecond_less() {
    let (clock, w) = gcra_waiting(WaitOrder::Fifo, 4);
    w.try_acquire(1).unwrap();
    let mut waiter = task::spawn(w.acquire(1));
    assert_pending!(waiter.poll());
    assert_eq!(clock.next_deadline(), Some(100_000_000));
    clock.advance(100 * MS - Duration::from_nanos(1));
    assert!(!waiter.is_woken());
    clock.advance(Duration::from_nanos(1));
    assert!(waiter.is_woken());
    assert_ready!(waiter.poll()).unwrap();
}

#[test]
fn a_wait_longer_than_max_wait_is_refused_at_once_with_the_exact_retry_after() {
    let clock = ManualClock::new();
    let f = FixedWindow::new(window(1), clock.clone()).unwrap();
    let w = Waiting::new(
        f,
        WaitConfig {
            max_wait: 250 * MS,
            max_waiters: 4,
            order: WaitOrder::Fifo,
        },
    )
    .unwrap();
    w.try_acquire(1).unwrap();
    clock.advance(700 * MS);
    let r = futures_block(w.acquire(1)).unwrap_err();
    assert_eq!(
        (r.reason, r.retry_after),
        (RejectReason::RateLimited, Some(300 * MS))
    );
    assert_eq!(w.waiters(), 0);
    clock.advance(50 * MS);
    let mut waiter = task::spawn(w.acquire(1)); // 250 ms to go: waits
    assert_pending!(waiter.poll());
    clock.advance(250 * MS);
    assert_ready!(waiter.poll()).unwrap();
}

fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    let mut t = task::spawn(f);
    match t.poll() {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("future did not complete at once"),
    }
}

#[test]
fn fifo_waiters_are_served_in_arrival_order_and_a_full_queue_refuses_the_newcomer() {
    let (clock, w) = gcra_waiting(WaitOrder::Fifo, 2);
    w.try_acquire(1).unwrap();
    let mut first = task::spawn(w.acquire(1));
    let mut second = task::spawn(w.acquire(1));
    assert_pending!(first.poll());
    assert_pending!(second.poll());
    assert_eq!(w.waiters(), 2);
    let third = futures_block(w.acquire(1)).unwrap_err();
    assert_eq!(third.reason, RejectReason::TooManyWaiters);
    clock.advance(100 * MS);
    assert!(first.is_woken());
    assert_ready!(first.poll()).unwrap();
    assert!(second.is_woken());
    assert_pending!(second.poll());
    clock.advance(100 * MS);
    assert_ready!(second.poll()).unwrap();
}

#[test]
fn lifo_serves_the_newest_and_evicts_the_oldest_when_full() {
    let (clock, w) = gcra_waiting(WaitOrder::Lifo, 2);
    w.try_acquire(1).unwrap();
    let mut oldest = task::spawn(w.acquire(1));
    let mut middle = task::spawn(w.acquire(1));
    assert_pending!(oldest.poll());
    assert_pending!(middle.poll());
    let mut newest = task::spawn(w.acquire(1));
    assert_pending!(newest.poll());
    assert!(oldest.is_woken());
    assert_eq!(
        assert_ready!(oldest.poll()).unwrap_err().reason,
        RejectReason::TooManyWaiters
    );
    clock.advance(100 * MS);
    assert_ready!(newest.poll()).unwrap();
    assert_pending!(middle.poll());
    clock.advance(100 * MS);
    assert_ready!(middle.poll()).unwrap();
}

#[test]
fn a_queued_waiter_is_refused_when_its_max_wait_runs_out() {
    let clock = ManualClock::new();
    let g = Gcra::new(
        GcraConfig {
            rate: 10,
            per: S,
            burst: 1,
        },
        clock.clone(),
    )
    .unwrap();
    let w = Waiting::new(
        g,
        WaitConfig {
            max_wait: 150 * MS,
            max_waiters: 4,
            order: WaitOrder::Fifo,
        },
    )
    .unwrap();
    w.try_acquire(1).unwrap();
    let mut first = task::spawn(w.acquire(1));
    assert_pending!(first.poll());
    clock.advance(50 * MS);
    let mut second = task::spawn(w.acquire(1)); // deadline at 200 ms, its turn at 200 ms
    assert_pending!(second.poll());
    w.try_acquire(1).unwrap_err();
    clock.advance(50 * MS);
    assert_ready!(first.poll()).unwrap();
    // Someone barges in and takes the 200 ms token: the second's turn moves past its deadline.
    clock.advance(100 * MS);
    w.try_acquire(1).unwrap();
    let r = assert_ready!(second.poll()).unwrap_err();
    assert_eq!(r.reason, RejectReason::RateLimited);
}

#[test]
fn a_cancelled_waiter_leaves_the_queue_and_the_next_is_served() {
    let (clock, w) = gcra_waiting(WaitOrder::Fifo, 4);
    w.try_acquire(1).unwrap();
    let mut first = task::spawn(w.acquire(1));
    let mut second = task::spawn(w.acquire(1));
    assert_pending!(first.poll());
    assert_pending!(second.poll());
    drop(first);
    assert!(second.is_woken());
    assert_pending!(second.poll());
    assert_eq!(w.waiters(), 1);
    clock.advance(100 * MS);
    assert_ready!(second.poll()).unwrap();
}

#[test]
fn a_blocking_waiter_sleeps_on_the_manual_clock() {
    let (clock, w) = gcra_waiting(WaitOrder::Fifo, 4);
    let w = Arc::new(w);
    w.try_acquire(1).unwrap();
    let waiter = {
        let w = w.clone();
        std::thread::spawn(move || w.acquire_blocking(1))
    };
    clock.wait_for_sleepers(1);
    clock.advance(100 * MS);
    waiter.join().unwrap().unwrap();
}

fn concurrency(max: u64, max_waiters: usize) -> (ManualClock, ConcurrencyLimiter<ManualClock>) {
    let clock = ManualClock::new();
    let wait = WaitConfig {
        max_wait: S,
        max_waiters,
        order: WaitOrder::Fifo,
    };
    let c = ConcurrencyLimiter::new(
        ConcurrencyConfig {
            max_concurrent: max,
            wait,
        },
        clock.clone(),
    )
    .unwrap();
    (clock, c)
}

#[test]
fn a_concurrency_waiter_is_woken_by_a_release_not_by_time() {
    let (clock, c) = concurrency(2, 4);
    let held = c.try_acquire(2).unwrap();
    let mut waiter = task::spawn(c.acquire(1));
    assert_pending!(waiter.poll());
    assert_eq!(c.waiters(), 1);
    clock.advance(500 * MS);
    assert!(!waiter.is_woken());
    drop(held);
    assert!(waiter.is_woken());
    let p = assert_ready!(waiter.poll()).unwrap();
    assert_eq!((p.count(), c.in_use()), (1, 1));
}

#[test]
fn a_concurrency_waiter_gives_up_at_max_wait_and_a_full_queue_refuses() {
    let (clock, c) = concurrency(1, 1);
    let _held = c.try_acquire(1).unwrap();
    let r = c.try_acquire(1).unwrap_err();
    assert_eq!(
        (r.reason, r.retry_after),
        (RejectReason::ConcurrencyLimited, None)
    );
    let mut waiter = task::spawn(c.acquire(1));
    assert_pending!(waiter.poll());
    let full = futures_block(c.acquire(1)).unwrap_err();
    assert_eq!(full.reason, RejectReason::TooManyWaiters);
    clock.advance(S);
    assert!(waiter.is_woken());
    assert_eq!(
        assert_ready!(waiter.poll()).unwrap_err().reason,
        RejectReason::ConcurrencyLimited
    );
    assert_eq!(
        c.try_acquire(2).unwrap_err().reason,
        RejectReason::ExceedsCapacity
    );
}

#[test]
fn a_blocking_concurrency_waiter_is_woken_by_a_release() {
    let (clock, c) = concurrency(1, 4);
    let held = c.try_acquire(1).unwrap();
    let waiter = {
        let c = c.clone();
        std::thread::spawn(move || c.acquire_blocking(1).map(|p| p.count()))
    };
    clock.wait_for_sleepers(1); // asleep until its deadline, or a release
    drop(held);
    assert_eq!(waiter.join().unwrap().unwrap(), 1);
}

#[test]
fn invalid_figures_are_refused_naming_the_key_and_toml_refuses_bare_numbers() {
    let err = Gcra::new(
        GcraConfig {
            rate: 0,
            ..Default::default()
        },
        ManualClock::new(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "`rate` = 0: must be at least 1");
    let err = Quota::new(
        QuotaConfig {
            alert_at: 1.5,
            ..Default::default()
        },
        ManualClock::new(),
    )
    .unwrap_err();
    assert_eq!(err.key, "alert_at");
    assert!(toml::from_str::<WindowLimitConfig>("window = 1")
        .unwrap_err()
        .to_string()
        .contains("has no unit"));
    assert!(toml::from_str::<WindowLimitConfig>("limt = 1").is_err());
    let c: ConcurrencyConfig =
        toml::from_str("max_concurrent = 8\nwait = { max_wait = \"2s\", order = \"lifo\" }")
            .unwrap();
    assert_eq!(
        (c.wait.max_wait, c.wait.order, c.wait.max_waiters),
        (2 * S, WaitOrder::Lifo, 64)
    );
}

/// 2,000 cases per property. Cases are drawn with XorShift rather than proptest's default ChaCha,
/// which, unoptimised in a test build, took most of a property's time.
fn cases() -> ProptestConfig {
    ProptestConfig {
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::with_cases(2000)
    }
}

/// Nanoseconds in the one-second windows and periods of the properties below.
const W: u64 = 1_000_000_000;
/// Arrivals per case: enough to cross many windows and refill times, few enough that 2,000 cases
/// of each property run in a few seconds unoptimised.
const ARRIVALS: usize = 120;

/// Every decision of a limiter fed `arrivals` (gap in ns, n) on a manual clock: (time, n, admitted).
fn decisions(
    l: &dyn Limiter<Clock = ManualClock>,
    clock: &ManualClock,
    arrivals: &[(u64, u64)],
) -> Vec<(u64, u64, bool)> {
    arrivals
        .iter()
        .map(|&(gap, n)| {
            clock.advance(Duration::from_nanos(gap));
            (clock.now(), n, l.try_acquire(n).is_ok())
        })
        .collect()
}

/// The admissions (time, n) of a limiter fed `arrivals`, in time order.
fn admitted(
    l: &dyn Limiter<Clock = ManualClock>,
    clock: &ManualClock,
    arrivals: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    decisions(l, clock, arrivals)
        .into_iter()
        .filter(|d| d.2)
        .map(|(t, n, _)| (t, n))
        .collect()
}

/// For each admission, the total admitted in the closed span `[its time, its time + d]`. Every
/// span of that length holds no more than the largest of these (slide a span's start forward to
/// the first admission in it). Two pointers: linear in the admissions.
fn span_totals(admits: &[(u64, u64)], d: u64) -> Vec<u64> {
    let (mut end, mut sum) = (0, 0);
    let mut out = Vec::with_capacity(admits.len());
    for &(start, n) in admits {
        while end < admits.len() && admits[end].0 <= start.saturating_add(d) {
            sum += admits[end].1;
            end += 1;
        }
        out.push(sum);
        sum -= n;
    }
    out
}

/// The total admitted in each aligned window `[k·w, (k+1)·w)` that admitted anything.
fn per_window(admits: &[(u64, u64)], w: u64) -> BTreeMap<u64, u64> {
    let mut totals = BTreeMap::new();
    for &(t, n) in admits {
        *totals.entry(t / w).or_insert(0) += n;
    }
    totals
}

/// The largest `count·1s − rate·t` over every span `[t_i, t_j]` between two admissions (`count`
/// admitted in it, `t = t_j − t_i`): "count ≤ burst + rate·t/1s in every span" holds iff this is at
/// most `burst·1s`. Linear: with prefix sums `P`, the span's figure is `A_j − B_i` where
/// `A_j = P_j·1s − rate·t_j` and `B_i = P_(i−1)·1s − rate·t_i`, so keep the least `B` so far.
fn worst_excess(admits: &[(u64, u64)], rate: u64) -> i128 {
    let (w, rate) = (i128::from(W), i128::from(rate));
    let (mut prefix, mut least_b, mut worst) = (0i128, i128::MAX, i128::MIN);
    for &(t, n) in admits {
        let t = i128::from(t);
        least_b = least_b.min(prefix * w - rate * t);
        prefix += i128::from(n);
        worst = worst.max(prefix * w - rate * t - least_b);
    }
    worst
}

/// Gaps between arrivals, in ns: mostly coarse (up to 300 ms), some at the same instant or a
/// nanosecond apart, some a hair around one second (the windows' and periods' length), so that
/// window edges and exact refill times are hit, not only stepped over.
fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0u64..300_000_000,
        2 => 0u64..3,
        1 => W - 2..W + 3,
    ]
}

fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((gap(), 1u64..4), 1..ARRIVALS)
}

/// What a test does next to a concurrency limiter.
#[derive(Debug, Clone)]
enum ConcurrencyOp {
    TryAcquire(u64),
    /// `acquire(n)`, polled once; kept as a waiter if it has to wait.
    Wait(u64),
    /// Drops the permit at this index (modulo the number held).
    Release(usize),
    /// Drops the waiter at this index (a cancelled wait).
    Cancel(usize),
    /// Polls every waiter that was woken.
    Poll,
    AdvanceMs(u64),
}

fn concurrency_op() -> impl Strategy<Value = ConcurrencyOp> {
    prop_oneof![
        3 => (1u64..6).prop_map(ConcurrencyOp::TryAcquire),
        3 => (1u64..6).prop_map(ConcurrencyOp::Wait),
        3 => any::<usize>().prop_map(ConcurrencyOp::Release),
        1 => any::<usize>().prop_map(ConcurrencyOp::Cancel),
        2 => Just(ConcurrencyOp::Poll),
        1 => (0u64..600).prop_map(ConcurrencyOp::AdvanceMs),
    ]
}

/// Polls the waiters that were woken: those that got permits move to `held`, those refused go.
fn poll_woken<F>(waiting: &mut Vec<task::Spawn<F>>, held: &mut Vec<ConcurrencyPermit<ManualClock>>)
where
    F: std::future::Future<Output = Result<ConcurrencyPermit<ManualClock>, sluicegate::Rejection>>,
{
    let mut i = 0;
    while i < waiting.len() {
        if !waiting[i].is_woken() {
            i += 1;
            continue;
        }
        match waiting[i].poll() {
            std::task::Poll::Ready(result) => {
                held.extend(result.ok());
                drop(waiting.remove(i));
            }
            std::task::Poll::Pending => i += 1,
        }
    }
}

proptest! {
    #![proptest_config(cases())]

    /// A token bucket and GCRA never admit more than `burst + rate·t` in any span `t` (and the
    /// bucket decides the same in its one-word, two-word or locked store).
    #[test]
    fn token_bucket_and_gcra_never_admit_more_than_burst_plus_rate_times_t(
        arrivals in arrivals(), rate in 1u64..50, burst in 3u64..20,
    ) {
        let config = TokenBucketConfig { capacity: burst, refill: rate, per: S };
        let clock = ManualClock::new();
        let tb = TokenBucket::new(config, clock.clone()).unwrap();
        let tb_admits = admitted(&tb, &clock, &arrivals);
        // The same decisions whichever store holds the state.
        let clock = ManualClock::new();
        let wide = TokenBucket::with_store(config, clock.clone(), TokenStore::default()).unwrap();
        prop_assert_eq!(&admitted(&wide, &clock, &arrivals), &tb_admits);
        let clock = ManualClock::new();
        let locked = TokenBucket::with_store(config, clock.clone(), MutexStore::default()).unwrap();
        prop_assert_eq!(&admitted(&locked, &clock, &arrivals), &tb_admits);
        let clock = ManualClock::new();
        let g = Gcra::new(GcraConfig { rate, per: S, burst }, clock.clone()).unwrap();
        let g_admits = admitted(&g, &clock, &arrivals);
        for admits in [tb_admits, g_admits] {
            prop_assert!(worst_excess(&admits, rate) <= i128::from(burst) * i128::from(W));
        }
    }

    /// A fixed window admits at most `limit` in each aligned window `[k·w, (k+1)·w)`, and so at
    /// most `2·limit` in any span of one window's length (it meets two windows); it refuses a call
    /// only when the call would take its window over `limit`.
    #[test]
    fn fixed_window_admits_at_most_limit_per_window_and_twice_limit_in_any_span_of_one_window(
        arrivals in arrivals(), limit in 3u64..30,
    ) {
        let clock = ManualClock::new();
        let f = FixedWindow::new(window(limit), clock.clone()).unwrap();
        let seen = decisions(&f, &clock, &arrivals);
        let mut counted: BTreeMap<u64, u64> = BTreeMap::new();
        for &(t, n, admitted) in &seen {
            let count = counted.entry(t / W).or_insert(0);
            prop_assert_eq!(admitted, *count + n <= limit, "at {} ns, {} + {}", t, *count, n);
            *count += if admitted { n } else { 0 };
        }
        let admits: Vec<_> = seen.iter().filter(|d| d.2).map(|&(t, n, _)| (t, n)).collect();
        prop_assert!(per_window(&admits, W).values().all(|&total| total <= limit));
        prop_assert!(span_totals(&admits, W).into_iter().all(|total| total <= 2 * limit));
    }

    /// A sliding-window counter admits at most `limit` per aligned window, and at most
    /// `limit·(1 + f/w)` in a span of one window starting at offset `f` into a window.
    #[test]
    fn sliding_window_counter_stays_within_its_documented_bound(arrivals in arrivals(), limit in 3u64..30) {
        let clock = ManualClock::new();
        let s = SlidingWindow::new(window(limit), clock.clone()).unwrap();
        let admits = admitted(&s, &clock, &arrivals);
        for (&(start, _), in_span) in admits.iter().zip(span_totals(&admits, W - 1)) {
            let f = start % W;
            prop_assert!(u128::from(in_span) * u128::from(W) <= u128::from(limit) * u128::from(W + f));
        }
        prop_assert!(per_window(&admits, W).values().all(|&total| total <= limit));
    }

    /// A sliding log never admits more than `limit` in any span shorter than its window, and
    /// `retry_after` is exact: at that moment the same call is admitted.
    #[test]
    fn sliding_log_is_exact_and_its_retry_after_is_truthful(arrivals in arrivals(), limit in 3u64..30) {
        let clock = ManualClock::new();
        let l = SlidingLog::new(window(limit), clock.clone()).unwrap();
        let admits = admitted(&l, &clock, &arrivals);
        prop_assert!(span_totals(&admits, W - 1).into_iter().all(|total| total <= limit));
        if let Err(r) = l.try_acquire(limit) {
            let wait = r.retry_after.unwrap();
            clock.advance(wait - Duration::from_nanos(1));
            prop_assert!(l.try_acquire(limit).is_err());
            clock.advance(Duration::from_nanos(1));
            prop_assert!(l.try_acquire(limit).is_ok());
        }
    }

    /// A quota admits at most `limit` per period whatever the arrivals, refuses only a call that
    /// would take its period over `limit`, and its overdraw alert fires exactly once in each period
    /// whose use reaches `alert_at` (at the call that reached it) and in no other.
    #[test]
    fn quota_keeps_to_its_limit_per_period_and_alerts_once_per_period(
        arrivals in arrivals(), limit in 3u64..30, percent in 1u64..=100,
    ) {
        let clock = ManualClock::new();
        let alerts = Arc::new(Mutex::new(Vec::new()));
        let sink = alerts.clone();
        let config = QuotaConfig { limit, period: S, alert_at: percent as f64 / 100.0 };
        let q = Quota::new(config, clock.clone())
            .unwrap()
            .on_alert(move |a| sink.lock().unwrap().push(a));
        let seen = decisions(&q, &clock, &arrivals);
        // The definition, step by step: use per period, and the alert at ceil(alert_at · limit).
        let threshold = (percent * limit).div_ceil(100);
        let (mut used, mut expected): (BTreeMap<u64, u64>, Vec<QuotaAlert>) = Default::default();
        for &(t, n, admitted) in &seen {
            let period = t / W;
            let use_now = used.entry(period).or_insert(0);
            prop_assert_eq!(admitted, *use_now + n <= limit, "at {} ns, {} + {}", t, *use_now, n);
            if admitted {
                let before = *use_now;
                *use_now += n;
                if before < threshold && *use_now >= threshold {
                    expected.push(QuotaAlert { period, used: *use_now, limit });
                }
            }
        }
        prop_assert!(used.values().all(|&u| u <= limit));
        prop_assert_eq!(&*alerts.lock().unwrap(), &expected);
        let now = used.get(&(clock.now() / W)).copied().unwrap_or(0);
        prop_assert_eq!((q.used(), q.alerted()), (now, now >= threshold));
    }

    /// A concurrency limiter never has more than `max_concurrent` permits out, after any
    /// interleaving of `try_acquire`, waits, releases, cancelled waits and time; what it counts as
    /// out is exactly what its permits hold; whenever every permit is free a waiter has been woken
    /// (no lost wake-up); and once every permit is dropped, every waiter is served or refused, and
    /// the count is back to 0 with nobody waiting.
    #[test]
    fn concurrency_limiter_never_has_more_than_max_out_and_returns_to_zero(
        ops in proptest::collection::vec(concurrency_op(), 1..80),
        max in 1u64..5,
        lifo in any::<bool>(),
    ) {
        let clock = ManualClock::new();
        let order = if lifo { WaitOrder::Lifo } else { WaitOrder::Fifo };
        let wait = WaitConfig { max_wait: S, max_waiters: 3, order };
        let c = ConcurrencyLimiter::new(ConcurrencyConfig { max_concurrent: max, wait }, clock.clone()).unwrap();
        let (mut held, mut waiting) = (Vec::new(), Vec::new());
        for op in ops {
            match op {
                ConcurrencyOp::TryAcquire(n) => held.extend(c.try_acquire(n).ok()),
                ConcurrencyOp::Wait(n) => {
                    let mut waiter = task::spawn(c.acquire(n));
                    match waiter.poll() {
                        std::task::Poll::Ready(result) => held.extend(result.ok()),
                        std::task::Poll::Pending => waiting.push(waiter),
                    }
                }
                ConcurrencyOp::Release(i) if !held.is_empty() => drop(held.swap_remove(i % held.len())),
                ConcurrencyOp::Cancel(i) if !waiting.is_empty() => drop(waiting.remove(i % waiting.len())),
                ConcurrencyOp::Poll => poll_woken(&mut waiting, &mut held),
                ConcurrencyOp::AdvanceMs(ms) => clock.advance(Duration::from_millis(ms)),
                ConcurrencyOp::Release(_) | ConcurrencyOp::Cancel(_) => {}
            }
            let out: u64 = held.iter().map(|p| p.count()).sum();
            prop_assert_eq!(c.in_use(), out);
            prop_assert!(out <= max);
            // With every permit free, the waiter being served can proceed: it must have been woken.
            prop_assert!(out > 0 || waiting.is_empty() || waiting.iter().any(|w| w.is_woken()),
                "every permit is free and no waiter was woken");
        }
        // Wind down with the clock stopped: each release wakes the waiter being served, which
        // takes its permits (dropped at once, waking the next) or is refused.
        held.clear();
        for _ in 0..20 {
            if waiting.is_empty() {
                break;
            }
            prop_assert!(waiting.iter().any(|w| w.is_woken()), "every permit is free and no waiter was woken");
            poll_woken(&mut waiting, &mut held);
            held.clear();
        }
        prop_assert!(waiting.is_empty(), "{} waiters never served", waiting.len());
        prop_assert_eq!((c.in_use(), c.waiters()), (0, 0));
    }

    /// Every rate limiter's `retry_after` is exact: refused a nanosecond before, admitted at it.
    #[test]
    fn retry_after_is_the_exact_moment_of_admission(arrivals in arrivals(), n in 1u64..4) {
        let clock = ManualClock::new();
        let quota = QuotaConfig { limit: 5, period: S, alert_at: 1.0 };
        let limiters: Vec<Box<dyn Limiter<Clock = ManualClock>>> = vec![
            Box::new(TokenBucket::new(TokenBucketConfig { capacity: 5, refill: 7, per: S }, clock.clone()).unwrap()),
            // A refill that divides the period: the bucket counts in nanoseconds, in one word.
            Box::new(TokenBucket::new(TokenBucketConfig { capacity: 5, refill: 10, per: S }, clock.clone()).unwrap()),
            Box::new(Gcra::new(GcraConfig { rate: 7, per: S, burst: 5 }, clock.clone()).unwrap()),
            Box::new(FixedWindow::new(window(5), clock.clone()).unwrap()),
            Box::new(SlidingWindow::new(window(5), clock.clone()).unwrap()),
            Box::new(SlidingLog::new(window(5), clock.clone()).unwrap()),
            Box::new(Quota::new(quota, clock.clone()).unwrap()),
        ];
        for l in &limiters {
            admitted(l.as_ref(), &clock, &arrivals);
            if let Err(r) = l.try_acquire(n) {
                let wait = r.retry_after.unwrap();
                clock.advance(wait - Duration::from_nanos(1));
                prop_assert!(l.try_acquire(n).is_err());
                clock.advance(Duration::from_nanos(1));
                prop_assert!(l.try_acquire(n).is_ok());
            }
        }
    }
}

#[test]
fn limiters_waiters_and_permits_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<TokenBucket<ManualClock>>();
    send_sync::<Gcra<ManualClock>>();
    send_sync::<FixedWindow<ManualClock>>();
    send_sync::<SlidingWindow<ManualClock>>();
    send_sync::<SlidingLog<ManualClock>>();
    send_sync::<Quota<ManualClock>>();
    send_sync::<Waiting<Gcra<ManualClock>>>();
    send_sync::<ConcurrencyLimiter<ManualClock>>();
    send_sync::<sluicegate::limit::ConcurrencyPermit<ManualClock>>();
}
