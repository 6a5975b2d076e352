//! Model-checked concurrency of the cells (the bucket, the in-flight counter and the turnstile,
//! with its changes of mode): every interleaving of 2–3 threads.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test
//! --release -p sluicegate --no-default-features --lib loom` (as `scripts/test` does).

use loom::sync::Arc;
use loom::thread;

use crate::cell::bucket::{Bucket, BucketParams};
use crate::cell::inflight::InFlight;
use crate::cell::turnstile::{Drawn, Turnstile};

#[test]
fn in_flight_never_exceeds_its_ceiling_and_returns_to_zero() {
    loom::model(|| {
        let in_flight = Arc::new(InFlight::new());
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let in_flight = Arc::clone(&in_flight);
                thread::spawn(move || {
                    if in_flight.try_enter(2) {
                        assert!(in_flight.current() <= 2, "ceiling exceeded");
                        in_flight.leave();
                        true
                    } else {
                        false
                    }
                })
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap());
        assert!(
            admitted.filter(|&a| a).count() >= 2,
            "at least two fit under a ceiling of 2"
        );
        assert_eq!(in_flight.current(), 0);
    });
}

#[test]
fn concurrent_reservations_get_distinct_slots_and_none_is_lost() {
    loom::model(|| {
        let bucket = Arc::new(Bucket::new());
        let params = BucketParams::new(10.0, 1); // one token each 100 ms, capacity 1
        let now = 1_000_000_000;
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || bucket.reserve(now, u64::MAX, &params).unwrap().wait)
            })
            .collect();
        let mut waits: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        waits.sort_unstable();
        assert_eq!(waits, vec![0, 100_000_000]);
        // Both reservations are on the books: the next token is two intervals away.
        assert_eq!(bucket.time_to_token(now, &params), 200_000_000);
    });
}

#[test]
fn a_cancelled_reservation_never_takes_another_reservation_with_it() {
    loom::model(|| {
        let bucket = Arc::new(Bucket::new());
        let params = BucketParams::new(10.0, 1);
        let now = 1_000_000_000;
        let cancelling = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let r = bucket.reserve(now, u64::MAX, &params).unwrap();
                bucket.cancel(&r, now)
            })
        };
        let keeping = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.reserve(now, u64::MAX, &params).unwrap().wait)
        };
        let returned = cancelling.join().unwrap();
        let kept_wait = keeping.join().unwrap();
        let next = bucket.time_to_token(now, &params);
        // The kept reservation still holds its slot: the next token lies after it.
        assert!(next >= kept_wait + 100_000_000, "kept reservation lost");
        if returned {
            // The cancelled slot really came back: only the kept one is on the books.
            assert_eq!(next, kept_wait + 100_000_000);
        } else {
            // Left unused (a later reservation was scheduled behind it): two slots on the books.
            assert_eq!(next, 200_000_000);
        }
    });
}

// ================================================================ the turnstile

/// A draw as the gate makes it, with no wait: in with a token and a slot in one step; with a
/// token but no slot, a slot taken the long way or else the token handed back. Whether it got in.
fn draw_as_the_gate_does(turnstile: &Turnstile, now: u64, params: &BucketParams, cap: u64) -> bool {
    match turnstile.draw(now, 0, params, cap) {
        Drawn::Admitted(_) => true,
        Drawn::Reserved(token) => {
            assert_eq!(token.wait, 0, "no wait was allowed");
            turnstile.try_enter(cap) || {
                turnstile.cancel(&token, now);
                false
            }
        }
        Drawn::Refused(_) => false,
    }
}

const NOW: u64 = 1_000_000_000;
const TENTH: u64 = 100_000_000;

#[test]
fn two_draws_against_a_ceiling_of_one_let_exactly_one_in_and_the_count_is_one_until_it_leaves() {
    loom::model(|| {
        let turnstile = Arc::new(Turnstile::new());
        let params = BucketParams::new(1e9, 1_000); // tokens to spare
        turnstile.configure(NOW, &params, 0);
        assert!(turnstile.is_fast());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let turnstile = Arc::clone(&turnstile);
                thread::spawn(move || {
                    let admitted = draw_as_the_gate_does(&turnstile, NOW, &params, 1);
                    if admitted {
                        assert_eq!(turnstile.current(), 1, "the ceiling is 1");
                    }
                    admitted
                })
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap());
        assert_eq!(admitted.filter(|&a| a).count(), 1);
        assert_eq!(turnstile.current(), 1);
        turnstile.leave();
        assert_eq!(turnstile.current(), 0);
        // The loser handed its token back, or never took one: only the winner's is spent.
        assert_eq!(turnstile.time_to_token(NOW, &params), 0);
        assert!(turnstile.is_fast());
    });
}

#[test]
fn two_draws_of_a_bucket_holding_one_token_take_it_once() {
    loom::model(|| {
        let turnstile = Arc::new(Turnstile::new());
        let params = BucketParams::new(10.0, 1); // one token each 100 ms, one at once
        turnstile.configure(NOW, &params, 0);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let turnstile = Arc::clone(&turnstile);
                thread::spawn(move || turnstile.draw(NOW, 0, &params, 10))
            })
            .collect();
        let mut drawn: Vec<Drawn> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        drawn.sort_by_key(|d| matches!(d, Drawn::Admitted(_)));
        assert_eq!(drawn[0], Drawn::Refused(TENTH), "{drawn:?}");
        assert!(matches!(drawn[1], Drawn::Admitted(_)), "{drawn:?}");
        assert_eq!(turnstile.time_to_token(NOW, &params), TENTH);
        assert_eq!(turnstile.current(), 1);
        assert!(turnstile.is_fast());
    });
}

/// Two threads draw at one instant from a bucket holding one token while one of them first moves
/// the turnstile to the other mode (`to_exact`: parameters that do not fit; else a fresh
/// turnstile, in exact mode, configured with parameters that fit). Returns how many got in, after
/// checking the count.
fn draws_across_a_change_of_mode(to_exact: bool) -> usize {
    let turnstile = Arc::new(Turnstile::new());
    let params = BucketParams::new(10.0, 1);
    let unfit = BucketParams::new(0.001, 1); // one token each 1000 s: beyond FITS
    if to_exact {
        turnstile.configure(NOW, &params, 0);
        assert!(turnstile.is_fast());
    }
    let drawing = {
        let turnstile = Arc::clone(&turnstile);
        thread::spawn(move || draw_as_the_gate_does(&turnstile, NOW, &params, 10))
    };
    let changing = {
        let turnstile = Arc::clone(&turnstile);
        thread::spawn(move || {
            turnstile.configure(NOW, if to_exact { &unfit } else { &params }, 0);
            draw_as_the_gate_does(&turnstile, NOW, &params, 10)
        })
    };
    let admitted = [drawing.join().unwrap(), changing.join().unwrap()]
        .into_iter()
        .filter(|&a| a)
        .count();
    assert_eq!(turnstile.is_fast(), !to_exact);
    assert_eq!(turnstile.current(), admitted as u64, "the count is exact");
    // No token was given twice, nor is one left over to give: the one token went to one draw
    // (or, at worst, was lost in the change of mode).
    assert!(admitted <= 1);
    assert_eq!(turnstile.reserve(NOW, 0, &params), Err(TENTH));
    for _ in 0..admitted {
        turnstile.leave();
    }
    assert_eq!(turnstile.current(), 0);
    admitted
}

#[test]
fn draws_during_a_switch_from_fast_to_exact_mode_get_the_one_token_once_and_keep_the_count() {
    loom::model(|| {
        // Nothing is lost this way: the fast schedule moves across whole.
        assert_eq!(draws_across_a_change_of_mode(true), 1);
    });
}

#[test]
fn draws_during_a_switch_from_exact_to_fast_mode_get_the_one_token_at_most_once_and_keep_the_count()
{
    loom::model(|| {
        draws_across_a_change_of_mode(false);
    });
}

#[test]
fn a_reservation_in_exact_mode_racing_a_switch_to_fast_mode_is_not_given_again() {
    loom::model(|| {
        let turnstile = Arc::new(Turnstile::new());
        let params = BucketParams::new(10.0, 1); // one token each 100 ms
        let max_wait = 10 * TENTH;
        let reserving = {
            let turnstile = Arc::clone(&turnstile);
            thread::spawn(move || turnstile.reserve(NOW, max_wait, &params).unwrap().wait)
        };
        let configuring = {
            let turnstile = Arc::clone(&turnstile);
            thread::spawn(move || turnstile.configure(NOW, &params, max_wait))
        };
        configuring.join().unwrap();
        let first = reserving.join().unwrap();
        assert!(turnstile.is_fast());
        let second = turnstile.reserve(NOW, max_wait, &params).unwrap().wait;
        // At most one token per interval: the second slot lies after the first (one slot later,
        // or two if the first draw's token was lost in the change of mode and it drew again).
        assert!(first == 0 || first == TENTH, "first {first}");
        assert!(second >= first + TENTH, "first {first}, second {second}");
        assert!(second <= 2 * TENTH, "first {first}, second {second}");
    });
}

#[test]
fn the_count_moves_on_through_changes_of_mode_in_both_directions_and_lands_exact() {
    loom::model(|| {
        let turnstile = Arc::new(Turnstile::new());
        let params = BucketParams::new(10.0, 1);
        let unfit = BucketParams::new(0.001, 1);
        turnstile.configure(NOW, &params, 0);
        let counting = {
            let turnstile = Arc::clone(&turnstile);
            thread::spawn(move || {
                assert!(turnstile.try_enter(10));
                turnstile.leave();
                assert!(turnstile.try_enter(10));
            })
        };
        let changing = {
            let turnstile = Arc::clone(&turnstile);
            thread::spawn(move || {
                turnstile.configure(NOW, &unfit, 0);
                assert!(!turnstile.is_fast());
                turnstile.configure(NOW, &params, 0);
                assert!(turnstile.is_fast());
            })
        };
        counting.join().unwrap();
        changing.join().unwrap();
        assert_eq!(turnstile.current(), 1);
        // The schedule came back whole: the one token is still there.
        assert_eq!(turnstile.time_to_token(NOW, &params), 0);
        assert!(matches!(
            turnstile.draw(NOW, 0, &params, 2),
            Drawn::Admitted(_)
        ));
        assert_eq!(turnstile.current(), 2);
    });
}
