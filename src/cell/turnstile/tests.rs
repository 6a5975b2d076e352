//! The turnstile's contract: used from one thread, a [`Turnstile`] gives exactly the results of a
//! reference made of a [`Bucket`] (the gate's token bucket) and an [`InFlight`] counter, in its
//! fast mode (schedule and count in one word, the schedule modulo 2^42 ns around an anchor) and
//! in its exact mode (the schedule in a 64-bit word of its own), and across the changes between
//! them: entered by `configure` with parameters that fit, left for a reading further than
//! [`FRESH`] from the anchor, for parameters or waits above [`FITS`] and near the end of 64-bit
//! time.
//!
//! The reference has no one-CAS path: [`Turnstile::draw`] (a token that may wait and, with a
//! token at once, a slot below the ceiling) is matched by the bucket's `reserve` followed, for a
//! token at once, by the counter's `try_enter`. Both sides are then driven as the gate drives
//! them: a token at once without a slot gets a slot the long way (`try_enter`) or is handed back;
//! a token later is kept, and maybe handed back later.
//!
//! # The clock
//! The property tests move the clock forward by little and by a lot (up to half of 64-bit time),
//! back by a little, and now and then to the end of 64-bit time (where it stays). Back by a little
//! means: never below the highest time `configure` was given, minus `FRESH / 2`. The fast mode,
//! when `configure` anchors it at `now`, raises a schedule older than `now - FRESH` to
//! `now - FRESH`: that is a full bucket for every reading it serves (from `now - FRESH` on), and
//! for every later reading as long as the clock stays above it; a clock that went back further
//! would see the raised schedule where the bucket sees its own, older one. (The highest time, not
//! the latest: a `configure` at a time the clock has gone back to does not lower a raise already
//! made, so a clock walked back by `FRESH / 2` between configurations would reach it.)
//!
//! # The one deviation, by design
//! The raise above shows in the reservations' private fields (`before`: `==` and `Debug` tell
//! them apart) and in `cancel`'s answer (the bucket may still hold as its latest a reservation
//! whose slot the raise has passed: it takes the hand-back, which changes nothing, and says
//! `true`; the turnstile says `false`). Neither changes what the bucket admits: the property
//! test compares reservations by their wait, `cancel`'s answer only while both schedules agree,
//! and the schedules themselves (equal, or raised no further than a full bucket); two plain
//! tests pin the smallest cases.
//!
//! The property tests run on a fixed seed, so they are reproducible; set `PROPTEST_RNG_SEED` to
//! explore other inputs.

mod modes;

use proptest::prelude::*;

use super::*;
use crate::cell::bucket::Bucket;
use crate::cell::inflight::InFlight;
use crate::cell::support::proptest_config;

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3_600 * SECOND;
/// How far the large forward moves go: half of 64-bit time.
const HALF: u64 = u64::MAX / 2;

/// Parameters with no tolerance: `time_to_token(0, &unit())` reads a schedule itself.
fn unit() -> BucketParams {
    BucketParams::new(1e9, 1)
}

/// A draw's answer with its reservation reduced to the wait.
fn by_wait(drawn: Drawn) -> (u8, u64) {
    match drawn {
        Drawn::Admitted(r) => (0, r.wait),
        Drawn::Reserved(r) => (1, r.wait),
        Drawn::Refused(retry_after) => (2, retry_after),
    }
}

// ================================================================ the two sides

/// How strictly the turnstile's answers must match the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    /// Everything equal: whole reservations, every hand-back's answer.
    Exactly,
    /// Equal, except for what the turnstile's raise of a schedule older than a full bucket shows:
    /// reservations are compared by their wait (their private `before` may hold the raised
    /// schedule), and a hand-back's answer only while both schedules agree (otherwise the bucket
    /// may still hold as its latest a reservation whose slot the raise has passed). Instead, the
    /// schedules themselves are read after every step: equal, or the turnstile's later than the
    /// bucket's and no later than the highest time `configure` was given minus [`FRESH`].
    UpToRaisedSchedules,
}

/// A turnstile and its reference, driven together; every method asserts that both sides answered
/// alike and returns the answer.
struct Pair {
    turnstile: Turnstile,
    bucket: Bucket,
    in_flight: InFlight,
    compare: Compare,
    /// The highest time `configure` was given.
    highest_configure: Option<u64>,
}

/// A reservation as each side made it.
#[derive(Debug, Clone, Copy)]
struct Kept {
    turnstile: Reservation,
    bucket: Reservation,
}

impl Pair {
    fn new(compare: Compare) -> Self {
        Pair {
            turnstile: Turnstile::new(),
            bucket: Bucket::new(),
            in_flight: InFlight::new(),
            compare,
            highest_configure: None,
        }
    }

    /// The lowest reading the clock may go back to (see the module docs).
    fn floor(&self) -> u64 {
        self.highest_configure
            .map_or(0, |c| c.saturating_sub(FRESH / 2))
    }

    /// The schedules (TATs) of both sides.
    fn schedules(&self) -> (u64, u64) {
        (
            self.turnstile.time_to_token(0, &unit()),
            self.bucket.time_to_token(0, &unit()),
        )
    }

    fn configure(&mut self, now: u64, params: &BucketParams, max_wait: u64) {
        self.turnstile.configure(now, params, max_wait);
        self.highest_configure = Some(self.highest_configure.map_or(now, |c| c.max(now)));
    }

    /// A token that may wait up to `max_wait` and, with one at once, a slot below `cap`, in one
    /// call; on the reference, a reservation and then a slot if the token is there at once.
    /// Returns both sides' answers.
    fn draw(&self, now: u64, max_wait: u64, params: &BucketParams, cap: u64) -> (Drawn, Drawn) {
        let turnstile = self.turnstile.draw(now, max_wait, params, cap);
        let reference = match self.bucket.reserve(now, max_wait, params) {
            Ok(r) if r.wait == 0 && self.in_flight.try_enter(cap.min(MAX_COUNT)) => {
                Drawn::Admitted(r)
            }
            Ok(r) => Drawn::Reserved(r),
            Err(retry_after) => Drawn::Refused(retry_after),
        };
        let context = format!("draw at {now}, max_wait {max_wait}, cap {cap}, {params:?}");
        match self.compare {
            Compare::Exactly => assert_eq!(turnstile, reference, "{context}"),
            Compare::UpToRaisedSchedules => {
                assert_eq!(by_wait(turnstile), by_wait(reference), "{context}")
            }
        }
        (turnstile, reference)
    }

    /// The gate's way in: a draw; with a token at once but no slot, a slot taken the long way or
    /// else the token handed back; with a token later, the token (kept for its wait, to be
    /// handed back or not). Returns whether the request is in, and the token it waits for.
    fn draw_as_the_gate_does(
        &self,
        now: u64,
        max_wait: u64,
        params: &BucketParams,
        cap: u64,
    ) -> (bool, Option<Kept>) {
        match self.draw(now, max_wait, params, cap) {
            (Drawn::Reserved(turnstile), Drawn::Reserved(bucket)) => {
                let kept = Kept { turnstile, bucket };
                if turnstile.wait > 0 {
                    (false, Some(kept))
                } else if self.try_enter(cap) {
                    (true, None)
                } else {
                    self.cancel(&kept, now);
                    (false, None)
                }
            }
            (Drawn::Admitted(_), _) => (true, None),
            _ => (false, None),
        }
    }

    /// [`Pair::draw_as_the_gate_does`] with no wait: whether the request is in.
    fn admit(&self, now: u64, params: &BucketParams, cap: u64) -> bool {
        let (admitted, kept) = self.draw_as_the_gate_does(now, 0, params, cap);
        assert!(kept.is_none());
        admitted
    }

    fn reserve(&self, now: u64, max_wait: u64, params: &BucketParams) -> Result<Kept, u64> {
        let turnstile = self.turnstile.reserve(now, max_wait, params);
        let bucket = self.bucket.reserve(now, max_wait, params);
        let context = format!("reserve at {now}, max_wait {max_wait}, {params:?}");
        match self.compare {
            Compare::Exactly => assert_eq!(turnstile, bucket, "{context}"),
            Compare::UpToRaisedSchedules => assert_eq!(
                turnstile.map(|r| r.wait),
                bucket.map(|r| r.wait),
                "{context}"
            ),
        }
        match (turnstile, bucket) {
            (Ok(turnstile), Ok(bucket)) => Ok(Kept { turnstile, bucket }),
            (Err(retry), _) => Err(retry),
            (Ok(_), Err(_)) => unreachable!("compared above"),
        }
    }

    fn cancel(&self, kept: &Kept, now: u64) -> bool {
        let agreed = self.schedules();
        let turnstile = self.turnstile.cancel(&kept.turnstile, now);
        let bucket = self.bucket.cancel(&kept.bucket, now);
        if self.compare == Compare::Exactly || agreed.0 == agreed.1 {
            assert_eq!(turnstile, bucket, "cancel at {now} of {kept:?}");
        }
        bucket
    }

    fn drain(&self, now: u64, params: &BucketParams) {
        self.turnstile.drain(now, params);
        self.bucket.drain(now, params);
    }

    fn try_enter(&self, cap: u64) -> bool {
        let turnstile = self.turnstile.try_enter(cap);
        let reference = self.in_flight.try_enter(cap);
        assert_eq!(turnstile, reference, "try_enter({cap})");
        turnstile
    }

    fn leave(&self) {
        self.turnstile.leave();
        self.in_flight.leave();
    }

    fn current(&self) -> u64 {
        let current = self.turnstile.current();
        assert_eq!(current, self.in_flight.current(), "current()");
        current
    }

    /// Compares what can be read without changing anything: the time to a token at `now` with
    /// `params`, the count, and (if the comparison allows for raised schedules) the schedules.
    fn check(&self, now: u64, params: &BucketParams) {
        assert_eq!(
            self.turnstile.time_to_token(now, params),
            self.bucket.time_to_token(now, params),
            "time_to_token at {now}, {params:?}"
        );
        self.current();
        if self.compare == Compare::UpToRaisedSchedules {
            let (turnstile, bucket) = self.schedules();
            let raised_at_most = self
                .highest_configure
                .map_or(0, |c| c.saturating_sub(FRESH));
            assert!(
                turnstile == bucket || (bucket < turnstile && turnstile <= raised_at_most),
                "schedules: turnstile {turnstile}, bucket {bucket}, raises up to {raised_at_most}"
            );
        }
    }
}

// ================================================================ random sequences

/// How the clock moves before a step.
#[derive(Debug, Clone, Copy)]
enum Move {
    Stay,
    /// Forward by this much, saturating at the end of time.
    Forward(u64),
    /// Forward by this much, but not past half of 64-bit time (unless already past it).
    Far(u64),
    /// Back by this much, but not below the pair's floor (see the module docs).
    Back(u64),
    /// To this many nanoseconds before the end of 64-bit time, unless already later.
    End(u64),
}

/// Which parameters a step uses.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// Those of the latest `configure` (the case's first before any).
    Current,
    /// Any of the case's, by index (modulo their number).
    Any(usize),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Configure {
        params: Pick,
        max_wait: u64,
    },
    /// As the gate draws: see [`Pair::draw_as_the_gate_does`].
    Draw {
        params: Pick,
        max_wait: u64,
        cap: u64,
    },
    Reserve {
        params: Pick,
        max_wait: u64,
    },
    /// A kept reservation, by index (modulo their number).
    Cancel(usize),
    Drain {
        params: Pick,
    },
    TryEnter {
        cap: u64,
    },
    /// Only while something is in flight.
    Leave,
    Look {
        params: Pick,
    },
}

#[derive(Debug, Clone, Copy)]
struct Step {
    clock: Move,
    op: Op,
}

/// Bits `shift..shift + bits` of `word`.
fn field(word: u64, shift: u32, bits: u32) -> u64 {
    (word >> shift) & ((1u64 << bits) - 1)
}

impl Move {
    /// Shrinking the word towards 0 shrinks the move towards "a nanosecond's worth of nothing".
    fn decode(w: u64) -> Self {
        let amount = w >> 10;
        match w % 1_000 {
            0..450 => Move::Forward(amount % (MS + 1)),
            450..700 => Move::Forward(amount % (5 * SECOND + 1)),
            // An hour, two, four... up to 2^20 hours (120 years), and then some.
            700..760 => {
                Move::Far((HOUR << (amount % 21)).saturating_add(field(amount, 5, 42) % HOUR))
            }
            760..880 => Move::Back(amount % (SECOND + 1)),
            880..960 => Move::Back(amount % (FRESH / 2 + 1)),
            960..998 => Move::Stay,
            _ if amount.is_multiple_of(4) => Move::End(amount % 1_000),
            _ => Move::End(amount % (FRESH * 2)),
        }
    }

    fn apply(self, now: u64, floor: u64) -> u64 {
        match self {
            Move::Stay => now,
            Move::Forward(by) => now.saturating_add(by),
            Move::Far(by) if now < HALF => now.saturating_add(by).min(HALF),
            Move::Far(by) => now.saturating_add(by),
            Move::Back(by) => now.saturating_sub(by).max(floor),
            Move::End(before) => now.max(u64::MAX - before),
        }
    }
}

impl Pick {
    fn decode(w: u64) -> Self {
        if w % 8 < 6 {
            Pick::Current
        } else {
            Pick::Any((w >> 3) as usize % 8)
        }
    }
}

/// A ceiling: mostly 0 to 4, sometimes none (`u64::MAX`, which the turnstile counts as
/// [`MAX_COUNT`]).
fn decode_cap(w: u64) -> u64 {
    match w % 16 {
        14 | 15 => u64::MAX,
        n => n % 5,
    }
}

/// A wait: mostly none or up to a second, sometimes [`FITS`] (the most the fast mode serves),
/// just above it, an hour or forever.
fn decode_wait(w: u64) -> u64 {
    match w % 32 {
        0..12 => 0,
        12..28 => (w >> 5) % (SECOND + 1),
        28 => FITS,
        29 => FITS + 1,
        30 => HOUR,
        _ => u64::MAX,
    }
}

impl Op {
    fn decode(w: u64) -> Self {
        let params = Pick::decode(field(w, 8, 8));
        let cap = decode_cap(field(w, 16, 8));
        let max_wait = decode_wait(w >> 24);
        match w % 100 {
            // As the gate's ticks do, mostly with a wait that fits.
            0..12 => Op::Configure {
                params,
                max_wait: if field(w, 60, 3) == 0 {
                    max_wait
                } else {
                    max_wait.min(SECOND)
                },
            },
            12..38 => Op::Draw {
                params,
                // Half of them with no wait (a token now or nothing, as `try_acquire` asks).
                max_wait: if w & (1 << 63) == 0 { 0 } else { max_wait },
                cap,
            },
            38..55 => Op::Reserve { params, max_wait },
            55..63 => Op::Cancel(field(w, 16, 16) as usize),
            63..68 => Op::Drain { params },
            68..78 => Op::TryEnter { cap },
            78..92 => Op::Leave,
            _ => Op::Look { params },
        }
    }
}

fn steps(max: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((any::<u64>(), any::<u64>()), 1..max).prop_map(|words| {
        words
            .into_iter()
            .map(|(clock, op)| Step {
                clock: Move::decode(clock),
                op: Op::decode(op),
            })
            .collect()
    })
}

/// Mostly parameters the fast mode serves (1 to 1e9 tokens/s, 1 to 1000 at once; a slow rate
/// with a large capacity may still exceed [`FITS`] in tolerance), sometimes ones it does not.
fn params() -> impl Strategy<Value = BucketParams> {
    prop_oneof![
        4 => (0.0f64..=9.0, 0.0f64..=3.0).prop_map(|(rate, capacity)| {
            BucketParams::new(10f64.powf(rate), 10f64.powf(capacity).round() as u64)
        }),
        1 => prop::sample::select(vec![
            // An interval above FITS.
            BucketParams::new(0.001, 1),
            BucketParams::new(0.005, 3),
            // A tolerance above FITS: 199 s, 1000 s.
            BucketParams::new(1.0, 200),
            BucketParams::new(1_000.0, 1_000_000),
            // One token in 584 years; a capacity whose tolerance saturates.
            BucketParams::new(0.0, 1),
            BucketParams::new(1e9, u64::MAX),
        ]),
    ]
}

fn param_table() -> impl Strategy<Value = Vec<BucketParams>> {
    prop::collection::vec(params(), 1..=4)
}

/// Drives `steps` through a pair from `start` and asserts equal answers after every step.
fn run(compare: Compare, start: u64, table: &[BucketParams], steps: &[Step]) {
    let mut pair = Pair::new(compare);
    let mut kept: Vec<Kept> = Vec::new();
    let mut current = table[0];
    let mut now = start;
    let pick = |p: Pick, current: BucketParams| match p {
        Pick::Current => current,
        Pick::Any(i) => table[i % table.len()],
    };
    for (i, step) in steps.iter().enumerate() {
        now = step.clock.apply(now, pair.floor());
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut look = current;
            match step.op {
                Op::Configure { params, max_wait } => {
                    current = pick(params, current);
                    look = current;
                    pair.configure(now, &current, max_wait);
                }
                Op::Draw {
                    params,
                    max_wait,
                    cap,
                } => {
                    look = pick(params, current);
                    if let (_, Some(k)) = pair.draw_as_the_gate_does(now, max_wait, &look, cap) {
                        kept.push(k);
                    }
                }
                Op::Reserve { params, max_wait } => {
                    look = pick(params, current);
                    if let Ok(k) = pair.reserve(now, max_wait, &look) {
                        kept.push(k);
                    }
                }
                Op::Cancel(index) if !kept.is_empty() => {
                    let k = kept.remove(index % kept.len());
                    pair.cancel(&k, now);
                }
                Op::Cancel(_) => {}
                Op::Drain { params } => {
                    look = pick(params, current);
                    pair.drain(now, &look);
                }
                Op::TryEnter { cap } => {
                    pair.try_enter(cap);
                }
                Op::Leave if pair.current() > 0 => pair.leave(),
                Op::Leave => {}
                Op::Look { params } => look = pick(params, current),
            }
            pair.check(now, &look);
        }));
        if let Err(panic) = stepped {
            eprintln!("at step {i} ({step:?}), at {now}");
            std::panic::resume_unwind(panic);
        }
    }
    // Whatever happened, the count is the entries not yet left, and goes back to zero.
    while pair.current() > 0 {
        pair.leave();
    }
}

/// Start times: the clock's first minutes (an anchor there is within [`FRESH`] of the end of
/// 64-bit time, modulo 2^64), and later ones.
fn any_start() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        2 => 0..FRESH,
        1 => Just(1_000 * SECOND),
        4 => 2 * FRESH..1 << 50,
    ]
}

proptest! {
    #![proptest_config(proptest_config(2_000))]

    /// The contract: admissions, waits, refusals and their retry times, the
    /// time to a token and the count equal after every step, and the schedule the bucket's or
    /// raised no further than a full bucket.
    #[test]
    fn a_turnstile_gives_the_answers_of_a_bucket_and_a_counter_except_where_it_raised_a_schedule_to_a_full_bucket(
        start in any_start(),
        table in param_table(),
        steps in steps(200),
    ) {
        run(Compare::UpToRaisedSchedules, start, &table, &steps);
    }
}

// ================================================================ the word and the module's example

#[test]
fn a_fast_turnstile_admits_two_of_a_two_token_bucket_in_one_step_each_then_refuses_or_reserves() {
    let params = BucketParams::new(10.0, 2); // 10 tokens/s, 2 at once
    let turnstile = Turnstile::new();
    let now = 1_000_000_000; // 1 s on some clock, in nanoseconds
    turnstile.configure(now, &params, 0);
    assert!(turnstile.is_fast());
    // A token and a slot below 10 in flight, in one compare-and-swap; twice.
    assert!(matches!(
        turnstile.draw(now, 0, &params, 10),
        Drawn::Admitted(_)
    ));
    assert!(matches!(
        turnstile.draw(now, 0, &params, 10),
        Drawn::Admitted(_)
    ));
    assert_eq!(turnstile.current(), 2);
    // The next token is 100 ms away: refused at once, or reserved by one who may wait that long.
    assert_eq!(
        turnstile.draw(now, 0, &params, 10),
        Drawn::Refused(100_000_000)
    );
    let Ok(token) = turnstile.reserve(now, 100_000_000, &params) else {
        panic!()
    };
    assert_eq!(token.wait, 100_000_000);
    turnstile.leave();
    turnstile.leave();
    assert_eq!(turnstile.current(), 0);
}

#[test]
fn a_schedule_reads_back_exactly_against_any_reading_within_half_its_range() {
    for tat in [
        0u64,
        1,
        1 << 41,
        1 << 42,
        (1 << 42) + 5,
        u64::MAX - (1 << 43),
    ] {
        for offset in [0i64, 1, -1, (1 << 41) - 1, -(1 << 41) + 1, 12_345, -98_765] {
            let reference = tat.wrapping_add(offset as u64);
            let word = encode(FAST | 7, tat);
            assert_eq!(decode(word, reference), tat, "tat {tat}, offset {offset}");
            assert_eq!(word & MAX_COUNT, 7);
            assert_eq!(word & MODE, FAST);
        }
    }
}

#[test]
fn near_is_strictly_within_the_distance_either_side_and_never_across_the_end_of_time() {
    assert!(near(100, 100, 10));
    assert!(near(109, 100, 10));
    assert!(near(91, 100, 10));
    assert!(!near(110, 100, 10));
    assert!(!near(90, 100, 10));
    assert!(!near(3, u64::MAX - 3, 10), "not across the end of time");
    assert!(!near(u64::MAX, 0, FRESH));
}
