//! Which rule a key runs: the default, a key's own from the override table, or one the
//! application's resolver names when the key first arrives.
//!
//! Each key holds the number of its rule (four bytes beside its state), resolved once when the
//! key is inserted, so the request path reads a rule by number and never consults the table or
//! the resolver. Rules are kept once per distinct configuration: the table's at construction, the
//! resolver's as they first appear (at most [`MAX_RESOLVED`] distinct ones, behind a lock taken
//! only when the resolver names a limit for a new key).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::OnceLock;

use foldhash::fast::RandomState;
use parking_lot::Mutex;

use super::config::KeyedConfigError;
use super::rule::KeyedRule;

/// Distinct configurations a resolver may name: 256, plans or tiers of a service, not one per
/// key; beyond them a key gets the default limit (with a `tracing` warning).
pub(crate) const MAX_RESOLVED: usize = 256;

/// The application's resolver: a key's own configuration, or `None` for the default.
pub(crate) type Resolver<K, Cfg> = Box<dyn Fn(&K) -> Option<Cfg> + Send + Sync>;

/// Every rule the keys run, by number (0 is the default).
pub(crate) struct Rules<K, R: KeyedRule> {
    /// The configurations of `rules`, in order: 0 the default, then the table's.
    configs: Vec<R::Config>,
    rules: Vec<R>,
    table: HashMap<K, u32, RandomState>,
    resolver: Option<Resolver<K, R::Config>>,
    resolved: Box<[OnceLock<R>]>,
    resolved_configs: Mutex<Vec<R::Config>>,
}

impl<K: Hash + Eq, R: KeyedRule> Rules<K, R> {
    /// The default rule and the table's; an error names the override (by its position) and key.
    pub(crate) fn new(
        default: &R::Config,
        overrides: Vec<(K, R::Config, String)>,
        resolver: Option<Resolver<K, R::Config>>,
    ) -> Result<Self, KeyedConfigError> {
        let mut configs = vec![default.clone()];
        let mut rules = vec![R::new(default).map_err(KeyedConfigError::from)?];
        let mut table = HashMap::with_hasher(RandomState::default());
        for (key, config, name) in overrides {
            let number = match configs.iter().position(|c| *c == config) {
                Some(n) => n,
                None => {
                    rules.push(R::new(&config).map_err(|e| KeyedConfigError::within(&name, e))?);
                    configs.push(config);
                    configs.len() - 1
                }
            };
            table.insert(key, number as u32);
        }
        let resolved = if resolver.is_some() {
            (0..MAX_RESOLVED).map(|_| OnceLock::new()).collect()
        } else {
            Box::default()
        };
        Ok(Rules {
            configs,
            rules,
            table,
            resolver,
            resolved,
            resolved_configs: Mutex::new(Vec::new()),
        })
    }

    /// Rule number `n` (the default for a number not handed out).
    #[inline]
    pub(crate) fn get(&self, n: u32) -> &R {
        let n = n as usize;
        match self.rules.get(n) {
            Some(rule) => rule,
            None => self
                .resolved
                .get(n - self.rules.len())
                .and_then(OnceLock::get)
                .unwrap_or(&self.rules[0]),
        }
    }

    /// The rule number of a key already in the table of overrides, if it is there.
    pub(crate) fn listed<Q>(&self, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.table.is_empty() {
            None
        } else {
            self.table.get(key).copied()
        }
    }

    /// The rule number of a new key: the table's, else the resolver's, else the default. Calls
    /// the resolver, so it runs outside every shard lock.
    pub(crate) fn resolve(&self, key: &K) -> u32 {
        if let Some(n) = self.listed(key) {
            return n;
        }
        match self.resolver.as_ref().and_then(|resolve| resolve(key)) {
            Some(config) => self.intern(config),
            None => 0,
        }
    }

    /// The number of the rule for `config`, made the first time it is named.
    fn intern(&self, config: R::Config) -> u32 {
        if let Some(n) = self.configs.iter().position(|c| *c == config) {
            return n as u32;
        }
        let base = self.rules.len();
        let mut seen = self.resolved_configs.lock();
        if let Some(i) = seen.iter().position(|c| *c == config) {
            return (base + i) as u32;
        }
        if seen.len() == self.resolved.len() {
            tracing::warn!(target: "sluicegate::keyed", limit = MAX_RESOLVED, config = ?config,
                "the resolver named more distinct limits than a keyed limiter keeps: the key gets the default");
            return 0;
        }
        match R::new(&config) {
            Ok(rule) => {
                let i = seen.len();
                // The slot is empty: only this lock's holder fills it, once per slot.
                let _ = self.resolved[i].set(rule);
                seen.push(config);
                (base + i) as u32
            }
            Err(e) => {
                tracing::warn!(target: "sluicegate::keyed", error = %e,
                    "the resolver named an invalid limit: the key gets the default");
                0
            }
        }
    }
}
