//! `[redis]`: the Redis store that the policies with `store = "redis"` keep their rate limits in.
//!
//! The table holds the keys of two structs of [`crate::store::redis`], with their own meaning,
//! defaults and serde: the connection's ([`RedisStoreConfig`]: `url`, `deadline`,
//! `connect_timeout`, `reconnect_min_delay`, `reconnect_max_delay`, `key_prefix`, `breaker`,
//! `tls_ca_file`) and
//! the limits' ([`RedisLimitConfig`]: `on_store_failure`, `nodes`, `lease`, `lease_ttl`,
//! `negative_cache`, `max_local_keys`), shared by every such policy. A limit's `name` and figures
//! come from its policy (the route's pattern and its `rate`), so `name` and `limit` are not keys
//! of this table.
//!
//! ```toml
//! [redis]
//! url = "redis://10.0.0.5:6379"
//! deadline = "20ms"
//! on_store_failure = "local"   # each node enforces 1/nodes of the limit while Redis is away
//! nodes = 4
//!
//! [policies."/api/*"]
//! rate = "100/s"
//! store = "redis"
//! ```
//!
//! Without the feature `redis` the table is read (so one file serves every build) and kept as
//! written; [`Config::warnings`](super::Config::warnings) says it is unused, and a policy with
//! `store = "redis"` is a configuration error that names the feature.
//!
//! [`RedisStoreConfig`]: crate::store::redis::RedisStoreConfig
//! [`RedisLimitConfig`]: crate::store::redis::RedisLimitConfig

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[cfg(feature = "redis")]
use crate::store::redis::{RedisLimitConfig, RedisStoreConfig};

/// `[redis]`: where the Redis store is, and how the limits of `store = "redis"` policies use it
/// (see [`Config::redis`](super::Config::redis) and the shipped `config/sluicegate.toml`). Build one with [`RedisConfig::default`] and set its fields.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The connection: `url`, `deadline`, `connect_timeout`, `reconnect_min_delay`,
    /// `reconnect_max_delay`, `key_prefix`, `breaker`, `tls_ca_file`.
    #[cfg(feature = "redis")]
    pub store: RedisStoreConfig,
    /// What every `store = "redis"` limit shares: `on_store_failure`, `nodes`, `lease`,
    /// `lease_ttl`, `negative_cache`, `max_local_keys`. Its `name` and `limit` are not used: each
    /// policy sets its own (the route's pattern, its `rate`).
    #[cfg(feature = "redis")]
    pub limits: RedisLimitConfig,
    /// The table as written, kept for a build with the feature.
    #[cfg(not(feature = "redis"))]
    table: toml::Table,
}

/// Keys of [`RedisLimitConfig`] that each policy sets, not the `[redis]` table.
#[cfg(feature = "redis")]
const PER_POLICY: [&str; 2] = ["name", "limit"];

/// Keys of [`RedisStoreConfig`] that are unset by default, so not written by its serde.
#[cfg(feature = "redis")]
const STORE_UNSET: [&str; 1] = ["tls_ca_file"];

#[cfg(feature = "redis")]
impl RedisConfig {
    /// The keys of each struct, as its own serde writes them.
    fn keys() -> (Vec<String>, Vec<String>) {
        let names = |value: Result<toml::Value, _>| match value {
            Ok(toml::Value::Table(t)) => t.keys().cloned().collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let mut store = names(toml::Value::try_from(RedisStoreConfig::default()));
        store.extend(STORE_UNSET.iter().map(|k| (*k).to_owned()));
        let limits = names(toml::Value::try_from(RedisLimitConfig::default()))
            .into_iter()
            .filter(|k| !PER_POLICY.contains(&k.as_str()))
            .collect();
        (store, limits)
    }

    /// The two structs from the table's keys, each read by its own serde; an error names the key.
    fn from_table(table: toml::Table) -> Result<Self, String> {
        let (store_keys, limit_keys) = Self::keys();
        let (mut store, mut limits) = (toml::Table::new(), toml::Table::new());
        for (key, value) in table {
            if store_keys.contains(&key) {
                store.insert(key, value);
            } else if limit_keys.contains(&key) {
                limits.insert(key, value);
            } else if PER_POLICY.contains(&key.as_str()) {
                return Err(format!(
                    "`redis.{key}` is set by each policy with `store = \"redis\"` (the limit's \
                     name is the route's pattern, its figures the policy's `rate`), not here"
                ));
            } else {
                let mut expected: Vec<&str> = store_keys
                    .iter()
                    .chain(&limit_keys)
                    .map(String::as_str)
                    .collect();
                expected.sort_unstable();
                let mut message = format!(
                    "unknown key `redis.{key}` (expected one of: {})",
                    expected.join(", ")
                );
                if let Some(close) = super::parse::closest(&key, &expected) {
                    message.push_str(&format!("; did you mean `{close}`?"));
                }
                return Err(message);
            }
        }
        Ok(RedisConfig {
            store: read(store)?,
            limits: read(limits)?,
        })
    }

    fn to_table(&self) -> Result<toml::Table, toml::ser::Error> {
        let mut table = match toml::Value::try_from(&self.store)? {
            toml::Value::Table(t) => t,
            _ => toml::Table::new(),
        };
        if let toml::Value::Table(limits) = toml::Value::try_from(&self.limits)? {
            for (key, value) in limits {
                if !PER_POLICY.contains(&key.as_str()) {
                    table.insert(key, value);
                }
            }
        }
        Ok(table)
    }
}

/// `T` from `part`; a failure is found key by key, so that its message names the key.
#[cfg(feature = "redis")]
fn read<T: serde::de::DeserializeOwned>(part: toml::Table) -> Result<T, String> {
    for (key, value) in &part {
        let mut one = toml::Table::new();
        one.insert(key.clone(), value.clone());
        if let Err(e) = toml::Value::Table(one).try_into::<T>() {
            return Err(format!("`redis.{key}`: {}", e.message()));
        }
    }
    toml::Value::Table(part)
        .try_into::<T>()
        .map_err(|e| format!("`redis`: {}", e.message()))
}

#[cfg(not(feature = "redis"))]
impl RedisConfig {
    fn from_table(table: toml::Table) -> Result<Self, String> {
        Ok(RedisConfig { table })
    }

    fn to_table(&self) -> Result<toml::Table, std::convert::Infallible> {
        Ok(self.table.clone())
    }
}

impl Serialize for RedisConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_table()
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for RedisConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(d)?;
        RedisConfig::from_table(table).map_err(serde::de::Error::custom)
    }
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;
    use crate::store::redis::OnStoreFailure;
    use std::time::Duration;

    #[test]
    fn one_table_fills_the_store_and_the_limits_by_their_own_keys() {
        let config: RedisConfig = toml::from_str(
            r#"
            url = "redis://10.0.0.5:6379"
            deadline = "15ms"
            on_store_failure = "deny"
            nodes = 4
            lease = 10
            "#,
        )
        .expect("valid");
        assert_eq!(config.store.url, "redis://10.0.0.5:6379");
        assert_eq!(config.store.deadline, Duration::from_millis(15));
        assert_eq!(config.limits.on_store_failure, OnStoreFailure::Deny);
        assert_eq!((config.limits.nodes, config.limits.lease), (4, 10));
        let again: RedisConfig =
            toml::from_str(&toml::to_string(&config).expect("writes")).expect("reads back");
        assert_eq!(again, config);
    }

    #[test]
    fn errors_name_the_key() {
        let unknown = toml::from_str::<RedisConfig>("urll = \"redis://x\"").unwrap_err();
        assert!(unknown.message().contains("`redis.urll`"), "{unknown}");
        assert!(
            unknown.message().contains("did you mean `url`"),
            "{unknown}"
        );
        let bad = toml::from_str::<RedisConfig>("deadline = 20").unwrap_err();
        assert!(bad.message().contains("`redis.deadline`"), "{bad}");
        let name = toml::from_str::<RedisConfig>("name = \"x\"").unwrap_err();
        assert!(name.message().contains("set by each policy"), "{name}");
    }
}
