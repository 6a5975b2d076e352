//! The service's vital signs: latency, throughput and their summaries.
//!
//! The request path only *records*: a completed call writes its latency, the requests in flight
//! when it was admitted and when that was, into two words of a fixed ring of atomics (no lock,
//! no allocation).
//! Everything that costs more, sorting the window for the trimmed mean, feeding the percentile
//! histogram, working out rates, runs once per sampler tick, on whichever request first finds the
//! tick due (it takes a `try_lock`; every other request goes straight on).
//!
//! At high rates not every call needs timing: the gate times enough calls to refill the latency window
//! about twice per tick and counts the rest, so two clock reads are not paid on every request where
//! they would tell nothing new. Below about `20 × window` completions a second every call is timed.
//!
//! The **trimmed mean** is the original design's: sort the last `window` latencies, cut `floor(n·trim)` samples at
//! each end, average the rest. It is valid once `min_samples` latencies exist.
//!
//! So of `[1, 2, …, 9, 1000]` with `trim = 0.1`, one sample is cut at each end and the trimmed
//! mean is that of 2..=9: 5 (in whole nanoseconds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::capacity::Sample;
use crate::clock::Nanos;

/// The trimmed mean of `samples` (nanoseconds), cutting `floor(n·trim)` from each end after sorting
/// them in place. `None` for an empty slice or a cut that leaves nothing.
pub(crate) fn trimmed_mean(samples: &mut [u64], trim: f64) -> Option<u64> {
    let n = samples.len();
    let cut = if trim.is_finite() && trim > 0.0 {
        ((n as f64) * trim).floor() as usize
    } else {
        0
    };
    if n == 0 || 2 * cut >= n {
        return None;
    }
    samples.sort_unstable();
    let kept = &samples[cut..n - cut];
    let sum: u128 = kept.iter().map(|&v| u128::from(v)).sum();
    Some((sum / kept.len() as u128) as u64)
}

/// The last latencies, written lock-free by completing requests.
#[derive(Debug)]
pub(crate) struct LatencyRing {
    /// Two words per sample: the latency and level ([`pack`]), and the admission time.
    slots: Box<[AtomicU64]>,
    head: AtomicU64,
    mask: u64,
}

impl LatencyRing {
    /// A ring holding at least `window` samples and at least 4,096, so one tick's worth of
    /// samples reaches the histogram and the capacity estimator even when the window is small.
    pub(crate) fn new(window: usize) -> Self {
        let cap = window.saturating_mul(2).max(4096).next_power_of_two();
        LatencyRing {
            slots: (0..2 * cap).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            mask: (cap - 1) as u64,
        }
    }

    /// How many samples the ring holds.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len() / 2
    }

    /// Records a latency, the requests in flight when its request was admitted (counting it)
    /// and when it was admitted (the clock's reading modulo 2^48).
    #[inline]
    pub(crate) fn record(&self, nanos: Nanos, level: u32, admitted: Nanos) {
        let i = (self.head.fetch_add(1, Ordering::Relaxed) & self.mask) as usize;
        self.slots[2 * i].store(pack(nanos, level), Ordering::Relaxed);
        self.slots[2 * i + 1].store(admitted, Ordering::Relaxed);
    }

    /// How many samples were ever recorded.
    pub(crate) fn recorded(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Copies the latencies with sequence numbers in `[from, to)` (at most the ring's capacity,
    /// the newest) into `out`. A writer that has claimed a slot but not yet stored into it leaves
    /// an old value there: a sampling error of one sample, accepted to keep the writers lock-free.
    pub(crate) fn copy_range(&self, from: u64, to: u64, out: &mut Vec<u64>) {
        out.extend(self.samples(from, to).map(|s| s.latency));
    }

    /// As [`LatencyRing::copy_range`], whole samples.
    pub(crate) fn samples(&self, from: u64, to: u64) -> impl Iterator<Item = Sample> + '_ {
        let from = from.max(to.saturating_sub(self.capacity() as u64));
        (from..to).map(move |i| {
            let i = (i & self.mask) as usize;
            let word = self.slots[2 * i].load(Ordering::Relaxed);
            Sample {
                latency: word & LATENCY_MASK,
                level: (word >> LATENCY_BITS) as u32,
                admitted: self.slots[2 * i + 1].load(Ordering::Relaxed),
            }
        })
    }
}

/// Bits of a word that hold a latency or a clock reading; the admission level takes the rest.
/// One layout for the ring's slots and the gate's timed permits (`TimedStart`).
pub(crate) const LATENCY_BITS: u32 = 48;
/// The latency's bits of a word.
pub(crate) const LATENCY_MASK: u64 = (1 << LATENCY_BITS) - 1;
/// The highest admission level a word holds.
pub(crate) const MAX_LEVEL: u64 = (1 << (64 - LATENCY_BITS)) - 1;

/// One ring slot: `nanos` and `level`, each saturated to its field.
#[inline]
fn pack(nanos: Nanos, level: u32) -> u64 {
    (u64::from(level).min(MAX_LEVEL) << LATENCY_BITS) | nanos.min(LATENCY_MASK)
}

/// Latency percentiles over a recent span: two histograms that take turns, so a reading covers
/// between one and two spans.
#[derive(Debug)]
pub(crate) struct Percentiles {
    current: Option<Histogram<u64>>,
    previous: Option<Histogram<u64>>,
    rotated_at: Nanos,
}

/// How long each of the two percentile histograms collects before it is recycled: a reading covers
/// 5 to 10 s, recent enough to follow a change of load, long enough for a p99 over thousands of
/// calls at modest rates.
pub(crate) const PERCENTILE_SPAN: Nanos = 5_000_000_000;

/// The longest latency the histograms tell apart: one hour, in nanoseconds; a call longer than that
/// counts as an hour, already far past any timeout a gate is configured with.
const HIGHEST_TRACKABLE: u64 = 3_600_000_000_000;

fn new_histogram() -> Option<Histogram<u64>> {
    // The bounds are constants hdrhistogram accepts; an error here would be a bug in them, and then
    // percentiles are simply not reported rather than the gate panicking.
    Histogram::new_with_bounds(1, HIGHEST_TRACKABLE, 2).ok()
}

impl Percentiles {
    pub(crate) fn new(now: Nanos) -> Self {
        Percentiles {
            current: new_histogram(),
            previous: new_histogram(),
            rotated_at: now,
        }
    }

    pub(crate) fn record(&mut self, nanos: Nanos) {
        if let Some(h) = &mut self.current {
            h.saturating_record(nanos.max(1));
        }
    }

    pub(crate) fn rotate_if_due(&mut self, now: Nanos) {
        if now.saturating_sub(self.rotated_at) >= PERCENTILE_SPAN {
            std::mem::swap(&mut self.current, &mut self.previous);
            if let Some(h) = &mut self.current {
                h.reset();
            }
            self.rotated_at = now;
        }
    }

    /// The given quantiles (0..=1) over both spans, or `None` where there are no samples.
    pub(crate) fn quantiles<const N: usize>(&self, qs: [f64; N]) -> [Option<Duration>; N] {
        let (Some(previous), Some(current)) = (&self.previous, &self.current) else {
            return [None; N];
        };
        let mut merged = previous.clone();
        if merged.add(current).is_err() {
            merged = current.clone();
        }
        if merged.is_empty() {
            return [None; N];
        }
        qs.map(|q| Some(Duration::from_nanos(merged.value_at_quantile(q))))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_trimmed_mean_cuts_one_outlier_at_each_end_of_ten_samples_at_a_tenth() {
        // One outlier at each end is cut: the mean of 2..=9 is 5.5.
        let samples = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1000];
        assert_eq!(trimmed_mean(&mut samples.clone(), 0.1), Some(5));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// The trimmed mean equals a straightforward reference computation.
        #[test]
        fn trimmed_mean_equals_the_reference(
            samples in prop::collection::vec(0u64..10_000_000_000, 1..300),
            trim in 0.0f64..0.49,
        ) {
            let mut sorted = samples.clone();
            sorted.sort();
            let cut = (samples.len() as f64 * trim).floor() as usize;
            let kept = &sorted[cut..sorted.len() - cut];
            let reference = kept.iter().map(|&v| v as u128).sum::<u128>() / kept.len() as u128;
            let mut work = samples.clone();
            prop_assert_eq!(trimmed_mean(&mut work, trim), Some(reference as u64));
        }
    }

    #[test]
    fn a_slot_gives_back_its_latency_level_and_admission_each_saturated_to_its_field() {
        let ring = LatencyRing::new(1);
        ring.record(1_234_567, 890, 42);
        ring.record(u64::MAX, u32::MAX, 7);
        let samples: Vec<Sample> = ring.samples(0, 2).collect();
        assert_eq!(
            samples,
            [
                Sample {
                    latency: 1_234_567,
                    level: 890,
                    admitted: 42
                },
                Sample {
                    latency: LATENCY_MASK,
                    level: MAX_LEVEL as u32,
                    admitted: 7
                },
            ]
        );
        let mut only = Vec::new();
        ring.copy_range(0, 2, &mut only);
        assert_eq!(only, [1_234_567, LATENCY_MASK]);
    }
}
