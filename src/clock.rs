//! Time, as the gate sees it.
//!
//! Every decision the gate takes is a function of "now", so time comes from a [`Clock`] the gate is
//! built with. The default, [`MonotonicClock`], reads `std::time::Instant`, which is monotonic on
//! every platform Rust supports; cheaper TSC-based clocks can run backwards across cores, and a limiter
//! that trusts such a clock can over-admit. [`ManualClock`] moves only when told, so tests and the
//! simulator are exact and reproducible: a request that has to wait for a token sleeps on the manual
//! clock and wakes when the test advances it, never on wall time.
//!
//! Time is a count of nanoseconds since the clock's own origin ([`Nanos`]); 64 bits cover 584 years.
//! The gate never assumes the clock is monotonic: time that appears to go backwards is treated as "no
//! time has passed", so it can neither panic nor let extra requests through.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::{Clock, ManualClock};
//!
//! let clock = ManualClock::new();
//! assert_eq!(clock.now(), 0);
//! clock.advance(Duration::from_millis(5));
//! assert_eq!(clock.now(), 5_000_000);
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Nanoseconds since a clock's origin.
pub type Nanos = u64;

/// Converts a duration to [`Nanos`], saturating at `u64::MAX` (584 years).
pub fn duration_to_nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of time, and a way to wait for a moment of it.
///
/// Implementations must be cheap to read: [`Clock::now`] is called on every request.
pub trait Clock: Clone + Send + Sync + 'static {
    /// The future returned by [`Clock::sleep_until`].
    type Sleep: Future<Output = ()> + Send;

    /// Nanoseconds since this clock's origin. Should not decrease, but the gate copes if it does.
    fn now(&self) -> Nanos;

    /// A future that completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Nanos) -> Self::Sleep;

    /// Whether [`Clock::sleep_until`] can be awaited in the current context. The gate refuses a request
    /// that would have to wait (with a truthful `retry_after`) rather than panic where it cannot.
    fn can_sleep(&self) -> bool {
        true
    }

    /// Blocks the calling thread until [`Clock::now`] has reached `deadline`.
    fn block_until(&self, deadline: Nanos);
}

/// The default clock: `std::time::Instant`, monotonic, about 25 ns a read.
///
/// Async waits use tokio's timer, so they need a tokio runtime with time enabled; outside one, a
/// request that would have to wait is refused with its `retry_after` instead (blocking waits work
/// anywhere).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: std::time::Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    type Sleep = tokio::time::Sleep;

    #[inline]
    fn now(&self) -> Nanos {
        duration_to_nanos(self.origin.elapsed())
    }

    fn sleep_until(&self, deadline: Nanos) -> Self::Sleep {
        tokio_sleep_until(self.origin, deadline)
    }

    fn can_sleep(&self) -> bool {
        tokio_can_sleep()
    }

    fn block_until(&self, deadline: Nanos) {
        block_until(self, deadline);
    }
}

/// A clock read from the CPU's time-stamp counter (the `quanta` crate, as governor's default clock):
/// about half the cost of [`MonotonicClock`] on x86-64 Linux.
///
/// Not the default, for a reason: a TSC can run slightly backwards when a thread moves between cores.
/// The gate tolerates that (a clock that goes backwards is read as "no time has passed", so no extra
/// request gets through), but latency samples taken across such a jump come out short. Choose it when
/// the guard's own cost matters more than that. Async waits use tokio's timer, as with
/// [`MonotonicClock`].
#[cfg(feature = "quanta")]
#[derive(Debug, Clone)]
pub struct QuantaClock {
    clock: quanta::Clock,
    /// The origin as a raw counter reading: scaling only the difference keeps `now` to one
    /// multiply and shift.
    origin: u64,
    origin_std: std::time::Instant,
}

#[cfg(feature = "quanta")]
impl QuantaClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        QuantaClock {
            origin: clock.raw(),
            origin_std: std::time::Instant::now(),
            clock,
        }
    }
}

#[cfg(feature = "quanta")]
impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "quanta")]
impl Clock for QuantaClock {
    type Sleep = tokio::time::Sleep;

    #[inline]
    fn now(&self) -> Nanos {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }

    fn sleep_until(&self, deadline: Nanos) -> Self::Sleep {
        tokio_sleep_until(self.origin_std, deadline)
    }

    fn can_sleep(&self) -> bool {
        tokio_can_sleep()
    }

    fn block_until(&self, deadline: Nanos) {
        block_until(self, deadline);
    }
}

/// tokio's timer, for a clock whose `now()` counts from `origin`. A deadline beyond what `Instant`
/// can represent is "practically never": sleep for the longest span worth asking for.
fn tokio_sleep_until(origin: std::time::Instant, deadline: Nanos) -> tokio::time::Sleep {
    match origin.checked_add(Duration::from_nanos(deadline)) {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)),
        None => tokio::time::sleep(Duration::from_secs(86_400 * 365)),
    }
}

/// Whether tokio's timer can be used from here (inside a runtime).
fn tokio_can_sleep() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Sleeps the thread until a wall clock reaches `deadline`.
fn block_until(clock: &impl Clock, deadline: Nanos) {
    let now = clock.now();
    if deadline > now {
        std::thread::sleep(Duration::from_nanos(deadline - now));
    }
}

/// A clock that moves only when told: for tests and the simulator.
///
/// Clones share the same time. Waiters (async or blocking) wake when [`ManualClock::advance`] or
/// [`ManualClock::set`] moves time to or past their deadline.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    shared: Arc<ManualShared>,
}

#[derive(Debug, Default)]
struct ManualShared {
    now: AtomicU64,
    sleepers: Mutex<Sleepers>,
    moved: Condvar,
}

#[derive(Debug, Default)]
struct Sleepers {
    /// (sleep id, deadline, waker) of every async waiter that is pending.
    wakers: Vec<(u64, Nanos, Waker)>,
    blocked: usize,
    next_id: u64,
}

impl ManualClock {
    /// A manual clock at time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `by` (saturating) and wakes every waiter whose deadline has come.
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        let mut sleepers = self.shared.sleepers.lock();
        let now = self.shared.now.load(Ordering::SeqCst).saturating_add(by);
        self.shared.now.store(now, Ordering::SeqCst);
        Self::wake_due(&mut sleepers, now);
        self.shared.moved.notify_all();
    }

    /// Sets the time, forwards or backwards (to test clocks that misbehave).
    pub fn set(&self, to: Duration) {
        let now = duration_to_nanos(to);
        let mut sleepers = self.shared.sleepers.lock();
        self.shared.now.store(now, Ordering::SeqCst);
        Self::wake_due(&mut sleepers, now);
        self.shared.moved.notify_all();
    }

    /// The current time as a `Duration` since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now())
    }

    /// How many waiters (async tasks registered with a waker, and blocked threads) are asleep now.
    pub fn sleepers(&self) -> usize {
        let s = self.shared.sleepers.lock();
        s.wakers.len() + s.blocked
    }

    /// Blocks until at least `n` waiters are asleep on this clock: lets a test know that threads it
    /// started have reached their wait, without sleeping for an arbitrary time.
    pub fn wait_for_sleepers(&self, n: usize) {
        let mut s = self.shared.sleepers.lock();
        while s.wakers.len() + s.blocked < n {
            self.shared.moved.wait(&mut s);
        }
    }

    /// The earliest deadline any async waiter is asleep for, if any.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.shared
            .sleepers
            .lock()
            .wakers
            .iter()
            .map(|(_, at, _)| *at)
            .min()
    }

    fn wake_due(sleepers: &mut Sleepers, now: Nanos) {
        let mut i = 0;
        while i < sleepers.wakers.len() {
            if sleepers.wakers[i].1 <= now {
                let (_, _, waker) = sleepers.wakers.swap_remove(i);
                waker.wake();
            } else {
                i += 1;
            }
        }
    }
}

impl Clock for ManualClock {
    type Sleep = ManualSleep;

    #[inline]
    fn now(&self) -> Nanos {
        self.shared.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, deadline: Nanos) -> ManualSleep {
        let id = {
            let mut s = self.shared.sleepers.lock();
            s.next_id += 1;
            s.next_id
        };
        ManualSleep {
            clock: self.clone(),
            deadline,
            id,
        }
    }

    fn block_until(&self, deadline: Nanos) {
        let mut s = self.shared.sleepers.lock();
        s.blocked += 1;
        self.shared.moved.notify_all();
        while self.shared.now.load(Ordering::SeqCst) < deadline {
            self.shared.moved.wait(&mut s);
        }
        s.blocked -= 1;
    }
}

/// The future of [`ManualClock::sleep_until`].
#[derive(Debug)]
pub struct ManualSleep {
    clock: ManualClock,
    deadline: Nanos,
    id: u64,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let shared = &self.clock.shared;
        let mut sleepers = shared.sleepers.lock();
        if shared.now.load(Ordering::SeqCst) >= self.deadline {
            return Poll::Ready(());
        }
        let waker = cx.waker();
        match sleepers.wakers.iter_mut().find(|(id, _, _)| *id == self.id) {
            Some(entry) => entry.2.clone_from(waker),
            None => sleepers
                .wakers
                .push((self.id, self.deadline, waker.clone())),
        }
        shared.moved.notify_all();
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        // A cancelled sleep must not be counted as a sleeper any longer.
        let mut sleepers = self.clock.shared.sleepers.lock();
        if let Some(i) = sleepers.wakers.iter().position(|(id, _, _)| *id == self.id) {
            sleepers.wakers.swap_remove(i);
        }
    }
}
