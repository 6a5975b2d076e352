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
