//! Latency by admission level: what the requests admitted at each level of in-flight requests took.
//!
//! Levels are pooled in bands, eight per octave (a band is about 9 % wide at any size, so a
//! service of 2 workers and one of 2,000 are seen at the same relative resolution). A band keeps
//! sums (count, latency, latency², level) that forget slowly, so that the figures follow a service
//! that gets faster or slower without a reset.

/// Bands per octave of level: fine enough to place a knee within about 9 %.
pub(crate) const BANDS_PER_OCTAVE: f64 = 8.0;
/// Bands in all: 16 octaves, every level a permit can carry (up to 65,535).
pub(crate) const BANDS: usize = 128;
/// A band keeps about this many samples: enough for a mean good to a few percent, few enough to
/// follow a service that changes within seconds.
pub(crate) const KEEP: f64 = 256.0;

/// The band of an admission level.
pub(crate) fn band(level: f64) -> usize {
    let b = (level.max(1.0).log2() * BANDS_PER_OCTAVE).floor();
    if b.is_finite() && b > 0.0 {
        (b as usize).min(BANDS - 1)
    } else {
        0
    }
}

/// Sums over some requests: count, Σ latency, Σ latency² (nanoseconds) and Σ admission level.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Sums {
    pub(crate) n: f64,
    pub(crate) lat: f64,
    pub(crate) sq: f64,
    pub(crate) level: f64,
}

impl Sums {
    /// One request admitted at `level` that took `lat` nanoseconds.
    pub(crate) fn one(lat: f64, level: f64) -> Self {
        Sums {
            n: 1.0,
            lat,
            sq: lat * lat,
            level,
        }
    }

    pub(crate) fn add(&mut self, o: Sums) {
        self.n += o.n;
        self.lat += o.lat;
        self.sq += o.sq;
        self.level += o.level;
    }

    fn scale(&mut self, f: f64) {
        self.n *= f;
        self.lat *= f;
        self.sq *= f;
        self.level *= f;
    }
}

/// One band's summary, as the fit reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// Mean admission level.
    pub(crate) level: f64,
    /// Mean latency, nanoseconds.
    pub(crate) lat: f64,
    /// Weight: the samples behind it.
    pub(crate) n: f64,
    /// Standard error of `lat`.
    pub(crate) se: f64,
}

/// The bands.
#[derive(Debug, Clone)]
pub(crate) struct Bands {
    sums: Box<[Sums; BANDS]>,
}

impl Default for Bands {
    fn default() -> Self {
        Bands {
            sums: Box::new([Sums::default(); BANDS]),
        }
    }
}

impl Bands {
    /// Adds what one cohort's requests of band `b` took; the band forgets its past in proportion,
    /// at most by half at once.
    pub(crate) fn absorb(&mut self, b: usize, s: Sums) {
        if s.n <= 0.0 {
            return;
        }
        let band = &mut self.sums[b.min(BANDS - 1)];
        band.scale((1.0 - s.n / KEEP).max(0.5));
        band.add(s);
    }

    /// The bands with at least `least` samples, lowest level first, into `out`.
    pub(crate) fn points(&self, least: f64, out: &mut Vec<Point>) {
        out.clear();
        out.extend(self.sums.iter().filter(|s| s.n >= least).map(|s| {
            let lat = s.lat / s.n;
            Point {
                level: s.level / s.n,
                lat,
                n: s.n,
                se: ((s.sq / s.n - lat * lat).max(0.0) / s.n).sqrt(),
            }
        }));
    }

    /// Whether some band has at least `n` samples.
    pub(crate) fn any_with(&self, n: f64) -> bool {
        self.sums.iter().any(|s| s.n >= n)
    }
}

/// Gives the bands too thin to measure their own spread (fewer than `thick` samples) the widest
/// spread of the thick ones (or, while none is thick, the spread pooled over all that have two
/// samples) as their standard deviation: one sample has no spread of its own, and a standard error
/// of zero would let a single slow request show a queue.
pub(crate) fn lend_spread(points: &mut [Point], thick: f64) {
    let sd = |p: &Point| p.se * p.n.sqrt();
    let widest = points
        .iter()
        .filter(|p| p.n >= thick)
        .map(sd)
        .reduce(f64::max);
    let spread = widest.unwrap_or_else(|| {
        let (mut dof, mut var) = (0.0, 0.0);
        for p in points.iter().filter(|p| p.n >= 2.0) {
            var += (p.n - 1.0) * sd(p).powi(2);
            dof += p.n - 1.0;
        }
        if dof > 0.0 {
            (var / dof).sqrt()
        } else {
            f64::INFINITY
        }
    });
    for p in points.iter_mut().filter(|p| p.n < thick) {
        p.se = p.se.max(spread / p.n.sqrt());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_are_eight_per_octave_and_cover_every_level() {
        assert_eq!(band(1.0), 0);
        assert_eq!(band(2.0), 8);
        assert_eq!(band(4.0), 16);
        assert_eq!(band(65_535.0), BANDS - 1);
        assert_eq!(band(0.0), 0);
        assert_eq!(band(f64::NAN), 0);
    }

    fn point(level: f64, lat: f64, n: f64, sd: f64) -> Point {
        Point {
            level,
            lat,
            n,
            se: sd / n.sqrt(),
        }
    }

    #[test]
    fn a_thin_band_borrows_the_widest_spread_of_the_thick_ones() {
        let mut pts = [
            point(1.0, 100.0, 50.0, 30.0),
            point(2.0, 100.0, 40.0, 60.0),
            point(8.0, 400.0, 1.0, 0.0),
            point(9.0, 450.0, 4.0, 10.0),
        ];
        lend_spread(&mut pts, 8.0);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
        // Thick bands keep their own; thin ones take the widest (60) over their own samples.
        assert!(near(pts[0].se, 30.0 / 50f64.sqrt()), "{}", pts[0].se);
        assert!(near(pts[1].se, 60.0 / 40f64.sqrt()), "{}", pts[1].se);
        assert!(near(pts[2].se, 60.0), "{}", pts[2].se);
        assert!(near(pts[3].se, 30.0), "{}", pts[3].se);
    }

    #[test]
    fn single_samples_alone_have_no_spread_to_go_by() {
        let mut pts = [point(1.0, 100.0, 1.0, 0.0), point(2.0, 900.0, 1.0, 0.0)];
        lend_spread(&mut pts, 8.0);
        assert!(pts.iter().all(|p| p.se == f64::INFINITY));
    }

    #[test]
    fn a_band_forgets_in_proportion_to_what_it_absorbs() {
        let mut b = Bands::default();
        for _ in 0..4000 {
            b.absorb(3, Sums::one(1.0, 1.0));
        }
        let mut pts = Vec::new();
        b.points(1.0, &mut pts);
        // Kept samples converge on KEEP.
        assert!((pts[0].n - KEEP).abs() < 1.0, "{}", pts[0].n);
    }
}
