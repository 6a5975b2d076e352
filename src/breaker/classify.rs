//! Which outcomes count against the downstream.
//!
//! A breaker protects a downstream from callers while it is failing, so only what says something
//! about the downstream's health counts: errors and timeouts are failures; a caller's own mistake
//! (a 4xx other than 408 and 429, a validation error) says nothing and is [`Outcome::Ignored`].
//! Slowness is not an outcome but a measurement: the permit times every call, and a slow-call
//! policy judges the duration itself.

use crate::clock::Nanos;

/// What a call says about the downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It answered properly.
    Success,
    /// It failed or timed out: counts against it.
    Failure,
    /// Says nothing about it (the caller's own mistake, a cancellation): not counted at all, and
    /// a half-open probe that ends this way frees its slot for another probe.
    Ignored,
}

impl Outcome {
    /// The usual reading of an HTTP status: 5xx, 408 (timeout) and 429 (the downstream says it
    /// is overloaded) are failures, other 4xx are the caller's mistakes and ignored, the rest
    /// (1xx to 3xx) are successes.
    ///
    /// ```
    /// use sluicegate::breaker::Outcome;
    /// assert_eq!(Outcome::from_http_status(503), Outcome::Failure);
    /// assert_eq!(Outcome::from_http_status(404), Outcome::Ignored);
    /// assert_eq!(Outcome::from_http_status(200), Outcome::Success);
    /// ```
    pub fn from_http_status(status: u16) -> Outcome {
        match status {
            408 | 429 => Outcome::Failure,
            400..=499 => Outcome::Ignored,
            500.. => Outcome::Failure,
            _ => Outcome::Success,
        }
    }
}

/// One finished call, as the policies see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// When it finished (the breaker's clock).
    pub at: Nanos,
    /// How long it took, from the permit's grant to its report.
    pub duration: Nanos,
    /// What it says about the downstream.
    pub outcome: Outcome,
}

/// Turns a call's result into an [`Outcome`], for [`Breaker::call_with`](super::Breaker::call_with).
///
/// Any `Fn(&Result<T, E>) -> Outcome` is a classifier:
///
/// ```
/// use sluicegate::breaker::{Classifier, Outcome};
///
/// let by_status = |r: &Result<u16, ()>| match r {
///     Ok(status) => Outcome::from_http_status(*status),
///     Err(()) => Outcome::Failure,
/// };
/// assert_eq!(by_status.classify(&Ok(404)), Outcome::Ignored);
/// ```
pub trait Classifier<T, E> {
    /// What `result` says about the downstream.
    fn classify(&self, result: &Result<T, E>) -> Outcome;
}

impl<T, E, F: Fn(&Result<T, E>) -> Outcome> Classifier<T, E> for F {
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        self(result)
    }
}

/// The default classifier: `Ok` is a success, `Err` a failure.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl<T, E> Classifier<T, E> for DefaultClassifier {
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Failure,
        }
    }
}
