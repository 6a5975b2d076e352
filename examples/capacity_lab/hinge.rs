//! The previous attempt's scratch "hinge" estimator, kept as found for comparison: W from the
//! knee of latency against admission level (4 bands per octave), its own copy of the oracle's
//! admission policy, a slow start of +3 per completion at the limit capped at twice the highest
//! level shown free of a knee.

use sluicegate::clock::Nanos;
use sluicegate::sim::{AttemptId, BackendView, Offer, Strategy};
use std::collections::HashMap;
const TICK: Nanos = 100_000_000;
const BUCKET: Nanos = 10_000_000;
const SUB: f64 = 4.0;
const BANDS: usize = 64;
const L0: f64 = 4.0;
const MARGIN: f64 = 1.1;
const HORIZON: f64 = 2.0;
/// A knee counts once some band above it is this much slower than the base.
const RISE: f64 = 1.3;
fn grow() -> f64 {
    3.0
}
fn band(level: u64) -> usize {
    (((level.max(1) as f64).log2() * SUB).floor() as usize).min(BANDS - 1)
}
fn band_mid(b: usize) -> f64 {
    2f64.powf((b as f64 + 0.5) / SUB)
}
pub(crate) struct Hinge {
    limit: f64,
    w_est: Option<f64>,
    s0: Option<f64>,
    in_flight: u64,
    attempts: HashMap<AttemptId, (Nanos, u64)>,
    // cohorts by admission bucket: (bucket, per-band (n, sum))
    pending: Vec<(u64, Vec<(f64, f64)>)>,
    bands: Vec<(f64, f64)>,
    lat_scale: f64,
    verified: f64,
    refused: u64,
    arrivals: u64,
    last_eval: Nanos,
    // urgent
    tick_start: Nanos,
    tick_urgent: u64,
    ticks: u64,
    urgent_rate: f64,
    urgent_fast: f64,
    trace: bool,
}
impl Hinge {
    pub(crate) fn new() -> Self {
        Hinge {
            limit: L0,
            w_est: None,
            s0: None,
            in_flight: 0,
            attempts: HashMap::new(),
            pending: Vec::new(),
            bands: vec![(0.0, 0.0); BANDS],
            lat_scale: 0.0,
            verified: 0.0,
            refused: 0,
            arrivals: 0,
            last_eval: 0,
            tick_start: 0,
            tick_urgent: 0,
            ticks: 0,
            urgent_rate: 0.0,
            urgent_fast: 0.0,
            trace: crate::tracing_on(),
        }
    }
    fn horizon(&self) -> Nanos {
        (HORIZON * self.lat_scale).max(BUCKET as f64) as Nanos
    }
    fn flush(&mut self, now: Nanos) {
        let h = self.horizon();
        while let Some((b, _)) = self.pending.first() {
            if (b + 1) * BUCKET + h > now {
                break;
            }
            let (_, cohort) = self.pending.remove(0);
            for (i, (n, sum)) in cohort.into_iter().enumerate() {
                if n > 0.0 {
                    let band = &mut self.bands[i];
                    // Forget slowly: a band keeps about its last 256 samples.
                    let keep = (1.0 - n / 256.0).max(0.5);
                    band.0 = band.0 * keep + n;
                    band.1 = band.1 * keep + sum;
                }
            }
        }
    }
    /// Fits latency = s0 * max(1, level / k) over the bands; returns (k, s0) and whether the
    /// bands show a knee at all.
    fn fit(&self) -> Option<(f64, f64, bool)> {
        let pts: Vec<(f64, f64, f64)> = self
            .bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.0 >= 8.0)
            .map(|(i, b)| (band_mid(i), b.1 / b.0, b.0))
            .collect();
        if pts.is_empty() {
            return None;
        }
        let top = pts.last().map(|p| p.0).unwrap_or(1.0);
        let mut best: Option<(f64, f64, f64)> = None;
        // Candidate knees: each band's level, and "beyond the top" (no knee seen).
        let mut cands: Vec<f64> = pts.iter().map(|p| p.0).collect();
        cands.push(top * 2.0);
        cands.reverse();
        for &k in &cands {
            // s0 from points at or below k, weighted.
            let (mut w, mut s) = (0.0, 0.0);
            for &(n, r, c) in &pts {
                let f = (n / k).max(1.0);
                w += c;
                s += c * r / f;
            }
            if w <= 0.0 {
                continue;
            }
            let s0 = s / w;
            let err: f64 = pts
                .iter()
                .map(|&(n, r, c)| {
                    let pred = s0 * (n / k).max(1.0);
                    c * ((r - pred) / pred).powi(2)
                })
                .sum();
            let rises = pts.iter().any(|&(n, r, _)| n > k && r >= RISE * s0);
            if k <= top && !rises {
                continue;
            }
            // A knee must explain the data clearly better than none.
            if best.is_none_or(|b| err < 0.8 * b.2) {
                best = Some((k, s0, err));
            }
        }
        best.map(|(k, s0, _)| (k, s0, k <= top))
    }
    fn evaluate(&mut self, now: Nanos) {
        self.flush(now);
        let binding = self.refused * 20 >= self.arrivals.max(1);
        if let Some((k, s0, knee)) = self.fit() {
            self.s0 = Some(s0);
            if knee {
                self.w_est = Some(k);
                let w = k;
                self.limit = (MARGIN * w).max(w + 1.0) + (0.5 * w.sqrt() + 0.5).floor();
            } else {
                self.verified = self.verified.max(k / 2.0);
                if binding {
                    self.w_est = None;
                }
            }
        }
        if self.trace {
            eprintln!(
                "t={:.2} inf={} L={:.1} w={:?} s0={:?} bind={binding} bands={:?}",
                now as f64 / 1e9,
                self.in_flight,
                self.limit,
                self.w_est.map(|w| w.round()),
                self.s0.map(|s| (s / 1e5).round() / 10.0),
                self.bands
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.0 >= 8.0)
                    .map(|(i, b)| (band_mid(i).round(), ((b.1 / b.0) / 1e5).round() / 10.0))
                    .collect::<Vec<_>>()
            );
        }
        self.refused = 0;
        self.arrivals = 0;
        self.last_eval = now;
    }
    fn caps(&self) -> (u64, u64) {
        let l = self.limit;
        let (Some(s0), Some(w)) = (self.s0, self.w_est) else {
            return (l as u64, (l + l.sqrt() + 1.0) as u64);
        };
        let u = self.urgent_rate * s0 / w;
        if u >= 0.8 || self.urgent_fast * s0 / w >= 0.8 {
            let uc = self.urgent_rate * s0;
            let nu = (l - uc - 2.0 * uc.sqrt()).max(0.0);
            return (nu as u64, (l + 1.0) as u64);
        }
        let uf = (self.urgent_fast * s0 / w).min(0.8);
        let h = if uf < 0.01 {
            1.0
        } else {
            (-(1000f64.ln()) / uf.ln()).ceil()
        };
        let h = h.min((4.0 * w).max(2.0));
        (l as u64, (l + h) as u64)
    }
    fn tick(&mut self, now: Nanos) {
        let span = (now - self.tick_start) as f64;
        let rate = self.tick_urgent as f64 / span;
        let tau = (1e9f64).max(2.0 * self.s0.unwrap_or(0.0));
        let a = (span / tau).min(1.0);
        if self.ticks == 0 {
            self.urgent_rate = rate;
            self.urgent_fast = rate;
        }
        self.ticks += 1;
        self.urgent_rate += a * (rate - self.urgent_rate);
        let af = if rate > self.urgent_fast { 0.5 } else { a };
        self.urgent_fast += af * (rate - self.urgent_fast);
        self.tick_urgent = 0;
        self.tick_start = now;
    }
}
impl Strategy for Hinge {
    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, _: &BackendView) -> Offer {
        self.arrivals += 1;
        if urgent {
            self.tick_urgent += 1;
        }
        let (nu, ur) = self.caps();
        let cap = if urgent { ur } else { nu };
        if self.in_flight < cap {
            self.in_flight += 1;
            self.attempts.insert(id, (now, self.in_flight));
            Offer::Admit
        } else {
            self.refused += 1;
            Offer::Refuse { retry_after: None }
        }
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, b: &BackendView) -> Offer {
        self.offer(id, true, now, b)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, id: AttemptId, now: Nanos, _: bool) {
        let Some((at, level)) = self.attempts.remove(&id) else {
            return;
        };
        self.in_flight -= 1;
        let lat = (now - at) as f64;
        if self.lat_scale == 0.0 {
            self.lat_scale = lat;
        } else if lat > self.lat_scale {
            self.lat_scale *= 1.02;
        } else {
            self.lat_scale *= 0.98;
        }
        let bucket = at / BUCKET;
        let b = band(level);
        if (bucket + 1) * BUCKET + self.horizon() <= now {
            let band = &mut self.bands[b];
            band.0 += 1.0;
            band.1 += lat;
        } else {
            let i = match self.pending.binary_search_by(|p| p.0.cmp(&bucket)) {
                Ok(i) => i,
                Err(i) => {
                    self.pending.insert(i, (bucket, vec![(0.0, 0.0); BANDS]));
                    i
                }
            };
            let c = &mut self.pending[i].1[b];
            c.0 += 1.0;
            c.1 += lat;
        }
        // Slow start while no knee is known: a completion from the limit opens a slot.
        if self.w_est.is_none() && level as f64 + 1.0 >= self.limit {
            // Never past twice the highest level shown free of a knee.
            self.limit = (self.limit + grow()).min(2.0 * self.verified.max(L0));
        }
    }
    fn timer(&mut self, now: Nanos, _: &BackendView) -> Option<Nanos> {
        if now >= self.tick_start + TICK {
            self.tick(now);
        }
        if now >= self.last_eval + BUCKET {
            self.evaluate(now);
        }
        Some(now + BUCKET)
    }
}
