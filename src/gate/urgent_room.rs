//! Room for urgent requests: how far above the working level they may go (the headroom) and how
//! far below a fixed ceiling non-urgent requests stop (the reserve), from the urgent demand the
//! sampler measures. `docs/design/urgency.md` has the reasoning and the experiments.

/// Urgent headroom above the working level, at least, while urgent demand leaves room in it.
const URGENT_HEADROOM_MIN: u64 = 2;
/// Standard deviations of a Poisson count of urgent requests that the urgent headroom covers.
const URGENT_HEADROOM_SIGMAS: f64 = 3.0;
/// Urgent headroom above the working level once urgent demand alone nearly fills it: one request;
/// non-urgent requests then get only what urgent demand leaves below it.
pub(super) const URGENT_HEADROOM_FULL: u64 = 1;
/// Before urgent demand is known, the urgent reserve below a fixed `max_in_flight` is this share
/// of the ceiling (and at least one request): a sixteenth, room for a few urgent requests that
/// costs the service little of a ceiling it was given.
const URGENT_RESERVE_UNKNOWN: u64 = 16;
/// The urgent reserve below a fixed `max_in_flight` is overrun by urgent bursts about this often.
const URGENT_RESERVE_OVERFLOW: f64 = 1e-3;

/// The urgent reserve below a fixed in-flight `ceiling`: non-urgent requests stop
/// this many below it, urgent ones may use all of it. Urgent arrivals that find non-urgent work at
/// its cap pile up above it as a queue of load `rho` = `urgent_need` ÷ `ceiling` (their share of
/// the ceiling's completions, by Little's law), whose length passes `r` with probability `rho^r`:
/// the reserve is the `r` at which that is [`URGENT_RESERVE_OVERFLOW`], all but one slot once urgent
/// demand alone fills the ceiling (`rho` ≥ 1; the non-urgent floor still admits its rate), and
/// a sixteenth of the ceiling until urgent demand is known (`None`). Never more than
/// `ceiling − 1`, so that non-urgent requests keep one slot of their own.
pub(super) fn urgent_reserve(ceiling: u64, urgent_need: Option<f64>) -> u64 {
    let reserve = match urgent_need.filter(|n| n.is_finite()) {
        None => ceiling / URGENT_RESERVE_UNKNOWN,
        Some(need) => {
            let rho = need / ceiling.max(1) as f64;
            if rho >= 1.0 {
                u64::MAX
            } else if rho <= 0.0 {
                1
            } else {
                // Both logarithms are negative; the quotient is finite and positive.
                (URGENT_RESERVE_OVERFLOW.ln() / rho.ln()).ceil() as u64
            }
        }
    };
    reserve.max(1).min(ceiling.saturating_sub(1))
}

/// A tick's figure of urgent demand, held at its peaks: quick to grow, slow to shrink (a tenth a
/// tick), so that urgent bursts find room.
pub(super) fn peak_held(now: f64, before: f64) -> f64 {
    now.max(before * 0.9)
}

/// Urgent room above the working level while urgent demand is light (`need` of them in flight,
/// leaving the share `left` of the working level): three standard deviations of a Poisson count
/// of them, shrinking as they fill the working level (where urgent requests have room of their
/// own: see `Inner::enter_urgent_room`).
pub(super) fn urgent_headroom(need: f64, left: f64) -> u64 {
    let spread = URGENT_HEADROOM_SIGMAS * need.max(0.0).sqrt() * left;
    spread.max(0.0) as u64 + URGENT_HEADROOM_MIN
}

/// A tick's figure of urgent demand for the urgent reserve below a fixed ceiling: quick to grow,
/// halved a tick. Held as [`peak_held`] holds it, the reserve of a flood (all but one slot, once
/// urgent demand alone filled the ceiling) outlived it by half a second, and refused non-urgent
/// requests with the service a tenth full (`flash-crowd`, after the flood).
pub(super) fn briefly_held(now: f64, before: f64) -> f64 {
    now.max(before * 0.5)
}

/// With a fixed `max_in_flight` of `max`: the working level, and the urgent reserve (see
/// [`urgent_reserve`]) split into the headroom above it and the rest below it. While the switch
/// is `on` the working level is `max_running`: a ceiling above it would let a queue stand in front
/// of the workers for as long as the flood lasts. The reserve then goes above that level as far as
/// the ceiling lets it, unless urgent demand (`recent`) alone fills it: urgent requests would only
/// queue there.
pub(super) fn fixed_levels(
    max: u64,
    on: bool,
    max_running: u64,
    recent: Option<f64>,
) -> (u64, u64, u64) {
    let working = if on { max.min(max_running) } else { max }.max(1);
    let reserve = urgent_reserve(working, recent);
    let above = if recent.is_some_and(|n| n < working as f64) {
        reserve.min(max.saturating_sub(working))
    } else {
        0
    };
    (working, above, reserve - above)
}
