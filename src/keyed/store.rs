//! The sharded table of keys: each shard a `parking_lot` read-write lock around a slab of entries
//! (key, state word, rule number) and a `hashbrown` index of slab positions.
//!
//! A key's shard is chosen by bits 32 and up of its hash (the index uses the low bits for the
//! bucket and the top seven for its tags, so the three never share bits). The request path for a
//! known key takes its shard's read lock and changes the state with a compare-and-swap; only a new
//! key takes the write lock. Each shard holds at most its share of `max_keys`, so the cap is hard
//! and every eviction is decided inside the one shard whose lock is held.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::clock::Nanos;
use crate::limit::{AtomicStore, StateStore};
use crate::rejection::Rejection;

use super::rule::KeyedRule;

/// One key: the key itself, its state and the number of its rule.
#[derive(Debug)]
pub(crate) struct Entry<K> {
    pub(crate) key: K,
    pub(crate) state: AtomicStore,
    pub(crate) rule: u32,
}

impl<K> Entry<K> {
    /// Admits `n` at `now` under `rule`, or refuses: one compare-and-swap loop on the word.
    #[inline]
    pub(crate) fn take<R: KeyedRule>(&self, rule: &R, now: Nanos, n: u64) -> Result<(), Rejection> {
        self.state.update(|state| {
            *state = rule.try_take(*state, now, n)?;
            Ok(())
        })
    }

    pub(crate) fn state(&self) -> u64 {
        self.state.read(|s| *s)
    }
}

/// What a shard has dropped or refused, for [`KeyedStats`](super::KeyedStats).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) dropped_full: u64,
    pub(crate) evicted_in_debt: u64,
    pub(crate) refused_new: u64,
}

/// One shard: at most `cap` keys.
#[derive(Debug)]
pub(crate) struct Shard<K> {
    pub(crate) entries: Vec<Entry<K>>,
    index: HashTable<u32>,
    pub(crate) cap: usize,
    /// Where the next scan for a victim or an idle key starts (CLOCK's hand).
    pub(crate) hand: usize,
    pub(crate) tally: Tally,
}

impl<K: Hash + Eq> Shard<K> {
    pub(crate) fn new(cap: usize) -> Self {
        Shard {
            entries: Vec::new(),
            index: HashTable::new(),
            cap,
            hand: 0,
            tally: Tally::default(),
        }
    }

    /// The entry of `key`, if held.
    #[inline]
    pub(crate) fn get<Q>(&self, hash: u64, key: &Q) -> Option<&Entry<K>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entries = &self.entries;
        self.index
            .find(hash, |&i| entries[i as usize].key.borrow() == key)
            .map(|&i| &entries[i as usize])
    }

    /// Position of `key`, if held.
    pub(crate) fn position<Q>(&self, hash: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entries = &self.entries;
        self.index
            .find(hash, |&i| entries[i as usize].key.borrow() == key)
            .map(|&i| i as usize)
    }

    /// Adds a key below the cap. The slab grows by doubling but never past the cap, so a full
    /// shard holds exactly `cap` entries; the index is then given room for twice the cap, so that
    /// replacing keys (which leaves tombstones) rehashes it in place and never grows it again.
    pub(crate) fn push(&mut self, entry: Entry<K>, hash: u64, hasher: &RandomState) {
        debug_assert!(self.entries.len() < self.cap);
        let len = self.entries.len();
        if len == self.entries.capacity() {
            self.entries.reserve_exact(len.max(4).min(self.cap - len));
        }
        self.entries.push(entry);
        let Shard {
            index,
            entries,
            cap,
            ..
        } = self;
        index.insert_unique(hash, len as u32, |&i| {
            hasher.hash_one(&entries[i as usize].key)
        });
        if entries.len() == *cap {
            index.reserve(*cap + 1, |&i| hasher.hash_one(&entries[i as usize].key));
        }
    }

    /// Puts a new key in the place of the key at `at`.
    pub(crate) fn replace(&mut self, at: usize, entry: Entry<K>, hash: u64, hasher: &RandomState) {
        self.unindex(at, hasher);
        self.entries[at] = entry;
        let Shard { index, entries, .. } = self;
        index.insert_unique(hash, at as u32, |&i| {
            hasher.hash_one(&entries[i as usize].key)
        });
    }

    /// Drops the key at `at`; the last entry takes its place.
    pub(crate) fn remove_at(&mut self, at: usize, hasher: &RandomState) {
        self.unindex(at, hasher);
        let last = self.entries.len() - 1;
        self.entries.swap_remove(at);
        if at != last {
            let moved = hasher.hash_one(&self.entries[at].key);
            if let Some(slot) = self.index.find_mut(moved, |&i| i as usize == last) {
                *slot = at as u32;
            }
        }
    }

    fn unindex(&mut self, at: usize, hasher: &RandomState) {
        let hash = hasher.hash_one(&self.entries[at].key);
        if let Ok(found) = self.index.find_entry(hash, |&i| i as usize == at) {
            found.remove();
        }
    }

    /// Gives back the memory of dropped keys.
    pub(crate) fn shrink_to_fit(&mut self, hasher: &RandomState) {
        self.entries.shrink_to_fit();
        let entries = &self.entries;
        self.index
            .shrink_to_fit(|&i| hasher.hash_one(&entries[i as usize].key));
    }
}
