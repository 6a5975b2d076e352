//! Durations in the toolkit's config structs, written as `humantime` strings (`"10s"`, `"250ms"`)
//! as everywhere else in the configuration; a bare number is refused, since nobody can tell
//! whether `10` meant seconds or milliseconds.

/// Serde adapter for a [`Duration`](std::time::Duration) written as a `humantime` string.
pub(crate) mod duration {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*value))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    struct DurationVisitor;

    impl DurationVisitor {
        fn no_unit<E: de::Error>(number: impl fmt::Display) -> E {
            E::custom(format!(
                "{number} has no unit: a duration is a string with a unit, e.g. \"{number}ms\" or \"{number}s\""
            ))
        }
    }

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration string with a unit, e.g. \"250ms\" or \"10s\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            humantime::parse_duration(v).map_err(|e| {
                E::custom(format!(
                    "{v:?} is not a duration: {e}; write a number with a unit, e.g. \"250ms\" or \"10s\""
                ))
            })
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            Err(Self::no_unit(v))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            Err(Self::no_unit(v))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
            Err(Self::no_unit(v))
        }
    }
}
