//! The learning reference: a slow start told where to stop. From the gate's own start of eight
//! requests, the ceiling grows by three for each answer while it refuses (about four times per
//! round trip), never past `scale` × W, W read from the simulator (which a gate cannot know).
//! What it misses is what learning from a cold start costs by itself; with `scale` off 1, what a
//! ceiling that far off W costs once learned.

use sluicegate::clock::Nanos;
use sluicegate::sim::{AttemptId, BackendView, Offer, Strategy};

/// The gate's own start (`capacity::START`).
const START: f64 = 8.0;
/// The gate's own growth per answer (`capacity::GROWTH`).
const GROWTH: f64 = 3.0;

pub(crate) struct SlowStart {
    scale: f64,
    /// (ceiling, stop), from the first offer on.
    ceiling: Option<(f64, f64)>,
    in_flight: u64,
    refused: bool,
}

impl SlowStart {
    pub(crate) fn new(scale: f64) -> Self {
        SlowStart {
            scale,
            ceiling: None,
            in_flight: 0,
            refused: false,
        }
    }

    /// The stop: `scale` × W, at least one request.
    fn stop(&self, b: &BackendView) -> f64 {
        (self.scale * f64::from(b.workers)).round().max(1.0)
    }
}

impl Strategy for SlowStart {
    fn offer(&mut self, _: AttemptId, _: bool, _: Nanos, b: &BackendView) -> Offer {
        let stop = self.stop(b);
        let (ceiling, _) = *self.ceiling.get_or_insert((START.min(stop), stop));
        if (self.in_flight as f64) < ceiling {
            self.in_flight += 1;
            Offer::Admit
        } else {
            self.refused = true;
            Offer::Refuse { retry_after: None }
        }
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, b: &BackendView) -> Offer {
        self.offer(id, true, now, b)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some((c, stop)) = self.ceiling.as_mut().filter(|_| self.refused) {
            *c = (*c + GROWTH).min(*stop);
        }
    }
}
