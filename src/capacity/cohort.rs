//! Cohorts: the timed requests admitted within one [`BUCKET`], judged only once all of them are
//! back.
//!
//! A tick sees the requests that completed since the last one. Read as they come, the quick ones
//! of a burst come back first, and a queue that is forming looks like no queue: the slow ones are
//! still out. So a request's latency joins its level band only when every timed request admitted
//! in the same bucket has completed, or once the bucket is [`HORIZON`] latency scales old; then the
//! ones still out count with the time they have waited so far, at least as long as they will
//! take. A stalled service therefore shows its stall, instead of nothing.
//!
//! The request path keeps one counter per bucket ([`Ledger`]): a timed admission adds its level
//! and one, its release takes them back off (an atomic add each, on timed calls only). The tick
//! reads the counters, never the requests.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use super::bands::{band, Bands, Sums};
use crate::clock::Nanos;

/// A cohort is the timed requests admitted in one bucket of this many nanoseconds: short against
/// a tick, so that a flood's first requests are judged apart from the ones behind them.
pub(crate) const BUCKET: Nanos = 10_000_000;
/// Buckets the ledger holds (41 s): past that, a request still out is counted as waited anyway.
pub(crate) const RING: u64 = 4096;
/// A cohort whose requests are not all back is judged this many latency scales after its bucket
/// ended: long enough for the usual tail, short enough to see a stall within a few latencies.
pub(crate) const HORIZON: f64 = 4.0;

/// A cohort with no more than this share of its requests still out is judged at once: the tail
/// of a service's own latencies (the slowest twentieth) would otherwise set the pace of learning.
pub(crate) const OUT_SHARE: f64 = 0.05;

/// Bits of a ledger word that hold the sum of levels; the count of requests takes the rest.
const LEVEL_BITS: u32 = 44;
const LEVEL_MASK: u64 = (1 << LEVEL_BITS) - 1;

/// The bucket of a time (the clock's reading modulo 2^48, as the permit carries it).
pub(crate) fn bucket_of(at: Nanos) -> u64 {
    at / BUCKET
}

/// Requests out, per bucket of admission time: written by the request path.
#[derive(Debug)]
pub(crate) struct Ledger {
    slots: Box<[AtomicU64]>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            slots: (0..RING).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Ledger {
    fn slot(&self, bucket: u64) -> &AtomicU64 {
        &self.slots[(bucket % RING) as usize]
    }

    /// A timed request admitted at `at` (the clock's reading modulo 2^48) at `level`.
    #[inline]
    pub(crate) fn enter(&self, at: Nanos, level: u32) {
        self.slot(bucket_of(at))
            .fetch_add((1 << LEVEL_BITS) + u64::from(level), Ordering::Relaxed);
    }

    /// The same request, released (whatever its outcome).
    #[inline]
    pub(crate) fn leave(&self, at: Nanos, level: u32) {
        self.slot(bucket_of(at))
            .fetch_sub((1 << LEVEL_BITS) + u64::from(level), Ordering::Relaxed);
    }

    /// (requests out, sum of their levels) of a bucket.
    pub(crate) fn out(&self, bucket: u64) -> (u64, u64) {
        let w = self.slot(bucket).load(Ordering::Relaxed);
        (w >> LEVEL_BITS, w & LEVEL_MASK)
    }
}

/// One bucket's requests that are back, by band.
#[derive(Debug, Default)]
struct Open {
    bucket: u64,
    returned: Vec<(usize, Sums)>,
}

/// The cohorts not yet judged, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Cohorts {
    open: VecDeque<Open>,
    /// The first bucket not yet judged.
    next: u64,
    /// Requests out per bucket from `next` on, read before the tick's samples.
    out: Vec<(u64, u64)>,
    /// Spare vectors of judged cohorts, reused.
    spare: Vec<Vec<(usize, Sums)>>,
}

impl Cohorts {
    /// Reads the requests out of every bucket from the first not judged to the one before `now`'s.
    /// Read before the samples of the tick are taken, so that a request that completes in between
    /// keeps its bucket open until the next tick rather than being lost.
    pub(crate) fn read_ledger(&mut self, ledger: &Ledger, now: Nanos) {
        let now_b = bucket_of(now);
        if now_b < self.next || now_b - self.next >= RING {
            // The clock's reading wrapped, or nothing ran for longer than the ledger holds.
            self.open.clear();
            self.next = now_b.saturating_sub(RING - 1);
        }
        self.out.clear();
        self.out.extend((self.next..now_b).map(|b| ledger.out(b)));
    }

    /// A request admitted at `at` and `level` that took `lat` nanoseconds.
    pub(crate) fn add(&mut self, at: Nanos, level: u32, lat: Nanos) {
        let b = bucket_of(at);
        if b < self.next {
            return; // its cohort was judged without it
        }
        let i = match self.open.binary_search_by_key(&b, |o| o.bucket) {
            Ok(i) => i,
            Err(i) => {
                let returned = self.spare.pop().unwrap_or_default();
                self.open.insert(
                    i,
                    Open {
                        bucket: b,
                        returned,
                    },
                );
                i
            }
        };
        let s = Sums::one(lat as f64, f64::from(level));
        let returned = &mut self.open[i].returned;
        let bnd = band(f64::from(level));
        match returned.iter_mut().find(|(x, _)| *x == bnd) {
            Some((_, sums)) => sums.add(s),
            None => returned.push((bnd, s)),
        }
    }

    /// Judges the cohorts, oldest first, that are back in full or `horizon` old at `now`, into
    /// `bands`; stops at the first that is neither.
    pub(crate) fn judge(&mut self, now: Nanos, horizon: Option<Nanos>, bands: &mut Bands) {
        let horizon = horizon.map(|h| h.min((RING - 2) * BUCKET));
        let mut judged = 0;
        for &(count, level_sum) in &self.out {
            let b = self.next;
            let end = (b + 1) * BUCKET;
            let old = horizon.is_some_and(|h| end.saturating_add(h) <= now);
            let back: f64 = match self.open.front() {
                Some(o) if o.bucket == b => o.returned.iter().map(|(_, s)| s.n).sum(),
                _ => 0.0,
            };
            let nearly = (count as f64) <= OUT_SHARE * (back + count as f64);
            if count > 0 && !old && !nearly {
                break;
            }
            if self.open.front().is_some_and(|o| o.bucket == b) {
                if let Some(mut o) = self.open.pop_front() {
                    for &(bnd, s) in &o.returned {
                        bands.absorb(bnd, s);
                    }
                    o.returned.clear();
                    self.spare.push(o.returned);
                }
            }
            if count > 0 {
                // Still out: they have waited at least since the middle of their bucket.
                let n = count as f64;
                let waited = now.saturating_sub(b * BUCKET + BUCKET / 2) as f64;
                let level = level_sum as f64;
                bands.absorb(
                    band(level / n),
                    Sums {
                        n,
                        lat: n * waited,
                        sq: n * waited * waited,
                        level,
                    },
                );
            }
            self.next += 1;
            judged += 1;
        }
        self.out.drain(..judged);
        // Samples of buckets judged before they came (none are kept past `next`).
        while self.open.front().is_some_and(|o| o.bucket < self.next) {
            if let Some(mut o) = self.open.pop_front() {
                o.returned.clear();
                self.spare.push(o.returned);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cohort_is_judged_once_all_of_it_is_back() {
        let ledger = Ledger::default();
        let mut c = Cohorts::default();
        let mut bands = Bands::default();
        ledger.enter(1_000, 1);
        ledger.enter(2_000, 2);
        // One back, one out: not judged.
        ledger.leave(1_000, 1);
        c.read_ledger(&ledger, BUCKET + 1);
        c.add(1_000, 1, 500);
        c.judge(BUCKET + 1, None, &mut bands);
        assert!(!bands.any_with(1.0));
        // Both back.
        ledger.leave(2_000, 2);
        c.read_ledger(&ledger, BUCKET + 2);
        c.add(2_000, 2, 900);
        c.judge(BUCKET + 2, None, &mut bands);
        assert!(bands.any_with(1.0));
    }

    #[test]
    fn a_cohort_with_a_twentieth_still_out_is_judged_without_waiting_for_its_tail() {
        let ledger = Ledger::default();
        let mut c = Cohorts::default();
        let mut bands = Bands::default();
        for i in 0..20 {
            ledger.enter(i, 3);
        }
        for i in 0..19 {
            ledger.leave(i, 3);
        }
        let now = BUCKET + 1;
        c.read_ledger(&ledger, now);
        for i in 0..19 {
            c.add(i, 3, 1_000);
        }
        c.judge(now, None, &mut bands);
        let mut pts = Vec::new();
        bands.points(1.0, &mut pts);
        // The nineteen back, and the one still out with what it waited (the band forgets a
        // 256th of the nineteen as it takes the twentieth).
        assert_eq!(pts.len(), 1);
        assert!((pts[0].n - 20.0).abs() < 0.1, "{}", pts[0].n);
    }

    #[test]
    fn a_stalled_cohort_is_judged_at_the_horizon_with_what_it_waited() {
        let ledger = Ledger::default();
        let mut c = Cohorts::default();
        let mut bands = Bands::default();
        ledger.enter(0, 4);
        let now = 10 * BUCKET;
        c.read_ledger(&ledger, now);
        c.judge(now, Some(BUCKET), &mut bands);
        let mut pts = Vec::new();
        bands.points(1.0, &mut pts);
        assert_eq!(pts.len(), 1);
        assert_eq!(pts[0].level, 4.0);
        assert_eq!(pts[0].lat, (now - BUCKET / 2) as f64);
    }
}
