//! The turnstile's modes one by one: entered, left and kept as the module docs say, with the
//! answers of the reference (a bucket and a counter) throughout.

use super::*;

// ================================================================ the modes, one by one

/// 10 tokens/s (one each 100 ms), 3 at once.
fn tenth() -> BucketParams {
    BucketParams::new(10.0, 3)
}

/// Admits at `now` through the gate's path until refused; returns how many got in.
fn admit_all(pair: &Pair, now: u64, params: &BucketParams, cap: u64) -> u64 {
    let mut n = 0;
    while pair.admit(now, params, cap) {
        n += 1;
        assert!(n <= 10_000, "no end to admissions");
    }
    n
}

#[test]
fn a_new_turnstile_is_exact_with_a_full_bucket_and_configure_with_fitting_params_makes_it_fast() {
    let mut pair = Pair::new(Compare::Exactly);
    let p = tenth();
    let now = 10 * SECOND;
    assert!(!pair.turnstile.is_fast());
    assert_eq!(admit_all(&pair, now, &p, 10), 3, "a new turnstile is full");
    pair.check(now, &p);
    pair.configure(now, &p, 0);
    assert!(pair.turnstile.is_fast());
    // The count and the schedule moved across: still three in flight, still no token.
    assert_eq!(pair.current(), 3);
    assert_eq!(pair.reserve(now, 0, &p).unwrap_err(), 100 * MS);
    // One token each 100 ms, in fast mode.
    let later = now + 100 * MS;
    assert!(matches!(
        pair.draw(later, 0, &p, 10),
        (Drawn::Admitted(_), _)
    ));
    pair.check(later, &p);
    assert!(!pair.admit(later, &p, 10));
    // No slot: the token is handed back, on both sides.
    let later = later + 100 * MS;
    assert!(!pair.admit(later, &p, 4));
    assert!(pair.admit(later, &p, 5));
    pair.leave();
    pair.check(later, &p);
    assert!(pair.turnstile.is_fast());
}

#[test]
fn a_reading_further_than_fresh_from_the_anchor_leaves_the_fast_mode_with_the_buckets_answers() {
    let p = tenth();
    let anchor = 1_000 * SECOND;
    // Above: the last reading served is `anchor + FRESH - 1`.
    let mut pair = Pair::new(Compare::UpToRaisedSchedules);
    pair.configure(anchor, &p, 0);
    assert!(pair.admit(anchor + FRESH - 1, &p, 10));
    assert!(pair.turnstile.is_fast());
    assert!(pair.admit(anchor + FRESH, &p, 10));
    assert!(!pair.turnstile.is_fast());
    assert_eq!(admit_all(&pair, anchor + FRESH, &p, 10), 1);
    pair.check(anchor + FRESH, &p);

    // Below: the last reading served is `anchor - FRESH + 1`; the schedule runs ahead of the
    // anchor, so nothing raised is in sight.
    let mut pair = Pair::new(Compare::UpToRaisedSchedules);
    pair.configure(anchor, &p, 0);
    for _ in 0..5 {
        pair.reserve(anchor, SECOND, &p).unwrap();
    }
    assert!(!pair.admit(anchor - FRESH + 1, &p, 10));
    assert!(pair.turnstile.is_fast());
    let retry = pair.reserve(anchor - FRESH - 1, 0, &p).unwrap_err();
    assert_eq!(retry, FRESH + 1 + 300 * MS);
    assert!(!pair.turnstile.is_fast());
    pair.check(anchor - FRESH - 1, &p);
    assert_eq!(admit_all(&pair, anchor + 300 * MS, &p, 10), 1);
    pair.check(anchor + 300 * MS, &p);

    // A hand-back above, and a drain above or below, leave it too. (No hand-back below: the
    // fast mode raised the schedule to `anchor - FRESH` when anchored, and a hand-back restores
    // no earlier than the reservation's `before`, which a reading below that would show.)
    let cancel = |pair: &Pair, kept: &Kept, now| {
        assert!(pair.cancel(kept, now));
    };
    let drain = |pair: &Pair, _: &Kept, now| pair.drain(now, &p);
    type Action<'a> = &'a dyn Fn(&Pair, &Kept, u64);
    for (action, far, at_far) in [
        (&cancel as Action, anchor + FRESH, 3),
        (&drain, anchor + FRESH, 1),
        (&drain, anchor - FRESH - 1, 0),
    ] {
        let mut pair = Pair::new(Compare::UpToRaisedSchedules);
        pair.configure(anchor, &p, 0);
        let kept = pair.reserve(anchor, SECOND, &p).unwrap();
        action(&pair, &kept, far);
        assert!(!pair.turnstile.is_fast(), "at {far}");
        pair.check(far, &p);
        assert_eq!(admit_all(&pair, far, &p, 10), at_far, "at {far}");
        pair.check(far, &p);
    }
}

#[test]
fn params_that_do_not_fit_leave_the_fast_mode_with_the_buckets_answers() {
    let p = tenth();
    let now = 1_000 * SECOND;
    let slow = BucketParams::new(0.001, 1);
    let deep = BucketParams::new(1.0, 200);
    assert!(slow.interval() > FITS && slow.tolerance() <= FITS);
    assert!(deep.interval() <= FITS && deep.tolerance() > FITS);
    let fresh_pair = || {
        let mut pair = Pair::new(Compare::UpToRaisedSchedules);
        pair.configure(now, &p, 0);
        assert!(pair.admit(now, &p, 10));
        assert!(pair.turnstile.is_fast());
        pair
    };
    // Through the gate's path, with parameters whose interval or tolerance exceeds FITS: a
    // draw refused with them reads the schedule alone and stays; one that takes a token leaves.
    let pair = fresh_pair();
    assert!(
        !pair.admit(now, &slow, 10),
        "the token of `p` is 100 ms away"
    );
    assert!(pair.turnstile.is_fast(), "a refusal writes nothing");
    pair.check(now, &slow);
    for unfit in [slow, deep] {
        let pair = fresh_pair();
        let at = now + SECOND;
        pair.admit(at, &unfit, 10);
        assert!(!pair.turnstile.is_fast(), "{unfit:?}");
        pair.check(at, &unfit);
        pair.check(at, &p);
        admit_all(&pair, at, &p, 10);
        pair.check(at + SECOND, &p);
    }
    // A reservation that may wait longer than FITS.
    for max_wait in [FITS + 1, HOUR, u64::MAX] {
        let pair = fresh_pair();
        pair.reserve(now, FITS, &p).unwrap();
        assert!(pair.turnstile.is_fast(), "FITS itself fits");
        pair.reserve(now, max_wait, &p).unwrap();
        assert!(!pair.turnstile.is_fast(), "max_wait {max_wait}");
        pair.check(now, &p);
        assert_eq!(pair.reserve(now, 0, &p).unwrap_err(), 100 * MS);
    }
    // A drain with such parameters.
    let pair = fresh_pair();
    pair.drain(now, &deep);
    assert!(!pair.turnstile.is_fast());
    pair.check(now, &deep);
    // `configure` with them, or with a wait above FITS.
    for (unfit, max_wait) in [(slow, 0), (deep, 0), (p, FITS + 1), (p, u64::MAX)] {
        let mut pair = fresh_pair();
        pair.configure(now, &unfit, max_wait);
        assert!(!pair.turnstile.is_fast(), "{unfit:?}, max_wait {max_wait}");
        pair.check(now, &p);
        assert_eq!(admit_all(&pair, now, &p, 10), 2);
        pair.configure(now, &p, FITS);
        assert!(pair.turnstile.is_fast(), "back with parameters that fit");
        pair.check(now, &p);
    }
}

#[test]
fn interval_tolerance_and_wait_fit_the_fast_mode_up_to_fits_inclusive() {
    let now = 1_000 * SECOND;
    for (params, max_wait, fast) in [
        (BucketParams::from_parts(FITS, 0), FITS, true),
        (BucketParams::from_parts(1, FITS), 0, true),
        (BucketParams::from_parts(FITS + 1, 0), 0, false),
        (BucketParams::from_parts(1, FITS + 1), 0, false),
        (BucketParams::from_parts(1, 0), FITS + 1, false),
    ] {
        let mut pair = Pair::new(Compare::UpToRaisedSchedules);
        pair.configure(now, &params, max_wait);
        assert_eq!(pair.turnstile.is_fast(), fast, "{params:?}, {max_wait}");
        pair.reserve(now, max_wait, &params).unwrap();
        pair.check(now, &params);
        pair.check(now + FITS, &params);
    }
}

#[test]
fn near_the_end_of_time_a_turnstile_leaves_the_fast_mode_and_stays_exact_with_the_buckets_answers()
{
    let p = BucketParams::new(1e9, 3); // one token each nanosecond, 3 at once
    let start = 1_000 * SECOND;
    for end in [u64::MAX - FRESH, u64::MAX - 2, u64::MAX] {
        let mut pair = Pair::new(Compare::UpToRaisedSchedules);
        pair.configure(start, &p, 0);
        assert!(pair.admit(start, &p, 100));
        // A reading at the end of time, far from the anchor: exact mode.
        let admitted = admit_all(&pair, end, &p, 100);
        assert!(!pair.turnstile.is_fast());
        pair.check(end, &p);
        // `configure` there keeps it exact.
        pair.configure(end, &p, 0);
        assert!(!pair.turnstile.is_fast(), "configured at {end}");
        // Each later nanosecond brings a token, until the schedule runs into the end of time;
        // then none, ever (the bucket's rule), on both sides.
        let mut total = admitted;
        let mut readings: Vec<u64> = (1..=10).filter_map(|d| end.checked_add(d)).collect();
        readings.extend(
            [u64::MAX - 1, u64::MAX]
                .into_iter()
                .filter(|&r| r > end.saturating_add(10)),
        );
        for now in readings {
            total += admit_all(&pair, now, &p, 100);
            pair.check(now, &p);
        }
        assert_eq!(admit_all(&pair, u64::MAX, &p, 100), 0);
        assert!(pair.reserve(u64::MAX, u64::MAX, &p).is_err());
        assert!(total >= 1, "end {end}");
        pair.check(u64::MAX, &p);
    }
}

/// An anchor within [`FRESH`] of 0 lies within `FRESH` of the end of 64-bit time modulo 2^64 (a
/// first draft's distance wrapped, and its fast mode served readings there, admitting without
/// limit): readings at the end of time must get the bucket's answers (one token, then none: the
/// schedule has run into the end of time).
#[test]
fn a_fast_mode_anchored_in_the_clocks_first_minutes_gives_the_buckets_answers_at_the_end_of_time() {
    for (anchor, capacity) in [(0, 1), (0, 3), (SECOND, 1), (FRESH - 1, 2)] {
        let p = BucketParams::new(1e9, capacity);
        let mut pair = Pair::new(Compare::Exactly);
        pair.configure(anchor, &p, 0);
        assert!(pair.turnstile.is_fast());
        let mut admitted = 0;
        for now in [u64::MAX - 3, u64::MAX - 1, u64::MAX, u64::MAX] {
            for _ in 0..4 {
                admitted += u64::from(pair.admit(now, &p, 100));
                pair.check(now, &p);
            }
        }
        assert!(
            admitted <= capacity + 3,
            "anchor {anchor}: {admitted} admitted"
        );
        assert!(pair.reserve(u64::MAX, u64::MAX, &p).is_err());
    }
}

#[test]
fn configure_after_a_long_idle_returns_to_the_fast_mode_with_a_full_bucket() {
    let p = tenth();
    let start = 10 * SECOND;
    for idle in [FRESH, 2 * FRESH, 7 * 24 * HOUR, HALF] {
        let mut pair = Pair::new(Compare::UpToRaisedSchedules);
        pair.configure(start, &p, 0);
        assert_eq!(admit_all(&pair, start, &p, 10), 3);
        pair.drain(start, &p);
        // Nothing to drain (three taken at once); one more reserved, 100 ms ahead.
        assert_eq!(
            pair.reserve(start, SECOND, &p).unwrap().turnstile.wait,
            100 * MS
        );
        // Idle: a reading long after, served exactly (the anchor is far).
        let now = start + idle;
        pair.check(now, &p);
        assert_eq!(pair.current(), 3);
        pair.configure(now, &p, 0);
        assert!(pair.turnstile.is_fast(), "after {idle} ns");
        assert_eq!(
            admit_all(&pair, now, &p, 10),
            3,
            "a full bucket, after {idle} ns"
        );
        assert_eq!(pair.current(), 6);
        assert_eq!(pair.reserve(now, 0, &p).unwrap_err(), 100 * MS);
        pair.check(now, &p);
        assert!(pair.turnstile.is_fast());
    }
}

#[test]
fn configure_keeps_the_exact_mode_while_the_schedule_runs_further_ahead_than_half_the_window() {
    let p = tenth();
    let slow = BucketParams::new(0.001, 1); // one token each 1000 s
    assert!(slow.interval() > WINDOW / 2);
    let now = 1_000 * SECOND;
    let mut pair = Pair::new(Compare::UpToRaisedSchedules);
    pair.reserve(now, 0, &slow).unwrap();
    pair.configure(now, &p, 0);
    assert!(!pair.turnstile.is_fast(), "schedule 1000 s ahead");
    pair.check(now, &p);
    assert_eq!(
        pair.reserve(now, 0, &p).unwrap_err(),
        slow.interval() - p.tolerance()
    );
    // Once the clock has come within half the window of it, back to fast.
    let later = now + slow.interval() - WINDOW / 2;
    pair.configure(later, &p, 0);
    assert!(pair.turnstile.is_fast());
    pair.check(later, &p);
    let due = now + slow.interval() - p.tolerance();
    assert_eq!(
        pair.reserve(later, 0, &p).unwrap_err(),
        due - later,
        "the schedule moved across"
    );
    assert_eq!(admit_all(&pair, due, &p, 10), 1);
    pair.check(due, &p);
}

#[test]
fn the_count_goes_on_across_every_change_of_mode() {
    let p = tenth();
    let mut pair = Pair::new(Compare::UpToRaisedSchedules);
    let now = 1_000 * SECOND;
    for _ in 0..3 {
        assert!(pair.try_enter(5));
    }
    pair.configure(now, &p, 0);
    assert!(pair.turnstile.is_fast());
    assert_eq!(pair.current(), 3);
    assert!(pair.admit(now, &p, 5));
    pair.configure(now, &p, u64::MAX);
    assert!(!pair.turnstile.is_fast());
    assert_eq!(pair.current(), 4);
    assert!(pair.admit(now, &p, 5));
    assert!(!pair.try_enter(5));
    pair.leave();
    pair.configure(now, &p, 0);
    assert!(pair.turnstile.is_fast());
    assert_eq!(pair.current(), 4);
    assert!(pair.admit(now, &p, 5));
    assert!(!pair.admit(now, &p, 10), "no token left");
    for _ in 0..5 {
        pair.leave();
    }
    assert_eq!(pair.current(), 0);
    pair.check(now, &p);
}

#[test]
fn a_ceiling_above_max_count_counts_as_max_count() {
    let p = BucketParams::new(1e9, 1);
    let t = Turnstile::new();
    let now = 1_000 * SECOND;
    t.configure(now, &p, 0);
    for _ in 0..MAX_COUNT {
        assert!(t.try_enter(u64::MAX));
    }
    assert_eq!(t.current(), MAX_COUNT);
    assert!(!t.try_enter(u64::MAX));
    // A token, but no slot: the count did not spill into the schedule.
    let Drawn::Reserved(token) = t.draw(now, 0, &p, u64::MAX) else {
        panic!("a token and no slot at MAX_COUNT");
    };
    assert_eq!(token.wait, 0);
    assert_eq!(t.current(), MAX_COUNT);
    assert!(t.is_fast());
    assert!(t.cancel(&token, now));
    assert_eq!(t.time_to_token(now, &p), 0);
    t.leave();
    assert!(matches!(t.draw(now, 0, &p, u64::MAX), Drawn::Admitted(_)));
    assert_eq!(t.current(), MAX_COUNT);
    assert_eq!(t.reserve(now, 0, &p), Err(1));
    for _ in 0..MAX_COUNT {
        t.leave();
    }
    assert_eq!(t.current(), 0);
    assert!(t.is_fast());
}

/// The one deviation, by design: a reservation made after the fast mode raised an old schedule
/// holds the raised one as its `before`; the answers and the state are the bucket's.
#[test]
fn a_reservation_after_a_long_idle_waits_as_the_buckets_and_holds_the_raised_schedule() {
    let p = BucketParams::new(1e9, 1);
    let mut pair = Pair::new(Compare::UpToRaisedSchedules);
    let now = FRESH + 2;
    pair.configure(now, &p, 0);
    let turnstile = pair.turnstile.reserve(now, 0, &p).unwrap();
    let bucket = pair.bucket.reserve(now, 0, &p).unwrap();
    assert_eq!(turnstile.wait, bucket.wait);
    assert_ne!(
        turnstile, bucket,
        "`before` is the raised schedule, 2, not 0"
    );
    pair.check(now, &p);
}

/// The other face of it: a reservation from before the raise, handed back after it, is refused
/// by the turnstile (its slot is no longer the latest) where the bucket takes it back without a
/// change; either way the bucket is full, as both then show.
#[test]
fn a_reservation_from_before_a_long_idle_handed_back_after_it_leaves_the_buckets_state() {
    let p = BucketParams::new(1e9, 1);
    let mut pair = Pair::new(Compare::UpToRaisedSchedules);
    let kept = pair.reserve(0, 0, &p).unwrap();
    let now = FRESH + 2;
    pair.configure(now, &p, 0);
    assert!(pair.turnstile.is_fast());
    assert!(!pair.turnstile.cancel(&kept.turnstile, now));
    assert!(pair.bucket.cancel(&kept.bucket, now));
    pair.check(now, &p);
    assert_eq!(admit_all(&pair, now, &p, 10), 1);
    pair.check(now, &p);
}
