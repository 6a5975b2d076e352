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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Decodes a byte of [`SwitchCell`].
pub(crate) fn decode(bits: u8) -> SwitchStatus {
    let mode = match bits >> MODE_SHIFT {
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

impl SwitchCell {
    pub(crate) fn new(mode: SwitchMode) -> Self {
        SwitchCell {
            bits: AtomicU8::new(mode_bits(mode)),
            flips: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn load(&self) -> SwitchStatus {
        decode(self.bits.load(Ordering::Acquire))
    }

    /// Applies `f` atomically; returns the status before and after.
    fn update(&self, f: impl Fn(u8) -> u8) -> (SwitchStatus, SwitchStatus) {
        let mut cur = self.bits.load(Ordering::Acquire);
        loop {
            let mut next = f(cur);
            // Leaving the "on" state ends the split: the next overload starts with one bucket again.
            if !decode(next).on {
                next &= !SPLIT;
            }
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
