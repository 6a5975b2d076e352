//! The `grpc-timeout` header: how long a gRPC client will wait for its answer.

use std::time::Duration;

/// Most digits of a `grpc-timeout` value: the gRPC spec's "at most 8 digits".
const MAX_DIGITS: usize = 8;

/// Parses a `grpc-timeout` header value as the gRPC spec writes it: up to 8 ASCII digits and one
/// unit, `H` (hours), `M` (minutes), `S` (seconds), `m` (milliseconds), `u` (microseconds) or
/// `n` (nanoseconds). Anything else is `None` (the header is then ignored, as if absent).
///
/// ```
/// use std::time::Duration;
/// use sluicegate::deadline::parse_grpc_timeout;
///
/// assert_eq!(parse_grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
/// assert_eq!(parse_grpc_timeout(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
/// assert_eq!(parse_grpc_timeout(b"123456789S"), None); // nine digits
/// assert_eq!(parse_grpc_timeout(b"5s"), None); // `s` is not a unit: seconds are `S`
/// assert_eq!(parse_grpc_timeout(b"m"), None);
/// ```
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > MAX_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_of_the_spec_is_read_and_nothing_else() {
        let cases: [(&[u8], Option<Duration>); 13] = [
            (b"2H", Some(Duration::from_secs(7200))),
            (b"3M", Some(Duration::from_secs(180))),
            (b"4S", Some(Duration::from_secs(4))),
            (b"5m", Some(Duration::from_millis(5))),
            (b"6u", Some(Duration::from_micros(6))),
            (b"7n", Some(Duration::from_nanos(7))),
            (b"0m", Some(Duration::ZERO)),
            (b"99999999H", Some(Duration::from_secs(99_999_999 * 3600))),
            (b"", None),
            (b"10", None),
            (b"-1S", None),
            (b" 1S", None),
            (b"1.5S", None),
        ];
        for (value, expected) in cases {
            assert_eq!(
                parse_grpc_timeout(value),
                expected,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }
}
