//! Memory use as a function of the requests in flight, fitted over the probe's readings, so that
//! the memory ceilings can be enforced as in-flight levels between readings.

/// Memory use as a function of requests in flight, fitted over the probe's readings (exponentially
/// weighted least squares), so that the memory ceilings can be enforced as in-flight levels between
/// readings.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MemoryFit {
    pub(super) last_bits: Option<u64>,
    /// Requests in flight when the latest reading was taken (or first seen).
    pub(super) at_reading: u64,
    pub(super) weight: f64,
    pub(super) sx: f64,
    pub(super) sy: f64,
    pub(super) sxx: f64,
    pub(super) sxy: f64,
    pub(super) syy: f64,
}

impl MemoryFit {
    /// Forgetting factor per reading.
    const DECAY: f64 = 0.95;

    pub(super) fn add(&mut self, in_flight: f64, ratio: f64) {
        let d = Self::DECAY;
        self.weight = self.weight * d + 1.0;
        self.sx = self.sx * d + in_flight;
        self.sy = self.sy * d + ratio;
        self.sxx = self.sxx * d + in_flight * in_flight;
        self.sxy = self.sxy * d + in_flight * ratio;
        self.syy = self.syy * d + ratio * ratio;
    }

    /// Weighted variance of in-flight, covariance of in-flight and memory, and variance of memory
    /// over the readings; `None` before the first one.
    pub(super) fn moments(&self) -> Option<(f64, f64, f64)> {
        let w = self.weight;
        if w <= 0.0 {
            return None;
        }
        let (mx, my) = (self.sx / w, self.sy / w);
        Some((
            self.sxx / w - mx * mx,
            self.sxy / w - mx * my,
            self.syy / w - my * my,
        ))
    }

    /// The spread of readings around the fitted line (memory that the requests in flight do not
    /// explain: payloads of different sizes), as a standard deviation of the ratio.
    pub(super) fn spread(&self) -> f64 {
        if self.weight <= 1.0 {
            return 0.0;
        }
        let Some((var_x, cov, var_y)) = self.moments() else {
            return 0.0;
        };
        let explained = if var_x > 0.0 { cov * cov / var_x } else { 0.0 };
        let residual = var_y - explained;
        if residual.is_finite() && residual > 0.0 {
            residual.sqrt()
        } else {
            0.0
        }
    }

    /// Memory ratio per request in flight. Where the readings do not tell (in-flight hardly varied),
    /// all memory is taken to be per request: an overestimate, so the projected ceilings err on the
    /// safe side.
    pub(super) fn per_request(&self, in_flight: u64, ratio: f64) -> Option<f64> {
        if let Some((var, cov, _)) = self.moments() {
            if var >= 1.0 {
                let slope = cov / var;
                if slope.is_finite() && slope > 0.0 {
                    return Some(slope);
                }
            }
        }
        (in_flight > 0 && ratio > 0.0).then(|| ratio / in_flight as f64)
    }
}
