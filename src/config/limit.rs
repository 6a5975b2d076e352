//! [`Limit`]: a figure that is either fixed by the user or learned by the gate.
//!
//! In TOML a limit is written as a plain value (`max_qps = 400`), as `"auto"`, or as a table of bounds
//! for the learned value (`max_qps = { min = 100, max = 5000 }`, either bound optional), which also
//! means auto.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A figure the user fixes, or leaves to the gate to learn from what it measures (optionally within
/// bounds).
///
/// ```
/// use sluicegate::config::{Config, Limit};
///
/// let config = Config::from_toml_str(r#"
///     [gate]
///     max_qps = { min = 100, max = 5000 }
///     max_running = 64
///     max_avg_latency = "auto"
/// "#)?;
/// assert_eq!(config.gate.max_qps, Limit::Auto { min: Some(100.0), max: Some(5000.0) });
/// assert_eq!(config.gate.max_running, 64);
/// assert!(config.gate.max_avg_latency.is_auto());
/// assert_eq!(config.gate.max_qps.clamp(20_000.0), 5000.0);
/// # Ok::<(), sluicegate::config::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit<T> {
    /// The user's number, used as it is.
    Fixed(T),
    /// Learned by the gate, kept within the bounds that are given.
    Auto {
        /// The learned value is never below this.
        min: Option<T>,
        /// The learned value is never above this.
        max: Option<T>,
    },
}

impl<T> Limit<T> {
    /// Learned, without bounds (`"auto"` in TOML).
    pub const AUTO: Limit<T> = Limit::Auto {
        min: None,
        max: None,
    };

    /// Whether the gate learns this figure.
    pub fn is_auto(&self) -> bool {
        matches!(self, Limit::Auto { .. })
    }

    /// The fixed value, if the figure is not learned.
    pub fn fixed(&self) -> Option<&T> {
        match self {
            Limit::Fixed(v) => Some(v),
            Limit::Auto { .. } => None,
        }
    }
}

impl<T: Copy + PartialOrd> Limit<T> {
    /// The value to use when the gate has learned `learned`: the fixed value if there is one, else
    /// `learned` within the bounds (the lower bound wins if they cross).
    pub fn clamp(&self, learned: T) -> T {
        match *self {
            Limit::Fixed(v) => v,
            Limit::Auto { min, max } => {
                let mut v = learned;
                if let Some(max) = max {
                    if v > max {
                        v = max;
                    }
                }
                if let Some(min) = min {
                    if v < min {
                        v = min;
                    }
                }
                v
            }
        }
    }
}

impl<T> From<T> for Limit<T> {
    fn from(value: T) -> Self {
        Limit::Fixed(value)
    }
}

impl<T: PartialEq> PartialEq<T> for Limit<T> {
    fn eq(&self, other: &T) -> bool {
        matches!(self, Limit::Fixed(v) if v == other)
    }
}

impl<T: LimitValue> fmt::Display for Limit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Fixed(v) => f.write_str(&v.show()),
            Limit::Auto {
                min: None,
                max: None,
            } => f.write_str("\"auto\""),
            Limit::Auto { min, max } => {
                let mut parts = Vec::new();
                if let Some(min) = min {
                    parts.push(format!("min = {}", min.show()));
                }
                if let Some(max) = max {
                    parts.push(format!("max = {}", max.show()));
                }
                write!(f, "{{ {} }}", parts.join(", "))
            }
        }
    }
}

/// The kinds of value a [`Limit`] can hold: how each is read from and written to TOML.
pub trait LimitValue: Copy + PartialOrd + Sized {
    /// What a value of this kind looks like, for error messages.
    const EXPECTING: &'static str;
    /// From a TOML integer.
    fn from_i64(value: i64) -> Result<Self, String>;
    /// From an integer above `i64::MAX`.
    fn from_u64(value: u64) -> Result<Self, String> {
        Err(format!("{value} is too large"))
    }
    /// From a TOML float.
    fn from_f64(value: f64) -> Result<Self, String>;
    /// From a TOML string other than `"auto"`.
    fn from_text(text: &str) -> Result<Self, String>;
    /// As written in TOML and in error messages.
    fn show(&self) -> String;
    /// Writes the value as TOML.
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error>;
}

impl LimitValue for u64 {
    const EXPECTING: &'static str = "a whole number";
    fn from_u64(value: u64) -> Result<Self, String> {
        Ok(value)
    }
    fn from_i64(value: i64) -> Result<Self, String> {
        u64::try_from(value).map_err(|_| format!("{value} is negative"))
    }
    fn from_f64(value: f64) -> Result<Self, String> {
        Err(format!("{value} is not a whole number"))
    }
    fn from_text(text: &str) -> Result<Self, String> {
        Err(format!("{text:?} is not a number"))
    }
    fn show(&self) -> String {
        self.to_string()
    }
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(*self)
    }
}

impl LimitValue for f64 {
    const EXPECTING: &'static str = "a number";
    fn from_i64(value: i64) -> Result<Self, String> {
        Ok(value as f64)
    }
    fn from_f64(value: f64) -> Result<Self, String> {
        Ok(value)
    }
    fn from_text(text: &str) -> Result<Self, String> {
        Err(format!("{text:?} is not a number"))
    }
    fn show(&self) -> String {
        super::validate::float(*self)
    }
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(*self)
    }
}

impl LimitValue for Duration {
    const EXPECTING: &'static str = "a duration string with a unit such as \"2500ms\"";
    fn from_i64(value: i64) -> Result<Self, String> {
        Err(super::units::no_unit_message(value))
    }
    fn from_f64(value: f64) -> Result<Self, String> {
        Err(super::units::no_unit_message(value))
    }
    fn from_text(text: &str) -> Result<Self, String> {
        super::units::parse_duration(text)
    }
    fn show(&self) -> String {
        format!("{:?}", humantime::format_duration(*self).to_string())
    }
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*self))
    }
}

impl<T: LimitValue> Serialize for Limit<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Fixed(v) => v.write(serializer),
            Limit::Auto {
                min: None,
                max: None,
            } => serializer.serialize_str("auto"),
            Limit::Auto { min, max } => {
                let mut map = serializer.serialize_map(None)?;
                if let Some(min) = min {
                    map.serialize_entry("min", &Written(*min))?;
                }
                if let Some(max) = max {
                    map.serialize_entry("max", &Written(*max))?;
                }
                map.end()
            }
        }
    }
}

struct Written<T>(T);

impl<T: LimitValue> Serialize for Written<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.write(serializer)
    }
}

impl<'de, T: LimitValue> Deserialize<'de> for Limit<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LimitVisitor(PhantomData))
    }
}

struct LimitVisitor<T>(PhantomData<T>);

impl<'de, T: LimitValue> Visitor<'de> for LimitVisitor<T> {
    type Value = Limit<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, \"auto\", or a table of bounds such as {{ min = ..., max = ... }}",
            T::EXPECTING
        )
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Limit<T>, E> {
        if text == "auto" {
            return Ok(Limit::AUTO);
        }
        T::from_text(text).map(Limit::Fixed).map_err(|reason| {
            E::custom(format_args!(
                "{reason}: write {}, \"auto\", or {{ min = ..., max = ... }}",
                T::EXPECTING
            ))
        })
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Limit<T>, E> {
        T::from_i64(value).map(Limit::Fixed).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Limit<T>, E> {
        match i64::try_from(value) {
            Ok(v) => self.visit_i64(v),
            Err(_) => T::from_u64(value).map(Limit::Fixed).map_err(E::custom),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Limit<T>, E> {
        T::from_f64(value).map(Limit::Fixed).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Limit<T>, A::Error> {
        let (mut min, mut max) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            let slot = match key.as_str() {
                "min" => &mut min,
                "max" => &mut max,
                // How the toml crate hands over a date-time.
                k if k.starts_with("$__toml_private") => {
                    return Err(de::Error::custom(format_args!(
                        "a date-time is not a limit: write {}, \"auto\", or {{ min = ..., max = ... }}",
                        T::EXPECTING
                    )))
                }
                _ => return Err(de::Error::unknown_field(&key, &["min", "max"])),
            };
            if slot.is_some() {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            *slot = Some(map.next_value_seed(ValueSeed::<T>(PhantomData))?);
        }
        Ok(Limit::Auto { min, max })
    }
}

/// Reads one bound: a plain value of the limit's kind.
struct ValueSeed<T>(PhantomData<T>);

impl<'de, T: LimitValue> DeserializeSeed<'de> for ValueSeed<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: LimitValue> Visitor<'de> for ValueSeed<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        T::from_text(text).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        T::from_i64(value).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        match i64::try_from(value) {
            Ok(v) => self.visit_i64(v),
            Err(_) => T::from_u64(value).map_err(E::custom),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<T, E> {
        T::from_f64(value).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        // The toml crate hands over a date-time as a map with one private key.
        let key = map.next_key::<String>()?;
        if key
            .as_deref()
            .is_some_and(|k| k.starts_with("$__toml_private"))
        {
            return Err(de::Error::custom(format_args!(
                "a date-time is not a bound: write {}",
                T::EXPECTING
            )));
        }
        Err(de::Error::custom(format_args!(
            "a table is not a bound: write {}",
            T::EXPECTING
        )))
    }
}
