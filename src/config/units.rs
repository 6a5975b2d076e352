//! Values with units: durations (`"2500ms"`) and byte sizes (`"512MiB"`).
//!
//! They are parsed inside the deserializer, not afterwards, so that a bad value is reported with the
//! key it belongs to and its position in the file.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Binary and decimal byte units accepted by [`parse_byte_size`], lower case.
const BYTE_UNITS: [(&str, u64); 9] = [
    ("b", 1),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
];

/// Most fractional digits accepted in a byte size: enough for any real use, few enough that the
/// arithmetic cannot overflow.
const MAX_FRACTION_DIGITS: usize = 18;

/// Serde adapter for a [`Duration`] written as a `humantime` string.
pub(crate) mod duration {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        value: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Serde adapter for an optional byte count written as an integer or a string with a unit.
pub(crate) mod memory_limit {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<u64>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(bytes) => serialize_bytes(*bytes, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_any(BytesVisitor).map(Some)
    }
}

/// Writes a byte count in the largest binary unit that divides it exactly, so that it reads well and
/// parses back to the same number.
fn serialize_bytes<S: Serializer>(bytes: u64, serializer: S) -> Result<S::Ok, S::Error> {
    for (unit, size) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes != 0 && bytes.is_multiple_of(size) {
            return serializer.collect_str(&format_args!("{}{unit}", bytes / size));
        }
    }
    serializer.collect_str(&format_args!("{bytes}B"))
}

struct DurationVisitor;

/// Why a bare number is not a duration.
pub(crate) fn no_unit_message(number: impl fmt::Display) -> String {
    format!(
        "{number} has no unit: a duration is a string with a unit, \
         e.g. \"{number}ms\" or \"{number}s\""
    )
}

/// Parses a `humantime` duration, explaining a failure.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| {
        let reason = match error {
            humantime::DurationError::NumberOverflow => {
                "it is too long to represent (durations must stay below about 584 years)".to_owned()
            }
            other => other.to_string(),
        };
        format!(
            "{text:?} is not a duration: {reason}; write a number with a unit, \
             e.g. \"2500ms\", \"3s\" or \"1h 30m\""
        )
    })
}

impl DurationVisitor {
    fn no_unit<E: de::Error>(number: impl fmt::Display) -> E {
        E::custom(no_unit_message(number))
    }
}

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string with a unit, e.g. \"2500ms\", \"3s\" or \"1h 30m\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Duration, E> {
        Err(Self::no_unit(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Duration, E> {
        Err(Self::no_unit(value))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Duration, E> {
        Err(Self::no_unit(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Duration, E> {
        Err(Self::no_unit(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Duration, E> {
        Err(Self::no_unit(value))
    }
}

struct BytesVisitor;

impl BytesVisitor {
    fn negative<E: de::Error>(value: impl fmt::Display) -> E {
        E::custom(format_args!(
            "{value} is negative: a memory size is a number of bytes"
        ))
    }

    fn too_large<E: de::Error>(value: impl fmt::Display) -> E {
        E::custom(format_args!(
            "{value} bytes is too large (at most {})",
            u64::MAX
        ))
    }
}

impl Visitor<'_> for BytesVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number of bytes, or a string with a unit such as \"512MiB\" or \"1.5GB\"")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| Self::negative(value))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<u64, E> {
        if value < 0 {
            return Err(Self::negative(value));
        }
        u64::try_from(value).map_err(|_| Self::too_large(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| Self::too_large(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        Err(E::custom(format_args!(
            "{value} is not a whole number of bytes: write an integer, or a string with a unit \
             such as \"1.5GiB\""
        )))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
        parse_byte_size(text)
            .map_err(|reason| E::custom(format_args!("{text:?} is not a memory size: {reason}")))
    }
}

/// Parses a byte size such as `"512MiB"`, `"1.5GB"`, `"4096 KiB"` or `"123B"`.
///
/// The number is a non-negative decimal (no sign, no exponent); the unit is one of `B`, `KiB`, `MiB`,
/// `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000), in any case. A fraction
/// of a byte is rounded down. Returns why the text is not a size otherwise.
pub(crate) fn parse_byte_size(text: &str) -> Result<u64, String> {
    const UNITS_HELP: &str = "B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)";
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(format!(
            "it must start with a number, followed by a unit ({UNITS_HELP})"
        ));
    }
    if unit.is_empty() {
        return Err(format!(
            "add a unit ({UNITS_HELP}), or write the number of bytes as an integer"
        ));
    }
    let multiplier = BYTE_UNITS
        .iter()
        .find(|(name, _)| unit.eq_ignore_ascii_case(name))
        .map(|&(_, size)| size)
        .ok_or_else(|| format!("unknown unit {unit:?} (expected {UNITS_HELP})"))?;

    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(format!("{number:?} is not a number"));
    }
    if fraction.len() > MAX_FRACTION_DIGITS {
        return Err(format!(
            "at most {MAX_FRACTION_DIGITS} decimal places are supported"
        ));
    }
    let too_large = || format!("it is too large (at most {} bytes)", u64::MAX);
    let mut bytes: u128 = 0;
    for digit in whole.bytes() {
        bytes = bytes
            .checked_mul(10)
            .and_then(|b| b.checked_add(u128::from(digit - b'0')))
            .filter(|b| *b <= u128::from(u64::MAX))
            .ok_or_else(too_large)?;
    }
    bytes = bytes
        .checked_mul(u128::from(multiplier))
        .ok_or_else(too_large)?;
    if !fraction.is_empty() {
        let mut numerator: u128 = 0;
        for digit in fraction.bytes() {
            numerator = numerator * 10 + u128::from(digit - b'0');
        }
        // At most 18 digits: numerator < 10^18 and multiplier <= 2^40, so the product fits in u128.
        let denominator = 10u128.pow(fraction.len() as u32);
        bytes = bytes
            .checked_add(numerator * u128::from(multiplier) / denominator)
            .ok_or_else(too_large)?;
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn byte_sizes_parse_exactly() {
        assert_eq!(parse_byte_size("2GiB"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_byte_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_byte_size("0.1GB"), Ok(100_000_000));
        assert_eq!(parse_byte_size("4096 kib"), Ok(4096 * 1024));
        assert_eq!(parse_byte_size(".5KiB"), Ok(512));
        assert_eq!(parse_byte_size("1.KiB"), Ok(1024));
        assert_eq!(parse_byte_size("1.3B"), Ok(1));
        assert_eq!(parse_byte_size("18446744073709551615B"), Ok(u64::MAX));
    }

    #[test]
    fn bad_byte_sizes_are_refused() {
        for bad in [
            "",
            "B",
            "12",
            "1.2.3GB",
            ".GB",
            "-1GB",
            "1e3B",
            "5 apples",
            "1 G",
            "16777216TiB",
            "18446744073709551616B",
            "99999999999999999999999999999999999999999B",
        ] {
            assert!(parse_byte_size(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
