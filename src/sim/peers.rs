//! Adaptive peers: two published adaptive limiters, rebuilt for the simulator so that the gate is
//! measured against the best-known self-tuning alternatives, not only against static limits.
//!
//! * [`Gradient2`]: Netflix concurrency-limits' `Gradient2Limit` behind its `WindowedLimit` and
//!   `SimpleLimiter`: an in-flight limit that follows the ratio of a long-term to a short-term
//!   round-trip time.
//! * [`Bbr`]: the "BBR" check of Alibaba Sentinel's adaptive system protection as go-kratos
//!   implements it (`ratelimit/bbr`): when the CPU is busy, refuse whatever would take in-flight
//!   above the largest throughput times the smallest latency seen recently.
//!
//! Both are written from the published algorithms and their libraries' defaults; nothing is tuned to
//! a scenario, and the values used are listed on each type. Both are pure functions of the calls they
//! receive (no wall clock, no randomness), so a simulation with them stays deterministic.
//!
//! Both refuse at once (`Offer::Refuse { retry_after: None }`): neither library queues or tells a
//! client when to come back. Neither has a switch in the sense of [`Strategy::switch_on`], so their
//! reports show no switch flips.

use std::time::Duration;

use super::strategy::{AttemptId, BackendView, IdMap, Offer, Strategy};
use crate::clock::{duration_to_nanos, Nanos};

const NANOS_PER_MS: Nanos = 1_000_000;

/// Netflix's exponential average (`ExpAvgMeasurement`): a plain mean over the first `warmup`
/// samples, then an exponential average with factor `2 / (window + 1)`.
#[derive(Debug, Clone, Copy)]
struct ExpAvg {
    value: f64,
    sum: f64,
    count: u32,
    window: u32,
    warmup: u32,
}

impl ExpAvg {
    fn new(window: u32, warmup: u32) -> Self {
        ExpAvg {
            value: 0.0,
            sum: 0.0,
            count: 0,
            window,
            warmup,
        }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            let factor = 2.0 / (f64::from(self.window) + 1.0);
            self.value = self.value * (1.0 - factor) + sample * factor;
        }
        self.value
    }
}

/// The samples of one `WindowedLimit` window (`ImmutableAverageSampleWindow`).
#[derive(Debug, Clone, Copy)]
struct SampleWindow {
    min_rtt: Nanos,
    sum: u128,
    max_in_flight: u64,
    count: u64,
}

impl SampleWindow {
    const EMPTY: SampleWindow = SampleWindow {
        min_rtt: Nanos::MAX,
        sum: 0,
        max_in_flight: 0,
        count: 0,
    };

    fn add(&mut self, rtt: Nanos, in_flight: u64) {
        self.min_rtt = self.min_rtt.min(rtt);
        self.sum += u128::from(rtt);
        self.max_in_flight = self.max_in_flight.max(in_flight);
        self.count += 1;
    }

    /// The mean RTT (integer division, as the library's `sum / sampleCount`).
    fn mean(&self) -> Nanos {
        if self.count == 0 {
            0
        } else {
            u64::try_from(self.sum / u128::from(self.count)).unwrap_or(Nanos::MAX)
        }
    }
}

/// Netflix concurrency-limits' **`Gradient2Limit`**, fed the way its **`WindowedLimit`** feeds it and
/// enforced the way its **`SimpleLimiter`** enforces it.
///
/// Source: `github.com/Netflix/concurrency-limits`, `concurrency-limits-core`:
/// `limit/Gradient2Limit.java` (the algorithm and its `Builder` defaults), `limit/WindowedLimit.java`
/// (windows), `limit/window/ImmutableAverageSampleWindow.java` (per-window mean),
/// `limit/measurement/ExpAvgMeasurement.java` (the long-term average), `limiter/AbstractLimiter.java`
/// and `limiter/SimpleLimiter.java` (admission); described in Netflix's "Performance Under Load"
/// (2018).
///
/// # The algorithm
/// Every answered request gives a sample: its round-trip time (admission to answer) and the number in
/// flight when it was admitted, itself included. Samples under 100 µs are ignored. Samples gather in
/// a window; the first sample that ends after the window's end closes it, and a window that holds
/// at least 10 samples updates the limit once, with the window's **mean** RTT as `shortRtt` and its
/// **largest** in-flight figure as `inflight`. The next window ends 1 s after the sample that closed
/// the last one (the library's `clamp(2 × minRtt, 1 s, 1 s)`). Then:
///
/// ```text
/// longRtt  = ExpAvg(shortRtt)                 // plain mean of the first 10, then factor 2/(600+1)
/// if longRtt / shortRtt > 2: longRtt *= 0.95  // recover quickly after a long overload
/// if inflight < limit / 2: stop               // app-limited: no change
/// gradient = clamp(1.5 × longRtt / shortRtt, 0.5, 1)
/// newLimit = limit × gradient + 4
/// limit    = clamp(limit × 0.8 + newLimit × 0.2, 20, 200)
/// ```
///
/// An attempt is admitted while in-flight (admitted, not yet answered) is below the integer part of
/// the limit, and refused at once otherwise.
///
/// # Parameters: the library defaults
/// | parameter | value | where |
/// | --- | --- | --- |
/// | initial limit | 20 | `Gradient2Limit.Builder.initialLimit` |
/// | minimum limit | 20 | `Builder.minLimit` |
/// | maximum limit | 200 | `Builder.maxConcurrency` |
/// | smoothing | 0.2 | `Builder.smoothing` |
/// | queue size | 4 | `Builder.queueSize` |
/// | RTT tolerance | 1.5 | `Builder.rttTolerance` |
/// | long window | 600 samples (warm-up 10) | `Builder.longWindow`, `new ExpAvgMeasurement(longWindow, 10)` |
/// | long-RTT pull-down | × 0.95 when longRtt > 2 × shortRtt | `Gradient2Limit._update` |
/// | window | 1 s (minimum and maximum) | `WindowedLimit.DEFAULT_MIN/MAX_WINDOW_TIME` |
/// | samples per window | ≥ 10 | `WindowedLimit.DEFAULT_WINDOW_SIZE` |
/// | ignored RTT | < 100 µs | `WindowedLimit.DEFAULT_MIN_RTT_THRESHOLD` |
///
/// The default maximum (200) is below what a large backend needs: a backend of W workers wants at
/// least W in flight, and the simulator's backends range from 10 to 25,000 workers. The library does
/// not document `maxConcurrency` as a value the user must set (its builder says only "Maximum
/// allowable concurrency. Any estimated concurrency will be capped at this value"), so the default is
/// kept: on a backend of more than 200 workers, this strategy cannot use the whole backend.
///
/// # Mapping to the simulator
/// An answer whose client had already given up (`ok == false` in [`Strategy::complete`]) releases its
/// slot without a sample, as the library's gRPC server interceptor does for a cancelled call
/// (`onIgnore`). The strategy never makes an attempt wait.
#[derive(Debug, Clone)]
pub struct Gradient2 {
    estimated_limit: f64,
    long_rtt: ExpAvg,
    last_rtt: Nanos,
    next_update: Nanos,
    window: SampleWindow,
    in_flight: u64,
    /// Admission time and in-flight at admission (itself included) of every attempt in flight.
    started: IdMap<(Nanos, u64)>,
}

impl Default for Gradient2 {
    fn default() -> Self {
        Gradient2::new()
    }
}

impl Gradient2 {
    /// The initial limit (`Gradient2Limit.Builder.initialLimit`).
    pub const INITIAL_LIMIT: u32 = 20;
    /// The limit never goes below this (`Builder.minLimit`).
    pub const MIN_LIMIT: u32 = 20;
    /// The limit never goes above this (`Builder.maxConcurrency`).
    pub const MAX_LIMIT: u32 = 200;
    /// Weight of a new estimate in the smoothed limit (`Builder.smoothing`).
    pub const SMOOTHING: f64 = 0.2;
    /// What the limit may grow by per update while latency is flat (`Builder.queueSize`).
    pub const QUEUE_SIZE: u32 = 4;
    /// How much the short-term RTT may exceed the long-term one before the limit falls
    /// (`Builder.rttTolerance`).
    pub const RTT_TOLERANCE: f64 = 1.5;
    /// Samples (window updates) the long-term RTT averages over (`Builder.longWindow`).
    pub const LONG_WINDOW: u32 = 600;
    /// Updates of the long-term RTT that are a plain mean before it becomes exponential.
    pub const LONG_WARMUP: u32 = 10;
    /// The length of a sampling window (`WindowedLimit`'s minimum and maximum window time).
    pub const WINDOW: Duration = Duration::from_secs(1);
    /// Samples a window needs to update the limit (`WindowedLimit.DEFAULT_WINDOW_SIZE`).
    pub const WINDOW_SAMPLES: u64 = 10;
    /// Samples with a shorter RTT are ignored (`WindowedLimit.DEFAULT_MIN_RTT_THRESHOLD`).
    pub const MIN_RTT: Duration = Duration::from_micros(100);

    /// A limiter with the library's defaults, nothing in flight.
    pub fn new() -> Self {
        Gradient2 {
            estimated_limit: f64::from(Self::INITIAL_LIMIT),
            long_rtt: ExpAvg::new(Self::LONG_WINDOW, Self::LONG_WARMUP),
            last_rtt: 0,
            next_update: 0,
            window: SampleWindow::EMPTY,
            in_flight: 0,
            started: IdMap::default(),
        }
    }

    /// The limit in force: the integer part of [`Gradient2::estimated_limit`]. An attempt is admitted
    /// while fewer than this many are in flight.
    pub fn limit(&self) -> u64 {
        // The estimate stays within [MIN_LIMIT, MAX_LIMIT], so the conversion is exact truncation.
        self.estimated_limit as u64
    }

    /// The smoothed limit estimate, before truncation.
    pub fn estimated_limit(&self) -> f64 {
        self.estimated_limit
    }

    /// Attempts admitted and not yet answered.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// The long-term RTT (`getRttNoLoad`), nanoseconds; 0 before the first update.
    pub fn long_rtt(&self) -> f64 {
        self.long_rtt.value
    }

    /// The short-term RTT of the last update (`getLastRtt`: the last full window's mean),
    /// nanoseconds; 0 before the first update.
    pub fn last_rtt(&self) -> Nanos {
        self.last_rtt
    }

    /// `WindowedLimit.onSample`: gathers a sample and closes the window when it is due.
    fn sample(&mut self, start: Nanos, rtt: Nanos, in_flight: u64) {
        if rtt < duration_to_nanos(Self::MIN_RTT) {
            return;
        }
        self.window.add(rtt, in_flight);
        let end = start.saturating_add(rtt);
        if end > self.next_update {
            let window = std::mem::replace(&mut self.window, SampleWindow::EMPTY);
            self.next_update = end.saturating_add(duration_to_nanos(Self::WINDOW));
            if window.min_rtt < Nanos::MAX && window.count >= Self::WINDOW_SAMPLES {
                self.update(window.mean(), window.max_in_flight);
            }
        }
    }

    /// `Gradient2Limit._update`.
    fn update(&mut self, rtt: Nanos, in_flight: u64) {
        let queue_size = f64::from(Self::QUEUE_SIZE);
        self.last_rtt = rtt;
        let short = rtt as f64;
        let long = self.long_rtt.add(short);
        if long / short > 2.0 {
            self.long_rtt.value *= 0.95;
        }
        if (in_flight as f64) < self.estimated_limit / 2.0 {
            return;
        }
        let gradient = (Self::RTT_TOLERANCE * long / short).clamp(0.5, 1.0);
        let new_limit = self.estimated_limit * gradient + queue_size;
        let new_limit =
            self.estimated_limit * (1.0 - Self::SMOOTHING) + new_limit * Self::SMOOTHING;
        self.estimated_limit =
            new_limit.clamp(f64::from(Self::MIN_LIMIT), f64::from(Self::MAX_LIMIT));
    }
}

impl Strategy for Gradient2 {
    fn offer(&mut self, id: AttemptId, _: bool, now: Nanos, _: &BackendView) -> Offer {
        if self.in_flight < self.limit() {
            self.in_flight += 1;
            self.started.insert(id, (now, self.in_flight));
            Offer::Admit
        } else {
            Offer::Refuse { retry_after: None }
        }
    }

    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        self.offer(id, true, now, backend)
    }

    fn abandon(&mut self, _: AttemptId, _: Nanos) {}

    fn complete(&mut self, id: AttemptId, now: Nanos, ok: bool) {
        let Some((start, in_flight)) = self.started.remove(&id) else {
            return;
        };
        self.in_flight = self.in_flight.saturating_sub(1);
        if ok {
            self.sample(start, now.saturating_sub(start), in_flight);
        }
    }
}

/// One bucket of the rolling counters: answers and the sum of their RTTs (whole milliseconds).
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The absolute bucket number (time ÷ bucket length) this slot holds now.
    index: u64,
    passed: u64,
    rt_sum_ms: u64,
}

/// The **BBR** check of Alibaba Sentinel's adaptive system protection, as go-kratos implements it
/// (`ratelimit/bbr`), with worker utilisation standing in for CPU usage.
///
/// Sources: `github.com/go-kratos/aegis`, `ratelimit/bbr/bbr.go` (formerly `go-kratos/kratos`,
/// `pkg/ratelimit/bbr`), with its rolling window `pkg/window`; Sentinel's wiki page "系统自适应限流"
/// (system adaptive protection) and `SystemRuleManager.checkBbr` in `alibaba/Sentinel`, where the
/// check is `threads > 1 && threads > maxSuccessQps × minRt / 1000`.
///
/// # The algorithm (kratos)
/// * Every answered request adds 1 to a pass counter and its RT, in whole milliseconds (truncated),
///   to an RT counter. Both are rolling windows of 100 buckets of 100 ms (10 s), aligned to the
///   limiter's creation (time 0).
/// * `maxPass` is the largest count of a bucket among the 99 buckets before the current one (at
///   least 1; 0 if nothing was recorded for a whole window); `minRT` is the smallest mean RT of a
///   non-empty bucket among them, rounded up (at least 1 ms). Each is recomputed at most once per
///   bucket length (100 ms) and cached in between.
/// * `maxInFlight = ⌊maxPass × minRT × 10 / 1000⌋` (10 buckets a second): the most that can be in
///   flight at the best throughput and the best latency seen (Little's law).
/// * **Drop** an attempt when the CPU figure is ≥ 800 ‰ and `inFlight > 1 && inFlight >
///   maxInFlight`. The first such drop stores its time; while the CPU figure is below 800 ‰ and that
///   time is at most 1 s ago (the **cool-down**), the same in-flight check still drops. Once the CPU
///   figure is low and the stored time is more than 1 s ago, it is cleared and everything is
///   admitted. (kratos stores the time of the *first* drop of an episode, not of the latest, so the
///   cool-down runs 1 s from when dropping began.)
/// * The CPU figure is a decayed moving average sampled every 500 ms:
///   `cpu = ⌊cpu × 0.95 + usage × 0.05⌋`, in per mille, `usage` capped at 1000, starting at 0.
///
/// # Parameters: the library defaults
/// | parameter | value | where |
/// | --- | --- | --- |
/// | window | 10 s | `NewLimiter`: `Window: time.Second * 10` |
/// | buckets | 100 (100 ms each) | `NewLimiter`: `Bucket: 100` |
/// | CPU threshold | 800 ‰ (80 %) | `NewLimiter`: `CPUThreshold: 800` |
/// | CPU smoothing | decay 0.95, sampled every 500 ms | `decay = 0.95`, `cpuproc` ticker |
/// | cool-down | 1 s | `shouldDrop`: `<= time.Second` |
///
/// # The CPU substitution
/// The simulator has no CPU. The CPU figure here is **worker utilisation**: busy workers ÷ workers
/// (`BackendView::in_service / BackendView::workers`), averaged over each 500 ms sampling interval
/// (as a CPU-usage reading is an average over the interval since the last one) and then smoothed as
/// kratos smooths CPU. Between the views the strategy is shown, busy workers are kept exact from its
/// own count of attempts in flight: the backend serves in FIFO order on W workers, so `in_service`
/// is `min(in-flight, W)`. Sampling runs on [`Strategy::timer`].
///
/// Every answer counts, whether or not its client was still waiting (kratos records every `done`).
/// The strategy never makes an attempt wait.
#[derive(Debug, Clone)]
pub struct Bbr {
    buckets: Vec<Bucket>,
    /// The absolute bucket of the last record (0 before any: the window starts at creation).
    last_record: u64,
    max_pass_cache: Option<(u64, Nanos)>,
    min_rt_cache: Option<(u64, Nanos)>,
    in_flight: u64,
    started: IdMap<Nanos>,
    /// The smoothed CPU figure, per mille.
    cpu: u64,
    workers: u64,
    /// Busy-worker nanoseconds since the last CPU sample.
    busy: u128,
    last_change: Nanos,
    last_cpu_sample: Option<Nanos>,
    drop_since: Option<Nanos>,
}

impl Default for Bbr {
    fn default() -> Self {
        Bbr::new()
    }
}

impl Bbr {
    /// The rolling window's length (kratos `Window`).
    pub const WINDOW: Duration = Duration::from_secs(10);
    /// Buckets in the rolling window (kratos `Bucket`).
    pub const BUCKETS: u32 = 100;
    /// The CPU figure, per mille, at and above which the check applies (kratos `CPUThreshold`).
    pub const CPU_THRESHOLD: u64 = 800;
    /// The weight of the previous CPU figure in the moving average (kratos `decay`).
    pub const CPU_DECAY: f64 = 0.95;
    /// How often the CPU figure is sampled (kratos' `cpuproc` ticker).
    pub const CPU_INTERVAL: Duration = Duration::from_millis(500);
    /// How long after dropping began the in-flight check still applies with a low CPU figure.
    pub const COOL_DOWN: Duration = Duration::from_secs(1);

    /// A limiter with kratos' defaults, nothing recorded, CPU figure 0.
    pub fn new() -> Self {
        Bbr {
            buckets: vec![Bucket::default(); Self::BUCKETS as usize],
            last_record: 0,
            max_pass_cache: None,
            min_rt_cache: None,
            in_flight: 0,
            started: IdMap::default(),
            cpu: 0,
            workers: 1,
            busy: 0,
            last_change: 0,
            last_cpu_sample: None,
            drop_since: None,
        }
    }

    fn bucket_nanos() -> Nanos {
        (duration_to_nanos(Self::WINDOW) / u64::from(Self::BUCKETS)).max(1)
    }

    fn buckets_per_second() -> u64 {
        1_000_000_000 / Self::bucket_nanos()
    }

    /// The smoothed CPU figure (worker utilisation), per mille.
    pub fn cpu(&self) -> u64 {
        self.cpu
    }

    /// Attempts admitted and not yet answered.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// When the current dropping episode began (the time kratos keeps for the cool-down), if one is
    /// under way.
    pub fn dropping_since(&self) -> Option<Nanos> {
        self.drop_since
    }

    /// `maxPass`: the most answers in one bucket among the 99 before the one holding `now` (at least
    /// 1; 0 if nothing was recorded for a whole window). Cached for one bucket length, as kratos does.
    pub fn max_pass(&mut self, now: Nanos) -> u64 {
        if let Some((value, at)) = self.max_pass_cache {
            if now.saturating_sub(at) < Self::bucket_nanos() {
                return value;
            }
        }
        let value = match self.completed_buckets(now) {
            None => 0,
            Some(buckets) => buckets.map(|b| b.passed).fold(1, u64::max),
        };
        self.max_pass_cache = Some((value, now));
        value
    }

    /// `minRT`: the smallest mean RT (whole milliseconds, rounded up, at least 1) of a non-empty
    /// bucket among the 99 before the one holding `now`. Cached for one bucket length.
    pub fn min_rt_ms(&mut self, now: Nanos) -> u64 {
        if let Some((value, at)) = self.min_rt_cache {
            if now.saturating_sub(at) < Self::bucket_nanos() {
                return value;
            }
        }
        let min = self.completed_buckets(now).and_then(|buckets| {
            buckets
                .filter(|b| b.passed > 0)
                .map(|b| b.rt_sum_ms as f64 / b.passed as f64)
                .min_by(f64::total_cmp)
        });
        let value = min.map_or(1, |m| (m.ceil() as u64).max(1));
        self.min_rt_cache = Some((value, now));
        value
    }

    /// `maxInFlight` at `now`: `⌊maxPass × minRT × 10 / 1000⌋`, as the limiter computes it (which
    /// refreshes its 100 ms caches).
    pub fn max_in_flight(&mut self, now: Nanos) -> u64 {
        let pass = self.max_pass(now);
        let rt = self.min_rt_ms(now);
        pass.saturating_mul(rt)
            .saturating_mul(Self::buckets_per_second())
            / 1000
    }

    /// The buckets before the current one that are still in the window, oldest first; `None` when
    /// nothing was recorded for a whole window (kratos then reduces to 0).
    fn completed_buckets(&self, now: Nanos) -> Option<impl Iterator<Item = &Bucket>> {
        let size = u64::from(Self::BUCKETS);
        let current = now / Self::bucket_nanos();
        if current.saturating_sub(self.last_record) >= size {
            return None;
        }
        let first = (current + 1).saturating_sub(size);
        Some((first..current).filter_map(move |index| {
            self.buckets
                .get((index % size) as usize)
                .filter(|b| b.index == index)
        }))
    }

    fn record(&mut self, now: Nanos, rt_ms: u64) {
        let size = u64::from(Self::BUCKETS);
        let index = now / Self::bucket_nanos();
        if let Some(bucket) = self.buckets.get_mut((index % size) as usize) {
            if bucket.index != index {
                *bucket = Bucket {
                    index,
                    ..Bucket::default()
                };
            }
            bucket.passed += 1;
            bucket.rt_sum_ms = bucket.rt_sum_ms.saturating_add(rt_ms);
        }
        self.last_record = self.last_record.max(index);
    }

    /// Adds the busy-worker time up to `now` (in-flight changes only at admissions and answers).
    fn account(&mut self, now: Nanos) {
        let busy = self.in_flight.min(self.workers);
        let elapsed = now.saturating_sub(self.last_change);
        self.busy = self
            .busy
            .saturating_add(u128::from(busy) * u128::from(elapsed));
        self.last_change = self.last_change.max(now);
    }

    /// kratos `shouldDrop`.
    fn should_drop(&mut self, now: Nanos) -> bool {
        let over = |s: &mut Self| s.in_flight > 1 && s.in_flight > s.max_in_flight(now);
        if self.cpu < Self::CPU_THRESHOLD {
            match self.drop_since {
                None => false,
                Some(since) if now.saturating_sub(since) <= duration_to_nanos(Self::COOL_DOWN) => {
                    over(self)
                }
                Some(_) => {
                    self.drop_since = None;
                    false
                }
            }
        } else {
            let drop = over(self);
            if drop && self.drop_since.is_none() {
                self.drop_since = Some(now);
            }
            drop
        }
    }
}

impl Strategy for Bbr {
    fn offer(&mut self, id: AttemptId, _: bool, now: Nanos, backend: &BackendView) -> Offer {
        self.account(now);
        self.workers = u64::from(backend.workers).max(1);
        if self.should_drop(now) {
            return Offer::Refuse { retry_after: None };
        }
        self.in_flight += 1;
        self.started.insert(id, now);
        Offer::Admit
    }

    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        self.offer(id, true, now, backend)
    }

    fn abandon(&mut self, _: AttemptId, _: Nanos) {}

    fn complete(&mut self, id: AttemptId, now: Nanos, _: bool) {
        let Some(start) = self.started.remove(&id) else {
            return;
        };
        self.account(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        self.record(now, now.saturating_sub(start) / NANOS_PER_MS);
    }

    fn timer(&mut self, now: Nanos, backend: &BackendView) -> Option<Nanos> {
        self.account(now);
        self.workers = u64::from(backend.workers).max(1);
        if let Some(last) = self.last_cpu_sample {
            let interval = now.saturating_sub(last);
            if interval > 0 {
                let capacity = u128::from(self.workers) * u128::from(interval);
                let usage = (self.busy.saturating_mul(1000) / capacity).min(1000) as u64;
                let cpu =
                    self.cpu as f64 * Self::CPU_DECAY + usage as f64 * (1.0 - Self::CPU_DECAY);
                // Truncated toward zero, as kratos' int64 conversion does; always within 0..=1000.
                self.cpu = cpu as u64;
            }
        }
        self.busy = 0;
        self.last_cpu_sample = Some(now);
        Some(now.saturating_add(duration_to_nanos(Self::CPU_INTERVAL)))
    }
}
