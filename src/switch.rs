//! The auto switch.

use serde::{Deserialize, Serialize};

/// Who decides whether the switch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SwitchMode {
    /// The sampler decides (the default).
    #[default]
    Auto,
    /// Always on: every request draws a token.
    ForceOn,
    /// Always off: only the hard ceilings apply.
    ForceOff,
}

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Where the switch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SwitchStatus {
    /// Who decides.
    pub mode: SwitchMode,
    /// Whether requests draw tokens now (the mode applied to the auto decision).
    pub on: bool,
    /// The sampler's own decision, which is kept up to date even while the mode forces the switch.
    pub auto_on: bool,
    /// Whether non-urgent requests have moved to their own bucket (the urgent bucket could not serve a
    /// request within `request_timeout` since the switch last turned on).
    pub split: bool,
}

const AUTO_ON: u8 = 1;
const SPLIT: u8 = 2;
const MODE_SHIFT: u8 = 2;
/// The mode's two bits, once shifted down.
const MODE_MASK: u8 = 3;
/// Whether the switch is on: the mode applied to [`AUTO_ON`], kept in its own bit by every update
/// so that the request path tests one bit instead of decoding the mode.
const ON: u8 = 1 << 4;

/// The switch in one byte, so the request path learns everything with one atomic load; beside it,
/// the number of times it has flipped (on to off or off to on).
#[derive(Debug, Default)]
pub(crate) struct SwitchCell {
    bits: AtomicU8,
    flips: AtomicU64,
}

fn mode_bits(mode: SwitchMode) -> u8 {
    (match mode {
        SwitchMode::Auto => 0,
        SwitchMode::ForceOn => 1,
        SwitchMode::ForceOff => 2,
    }) << MODE_SHIFT
}

/// What the request path reads of the switch: its byte, tested bit by bit (see [`ON`]). Held in a
/// whole word: as a byte, the results that carry it were moved in pieces of mixed widths, and
/// the permit later built in the same stack slot was copied that way too, stalling its release on
/// store forwarding (measured: switch off 0.89x governor's `check()` became 1.28x).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SwitchBits(u64);

impl SwitchBits {
    /// Whether requests draw tokens now.
    #[inline]
    pub(crate) fn on(self) -> bool {
        self.0 & u64::from(ON) != 0
    }

    /// Whether non-urgent requests have moved to their own bucket.
    #[inline]
    pub(crate) fn split(self) -> bool {
        self.0 & u64::from(SPLIT) != 0
    }
}

/// Decodes a byte of [`SwitchCell`].
pub(crate) fn decode(bits: u8) -> SwitchStatus {
    let mode = match (bits >> MODE_SHIFT) & MODE_MASK {
        1 => SwitchMode::ForceOn,
        2 => SwitchMode::ForceOff,
        _ => SwitchMode::Auto,
    };
    let auto_on = bits & AUTO_ON != 0;
    SwitchStatus {
        mode,
        on: match mode {
            SwitchMode::Auto => auto_on,
            SwitchMode::ForceOn => true,
            SwitchMode::ForceOff => false,
        },
        auto_on,
        split: bits & SPLIT != 0,
    }
}

/// `bits` with the bits derived from the rest set to match: [`ON`] as the mode and the sampler's
/// decision say, and no split while the switch is off (leaving the "on" state ends the split:
/// the next overload starts with one bucket again).
fn settled(bits: u8) -> u8 {
    if decode(bits).on {
        bits | ON
    } else {
        bits & !(SPLIT | ON)
    }
}

impl SwitchCell {
    pub(crate) fn new(mode: SwitchMode) -> Self {
        SwitchCell {
            bits: AtomicU8::new(settled(mode_bits(mode))),
            flips: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn load(&self) -> SwitchStatus {
        decode(self.bits.load(Ordering::Acquire))
    }

    /// [`SwitchCell::load`] for the request path, without decoding the mode.
    #[inline]
    pub(crate) fn load_bits(&self) -> SwitchBits {
        SwitchBits(u64::from(self.bits.load(Ordering::Acquire)))
    }

    /// Applies `f` atomically; returns the status before and after.
    fn update(&self, f: impl Fn(u8) -> u8) -> (SwitchStatus, SwitchStatus) {
        let mut cur = self.bits.load(Ordering::Acquire);
        loop {
            let next = settled(f(cur));
            match self
                .bits
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let (before, after) = (decode(cur), decode(next));
                    if before.on != after.on {
                        self.flips.fetch_add(1, Ordering::Relaxed);
                    }
                    return (before, after);
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// How many times the switch has turned on or off.
    pub(crate) fn flips(&self) -> u64 {
        self.flips.load(Ordering::Relaxed)
    }

    pub(crate) fn set_mode(&self, mode: SwitchMode) -> (SwitchStatus, SwitchStatus) {
        self.update(|b| (b & (AUTO_ON | SPLIT)) | mode_bits(mode))
    }

    pub(crate) fn set_auto(&self, on: bool) -> (SwitchStatus, SwitchStatus) {
        self.update(|b| if on { b | AUTO_ON } else { b & !AUTO_ON })
    }

    /// Marks the split; returns whether this call made it (so only one caller reports it).
    pub(crate) fn split(&self) -> bool {
        let (before, after) = self.update(|b| b | SPLIT);
        !before.split && after.split
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Mode(SwitchMode),
        Auto(bool),
        Split,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            prop_oneof![
                Just(SwitchMode::Auto),
                Just(SwitchMode::ForceOn),
                Just(SwitchMode::ForceOff)
            ]
            .prop_map(Step::Mode),
            any::<bool>().prop_map(Step::Auto),
            Just(Step::Split),
        ]
    }

    proptest! {
        /// The request path's bits say what the decoded status says, after any history.
        #[test]
        fn the_request_paths_bits_agree_with_the_decoded_status(
            start in prop_oneof![
                Just(SwitchMode::Auto),
                Just(SwitchMode::ForceOn),
                Just(SwitchMode::ForceOff)
            ],
            steps in proptest::collection::vec(step(), 0..20),
        ) {
            let cell = SwitchCell::new(start);
            for s in std::iter::once(None).chain(steps.into_iter().map(Some)) {
                match s {
                    Some(Step::Mode(m)) => drop(cell.set_mode(m)),
                    Some(Step::Auto(on)) => drop(cell.set_auto(on)),
                    Some(Step::Split) => drop(cell.split()),
                    None => {}
                }
                let (status, bits) = (cell.load(), cell.load_bits());
                prop_assert_eq!(bits.on(), status.on);
                prop_assert_eq!(bits.split(), status.split);
                prop_assert!(!status.split || status.on, "split only while on");
            }
        }
    }
}
