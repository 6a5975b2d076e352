//! The low tail of latency: how long a queue is, read from the quickest requests.
//!
//! # Why the low tail
//!
//! Under an overload the in-flight ceiling holds the service at its knee plus a short queue,
//! and the knee is learned as capacity × base latency. Both figures are means of noisy counts,
//! so the knee is known to a few per cent, and the ceiling must allow for that error or risk
//! holding the service below its workers. The queue it then keeps slows a congested service.
//!
//! The mean latency tells the queue no better: a request's latency is its wait plus its own
//! service time, and the service time's spread (as wide as its mean for exponential times)
//! drowns a wait of a few requests. The *quickest* requests do not: below a low quantile of the
//! latencies measured without a queue (the tenth percentile, [`LOW_QUANTILE`]), the share of
//! latencies falls as soon as every request waits, and a share is a count whose noise is
//! binomial. A queue of `q` requests at `X` completions a second delays every request by about
//! `q / X`, and moves the share below that quantile by the density of the quick latencies times
//! that delay: on exponential times about `0.9 q / W` for `W` workers, where the mean moves by
//! `q / W` against a noise of one. For the same completions that is three times as precise as
//! the mean. The threshold sits a tenth of the way up the quick latencies, so a queue longer
//! than about a tenth of the workers delays every request past it, and an empty share says only
//! that the queue is at least that long; on a service whose times barely spread (a constant
//! service time) any wait does, and says nothing ([`LowTail::delay_for_share`]). The capacity
//! estimator trims by what the share tells and gives the trim back when it tells nothing; where
//! the share can measure a queue of a few requests, it also measures the workers with it (the
//! requests in flight less that queue) and sets the ceiling just above them (see
//! [`crate::capacity::Learned::workers`]).
//!
//! [`LowTail`] keeps the latencies of the last clean ticks (no ceiling refusing, no queue), and
//! from them the threshold, the share below it and, for a measured share, the delay that
//! explains it. The capacity estimator compares the share of saturated ticks with the share a
//! queue of the intended length would leave, and trims the ceiling when the queue is longer
//! (see [`crate::capacity`]).
//!
//! ```
//! use sluicegate::low_tail::LowTail;
//!
//! let mut tail = LowTail::new();
//! // Clean latencies 1..=1000 ms: the tenth percentile is 100 ms.
//! let clean: Vec<u64> = (1..=1000).map(|ms| ms * 1_000_000).collect();
//! tail.record_clean(&clean);
//! let threshold = tail.threshold().expect("enough samples");
//! assert_eq!(threshold, 100_000_000);
//! assert!((tail.share_below(threshold - 50_000_000) - 0.05).abs() < 1e-9);
//! // Every request delayed by 30 ms: 7 % of them stay below the threshold.
//! let delayed: Vec<u64> = clean.iter().map(|l| l + 30_000_000).collect();
//! let share = LowTail::count_below(&delayed, threshold) as f64 / delayed.len() as f64;
//! assert!((share - 0.07).abs() < 1e-9);
//! assert_eq!(tail.delay_for_share(share), Some(30_000_000));
//! ```

/// The quantile of clean latencies the threshold sits at.
pub const LOW_QUANTILE: f64 = 0.1;
/// Clean latencies kept (the latest): enough for the threshold's share to be known to about half
/// a per cent.
pub const CLEAN_SAMPLES: usize = 4096;
/// Clean latencies needed before the threshold is used. Few: a small, slow service measures few
/// clean latencies before its first overload (10 workers at 50 ms: 81 in a 3 s warm-up at 0.6 of
/// its capacity), and at 500 its queue was never judged (a standing queue of 4 to 5 requests on
/// 10 workers). The threshold's own error at 64 (about 0.04 of the share at the tenth percentile)
/// is about the binomial noise the share is judged with (two standard errors at 200 latencies).
pub const MIN_CLEAN_SAMPLES: usize = 64;

/// The latest clean latencies, and what their low tail says of a queue.
#[derive(Debug, Clone)]
pub struct LowTail {
    /// A ring of the latest clean latencies, nanoseconds.
    ring: Vec<u64>,
    /// Where the next one goes once the ring is full.
    next: usize,
    /// The ring, sorted, when `sorted_valid`.
    sorted: Vec<u64>,
    sorted_valid: bool,
}

impl Default for LowTail {
    fn default() -> Self {
        Self::new()
    }
}

impl LowTail {
    /// Nothing recorded.
    pub fn new() -> Self {
        LowTail {
            ring: Vec::with_capacity(CLEAN_SAMPLES),
            next: 0,
            sorted: Vec::with_capacity(CLEAN_SAMPLES),
            sorted_valid: false,
        }
    }

    /// Records latencies (nanoseconds) measured without a queue.
    pub fn record_clean(&mut self, latencies: &[u64]) {
        if latencies.is_empty() {
            return;
        }
        for &l in latencies {
            if self.ring.len() < CLEAN_SAMPLES {
                self.ring.push(l);
            } else {
                self.ring[self.next] = l;
                self.next = (self.next + 1) % CLEAN_SAMPLES;
            }
        }
        self.sorted_valid = false;
    }

    /// Forgets every clean latency, for a caller that knows they describe a service that is gone
    /// (the capacity estimator does not call it: its ring is replaced by the next 4,096 clean
    /// latencies).
    pub fn clear(&mut self) {
        self.ring.clear();
        self.next = 0;
        self.sorted.clear();
        self.sorted_valid = false;
    }

    /// How many clean latencies are kept.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    fn sorted(&mut self) -> &[u64] {
        if !self.sorted_valid {
            self.sorted.clear();
            self.sorted.extend_from_slice(&self.ring);
            self.sorted.sort_unstable();
            self.sorted_valid = true;
        }
        &self.sorted
    }

    /// The [`LOW_QUANTILE`] of the clean latencies, once [`MIN_CLEAN_SAMPLES`] are kept.
    pub fn threshold(&mut self) -> Option<u64> {
        let sorted = self.sorted();
        if sorted.len() < MIN_CLEAN_SAMPLES {
            return None;
        }
        // The ⌊n × q⌋-th quickest (q < 1, so never past the end).
        let rank = (sorted.len() as f64 * LOW_QUANTILE) as usize;
        Some(sorted[rank.saturating_sub(1)])
    }

    /// The share of the clean latencies at or below `latency`.
    pub fn share_below(&mut self, latency: u64) -> f64 {
        let sorted = self.sorted();
        if sorted.is_empty() {
            return 0.0;
        }
        sorted.partition_point(|&l| l <= latency) as f64 / sorted.len() as f64
    }

    /// How many of `latencies` are at or below `threshold`.
    pub fn count_below(latencies: &[u64], threshold: u64) -> u64 {
        latencies.iter().filter(|&&l| l <= threshold).count() as u64
    }

    /// The delay (nanoseconds) that, added to every clean latency, leaves `share` of them at or
    /// below the [`threshold`](Self::threshold): the threshold less the clean latency at that
    /// rank. 0 for a share at or above the threshold's own. For a share of 0 (every request
    /// delayed past the threshold) the threshold less the quickest clean latency, the least
    /// delay that does so: on exponential times about the threshold, on times that barely
    /// spread (a constant service time) about nothing, where any wait empties the share and
    /// says nothing of its length. `None` without a threshold.
    pub fn delay_for_share(&mut self, share: f64) -> Option<u64> {
        let threshold = self.threshold()?;
        let sorted = self.sorted();
        if share.is_nan() || share <= 0.0 {
            return Some(threshold.saturating_sub(sorted.first().copied().unwrap_or(threshold)));
        }
        let rank = (sorted.len() as f64 * share).round() as usize;
        let at = sorted[rank.clamp(1, sorted.len()) - 1];
        Some(threshold.saturating_sub(at))
    }
}
