//! Building a keyed limiter: the rule every key runs, the cap, the idle time, what a full table
//! does, and the keys with limits of their own.

use std::hash::Hash;
use std::time::Duration;

use crate::clock::{duration_to_nanos, Clock};

use super::config::{check_max_keys, KeyedConfigError, WhenFull, IDLE, MAX_KEYS};
use super::overrides::{Resolver, Rules};
use super::rule::KeyedRule;
use super::KeyedLimiter;

/// Builds a [`KeyedLimiter`]: `KeyedLimiter::<K, R>::builder(config)...build(clock)`.
pub struct KeyedBuilder<K, R: KeyedRule> {
    config: R::Config,
    max_keys: usize,
    idle: Duration,
    when_full: WhenFull,
    overrides: Vec<(K, R::Config, String)>,
    resolver: Option<Resolver<K, R::Config>>,
}

impl<K, R: KeyedRule> std::fmt::Debug for KeyedBuilder<K, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("config", &self.config)
            .field("max_keys", &self.max_keys)
            .field("idle", &self.idle)
            .field("when_full", &self.when_full)
            .field("overrides", &self.overrides.len())
            .field("resolver", &self.resolver.is_some())
            .finish()
    }
}

impl<K: Hash + Eq, R: KeyedRule> KeyedBuilder<K, R> {
    pub(crate) fn new(config: R::Config) -> Self {
        KeyedBuilder {
            config,
            max_keys: MAX_KEYS,
            idle: IDLE,
            when_full: WhenFull::default(),
            overrides: Vec::new(),
            resolver: None,
        }
    }

    /// The most keys held at once (default 100 000; at most 2³² − 1).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// A key full again this long is dropped as new keys arrive (default 10 min).
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// What a new key does when its shard is full and no key there is full again (default
    /// [`WhenFull::Evict`]).
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// `key` runs `config` instead of the default.
    pub fn override_key(self, key: K, config: R::Config) -> Self {
        let name = format!("overrides[{}]", self.overrides.len());
        self.named_override(key, config, name)
    }

    pub(crate) fn named_override(mut self, key: K, config: R::Config, name: String) -> Self {
        self.overrides.push((key, config, name));
        self
    }

    /// Asks `resolve` for the limit of each new key not in the override table (`None`: the
    /// default). It runs once per key arrival (and for `available` / `capacity` of a key not
    /// held), outside every lock; the answer holds while the key is held. At most 256 distinct configurations are kept; beyond them, and for an invalid
    /// one, the key gets the default (with a `tracing` warning).
    pub fn override_with(
        mut self,
        resolve: impl Fn(&K) -> Option<R::Config> + Send + Sync + 'static,
    ) -> Self {
        self.resolver = Some(Box::new(resolve));
        self
    }

    /// The limiter; fails, changing nothing, if a figure breaks a rule (the error names it).
    pub fn build<C: Clock>(self, clock: C) -> Result<KeyedLimiter<K, R, C>, KeyedConfigError> {
        check_max_keys(self.max_keys)?;
        let rules = Rules::new(&self.config, self.overrides, self.resolver)?;
        Ok(KeyedLimiter::from_parts(
            rules,
            self.max_keys,
            duration_to_nanos(self.idle),
            self.when_full,
            clock,
        ))
    }
}
