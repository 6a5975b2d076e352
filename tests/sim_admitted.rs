//! A strategy may admit an attempt it told to wait before its wait ends (`Strategy::admitted`,
//! asked after each of its decisions and answers), as a gate hands a freed slot to a waiting
//! request: the attempt joins the backend as any admitted one does, behind its queue.
#![cfg(feature = "sim")]

use std::collections::VecDeque;

use sluicegate::clock::Nanos;
use sluicegate::sim::{run_strategy, AttemptId, BackendView, Offer, Scenario, Strategy};

/// Four workers of 10 ms, flooded at twice their capacity for a second.
const FLOODED: &str = r#"
name = "flooded"
[backend]
workers = 4
service_time = "10ms"
distribution = "constant"
[clients]
arrivals = "uniform"
[[phase]]
duration = "1s"
load = 2.0
"#;

/// Admits up to `limit` in flight; the others wait, first come first served, for an answer to
/// free a place, or for a second at most.
#[derive(Default)]
struct Parking {
    limit: u64,
    in_flight: u64,
    parked: VecDeque<AttemptId>,
    admitted_from_wait: u64,
    most_in_service: u64,
}

impl Strategy for Parking {
    fn offer(&mut self, id: AttemptId, _: bool, now: Nanos, backend: &BackendView) -> Offer {
        self.most_in_service = self.most_in_service.max(backend.in_service);
        if self.in_flight < self.limit {
            self.in_flight += 1;
            return Offer::Admit;
        }
        self.parked.push_back(id);
        Offer::WaitUntil(now + 1_000_000_000)
    }
    fn ready(&mut self, id: AttemptId, _: Nanos, _: &BackendView) -> Offer {
        self.parked.retain(|&p| p != id);
        Offer::Refuse { retry_after: None }
    }
    fn abandon(&mut self, id: AttemptId, _: Nanos) {
        self.parked.retain(|&p| p != id);
    }
    fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {
        self.in_flight -= 1;
    }
    fn admitted(&mut self, _: Nanos) -> Option<AttemptId> {
        if self.in_flight >= self.limit {
            return None;
        }
        let id = self.parked.pop_front()?;
        self.in_flight += 1;
        self.admitted_from_wait += 1;
        Some(id)
    }
}

#[test]
fn an_attempt_admitted_from_its_wait_queues_behind_the_backend_and_never_adds_a_worker() {
    let scenario = Scenario::from_toml_str(FLOODED).expect("a valid scenario");
    let mut parking = Parking {
        limit: 8,
        ..Parking::default()
    };
    let report = run_strategy(&scenario, 1, "parking", &mut parking, &mut |_| {});
    assert!(parking.admitted_from_wait > 0, "answers freed places");
    assert!(
        parking.most_in_service <= 4,
        "four workers serve at most four: {}",
        parking.most_in_service
    );
    // Four workers of 10 ms answer 400 a second: the flood's second is served in full.
    assert!(report.goodput_ratio > 0.95, "{}", report.goodput_ratio);
    assert!(
        report.goodput_ratio <= 1.0 + 1e-9,
        "{}",
        report.goodput_ratio
    );
}
