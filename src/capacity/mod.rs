//! Capacity: how many requests in flight the service can take before they only queue.
//!
//! The gate needs one number it cannot be told: the in-flight ceiling at which the service is
//! busy but not queueing. It learns it from what any in-process gate sees, its own admissions
//! and their latencies, as TCP learns a pipe:
//!
//! * **Measured**: for each timed request, the requests in flight when it was admitted (its
//!   level, counted by the gate itself) and its latency (`cohort`: judged only once its
//!   admission cohort is back, so that a forming queue is seen whole).
//! * **Inferred**: latency = s0 · max(1, level ÷ k), fitted over level bands (`bands`,
//!   `knee`): k is the service's parallelism W, s0 the latency without a queue. Once a knee has
//!   shown, a fit that shows none takes s0 from the bands at or below that knee only.
//! * **Counted** (`lower`), while every request is timed: a request admitted at level n with D
//!   answers back during its longest possible wait proves W ≥ n − D. Where there is such a bound
//!   it decides: the ceiling grows as the slow start below, never past twice the bound; once the
//!   bound has stopped rising with levels a quarter above it tried, it is the knee, the ceiling is
//!   the one for a knee there, and the answers from levels at or below it give the base latency.
//!   What follows applies where there is no bound.
//! * **Decided**: once a knee shows, the ceiling is 1.1 k plus the √k ÷ 2 that keeps W workers busy
//!   between random arrivals (`ceiling_for`). Before, a slow start: from `START` requests,
//!   `GROWTH` more for each request that came back at base latency while the ceiling turned
//!   requests away, never past twice the highest level seen answered at base latency (or, from
//!   one answer back in x under half the base latency, its level ÷ (1 + x ÷ s0)); once
//!   `STALL_ANSWERS` answers from above that level came back with no band raising it, no further
//!   than the ceiling for a knee there. A cold gate protects from its first request. A knee that
//!   stops showing while the ceiling binds resumes the slow start, a quarter above the knee (or
//!   the level verified) at a time until a level twice the knee answers at base latency.
//!
//! It cannot run away: the ceiling grows only on answers at base latency, and only to twice a
//! level that was proved (the bound) or seen answered at base latency (on heavy-tailed services,
//! a level up to a few times W: the base is measured on the same requests). The bound forgets
//! what no answer proved for `lower::WINDOW` latency scales. A service that gets slower shows its
//! knee lower within `bands::KEEP` samples of a band; one that gets faster stops showing it, and
//! the slow start finds the new one. `docs/design/capacity.md` has the reasoning and the experiments.

use std::time::Duration;

use crate::clock::Nanos;

pub(crate) mod bands;
pub(crate) mod cohort;
pub(crate) mod knee;
pub(crate) mod lower;

use bands::{Bands, Point};
use cohort::Cohorts;
pub(crate) use cohort::Ledger;
use lower::Lower;

/// The ceiling a cold gate starts from: eight requests (TCP's initial window is ten), few enough
/// that no flood gets in first, enough that a service at its usual load is rarely refused while
/// the slow start finds it (from two, a cold gate refused a fifth of a half-loaded 8-worker
/// service's first second; the family's goodput bar was met as often from either).
pub(crate) const START: f64 = 8.0;
/// Requests the slow start adds per answer at base latency while the ceiling binds: with the
/// answer's own slot, the ceiling can about double per round trip on a service with room.
pub(crate) const GROWTH: f64 = 3.0;
/// The slow start never goes past this multiple of the highest level seen answered at base
/// latency: about a doubling per round trip (four times grew faster but overshot small services,
/// and met the family's goodput bar on fewer draws).
pub(crate) const VERIFIED_GROWTH: f64 = 2.0;
/// Once a knee has shown and stopped showing, the slow start that looks for the next one grows no
/// further than this multiple of the highest level verified (or that knee) until a level twice
/// the knee is verified: a lost knee is more often noise than a service that got much faster, and
/// doubling from it overshot (see `docs/design/capacity.md`).
pub(crate) const REPROBE_GROWTH: f64 = 1.25;
/// The ceiling sits this far above the knee: 10 % for a knee measured a band too low.
pub(crate) const KNEE_MARGIN: f64 = 1.1;
/// A tick that sees refusals counts as binding for this many latency scales (or ticks) after
/// them: room shows on answers that come back one round trip after the refusal.
pub(crate) const BINDING_LATENCIES: f64 = 2.0;
/// Weight of a new latency in the latency scale: 1/64, smooth over a few round trips.
pub(crate) const SCALE_WEIGHT: f64 = 1.0 / 64.0;
/// Samples a band needs before the fit leaves out the bands with fewer (except while the slow
/// start looks for a first knee), and before it measures its own spread: eight, enough for a mean.
pub(crate) const BAND_SAMPLES: f64 = 8.0;
/// An answer back within this share of the base latency waited less than its own latency `x`:
/// behind W workers, only a request admitted below (1 + x ÷ s0) · W comes back so quick, so its
/// level ÷ (1 + x ÷ s0) is a level with no queue. Slower answers bound too little to be worth it.
pub(crate) const QUICK: f64 = 0.5;
/// Answers from above the highest level verified that may come back while the slow start's
/// ceiling binds, with no band raising that level, before the slow start stops doubling over it:
/// 64, eight bands of eight samples (32 and 128 met the family's goodput bar about as often; see
/// `docs/design/capacity.md`).
pub(crate) const STALL_ANSWERS: u64 = 64;

/// The ceiling for a knee at `k`: [`KNEE_MARGIN`] above it plus the √k ÷ 2 that keeps k workers
/// busy between Poisson arrivals, and at least one above it.
pub(crate) fn ceiling_for(k: f64) -> f64 {
    let k1 = KNEE_MARGIN * k;
    (k1 + (0.5 * k1.sqrt() + 0.5).floor()).max(k + 1.0)
}

/// The ceiling for a knee at `k`, learned as `ceiling`, while demand runs at `load` times the
/// capacity: the room above [`KNEE_MARGIN`] × k is for workers that idle between random
/// arrivals, and under a load of ρ > 1 the gaps between arrivals are 1/ρ as long, so the room
/// shrinks with them (never below k, never above `ceiling`). On a service of one worker under a
/// flood the second slot only queued a request behind the one in service.
pub(crate) fn ceiling_under_load(k: u64, ceiling: u64, load: f64) -> u64 {
    if load.is_nan() || load <= 1.0 {
        return ceiling;
    }
    let k1 = KNEE_MARGIN * k as f64;
    let room = (ceiling as f64 - k1).max(0.0);
    let trimmed = (k1 + room / load).round() as u64;
    ceiling.min(trimmed.max(k))
}

impl Learned {
    /// The learned ceiling, with less room above the knee while demand (`offered` requests a
    /// second) exceeds the learned capacity (see [`ceiling_under_load`]).
    pub(crate) fn ceiling_under_load(&self, offered: f64) -> Option<u64> {
        let ceiling = self.ceiling?;
        Some(match (self.knee, self.capacity) {
            (Some(k), Some(c)) if c > 0.0 => ceiling_under_load(k, ceiling, offered / c),
            _ => ceiling,
        })
    }
}

/// The mean latency of the bands at or below `level`, if any.
fn below(points: &[Point], level: f64) -> Option<f64> {
    let (n, sum) = points
        .iter()
        .filter(|p| p.level <= level)
        .fold((0.0, 0.0), |(n, sum), p| (n + p.n, sum + p.n * p.lat));
    (n > 0.0).then(|| sum / n)
}

/// The learned figures, as [`crate::Snapshot::learned`] shows them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Learned {
    /// Completions per second the service sustains (the knee ÷ the base latency), once a knee
    /// shows.
    pub capacity: Option<f64>,
    /// Latency of a request that does not queue, once measured.
    #[serde(serialize_with = "crate::snapshot::optional_seconds")]
    pub base_latency: Option<Duration>,
    /// The in-flight level at which latency starts to climb (the service's parallelism), once it
    /// shows.
    pub knee: Option<u64>,
    /// The learned in-flight ceiling: above the knee once it shows, the slow start's before.
    pub ceiling: Option<u64>,
    /// Whether a knee shows (the service was seen queueing); otherwise the ceiling is still
    /// growing from its start.
    pub confirmed: bool,
}

impl Default for Learned {
    /// Nothing learned.
    fn default() -> Self {
        Learned {
            capacity: None,
            base_latency: None,
            knee: None,
            ceiling: None,
            confirmed: false,
        }
    }
}

/// A timed request, as the tick reads it from the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// When it was admitted (the clock's reading modulo 2^48).
    pub(crate) admitted: Nanos,
    /// Requests in flight when it was admitted, itself included.
    pub(crate) level: u32,
    /// Its latency.
    pub(crate) latency: Nanos,
}

/// The estimator's state; one tick at a time.
#[derive(Debug)]
pub(crate) struct Estimator {
    cohorts: Cohorts,
    bands: Bands,
    points: Vec<Point>,
    limit: f64,
    knee: Option<f64>,
    s0: Option<f64>,
    /// A smooth latency of every request (nanoseconds), the horizon's scale; 0 before any.
    scale: f64,
    /// The highest level a band came back from at base latency.
    verified: f64,
    /// The last knee that showed: once the service has shown its knee, the slow start's bound
    /// starts from it rather than from [`START`].
    last_knee: Option<f64>,
    last_refusal: Option<Nanos>,
    /// Answers from above the level verified since a band last raised it, counted while the
    /// ceiling binds.
    unconfirmed: u64,
    /// The completions-counted lower bound, while every request is timed.
    lower: Lower,
    /// Whether the lower bound shows a knee: it stopped rising once levels above it were tried,
    /// and has not risen by a quarter since.
    lower_knee: bool,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator {
            cohorts: Cohorts::default(),
            bands: Bands::default(),
            points: Vec::new(),
            limit: START,
            knee: None,
            s0: None,
            scale: 0.0,
            verified: 0.0,
            last_knee: None,
            last_refusal: None,
            unconfirmed: 0,
            lower: Lower::default(),
            lower_knee: false,
        }
    }
}

impl Estimator {
    /// First step of a tick at `now` (the clock's reading modulo 2^48): reads the ledger, before
    /// the tick's samples are taken.
    pub(crate) fn read_ledger(&mut self, ledger: &Ledger, now: Nanos) {
        self.cohorts.read_ledger(ledger, now);
    }

    /// Second step: the samples recorded since the last tick (one in `every` timed requests),
    /// and whether the ceiling refused requests since then.
    pub(crate) fn observe(
        &mut self,
        now: Nanos,
        tick: Nanos,
        samples: &[Sample],
        every: u64,
        refused: bool,
    ) -> Learned {
        let mut base = 0u64;
        for s in samples {
            let lat = s.latency as f64;
            self.scale = if self.scale == 0.0 {
                lat
            } else {
                self.scale + (lat - self.scale) * SCALE_WEIGHT
            };
            self.cohorts.add(s.admitted, s.level, s.latency);
            if self.s0.is_none_or(|s0| lat <= knee::RISE * s0) {
                base += 1;
            }
            // A quick answer shows room as soon as it is back, without waiting for its cohort:
            // a queue delays the quickest answers too.
            if let Some(s0) = self.s0.filter(|s0| lat <= QUICK * s0) {
                self.verified = self.verified.max(f64::from(s.level) / (1.0 + lat / s0));
            }
        }
        let horizon = (self.scale > 0.0).then_some((cohort::HORIZON * self.scale) as Nanos);
        self.cohorts.judge(now, horizon, &mut self.bands);
        if refused {
            self.last_refusal = Some(now);
        }
        let window = BINDING_LATENCIES * self.scale.max(tick as f64);
        let binding = self
            .last_refusal
            .is_some_and(|at| (now.saturating_sub(at) as f64) <= window);
        // Answers from above the level verified that no band confirms: the slow start stops
        // doubling over a level whose higher neighbours were tried and showed no room.
        let verified = self.verified;
        // The ceiling of the last tick: the fit below sets its own, which the bound overrides.
        let held = self.limit;
        self.fit(binding);
        if self.verified > verified {
            self.unconfirmed = 0;
        } else if binding {
            let above = samples
                .iter()
                .filter(|s| f64::from(s.level) > verified + 1.0);
            self.unconfirmed += above.count() as u64;
        }
        let grown = GROWTH * (base.saturating_mul(every.max(1))) as f64;
        self.lower.observe(now, samples, every, self.scale);
        if let Some(lower) = self.lower.bound() {
            self.follow_lower(now, lower, held, binding, grown);
        } else {
            if self.knee.is_none() && binding {
                self.limit = (self.limit + grown).min(self.slow_start_bound());
            }
            self.lower_knee = false;
        }
        self.learned()
    }

    /// Where every answer is counted, the bound `lower` decides: the ceiling `held` grows by
    /// `grown` while it binds, never past twice the bound, while the bound grows or no level above
    /// it was tried; once levels above it came back without raising it, it is the knee and the
    /// ceiling the one for a knee there.
    fn follow_lower(&mut self, now: Nanos, lower: f64, held: f64, binding: bool, grown: f64) {
        // Rises are a round trip apart where the levels below the bound answer: at the base
        // latency, not at the queue's.
        let round_trip = self.lower.base_latency().unwrap_or(self.scale);
        let growing = self.lower.growing(now, round_trip);
        self.lower_knee = !growing && (self.lower_knee || self.lower.tried_above());
        self.limit = if self.lower_knee {
            ceiling_for(lower)
        } else {
            let grown = if binding { grown } else { 0.0 };
            (held + grown).min(VERIFIED_GROWTH * lower)
        };
        self.knee = self.lower_knee.then_some(lower);
        if let Some(s0) = self.lower.base_latency() {
            self.s0 = Some(s0);
        }
    }

    fn fit(&mut self, binding: bool) {
        let least = if self.bands.any_with(BAND_SAMPLES) {
            BAND_SAMPLES
        } else {
            1.0
        };
        // Until a first knee shows, a binding ceiling's every level counts, thin bands too: a cold
        // gate's first burst climbs one level per request, and on a service of one or two workers
        // that staircase is the knee (its top band alone, thick at once, shows none).
        let cold = self.last_knee.is_none() && binding;
        self.bands
            .points(if cold { 1.0 } else { least }, &mut self.points);
        bands::lend_spread(&mut self.points, BAND_SAMPLES);
        let Some(f) = knee::fit(&self.points) else {
            return;
        };
        // Without a knee the fit's base is the mean of every band, queued ones too: once a knee
        // has shown, the bands at or below it (no queue by its own account) measure the base.
        let s0 = match self.last_knee {
            Some(k) if !f.knee => below(&self.points, k).unwrap_or(f.s0),
            _ => f.s0,
        };
        self.s0 = Some(s0);
        if f.knee {
            self.knee = Some(f.k);
            self.last_knee = Some(f.k);
            self.limit = ceiling_for(f.k);
        } else if binding {
            self.knee = None;
        }
        for p in &self.points {
            if p.n >= least.max(2.0) && p.lat <= knee::RISE * s0 {
                self.verified = self.verified.max(p.level);
            }
        }
    }

    /// The most the slow start may grow the ceiling to: twice the highest level verified (or
    /// the last knee, or [`START`]); once a knee has shown and until a level twice as high is
    /// verified, only [`REPROBE_GROWTH`] times the highest of that knee and the level verified
    /// (and at least one more). Once [`STALL_ANSWERS`] answers from above the level verified
    /// came back without raising it, no more than the ceiling for a knee there: the levels above
    /// it were tried, and none showed room.
    fn slow_start_bound(&self) -> f64 {
        let bound = self.growth_bound();
        if self.unconfirmed >= STALL_ANSWERS && self.verified > 0.0 {
            bound.min(ceiling_for(self.verified))
        } else {
            bound
        }
    }

    /// [`Estimator::slow_start_bound`] before the levels above the one verified were tried.
    fn growth_bound(&self) -> f64 {
        match self.last_knee {
            Some(k) if self.verified < VERIFIED_GROWTH * k => {
                // At least a level more: a quarter of three levels is none.
                let from = self.verified.max(k);
                (REPROBE_GROWTH * from).max(from + 1.0)
            }
            last => VERIFIED_GROWTH * self.verified.max(last.unwrap_or(START)),
        }
    }

    /// A smooth latency of every request, nanoseconds.
    pub(crate) fn latency(&self) -> Option<f64> {
        (self.scale > 0.0).then_some(self.scale)
    }

    /// The base latency, nanoseconds.
    pub(crate) fn base_latency(&self) -> Option<f64> {
        self.s0
    }

    /// The learned figures now.
    pub(crate) fn learned(&self) -> Learned {
        let base = self.s0.map(|s| Duration::from_nanos(s as u64));
        Learned {
            capacity: self.knee.zip(self.s0).map(|(k, s0)| k / s0 * 1e9),
            base_latency: base,
            knee: self.knee.map(|k| k.round() as u64),
            ceiling: Some(self.limit.floor().max(1.0) as u64),
            confirmed: self.knee.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: f64 = 1e6;
    /// These tests feed samples as if one request in two were timed: the knee fit decides (with
    /// every request timed, the bound of `lower` would).
    const EVERY: u64 = 2;

    /// An estimator fed rounds of requests whose latency the test sets: each round admits one
    /// request per level at the round's start, and ticks once all of them are back.
    #[derive(Default)]
    struct Rounds {
        est: Estimator,
        ledger: Ledger,
        now: Nanos,
    }

    impl Rounds {
        fn round(
            &mut self,
            levels: std::ops::RangeInclusive<u32>,
            latency: impl Fn(u32) -> f64,
        ) -> Learned {
            let start = self.now;
            let mut samples = Vec::new();
            for level in levels {
                self.ledger.enter(start, level);
                self.ledger.leave(start, level);
                let latency = latency(level) as Nanos;
                samples.push(Sample {
                    admitted: start,
                    level,
                    latency,
                });
            }
            let longest = samples.iter().map(|s| s.latency).max().unwrap_or(0);
            self.now = start + longest + 2 * cohort::BUCKET;
            self.est.read_ledger(&self.ledger, self.now);
            // Every round refused requests: the ceiling binds throughout.
            self.est
                .observe(self.now, self.now - start, &samples, EVERY, true)
        }

        fn rounds(
            &mut self,
            n: usize,
            levels: std::ops::RangeInclusive<u32>,
            latency: impl Fn(u32) -> f64,
        ) -> Learned {
            let mut learned = Learned::default();
            for _ in 0..n {
                learned = self.round(levels.clone(), &latency);
            }
            learned
        }
    }

    /// A queue behind ten workers: 1 ms up to level 10, then proportionally more.
    fn ten_workers(level: u32) -> f64 {
        MS * (f64::from(level) / 10.0).max(1.0)
    }

    #[test]
    fn a_knee_that_stops_showing_is_looked_for_again_a_quarter_above_it_not_twice() {
        let mut r = Rounds::default();
        let learned = r.rounds(40, 1..=14, ten_workers);
        assert_eq!(learned.knee, Some(10), "{learned:?}");
        // The levels past the knee answer at base latency now: the knee stops showing, and the
        // ceiling looks for the next one no further than a quarter above the highest level seen
        // answered so (14), not twice it.
        let learned = r.rounds(1_000, 1..=14, |_| MS);
        assert!(!learned.confirmed, "{learned:?}");
        let ceiling = learned.ceiling.unwrap_or(0);
        assert!(
            ceiling > 14,
            "the ceiling grows past the old knee: {ceiling}"
        );
        assert!(ceiling <= 17, "no more than 1.25 × 14: {ceiling}");
        // Once levels twice the old knee answer at base latency, it doubles again.
        let learned = r.rounds(40, 1..=20, |_| MS);
        assert_eq!(learned.ceiling, Some(40), "{learned:?}");
    }

    #[test]
    fn a_lost_knee_of_a_few_workers_is_looked_for_again_at_least_a_level_at_a_time() {
        let mut r = Rounds::default();
        let learned = r.rounds(40, 1..=3, |n| MS * (f64::from(n) / 2.0).max(1.0));
        assert_eq!(learned.knee, Some(2), "{learned:?}");
        // Level 3 answers at base latency now: a quarter above it is no level at all, one more is.
        let learned = r.rounds(1_000, 1..=3, |_| MS);
        assert!(!learned.confirmed, "{learned:?}");
        assert_eq!(learned.ceiling, Some(4), "{learned:?}");
    }

    #[test]
    fn levels_above_the_one_verified_that_never_show_room_stop_the_slow_start_over_it() {
        // Ten levels verified at a base latency of 1 ms; the slow start doubles over them.
        let mut est = Estimator {
            s0: Some(MS),
            verified: 10.0,
            limit: 20.0,
            ..Estimator::default()
        };
        // Rounds of answers from levels 12 to 20 (more than a level above the one verified), a
        // little slower than base and never judged (their cohorts stay open): no band confirms
        // any of those levels, and none shows a knee.
        let mut now: Nanos = 0;
        let mut answers: u64 = 0;
        loop {
            let samples: Vec<Sample> = (12..=20)
                .map(|level| Sample {
                    admitted: now,
                    level,
                    latency: (1.5 * MS) as Nanos,
                })
                .collect();
            now += (2.0 * MS) as Nanos;
            let learned = est.observe(now, (2.0 * MS) as Nanos, &samples, EVERY, true);
            answers += samples.len() as u64;
            assert!(!learned.confirmed, "{learned:?}");
            if answers < STALL_ANSWERS {
                assert_eq!(learned.ceiling, Some(20), "after {answers}: {learned:?}");
            } else {
                // Tried and never confirmed: the ceiling a knee at ten would give.
                assert_eq!(learned.ceiling, Some(13), "after {answers}: {learned:?}");
                assert_eq!(ceiling_for(10.0), 13.0);
                break;
            }
        }
    }

    #[test]
    fn while_bands_keep_confirming_higher_levels_the_slow_start_keeps_doubling() {
        // A service with room at every level tried: every three rounds its bands confirm the top
        // level tried (a band verifies from two samples, which it holds after the third), so the
        // thousands of answers from above the level verified before never stop the doubling.
        let mut r = Rounds::default();
        let mut ceiling = START as u32;
        for step in 1..=8 {
            let learned = r.rounds(3, 1..=ceiling, |_| MS);
            let before = ceiling;
            ceiling = learned.ceiling.unwrap_or(0) as u32;
            // About twice: the bound is twice the top band's mean level, just under the top level.
            assert!(
                f64::from(ceiling) >= 1.9 * f64::from(before),
                "step {step}: {before} -> {learned:?}"
            );
        }
    }

    #[test]
    fn once_a_knee_has_shown_a_rise_too_small_to_show_one_does_not_raise_the_base_latency() {
        let mut r = Rounds::default();
        let learned = r.rounds(40, 1..=14, ten_workers);
        assert_eq!(learned.knee, Some(10), "{learned:?}");
        // Past level 10 a fifth slower: below the rise that shows a knee, so none shows; the
        // mean of every level would put the base 6 % higher.
        let learned = r.rounds(1_000, 1..=14, |n| if n > 10 { 1.2 * MS } else { MS });
        assert!(!learned.confirmed, "{learned:?}");
        let base = learned.base_latency.map_or(0.0, |b| b.as_secs_f64() * 1e3);
        assert!((base - 1.0).abs() < 0.005, "base {base} ms, not 1 ms");
    }

    #[test]
    fn under_load_the_room_above_the_knee_shrinks_with_the_gaps_between_arrivals() {
        // At or below the capacity the ceiling stands.
        assert_eq!(ceiling_under_load(10, 13, 1.0), 13);
        assert_eq!(ceiling_under_load(10, 13, 0.5), 13);
        assert_eq!(ceiling_under_load(10, 13, f64::NAN), 13);
        // The room above 1.1 k (2 of 13) halves at twice the capacity.
        assert_eq!(ceiling_under_load(10, 13, 2.0), 12);
        // One worker under a flood: no second slot to queue behind it.
        assert_eq!(ceiling_under_load(1, 2, 8.0), 1);
        assert_eq!(ceiling_under_load(1, 2, 1.5), 2);
        // Never below the knee, never above the ceiling learned.
        for load in [1.5, 3.0, 20.0, f64::INFINITY] {
            for k in [1, 2, 7, 100, 1_500] {
                let ceiling = ceiling_for(k as f64) as u64;
                let under = ceiling_under_load(k, ceiling, load);
                assert!(k <= under && under <= ceiling, "k {k} load {load}: {under}");
            }
        }
        // A learned ceiling below 1.1 k (a bound, not a knee's) is kept.
        assert_eq!(ceiling_under_load(10, 10, 5.0), 10);
    }
}
