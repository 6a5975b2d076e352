//! The knee: the fewest requests in flight at which latency starts to climb.
//!
//! A service with W workers and a queue in front of them answers a request admitted at level n
//! (requests in flight, itself included) in s0 while n ≤ W and in about s0 · n ÷ W beyond: the
//! n − W before it wait their turn. So the bands are fitted to latency = s0 · max(1, n ÷ k): k is
//! W, s0 the latency of a request that does not queue. The same curve holds for a service that
//! slows down under load (congestion) with a smaller k, which is what matters: past k, more in
//! flight only adds waiting.
//!
//! A knee counts only where the data shows one: some band above it is both [`RISE`] × s0 slow
//! and [`SIGNIFICANT`] standard errors above s0, and the fit explains the bands clearly better
//! ([`BETTER`]) than any higher knee. Otherwise the fit still gives s0, and says no knee shows.

use super::bands::Point;

/// A band this much slower than the base shows a queue: above the spread of a service's own
/// latencies, well below the doubling of a queue as long as the work.
pub(crate) const RISE: f64 = 1.3;
/// ...and the rise is this many standard errors of the band's mean: one band of noise in a
/// hundred fits would otherwise place a knee.
pub(crate) const SIGNIFICANT: f64 = 3.0;
/// A lower knee must cut the fit's error by this factor to win over a higher one: the simpler
/// curve (the knee further out) wins ties.
pub(crate) const BETTER: f64 = 0.8;

/// What the fit found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fit {
    /// The knee's level (W), or twice the highest level seen when no knee shows.
    pub(crate) k: f64,
    /// The base latency, nanoseconds.
    pub(crate) s0: f64,
    /// Whether a knee shows within the levels seen.
    pub(crate) knee: bool,
}

/// Fits latency = s0 · max(1, level ÷ k) to the bands (lowest level first); `None` without any.
pub(crate) fn fit(points: &[Point]) -> Option<Fit> {
    let top = points.last()?.level;
    let mut best: Option<(Fit, f64)> = None;
    // From the highest candidate (no knee at all) down; each band's level is a candidate.
    let candidates = std::iter::once(2.0 * top).chain(points.iter().rev().map(|p| p.level));
    for k in candidates {
        let knee = k <= top;
        let (mut weight, mut sum) = (0.0, 0.0);
        for p in points {
            weight += p.n;
            sum += p.n * p.lat / (p.level / k).max(1.0);
        }
        let s0 = sum / weight;
        if !(s0.is_finite() && s0 > 0.0) {
            continue;
        }
        let rises = points
            .iter()
            .any(|p| p.level > k && p.lat >= RISE * s0 && p.lat - s0 >= SIGNIFICANT * p.se);
        if knee && !rises {
            continue;
        }
        let err: f64 = points
            .iter()
            .map(|p| {
                let pred = s0 * (p.level / k).max(1.0);
                p.n * ((p.lat - pred) / pred).powi(2)
            })
            .sum();
        if best.is_none_or(|(_, e)| err < BETTER * e) {
            best = Some((Fit { k, s0, knee }, err));
        }
    }
    best.map(|(f, _)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(w: f64, s0: f64, levels: &[f64]) -> Vec<Point> {
        levels
            .iter()
            .map(|&n| Point {
                level: n,
                lat: s0 * (n / w).max(1.0),
                n: 100.0,
                se: s0 * 0.01,
            })
            .collect()
    }

    #[test]
    fn a_queue_behind_w_workers_shows_its_knee_at_w() {
        let pts = queue(10.0, 1e6, &[2.0, 4.0, 8.0, 10.0, 13.0, 16.0, 20.0, 30.0]);
        let f = fit(&pts).unwrap();
        assert!(f.knee);
        assert_eq!(f.k, 10.0);
        assert!((f.s0 - 1e6).abs() < 1.0);
    }

    #[test]
    fn flat_latency_shows_no_knee_and_gives_the_base_latency() {
        let pts = queue(1000.0, 2e6, &[2.0, 4.0, 8.0, 16.0]);
        let f = fit(&pts).unwrap();
        assert!(!f.knee);
        assert_eq!(f.k, 32.0);
        assert!((f.s0 - 2e6).abs() < 1.0);
    }

    #[test]
    fn a_rise_within_the_noise_is_no_knee() {
        let mut pts = queue(1000.0, 1e6, &[2.0, 4.0, 8.0, 16.0]);
        pts[3].lat = 1.4e6;
        pts[3].se = 0.2e6; // two standard errors only
        assert!(!fit(&pts).unwrap().knee);
    }

    #[test]
    fn no_bands_no_fit() {
        assert_eq!(fit(&[]), None);
    }
}
