//! The windows a rate is taken over: the last N calls, or the calls of the last span of time.
//!
//! Both keep, per call or per slice, only whether it was "bad" (failed, or slow), so a window of
//! 100 calls is 100 bytes and a time window is a few counters per slice.

use crate::clock::{duration_to_nanos, Nanos};

use super::config::WindowConfig;

/// What a window holds: how many calls, how many of them bad.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) calls: u64,
    pub(crate) bad: u64,
}

/// The last `ring.len()` calls, as a ring of "bad" flags with running totals.
#[derive(Debug, Clone)]
struct CountWindow {
    ring: Vec<bool>,
    next: usize,
    tally: Tally,
}

impl CountWindow {
    fn record(&mut self, bad: bool) {
        if (self.tally.calls as usize) < self.ring.len() {
            self.tally.calls += 1;
        } else if self.ring[self.next] {
            self.tally.bad -= 1;
        }
        self.ring[self.next] = bad;
        self.tally.bad += u64::from(bad);
        self.next = (self.next + 1) % self.ring.len();
    }
}

/// One slice of a time window: which slice of time it is counting, and its counts.
#[derive(Debug, Clone, Copy, Default)]
struct Slice {
    index: u64,
    tally: Tally,
}

/// The calls that ended within the last `slices.len()` slices of `width` nanoseconds.
#[derive(Debug, Clone)]
struct TimeWindow {
    width: Nanos,
    slices: Vec<Slice>,
}

impl TimeWindow {
    fn record(&mut self, at: Nanos, bad: bool) {
        let index = at / self.width;
        let n = self.slices.len() as u64;
        let slice = &mut self.slices[(index % n) as usize];
        if slice.index != index {
            *slice = Slice {
                index,
                tally: Tally::default(),
            };
        }
        slice.tally.calls += 1;
        slice.tally.bad += u64::from(bad);
    }

    fn tally(&self, now: Nanos) -> Tally {
        let current = now / self.width;
        let n = self.slices.len() as u64;
        let mut sum = Tally::default();
        for s in &self.slices {
            // A slice counts while it is one of the last `n` (a clock gone back counts as now).
            if current.saturating_sub(s.index) < n {
                sum.calls += s.tally.calls;
                sum.bad += s.tally.bad;
            }
        }
        sum
    }
}

/// A count window or a time window.
#[derive(Debug, Clone)]
pub(crate) struct Window(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Count(CountWindow),
    Time(TimeWindow),
}

impl Window {
    /// An empty window of the given shape (figures below their minimum are raised to it).
    pub(crate) fn new(config: WindowConfig) -> Self {
        Window(match config {
            WindowConfig::Count { calls } => Kind::Count(CountWindow {
                ring: vec![false; calls.max(1) as usize],
                next: 0,
                tally: Tally::default(),
            }),
            WindowConfig::Time { span, buckets } => {
                let buckets = buckets.max(1);
                Kind::Time(TimeWindow {
                    width: (duration_to_nanos(span) / u64::from(buckets)).max(1),
                    slices: vec![Slice::default(); buckets as usize],
                })
            }
        })
    }

    /// Takes note of a call that ended at `at`.
    pub(crate) fn record(&mut self, at: Nanos, bad: bool) {
        match &mut self.0 {
            Kind::Count(w) => w.record(bad),
            Kind::Time(w) => w.record(at, bad),
        }
    }

    /// The calls in the window at `now`.
    pub(crate) fn tally(&self, now: Nanos) -> Tally {
        match &self.0 {
            Kind::Count(w) => w.tally,
            Kind::Time(w) => w.tally(now),
        }
    }

    /// Forgets every call.
    pub(crate) fn clear(&mut self) {
        match &mut self.0 {
            Kind::Count(w) => {
                w.ring.fill(false);
                w.next = 0;
                w.tally = Tally::default();
            }
            Kind::Time(w) => w.slices.fill(Slice::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn count_window_forgets_the_oldest_call() {
        let mut w = Window::new(WindowConfig::Count { calls: 3 });
        for bad in [true, false, false, false] {
            w.record(0, bad);
        }
        assert_eq!(w.tally(0), Tally { calls: 3, bad: 0 });
    }

    #[test]
    fn time_window_drops_slices_older_than_the_span() {
        let mut w = Window::new(WindowConfig::Time {
            span: Duration::from_secs(10),
            buckets: 10,
        });
        w.record(0, true);
        w.record(5_000_000_000, true);
        assert_eq!(w.tally(9_999_999_999).bad, 2);
        assert_eq!(w.tally(10_000_000_000).bad, 1);
        assert_eq!(w.tally(15_000_000_000).bad, 0);
    }
}
