//! Which key gives up its place: the eviction rule and the idle sweep.
//!
//! A key whose state is full again ([`KeyedRule::full_at`] has passed) decides exactly as a fresh
//! key would, so dropping it loses nothing. When a new key finds its shard full, the shard's hand
//! (CLOCK's hand over the slab) scans up to [`SCAN`] keys from where it stopped and evicts the first
//! one full again. If none of them is, the key among them that will be full soonest is the one
//! whose loss costs least: [`WhenFull::Evict`] evicts it (that key may later be admitted up to its
//! capacity more than its limit, once per such eviction), [`WhenFull::Refuse`] refuses the new key
//! until then. Each new key also checks [`IDLE_CHECKS`] keys at the hand and drops those full again
//! for at least `idle`, so the table shrinks back towards the keys in use while keys arrive.

use foldhash::fast::RandomState;

use crate::clock::Nanos;

use super::config::WhenFull;
use super::overrides::Rules;
use super::rule::KeyedRule;
use super::store::Shard;

/// Keys a full shard looks at to place a new key: 32, enough that a shard where one key in ten is
/// full again finds one 97 % of the time, and a bounded cost (32 loads) when none is.
pub(crate) const SCAN: usize = 32;
/// Keys each new key checks for idleness: 2, so the sweep outpaces the arrivals that fill the
/// table and the request that pays for it pays little.
pub(crate) const IDLE_CHECKS: usize = 2;

/// A key the scan chose: where it is and when it is full again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Victim {
    pub(crate) at: usize,
    pub(crate) full_at: Nanos,
}

/// What a full shard does for a new key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place {
    /// Replace the key at this position (lossless or not, as counted).
    Replace(usize),
    /// Refuse the new key until this time.
    RefuseUntil(Nanos),
}

impl<K: std::hash::Hash + Eq> Shard<K> {
    /// The scan from the hand (see the module docs).
    pub(crate) fn victim<R: KeyedRule>(
        &mut self,
        rules: &Rules<K, R>,
        now: Nanos,
    ) -> Option<Victim> {
        let len = self.entries.len();
        if len == 0 {
            return None;
        }
        let looked = SCAN.min(len);
        let mut best: Option<Victim> = None;
        for step in 0..looked {
            let at = (self.hand + step) % len;
            let e = &self.entries[at];
            let full_at = rules.get(e.rule).full_at(e.state());
            if full_at <= now {
                self.hand = (at + 1) % len;
                return Some(Victim { at, full_at });
            }
            if best.is_none_or(|b| full_at < b.full_at) {
                best = Some(Victim { at, full_at });
            }
        }
        self.hand = (self.hand + looked) % len;
        best
    }

    /// Where a new key goes in this full shard, by the rule of `when_full`; counts the outcome.
    pub(crate) fn place<R: KeyedRule>(
        &mut self,
        rules: &Rules<K, R>,
        now: Nanos,
        when_full: WhenFull,
    ) -> Place {
        let Some(v) = self.victim(rules, now) else {
            return Place::RefuseUntil(now.saturating_add(1));
        };
        if v.full_at <= now {
            self.tally.dropped_full += 1;
            return Place::Replace(v.at);
        }
        match when_full {
            WhenFull::Evict => {
                if self.tally.evicted_in_debt == 0 {
                    tracing::warn!(target: "sluicegate::keyed", cap = self.cap,
                        "a keyed limiter's shard is full of keys in use: evicting the one closest to full \
                         (it may be admitted up to its capacity more than its limit if it returns at once)");
                }
                self.tally.evicted_in_debt += 1;
                Place::Replace(v.at)
            }
            WhenFull::Refuse => {
                self.tally.refused_new += 1;
                Place::RefuseUntil(v.full_at)
            }
        }
    }

    /// Drops up to [`IDLE_CHECKS`] keys at the hand that have been full again for `idle`.
    pub(crate) fn sweep_some<R: KeyedRule>(
        &mut self,
        rules: &Rules<K, R>,
        now: Nanos,
        idle: Nanos,
        hasher: &RandomState,
    ) {
        for _ in 0..IDLE_CHECKS {
            let len = self.entries.len();
            if len == 0 {
                return;
            }
            let at = self.hand % len;
            if self.idle_at(at, rules, now, idle) {
                self.remove_at(at, hasher);
                self.tally.dropped_full += 1;
                self.hand = at;
            } else {
                self.hand = (at + 1) % len;
            }
        }
    }

    /// Drops every key full again for `idle`; returns how many.
    pub(crate) fn sweep_all<R: KeyedRule>(
        &mut self,
        rules: &Rules<K, R>,
        now: Nanos,
        idle: Nanos,
        hasher: &RandomState,
    ) -> usize {
        let mut dropped = 0;
        let mut at = 0;
        while at < self.entries.len() {
            if self.idle_at(at, rules, now, idle) {
                self.remove_at(at, hasher);
                dropped += 1;
            } else {
                at += 1;
            }
        }
        self.tally.dropped_full += dropped as u64;
        self.hand = 0;
        dropped
    }

    fn idle_at<R: KeyedRule>(
        &self,
        at: usize,
        rules: &Rules<K, R>,
        now: Nanos,
        idle: Nanos,
    ) -> bool {
        let e = &self.entries[at];
        let full_at = rules.get(e.rule).full_at(e.state());
        full_at <= now && now - full_at >= idle
    }
}
