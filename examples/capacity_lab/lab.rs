//! The scratch estimator: W from the knee of latency against admission level.
//!
//! * Measured, per admitted request: the requests in flight just after it was admitted (its
//!   level, counted by the gate itself) and its latency.
//! * Pooled by level band (8 per octave: count, Σ latency, Σ latency², Σ level), but only once the
//!   request's admission cohort (a 10 ms bucket) has fully returned, or is 4 latency scales old
//!   (then the requests still out count with the time they have waited so far): the quick ones of
//!   a cohort never make the base alone. A band forgets slowly (it keeps about 256 samples).
//! * Inferred: latency = s0 · max(1, level ÷ k), fitted over the bands every 10 ms; k is W (a
//!   FIFO backend serves W at once, each request beyond waits its turn), s0 the base latency. A
//!   knee counts only where some band above it is ≥ 1.3 s0 *and* 3 standard errors above s0, and
//!   it explains the data clearly better than no knee.
//! * Limit: limit_for(1.1 k) once a knee shows. Before that, a slow start from 2: +3 per
//!   completion that came back at base latency while the limit binds (a refusal within two
//!   latency scales), never past twice the highest level whose band came back at base latency.
//!   A knee that no longer shows while the limit binds is dropped, and the slow start resumes.
//! * Admission: the shared policy of `policy.rs` with urgent requests on their own cap.

use std::collections::{HashMap, VecDeque};

use sluicegate::clock::Nanos;
use sluicegate::sim::{AttemptId, BackendView, Offer, Strategy};

use crate::policy::{limit_for, Admission, Headroom};

const TICK: Nanos = 100_000_000;
/// Cohorts are the requests admitted in one bucket.
const BUCKET: Nanos = 10_000_000;
/// Level bands per octave.
const SUB: f64 = 8.0;
const BANDS: usize = 128;
/// Starting limit.
const L0: f64 = 2.0;
/// Growth per completion at the limit in the slow start.
const GROW: f64 = 3.0;
/// A cohort is closed this many latency scales after its bucket ends.
const HORIZON: f64 = 4.0;
/// A band keeps about this many samples.
const KEEP: f64 = 256.0;
/// A knee counts once some band above it is this much slower than the base.
const RISE: f64 = 1.3;
/// ...and the rise is this many standard errors of its mean.
const SIGNIFICANT: f64 = 3.0;

fn band(level: u64) -> usize {
    (((level.max(1) as f64).log2() * SUB).floor() as usize).min(BANDS - 1)
}

/// (count, Σ latency, Σ latency², Σ level).
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    n: f64,
    lat: f64,
    sq: f64,
    level: f64,
}

impl Sums {
    fn add(&mut self, n: f64, lat: f64, sq: f64, level: f64) {
        self.n += n;
        self.lat += lat;
        self.sq += sq;
        self.level += level;
    }
}

/// One band of one cohort: admitted, returned, and the admission times of those still out.
#[derive(Debug, Clone, Copy, Default)]
struct Open {
    returned: Sums,
    out: f64,
    out_level: f64,
    out_admitted: f64,
}

pub(crate) struct Lab {
    limit: f64,
    w_est: Option<f64>,
    s0: Option<f64>,
    gate: Admission,
    attempts: HashMap<AttemptId, (Nanos, u64, bool)>,
    cohorts: VecDeque<(u64, HashMap<usize, Open>)>,
    bands: Vec<Sums>,
    lat_scale: f64,
    verified: f64,
    binding: bool,
    next_tick: Nanos,
    next_eval: Nanos,
}

impl Lab {
    pub(crate) fn new() -> Self {
        Lab {
            limit: L0,
            w_est: None,
            s0: None,
            gate: Admission::new(Headroom::Own),
            attempts: HashMap::new(),
            cohorts: VecDeque::new(),
            bands: vec![Sums::default(); BANDS],
            lat_scale: 0.0,
            verified: 0.0,
            binding: false,
            next_tick: TICK,
            next_eval: BUCKET,
        }
    }

    fn horizon(&self) -> Nanos {
        (HORIZON * self.lat_scale) as Nanos
    }

    /// Moves complete (or old enough) cohorts into the bands.
    fn flush(&mut self, now: Nanos) {
        let h = self.horizon();
        while let Some((b, cohort)) = self.cohorts.front() {
            let all_back = cohort.values().all(|o| o.out == 0.0);
            if !all_back && (self.lat_scale == 0.0 || (b + 1) * BUCKET + h > now) {
                break;
            }
            let (_, cohort) = self.cohorts.pop_front().expect("front exists");
            for (i, o) in cohort {
                let mut s = o.returned;
                // The ones still out have waited at least this long.
                let waited = o.out * now as f64 - o.out_admitted;
                let sq = if o.out > 0.0 {
                    waited * waited / o.out
                } else {
                    0.0
                };
                s.add(o.out, waited, sq, o.out_level);
                if s.n > 0.0 {
                    let band = &mut self.bands[i];
                    let keep = (1.0 - s.n / KEEP).max(0.5);
                    band.n = band.n * keep + s.n;
                    band.lat = band.lat * keep + s.lat;
                    band.level = band.level * keep + s.level;
                    band.sq = band.sq * keep + s.sq;
                }
            }
        }
    }

    /// Fits latency = s0 · max(1, level ÷ k) over the bands: (k, s0, whether a knee shows).
    fn fit(&self) -> Option<(f64, f64, bool)> {
        let least = if self.bands.iter().any(|b| b.n >= 8.0) {
            8.0
        } else {
            1.0
        };
        let pts: Vec<(f64, f64, f64)> = self
            .bands
            .iter()
            .filter(|b| b.n >= least)
            .map(|b| (b.level / b.n, b.lat / b.n, b.n))
            .collect();
        // The standard error of each band's mean latency.
        let se: Vec<f64> = self
            .bands
            .iter()
            .filter(|b| b.n >= least)
            .map(|b| {
                let m = b.lat / b.n;
                ((b.sq / b.n - m * m).max(0.0) / b.n).sqrt()
            })
            .collect();
        let top = pts.last()?.0;
        let mut cands: Vec<f64> = pts.iter().map(|p| p.0).collect();
        cands.push(top * 2.0);
        cands.reverse();
        let mut best: Option<(f64, f64, f64)> = None;
        for &k in &cands {
            let (mut w, mut s) = (0.0, 0.0);
            for &(n, r, c) in &pts {
                w += c;
                s += c * r / (n / k).max(1.0);
            }
            let s0 = s / w;
            let err: f64 = pts
                .iter()
                .map(|&(n, r, c)| {
                    let pred = s0 * (n / k).max(1.0);
                    c * ((r - pred) / pred).powi(2)
                })
                .sum();
            let rises = pts
                .iter()
                .zip(&se)
                .any(|(&(n, r, _), &e)| n > k && r >= RISE * s0 && r - s0 >= SIGNIFICANT * e);
            if k <= top && !rises {
                continue;
            }
            if best.is_none_or(|b| err < 0.8 * b.2) {
                best = Some((k, s0, err));
            }
        }
        best.map(|(k, s0, _)| (k, s0, k <= top))
    }

    fn evaluate(&mut self, now: Nanos) {
        self.flush(now);
        let [nu, ur] = self.gate.arrivals;
        let binding = (self.gate.refused[0] + self.gate.refused[1]) * 20 >= (nu + ur).max(1);
        let since = now.saturating_sub(self.gate.last_refusal) as f64;
        self.binding = self.gate.refusals > 0 && since <= 2.0 * self.lat_scale.max(TICK as f64);
        if let Some((k, s0, knee)) = self.fit() {
            self.s0 = Some(s0);
            if knee {
                self.w_est = Some(k);
                self.limit = limit_for(k * 1.1).max(k + 1.0);
            } else if binding {
                self.w_est = None;
            }
            // The highest level whose requests came back at base latency.
            for b in &self.bands {
                if b.n >= 2.0 && b.lat / b.n <= RISE * s0 {
                    self.verified = self.verified.max(b.level / b.n);
                }
            }
        }
        if crate::tracing_on() && now % TICK < BUCKET {
            eprintln!(
                "t={:.2} inf={} urg={} L={:.1} w={:?} s0={:?} bind={binding} ref={:?} bands={:?}",
                now as f64 / 1e9,
                self.gate.in_flight,
                self.gate.urgent_in_flight,
                self.limit,
                self.w_est.map(|w| w.round()),
                self.s0.map(|s| (s / 1e5).round() / 10.0),
                self.gate.refused,
                self.bands
                    .iter()
                    .filter(|b| b.n >= 8.0)
                    .map(|b| (
                        (b.level / b.n).round(),
                        ((b.lat / b.n) / 1e5).round() / 10.0
                    ))
                    .collect::<Vec<_>>()
            );
        }
        self.gate.refused = [0; 2];
        self.gate.arrivals = [0; 2];
    }
}

impl Strategy for Lab {
    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, _: &BackendView) -> Offer {
        if !self
            .gate
            .admit(urgent, now, self.limit, self.w_est, self.s0)
        {
            return Offer::Refuse { retry_after: None };
        }
        let level = self.gate.in_flight;
        self.attempts.insert(id, (now, level, urgent));
        let bucket = now / BUCKET;
        if self.cohorts.back().is_none_or(|c| c.0 != bucket) {
            self.cohorts.push_back((bucket, HashMap::new()));
        }
        let cohort = &mut self.cohorts.back_mut().expect("pushed").1;
        let o = cohort.entry(band(level)).or_default();
        o.out += 1.0;
        o.out_level += level as f64;
        o.out_admitted += now as f64;
        Offer::Admit
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, b: &BackendView) -> Offer {
        self.offer(id, true, now, b)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, id: AttemptId, now: Nanos, _: bool) {
        let Some((at, level, urgent)) = self.attempts.remove(&id) else {
            return;
        };
        self.gate.release(urgent);
        let lat = (now - at) as f64;
        self.lat_scale = if self.lat_scale == 0.0 {
            lat
        } else {
            self.lat_scale + (lat - self.lat_scale) / 64.0
        };
        let bucket = at / BUCKET;
        if let Ok(i) = self.cohorts.binary_search_by_key(&bucket, |c| c.0) {
            if let Some(o) = self.cohorts[i].1.get_mut(&band(level)) {
                o.out -= 1.0;
                o.out_level -= level as f64;
                o.out_admitted -= at as f64;
                o.returned.add(1.0, lat, lat * lat, level as f64);
            }
        }
        // Slow start while no knee is known: a completion at base latency while the limit
        // binds opens more slots.
        let base = self.s0.is_none_or(|s0| lat <= RISE * s0);
        if self.w_est.is_none() && self.binding && base {
            self.limit = (self.limit + GROW).min(2.0 * self.verified.max(L0));
        }
    }
    fn timer(&mut self, now: Nanos, _: &BackendView) -> Option<Nanos> {
        if now >= self.next_tick {
            self.gate.urgent.tick(now, self.s0);
            self.next_tick = now + TICK;
        }
        if now >= self.next_eval {
            self.evaluate(now);
            self.next_eval = now + BUCKET;
        }
        Some(self.next_tick.min(self.next_eval))
    }
}
