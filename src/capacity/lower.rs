//! The lower bound: the fewest workers the answers prove, counted from completions.
//!
//! Behind W workers that take requests in the order they came, a request admitted at level n
//! (requests in flight, itself included) starts once n − W of the requests ahead of it are back.
//! It started no later than its latency less its own service time, and its service took at least
//! the quickest answer seen: so if D answers came back between its admission and its completion
//! less that quickest answer, then W ≥ n − D. The bound needs no model of the service times and
//! no band of samples: one quick answer from a level with no queue proves that level, one from
//! behind a queue proves W itself. On constant service times it is exact from the first queue.
//!
//! It counts every answer, so it runs only while every request is timed (the gate times them all
//! up to a few thousand answers a second, where the bands are thinnest); a service timed one in
//! several leaves it to the knee fit. The bound is the highest of the last [`WINDOW`] latency
//! scales, so that a service that slows down is followed, and a bound read off a quickest answer
//! seen too early (a service time below it counts as waiting) does not outlive it.
//! `docs/design/capacity.md` has the measurements.

use super::Sample;
use crate::clock::Nanos;

/// The bound is the highest of this many latency scales: long enough that a ceiling held at the
/// bound keeps meeting answers that prove it, short enough to follow a service that slows down.
pub(crate) const WINDOW: f64 = 32.0;
/// A bound that rose by this factor within [`GROWING`] round trips is still growing (smaller rises
/// are the tail of the same level proved again), and answers from levels this far above the bound
/// that do not raise it show that the levels above it were tried.
pub(crate) const RISE: f64 = 1.25;
/// Round trips (base latencies) a rise keeps the bound growing: a slow start doubles once a round
/// trip, so three without a rise of a quarter mean it has stopped.
pub(crate) const GROWING: f64 = 3.0;

/// The base latency is the mean of the answers from levels at or below the bound, over about this
/// many of them: a twentieth of requests twenty times slower moved a mean of 64 by half and more,
/// and the capacity (the bound ÷ the base) with it.
pub(crate) const BASE_WEIGHT: f64 = 1.0 / 1024.0;

/// Completion times kept at most (half a megabyte): [`WINDOW`] latency scales of a long queue at a
/// few thousand answers a second would hold millions.
pub(crate) const KEPT: usize = 1 << 16;

/// The completions-counted lower bound on the service's parallelism.
#[derive(Debug, Default)]
pub(crate) struct Lower {
    /// Completion times of the timed requests of the last [`WINDOW`] latency scales, sorted.
    done: Vec<Nanos>,
    /// The quickest answer seen (nanoseconds), `None` before any.
    quickest: Option<Nanos>,
    /// Since when every request has been timed.
    exact_since: Option<Nanos>,
    /// Completions before this time are no longer kept.
    kept_from: Nanos,
    /// Each tick's highest bound and highest level answered, with the tick's time, for
    /// [`WINDOW`] latency scales.
    recent: Vec<(Nanos, f64, f64)>,
    /// The bound when it last rose by [`RISE`], and when.
    mark: f64,
    rose_at: Nanos,
    /// The mean latency of the answers from levels at or below the bound (nanoseconds), 0 before,
    /// and how many it has taken in.
    base: f64,
    based: u64,
}

impl Lower {
    /// A tick at `now`: the samples since the last one, read while requests were timed as the
    /// previous tick asked; `every` is what this tick asks from now on, `scale` the smooth latency.
    pub(crate) fn observe(&mut self, now: Nanos, samples: &[Sample], every: u64, scale: f64) {
        if now < self.kept_from || self.exact_since.is_some_and(|since| now < since) {
            // The clock's reading wrapped (it is kept modulo 2^48): start afresh.
            *self = Lower::default();
        }
        // Any answer bounds the quickest service, timed in full or not.
        if let Some(q) = samples.iter().map(|s| s.latency).min() {
            self.quickest = Some(self.quickest.map_or(q, |quickest| quickest.min(q)));
        }
        if let Some(since) = self.exact_since {
            self.count(now, samples, since, scale);
        }
        if every > 1 {
            *self = Lower {
                quickest: self.quickest,
                ..Lower::default()
            };
        } else if self.exact_since.is_none() {
            self.exact_since = Some(now);
        }
    }

    fn count(&mut self, now: Nanos, samples: &[Sample], since: Nanos, scale: f64) {
        for s in samples {
            self.done.push(s.admitted.saturating_add(s.latency));
        }
        self.done.sort_unstable();
        let horizon = (WINDOW * scale) as Nanos;
        self.kept_from = self.kept_from.max(now.saturating_sub(horizon));
        if self.done.len() > KEPT {
            // Past the memory kept: the oldest go, and the requests admitted before them with them.
            let cut = self.done[self.done.len() - KEPT];
            self.kept_from = self.kept_from.max(cut);
        }
        let old = self.done.partition_point(|&t| t < self.kept_from);
        self.done.drain(..old);
        // A request admitted before the completions kept, or before every request came to be
        // timed, may have seen answers that are not counted.
        let from = self.kept_from.max(since);
        let quickest = self.quickest.unwrap_or(0);
        let proved = self.bound().unwrap_or(0.0);
        let (mut best, mut top) = (0.0_f64, 0.0_f64);
        for s in samples.iter().filter(|s| s.admitted > from) {
            let end = (s.admitted + s.latency).saturating_sub(quickest);
            let before = self.done.partition_point(|&t| t <= s.admitted);
            let by = self.done.partition_point(|&t| t <= end);
            let level = f64::from(s.level);
            top = top.max(level);
            best = best.max(level - by.saturating_sub(before) as f64);
            if level <= proved {
                self.based += 1;
                let weight = BASE_WEIGHT.max(1.0 / self.based as f64);
                self.base += (s.latency as f64 - self.base) * weight;
            }
        }
        if top > 0.0 {
            self.recent.push((now, best, top));
        }
        let old = self.recent.partition_point(|&(t, _, _)| t < self.kept_from);
        self.recent.drain(..old);
        let bound = self.bound().unwrap_or(0.0);
        if bound > RISE * self.mark {
            self.mark = bound;
            self.rose_at = now;
        } else if bound < self.mark / RISE {
            // Fell (a slower service, or an early bound expired): rises count from here.
            self.mark = bound;
        }
    }

    /// The bound, once an answer proved a level.
    pub(crate) fn bound(&self) -> Option<f64> {
        let b = self.recent.iter().map(|&(_, b, _)| b).fold(0.0, f64::max);
        (b >= 1.0).then_some(b)
    }

    /// Whether answers came back from levels [`RISE`] above the bound without raising it: the
    /// levels above were tried, and the bound is the service's parallelism (its knee).
    pub(crate) fn tried_above(&self) -> bool {
        let top = self.recent.iter().map(|&(_, _, l)| l).fold(0.0, f64::max);
        self.bound().is_some_and(|b| top >= RISE * b)
    }

    /// Whether the bound rose by [`RISE`] within the last [`GROWING`] round trips of
    /// `round_trip` nanoseconds.
    pub(crate) fn growing(&self, now: Nanos, round_trip: f64) -> bool {
        (now.saturating_sub(self.rose_at) as f64) <= GROWING * round_trip
    }

    /// The mean latency of the answers from levels at or below the bound, once any.
    pub(crate) fn base_latency(&self) -> Option<f64> {
        (self.base > 0.0).then_some(self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// The samples of requests admitted at `admitted` (in order) to `workers` workers that serve
    /// in that order, each taking its `service` time.
    fn fifo(workers: usize, admitted: &[Nanos], service: &[Nanos]) -> Vec<Sample> {
        let mut free = vec![0; workers];
        let mut done: Vec<Nanos> = Vec::new();
        let mut out = Vec::new();
        for (&at, &s) in admitted.iter().zip(service) {
            let level = done.iter().filter(|&&c| c > at).count() as u32 + 1;
            let w = (0..workers).min_by_key(|&i| free[i]).unwrap_or(0);
            let end = free[w].max(at) + s;
            free[w] = end;
            done.push(end);
            out.push(Sample {
                admitted: at,
                level,
                latency: end - at,
            });
        }
        out
    }

    /// The samples of `n` requests of 10 ms each, admitted a nanosecond apart from time 1 to
    /// `workers` workers.
    fn burst(workers: usize, n: u64) -> Vec<Sample> {
        let admitted: Vec<Nanos> = (1..=n).collect();
        fifo(workers, &admitted, &vec![10 * MS; admitted.len()])
    }

    /// A lower bound fed `samples` in one tick at `now`, every request timed from time 0.
    fn fed(samples: &[Sample], now: Nanos, scale: f64) -> Lower {
        let mut lower = Lower::default();
        lower.observe(0, &[], 1, scale);
        lower.observe(now, samples, 1, scale);
        lower
    }

    #[test]
    fn behind_a_queue_of_constant_service_times_the_bound_is_the_worker_count() {
        let samples = burst(5, 12);
        assert_eq!(samples[11].level, 12);
        let lower = fed(&samples, 40 * MS, 15.0 * MS as f64);
        assert_eq!(lower.bound(), Some(5.0));
    }

    #[test]
    fn quick_answers_from_levels_without_a_queue_prove_those_levels() {
        let samples = burst(10, 4);
        let lower = fed(&samples, 20 * MS, 10.0 * MS as f64);
        assert_eq!(lower.bound(), Some(4.0));
        assert_eq!(
            lower.base_latency(),
            None,
            "no level was proved before these answers"
        );
    }

    #[test]
    fn whatever_the_service_times_the_bound_stays_at_or_below_the_worker_count() {
        // Service times spread over two orders of magnitude, the quickest one first so that the
        // quickest answer seen is no slower than any service.
        let service: Vec<Nanos> = (0..200u64)
            .map(|i| MS / 10 + (i * 7919 % 97) * MS / 4)
            .collect();
        let admitted: Vec<Nanos> = (0..200u64).map(|i| 1 + i * MS / 2).collect();
        let samples = fifo(6, &admitted, &service);
        assert!(
            samples.iter().any(|s| s.level > 12),
            "the queue goes well past the workers"
        );
        let lower = fed(&samples, 200 * MS, 10.0 * MS as f64);
        let bound = lower.bound().unwrap_or(0.0);
        assert!((1.0..=6.0).contains(&bound), "bound {bound}");
    }

    #[test]
    fn answers_from_well_above_the_bound_that_do_not_raise_it_show_the_levels_above_were_tried() {
        let scale = 15.0 * MS as f64;
        // One above five workers: not yet a quarter above the bound.
        let lower = fed(&burst(5, 6), 40 * MS, scale);
        assert_eq!(lower.bound(), Some(5.0));
        assert!(!lower.tried_above());
        // Seven above: tried, and none proved more than five.
        let lower = fed(&burst(5, 12), 40 * MS, scale);
        assert_eq!(lower.bound(), Some(5.0));
        assert!(lower.tried_above());
    }

    #[test]
    fn while_only_some_requests_are_timed_there_is_no_bound() {
        let samples = burst(5, 12);
        let mut lower = Lower::default();
        lower.observe(0, &[], 2, 15.0 * MS as f64);
        lower.observe(40 * MS, &samples, 2, 15.0 * MS as f64);
        assert_eq!(lower.bound(), None);
        // Timed in full again: the requests admitted before are left out.
        lower.observe(50 * MS, &[], 1, 15.0 * MS as f64);
        lower.observe(60 * MS, &samples, 1, 15.0 * MS as f64);
        assert_eq!(lower.bound(), None);
    }

    #[test]
    fn an_answer_from_before_every_request_was_timed_still_gives_the_quickest_service() {
        let scale = 15.0 * MS as f64;
        let mut lower = Lower::default();
        // One quick answer of a service of one worker, in the first tick (not counted: every
        // request is timed only from that tick on).
        let first = fifo(1, &[1], &[10 * MS]);
        lower.observe(50 * MS, &first, 1, scale);
        assert_eq!(lower.bound(), None);
        // A queue whose quickest answer is three times slower: without the first answer, the
        // time of two services would count as waiting.
        let admitted: Vec<Nanos> = (1..=4).map(|i| 60 * MS + i).collect();
        let queue = fifo(1, &admitted, &[30 * MS, 10 * MS, 10 * MS, 10 * MS]);
        lower.observe(200 * MS, &queue, 1, scale);
        assert_eq!(lower.bound(), Some(1.0));
    }

    #[test]
    fn a_clock_reading_that_wraps_starts_the_bound_afresh() {
        let samples = burst(5, 12);
        let scale = 15.0 * MS as f64;
        let mut lower = Lower::default();
        lower.observe(1_000 * MS, &[], 1, scale);
        lower.observe(1_100 * MS, &[], 1, scale);
        assert_eq!(lower.bound(), None);
        // The reading wrapped to near zero: the samples of the new readings count again.
        lower.observe(0, &[], 1, scale);
        lower.observe(40 * MS, &samples, 1, scale);
        assert_eq!(lower.bound(), Some(5.0));
    }

    #[test]
    fn a_bound_no_answer_proves_again_is_forgotten_after_its_window() {
        let samples = burst(5, 12);
        let scale = 15.0 * MS as f64;
        let mut lower = fed(&samples, 40 * MS, scale);
        assert!(lower.growing(40 * MS, scale));
        let later = 40 * MS + (GROWING * scale) as Nanos + 1;
        lower.observe(later, &[], 1, scale);
        assert_eq!(lower.bound(), Some(5.0));
        assert!(
            !lower.growing(later, scale),
            "no rise for {GROWING} round trips"
        );
        let gone = 40 * MS + (WINDOW * scale) as Nanos + 1;
        lower.observe(gone, &[], 1, scale);
        assert_eq!(lower.bound(), None);
    }
}
