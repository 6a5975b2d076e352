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

    /// Memory ratio per request in flight, where the readings tell: in-flight varied by at least
    /// one request between them and memory rose with it.
    pub(super) fn slope(&self) -> Option<f64> {
        let (var, cov, _) = self.moments()?;
        let slope = cov / var;
        (var >= 1.0 && slope.is_finite() && slope > 0.0).then_some(slope)
    }
}
