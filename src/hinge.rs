//! The knee read from single requests: latency against the requests in flight when each was
//! admitted.
//!
//! A service of W workers answers a request admitted with n requests in flight (itself included)
//! in its service time while n ≤ W; past W the request waits for n − W others to finish first,
//! and its latency climbs by one completion interval per request ahead. So the pairs (level,
//! latency) lie on a hinge: flat at the base latency up to the knee W, then a line. A flood the
//! gate starts into (a service restarted during a peak) spreads its first requests over every
//! level from one to the ceiling within a tick, and the hinge through them gives the knee and the
//! base at once, where every aggregate of that tick (its mean latency, Little's law on its
//! requests in flight) is already the flood's queue.
//!
//! The fit is least squares over a geometric grid of knees ([`KNEE_STEP`] apart): for each
//! candidate `w`, `latency = base + slope · max(0, level − w)` is a straight-line fit in
//! `max(0, level − w)`, solved from six running sums; the knee kept is the one with the least
//! squared error. It allocates nothing, and costs a pass over the pairs per candidate (100
//! candidates from level 1 to 1,000: steps of one request up to 20, then of 5 %; about a
//! millisecond for 4,096 pairs): the estimator fits on the ticks of a cold start that bring new
//! pairs (each of them while the pairs are fewer than a thousand, then as they grow by a
//! quarter), to tell a slow flood and for the ceiling of its probe, over at most
//! [`COLD_PAIRS`](crate::capacity::COLD_PAIRS) pairs, in the sampler's tick, never on the
//! request path. It is believed only where the pairs show the hinge: enough of them on each side of it ([`MIN_SIDE`]), a climb that at the highest
//! level is [`MIN_CLIMB`] times the base, and pairs below the knee that on their own climb at
//! most half as steeply as those above it ([`MAX_SLOPE_BELOW`]). Above the knee every pair reads
//! the same line whatever W is (latency = level / capacity, through the origin), so pairs that
//! never reached below it tell nothing, and the fit says so.
//!
//! ```
//! use sluicegate::hinge::fit;
//!
//! // 20 workers at 10 ms, 2,000 completions a second: flat to level 20, then 0.5 ms a request.
//! let pairs: Vec<(u32, u64)> = (1..=200u32)
//!     .map(|n| (n, 10_000_000 + 500_000 * u64::from(n.saturating_sub(20))))
//!     .collect();
//! let hinge = fit(&pairs).expect("the pairs show a hinge");
//! assert!((hinge.knee - 20.0).abs() <= 2.0, "{hinge:?}");
//! assert!((hinge.base - 10e6).abs() <= 0.5e6, "{hinge:?}");
//! ```

/// Ratio between neighbouring candidate knees.
pub const KNEE_STEP: f64 = 1.05;

/// Pairs needed at or below the knee, and above it, for the fit to be believed.
pub const MIN_SIDE: usize = 8;

/// How far the fitted line must climb by the highest level, in multiples of the base.
pub const MIN_CLIMB: f64 = 3.0;

/// The steepest the pairs below the knee may climb, as a share of the slope above it.
pub const MAX_SLOPE_BELOW: f64 = 0.5;

/// A hinge fitted to (level, latency) pairs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hinge {
    /// The level at which latency starts to climb: the service's workers.
    pub knee: f64,
    /// The latency below the knee, in nanoseconds.
    pub base: f64,
    /// Nanoseconds of latency per request in flight past the knee.
    pub slope: f64,
}

/// Running sums of a straight-line fit of latency `l` against `x`.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    n: f64,
    x: f64,
    xx: f64,
    l: f64,
    ll: f64,
    xl: f64,
}

impl Sums {
    fn add(&mut self, x: f64, l: f64) {
        self.n += 1.0;
        self.x += x;
        self.xx += x * x;
        self.l += l;
        self.ll += l * l;
        self.xl += x * l;
    }

    /// Intercept, slope and squared error of the least-squares line; `None` when `x` does not
    /// vary.
    fn line(&self) -> Option<(f64, f64, f64)> {
        let var = self.n * self.xx - self.x * self.x;
        if self.n < 2.0 || var <= 0.0 {
            return None;
        }
        let slope = (self.n * self.xl - self.x * self.l) / var;
        let intercept = (self.l - slope * self.x) / self.n;
        let error = (self.ll - intercept * self.l - slope * self.xl).max(0.0);
        Some((intercept, slope, error))
    }
}

/// The hinge through `pairs` of (requests in flight at admission, latency in nanoseconds), or
/// `None` where they do not show one (see the module's documentation).
pub fn fit(pairs: &[(u32, u64)]) -> Option<Hinge> {
    let highest = pairs.iter().map(|&(n, _)| n).max()?;
    let lowest = pairs.iter().map(|&(n, _)| n).min()?;
    let mut best: Option<(f64, Hinge)> = None;
    let mut w = f64::from(lowest.max(1));
    while w < f64::from(highest) {
        let mut sums = Sums::default();
        let mut below = 0usize;
        for &(n, l) in pairs {
            let x = (f64::from(n) - w).max(0.0);
            if x == 0.0 {
                below += 1;
            }
            sums.add(x, l as f64);
        }
        let above = pairs.len() - below;
        if below >= MIN_SIDE && above >= MIN_SIDE {
            if let Some((base, slope, error)) = sums.line() {
                let hinge = Hinge {
                    knee: w,
                    base,
                    slope,
                };
                if base > 0.0 && slope > 0.0 && best.is_none_or(|(e, _)| error < e) {
                    best = Some((error, hinge));
                }
            }
        }
        w = (w * KNEE_STEP).max(w + 1.0);
    }
    let (_, hinge) = best?;
    let climbs = hinge.base + hinge.slope * (f64::from(highest) - hinge.knee);
    // Flat below the knee: the pairs there, on their own, climb at most a share of the slope
    // above it. (Pairs that never reached below the knee lie on one line through the origin, and
    // those below any knee fitted to them climb as steeply as those above.)
    let mut below = Sums::default();
    for &(n, l) in pairs {
        if f64::from(n) <= hinge.knee {
            below.add(f64::from(n), l as f64);
        }
    }
    let flat = below
        .line()
        .is_some_and(|(_, slope, _)| slope <= MAX_SLOPE_BELOW * hinge.slope);
    (climbs >= MIN_CLIMB * hinge.base && flat).then_some(hinge)
}
