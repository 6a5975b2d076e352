//! The seed's own story, end to end on a manual clock: a service is flooded, the switch turns on,
//! urgent requests keep their rate while non-urgent ones trickle at `non_urgent_qps`, and when the
//! flood is gone the switch turns off again.

mod common;

use common::{gate_with, ms};
use sluicegate::clock::ManualClock;
use sluicegate::{Config, Gate, Permit, Request, Urgency};
use tokio_test::task::{self, Spawn};

static PAY: Request<'static> = Request::url("/pay/submit").with_urgency(Urgency::Urgent);
static REPORT: Request<'static> = Request::url("/report/daily").with_urgency(Urgency::NonUrgent);

fn config() -> Config {
    let mut c = Config::default();
    c.gate.max_running = (50).into();
    c.gate.max_avg_latency = (ms(100)).into();
    c.gate.max_qps = (200.0).into();
    c.gate.non_urgent_qps = 20.0;
    c.gate.request_timeout = ms(500);
    c.gate.max_waiters = 100;
    c.gate.max_in_flight = (1000).into();
    c
}

/// Per-second tallies of one class.
#[derive(Default, Clone, Copy, Debug)]
struct Tally {
    offered: u64,
    admitted: u64,
}

type Pending<'g> = Spawn<
    std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Permit<'g, ManualClock>, sluicegate::Rejection>>
                + 'g,
        >,
    >,
>;

struct World<'g> {
    gate: &'g Gate<ManualClock>,
    clock: ManualClock,
    running: Vec<(u64, Permit<'g, ManualClock>)>,
    waiting: Vec<(bool, Pending<'g>)>,
    now_ms: u64,
    urgent: Vec<Tally>,
    other: Vec<Tally>,
    switch_on: Vec<bool>,
}

impl<'g> World<'g> {
    /// Service time grows with the crowd, as real servers slow down when they drown: 50 ms up to 50
    /// in flight, proportionally more beyond.
    fn service_ms(&self) -> u64 {
        let n = self.running.len() as u64;
        50 * n.max(50) / 50
    }

    fn admitted(&mut self, urgent: bool, permit: Permit<'g, ManualClock>) {
        let second = (self.now_ms / 1000) as usize;
        let tally = if urgent {
            &mut self.urgent[second]
        } else {
            &mut self.other[second]
        };
        tally.admitted += 1;
        let done_at = self.now_ms + self.service_ms();
        self.running.push((done_at, permit));
    }

    fn arrive(&mut self, urgent: bool) {
        let second = (self.now_ms / 1000) as usize;
        let tally = if urgent {
            &mut self.urgent[second]
        } else {
            &mut self.other[second]
        };
        tally.offered += 1;
        let req: &'static Request<'static> = if urgent { &PAY } else { &REPORT };
        let mut t: Pending<'g> = task::spawn(Box::pin(self.gate.acquire(req)));
        match t.poll() {
            std::task::Poll::Ready(Ok(p)) => self.admitted(urgent, p),
            std::task::Poll::Ready(Err(_)) => {}
            std::task::Poll::Pending => self.waiting.push((urgent, t)),
        }
    }

    fn step(&mut self, urgent_per_s: u64, other_per_s: u64) {
        self.clock.advance(ms(1));
        self.now_ms += 1;
        let now = self.now_ms;
        self.running.retain(|(done_at, _)| *done_at > now);
        let mut still = Vec::new();
        for (urgent, mut t) in std::mem::take(&mut self.waiting) {
            if !t.is_woken() {
                still.push((urgent, t));
                continue;
            }
            match t.poll() {
                std::task::Poll::Ready(Ok(p)) => self.admitted(urgent, p),
                std::task::Poll::Ready(Err(_)) => {}
                std::task::Poll::Pending => still.push((urgent, t)),
            }
        }
        self.waiting = still;
        // Evenly spread arrivals: k per second means one whenever the running count crosses a step.
        for (rate, urgent) in [(urgent_per_s, true), (other_per_s, false)] {
            let due = rate * now / 1000 - rate * (now - 1) / 1000;
            for _ in 0..due {
                self.arrive(urgent);
            }
        }
        if now.is_multiple_of(100) {
            self.switch_on.push(self.gate.snapshot().switch.on);
        }
    }
}

#[test]
fn flood_turns_the_switch_on_urgent_keeps_its_rate_non_urgent_trickles_and_the_switch_turns_off_after(
) {
    let (gate, clock, _) = gate_with(config());
    let mut w = World {
        gate: &gate,
        clock,
        running: Vec::new(),
        waiting: Vec::new(),
        now_ms: 0,
        urgent: vec![Tally::default(); 21],
        other: vec![Tally::default(); 21],
        switch_on: Vec::new(),
    };
    // 0–2 s calm (100/s), 2–12 s flood (100 urgent + 1900 non-urgent per second), 12–20 s calm again.
    for _ in 0..2000 {
        w.step(30, 70);
    }
    for _ in 0..10_000 {
        w.step(100, 1900);
    }
    for _ in 0..8000 {
        w.step(30, 70);
    }
    let on = &w.switch_on; // one reading per 100 ms
    assert!(on[..20].iter().all(|&o| !o), "calm start: switch off");
    let first_on = on
        .iter()
        .position(|&o| o)
        .expect("the flood turns the switch on");
    assert!(
        (20..25).contains(&first_on),
        "on within 500 ms of the flood, at {first_on}00 ms"
    );
    let first_off = on[first_on..]
        .iter()
        .position(|&o| !o)
        .map(|i| i + first_on)
        .expect("turns off");
    assert!(
        first_off >= 120,
        "stays on while the flood lasts (off at {first_off}00 ms)"
    );
    assert!(
        first_off <= 140,
        "turns off within 2 s of the flood's end (off at {first_off}00 ms)"
    );
    assert!(
        on[first_off..].iter().all(|&o| !o),
        "and stays off: no flapping"
    );

    // Steady flood (4–12 s): every urgent request is served, non-urgent at non_urgent_qps.
    for second in 4..12 {
        let u = w.urgent[second];
        let o = w.other[second];
        assert_eq!(u.admitted, u.offered, "second {second}: urgent {u:?}");
        assert!(
            (19..=21).contains(&o.admitted),
            "second {second}: non-urgent {o:?}"
        );
    }
    // After the flood everything is served again.
    for second in 15..20 {
        assert_eq!(
            w.other[second].admitted, w.other[second].offered,
            "second {second}"
        );
    }
    drop(w);
    let s = gate.snapshot();
    assert_eq!(s.waiters, 0);
    assert_eq!(s.switch_flips, 2, "one on, one off");
}
