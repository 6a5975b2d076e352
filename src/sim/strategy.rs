//! Strategies: what stands between the clients and the backend.
//!
//! The simulator asks a [`Strategy`] about every attempt as it arrives ([`Strategy::offer`]); the
//! strategy admits it, makes it wait until a given time (then [`Strategy::ready`] is asked again), or
//! refuses it. It hears when a waiting attempt is abandoned by its client ([`Strategy::abandon`]) and
//! when the backend has answered an admitted one ([`Strategy::complete`]). Times are nanoseconds of
//! virtual time since the run began; they never go backwards.
//!
//! The built-in strategies are [`Unprotected`], [`TokenBucket`], [`ConcurrencyLimit`],
//! [`Sluicegate`] (the real [`Gate`] on a [`ManualClock`]) and, in [`super::peers`], the adaptive
//! [`Gradient2`](super::Gradient2) and [`Bbr`](super::Bbr). Others run through
//! [`super::run_strategy`]:
//!
//! ```
//! use sluicegate::clock::Nanos;
//! use sluicegate::sim::{run_strategy, AttemptId, BackendView, Offer, Scenario, Strategy};
//!
//! /// Refuses whatever would queue: admits only while a worker is free.
//! struct FreeWorkerOnly;
//!
//! impl Strategy for FreeWorkerOnly {
//!     fn offer(&mut self, _: AttemptId, _: bool, _: Nanos, backend: &BackendView) -> Offer {
//!         if backend.in_flight() < u64::from(backend.workers) {
//!             Offer::Admit
//!         } else {
//!             Offer::Refuse { retry_after: None }
//!         }
//!     }
//!     fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
//!         self.offer(id, true, now, backend)
//!     }
//!     fn abandon(&mut self, _: AttemptId, _: Nanos) {}
//!     fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {}
//! }
//!
//! let scenario = Scenario::from_toml_str(r#"
//!     name = "mine"
//!     [backend]
//!     workers = 4
//!     service_time = "10ms"
//!     [[phase]]
//!     duration = "1s"
//!     load = 3.0
//! "#)?;
//! let report = run_strategy(&scenario, 1, "free-worker-only", &mut FreeWorkerOnly, &mut |_| {});
//! assert!(report.goodput_ratio > 0.8 && report.wasted_work == 0.0);
//! # Ok::<(), sluicegate::sim::ScenarioError>(())
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cell::bucket::{Bucket, BucketParams};
use crate::clock::{duration_to_nanos, Clock, ManualClock, Nanos};
use crate::config::{Config, ConfigError};
use crate::gate::{Admission, Gate, Permit, SlotTicket, Ticket};
use crate::probe::{MemoryReading, ProbeError};
use crate::request::{Request, Urgency};

/// Identifies one attempt (a retry is a new attempt) for the whole time the strategy knows it.
pub type AttemptId = u64;

/// What a strategy decides about an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Send it to the backend now.
    Admit,
    /// Hold it until this time (nanoseconds since the run began), then ask [`Strategy::ready`].
    WaitUntil(Nanos),
    /// Refuse it; the client may retry, after `retry_after` (nanoseconds) if it honours it.
    Refuse {
        /// When trying again could succeed, if the strategy knows.
        retry_after: Option<Nanos>,
    },
}

/// What a strategy can see of the backend when it decides (what an in-process gate could measure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendView {
    /// Workers (W).
    pub workers: u32,
    /// Requests being served.
    pub in_service: u64,
    /// Requests queued for a worker.
    pub queued: u64,
    /// Memory in use, bytes.
    pub memory_used: u64,
    /// The memory limit, bytes.
    pub memory_limit: u64,
}

impl BackendView {
    /// Requests in the backend: in service plus queued.
    pub fn in_flight(&self) -> u64 {
        self.in_service + self.queued
    }
}

/// A protection strategy under test. Every call comes with the current virtual time `now`.
pub trait Strategy {
    /// Told just before [`offer`](Self::offer) of attempt `id`: the memory it will hold in the
    /// backend, in bytes (its payload), as a server may know a request's size from its body. A
    /// strategy that declares costs to a gate uses it; the default ignores it.
    fn payload(&mut self, id: AttemptId, bytes: u64) {
        let _ = (id, bytes);
    }

    /// Decides about a new attempt.
    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, backend: &BackendView) -> Offer;

    /// Decides again about an attempt told to wait, at the time it was told to wait until.
    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer;

    /// The client of a waiting attempt gave up (its timeout passed).
    fn abandon(&mut self, id: AttemptId, now: Nanos);

    /// The backend answered an admitted attempt; `ok` is whether its client was still waiting (a
    /// server learns otherwise when the write to the closed connection fails).
    fn complete(&mut self, id: AttemptId, now: Nanos, ok: bool);

    /// A waiting attempt the strategy admits now (asked after each of the strategy's decisions
    /// and answers, until `None`): one told to wait until a time, admitted before it (a slot freed
    /// by an answer, say). The default admits none.
    fn admitted(&mut self, now: Nanos) -> Option<AttemptId> {
        let _ = now;
        None
    }

    /// Periodic work. Called at time 0 and then whenever the strategy asks: return the next time, or
    /// `None` for no more calls. The default asks for none.
    fn timer(&mut self, now: Nanos, backend: &BackendView) -> Option<Nanos> {
        let _ = (now, backend);
        None
    }

    /// Whether the strategy's switch is on (read at the end of every 100 ms slice). Default: no switch.
    fn switch_on(&mut self, now: Nanos) -> bool {
        let _ = now;
        false
    }

    /// How many times the switch has turned on or off. Default: no switch.
    fn switch_flips(&mut self) -> u64 {
        0
    }
}

/// What a [`Watched`] strategy reports as the run goes: each hook hears of one call after the
/// strategy has answered it. Every hook does nothing by default; a closure `FnMut(Nanos, bool)`
/// is a `Watch` of the slices alone.
pub trait Watch {
    /// The strategy decided `offer` about attempt `id`, new at `now` (`urgent` or not).
    fn offered(&mut self, id: AttemptId, urgent: bool, now: Nanos, offer: &Offer) {
        let _ = (id, urgent, now, offer);
    }

    /// The strategy decided `offer` again about attempt `id`, told to wait before.
    fn readied(&mut self, id: AttemptId, offer: &Offer) {
        let _ = (id, offer);
    }

    /// The client of waiting attempt `id` gave up.
    fn abandoned(&mut self, id: AttemptId) {
        let _ = id;
    }

    /// The backend answered attempt `id`; `ok` is whether its client was still waiting.
    fn completed(&mut self, id: AttemptId, ok: bool) {
        let _ = (id, ok);
    }

    /// The end of a 100 ms slice at `now`, with the switch `on` or not.
    fn slice(&mut self, now: Nanos, on: bool) {
        let _ = (now, on);
    }
}

impl<F: FnMut(Nanos, bool)> Watch for F {
    fn slice(&mut self, now: Nanos, on: bool) {
        self(now, on)
    }
}

/// Another strategy, watched: every call goes to `inner` unchanged, and `watch` hears of each
/// decision, answer and slice (see [`Watch`]), to count what happened or to read what the
/// strategy holds then (a gate's [`Snapshot`](crate::Snapshot), say) as the run goes.
///
/// ```
/// use sluicegate::sim::{run_strategy, Scenario, Unprotected, Watched};
///
/// let scenario = Scenario::builtin("flash-crowd").expect("a built-in scenario");
/// let mut slices = 0;
/// let mut watched = Watched::new(Unprotected, |_now, _on| slices += 1);
/// run_strategy(&scenario, 1, "unprotected", &mut watched, &mut |_| {});
/// drop(watched);
/// assert!(slices > 0);
/// ```
#[derive(Debug)]
pub struct Watched<S, W> {
    inner: S,
    watch: W,
}

impl<S: Strategy, W: Watch> Watched<S, W> {
    /// `inner`, reported to `watch`.
    pub fn new(inner: S, watch: W) -> Self {
        Watched { inner, watch }
    }

    /// The watch, once the run is over.
    pub fn into_watch(self) -> W {
        self.watch
    }
}

impl<S: Strategy, W: Watch> Strategy for Watched<S, W> {
    fn payload(&mut self, id: AttemptId, bytes: u64) {
        self.inner.payload(id, bytes)
    }
    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, backend: &BackendView) -> Offer {
        let offer = self.inner.offer(id, urgent, now, backend);
        self.watch.offered(id, urgent, now, &offer);
        offer
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        let offer = self.inner.ready(id, now, backend);
        self.watch.readied(id, &offer);
        offer
    }
    fn abandon(&mut self, id: AttemptId, now: Nanos) {
        self.inner.abandon(id, now);
        self.watch.abandoned(id);
    }
    fn complete(&mut self, id: AttemptId, now: Nanos, ok: bool) {
        self.inner.complete(id, now, ok);
        self.watch.completed(id, ok);
    }
    fn admitted(&mut self, now: Nanos) -> Option<AttemptId> {
        let id = self.inner.admitted(now)?;
        self.watch.readied(id, &Offer::Admit);
        Some(id)
    }
    fn timer(&mut self, now: Nanos, backend: &BackendView) -> Option<Nanos> {
        self.inner.timer(now, backend)
    }
    fn switch_on(&mut self, now: Nanos) -> bool {
        let on = self.inner.switch_on(now);
        self.watch.slice(now, on);
        on
    }
    fn switch_flips(&mut self) -> u64 {
        self.inner.switch_flips()
    }
}

/// A strategy borrowed is the strategy: a [`Watched`] can wrap one it does not own.
impl<S: Strategy + ?Sized> Strategy for &mut S {
    fn payload(&mut self, id: AttemptId, bytes: u64) {
        (**self).payload(id, bytes)
    }
    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, backend: &BackendView) -> Offer {
        (**self).offer(id, urgent, now, backend)
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        (**self).ready(id, now, backend)
    }
    fn abandon(&mut self, id: AttemptId, now: Nanos) {
        (**self).abandon(id, now)
    }
    fn complete(&mut self, id: AttemptId, now: Nanos, ok: bool) {
        (**self).complete(id, now, ok)
    }
    fn admitted(&mut self, now: Nanos) -> Option<AttemptId> {
        (**self).admitted(now)
    }
    fn timer(&mut self, now: Nanos, backend: &BackendView) -> Option<Nanos> {
        (**self).timer(now, backend)
    }
    fn switch_on(&mut self, now: Nanos) -> bool {
        (**self).switch_on(now)
    }
    fn switch_flips(&mut self) -> u64 {
        (**self).switch_flips()
    }
}

/// No protection: everything goes to the backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unprotected;

impl Strategy for Unprotected {
    fn offer(&mut self, _: AttemptId, _: bool, _: Nanos, _: &BackendView) -> Offer {
        Offer::Admit
    }
    fn ready(&mut self, _: AttemptId, _: Nanos, _: &BackendView) -> Offer {
        Offer::Admit
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {}
}

/// One static token bucket at a fixed rate: an attempt that finds no token is refused at once, with
/// the time until the next token as `retry_after`.
#[derive(Debug)]
pub struct TokenBucket {
    bucket: Bucket,
    params: BucketParams,
}

impl TokenBucket {
    /// A bucket of `rate` tokens per second banking `burst` worth of it.
    pub fn new(rate: f64, burst: Duration) -> Self {
        TokenBucket {
            bucket: Bucket::new(),
            params: BucketParams::with_burst(rate, burst),
        }
    }
}

impl Strategy for TokenBucket {
    fn offer(&mut self, _: AttemptId, _: bool, now: Nanos, _: &BackendView) -> Offer {
        match self.bucket.try_acquire(now, &self.params) {
            Ok(()) => Offer::Admit,
            Err(wait) => Offer::Refuse {
                retry_after: Some(wait),
            },
        }
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        self.offer(id, true, now, backend)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {}
}

/// A static cap on attempts in flight (admitted, not yet answered): beyond it, refused at once.
#[derive(Debug)]
pub struct ConcurrencyLimit {
    limit: u64,
    in_flight: u64,
}

impl ConcurrencyLimit {
    /// At most `limit` in flight.
    pub fn new(limit: u64) -> Self {
        ConcurrencyLimit {
            limit,
            in_flight: 0,
        }
    }
}

impl Strategy for ConcurrencyLimit {
    fn offer(&mut self, _: AttemptId, _: bool, _: Nanos, _: &BackendView) -> Offer {
        if self.in_flight < self.limit {
            self.in_flight += 1;
            Offer::Admit
        } else {
            Offer::Refuse { retry_after: None }
        }
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, backend: &BackendView) -> Offer {
        self.offer(id, true, now, backend)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, _: AttemptId, _: Nanos, _: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

/// Attempt ids are sequential numbers; hashing them is a multiplication.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by attempt id, with the cheap [`IdHasher`].
pub(crate) type IdMap<V> = HashMap<AttemptId, V, BuildHasherDefault<IdHasher>>;

/// The memory a [`Sluicegate`] strategy's gate reads: updated from the backend, read by the gate's
/// manual memory probe.
#[derive(Debug, Clone)]
pub struct SharedMemory {
    used: Arc<AtomicU64>,
    limit: u64,
}

impl SharedMemory {
    /// Memory of a backend with `limit` bytes, `used` bytes in use now.
    pub fn new(used: u64, limit: u64) -> Self {
        SharedMemory {
            used: Arc::new(AtomicU64::new(used)),
            limit: limit.max(1),
        }
    }

    /// Publishes the memory in use.
    pub fn set(&self, used: u64) {
        self.used.store(used, Ordering::Relaxed);
    }

    /// A reading, as the gate's probe takes it.
    pub fn read(&self) -> Result<MemoryReading, ProbeError> {
        Ok(MemoryReading {
            used_bytes: self.used.load(Ordering::Relaxed),
            limit_bytes: self.limit,
        })
    }
}

/// Builds the gate a [`Sluicegate`] strategy borrows: on `clock`, reading memory from `memory`
/// only when [`Gate::refresh_memory`] is called.
pub fn simulated_gate(
    config: Config,
    clock: &ManualClock,
    memory: &SharedMemory,
) -> Result<Gate<ManualClock>, ConfigError> {
    let memory = memory.clone();
    Gate::builder(config)
        .clock(clock.clone())
        .manual_memory_probe(move || memory.read())
        .build()
}

/// The real [`Gate`], driven in virtual time: its clock is set to the event's time before every
/// call, memory is fed to it every `probe_interval`, and its permits and tickets are held for the
/// attempts they belong to.
///
/// The gate is borrowed: build it (e.g. with [`simulated_gate`]) in the function that runs the
/// simulation, as permits and tickets borrow it.
pub struct Sluicegate<'g> {
    gate: &'g Gate<ManualClock>,
    clock: ManualClock,
    memory: SharedMemory,
    probe_interval: Nanos,
    permits: IdMap<Permit<'g, ManualClock>>,
    tickets: IdMap<Ticket<'g, ManualClock>>,
    /// Urgent attempts waiting for a slot, oldest first (the gate hands slots to the newest).
    slots: Vec<(AttemptId, SlotTicket<'g, ManualClock>)>,
    /// The payload of the attempt about to be offered, declared to the gate as its cost.
    payload: Option<(AttemptId, u64)>,
}

impl std::fmt::Debug for Sluicegate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sluicegate")
            .field("gate", self.gate)
            .field("permits", &self.permits.len())
            .field("tickets", &self.tickets.len())
            .finish_non_exhaustive()
    }
}

static URGENT: Request<'static> = Request::url("/sim").with_urgency(Urgency::Urgent);
static NON_URGENT: Request<'static> = Request::url("/sim").with_urgency(Urgency::NonUrgent);

impl<'g> Sluicegate<'g> {
    /// Drives `gate`, whose clock is `clock` and whose memory probe reads `memory`.
    pub fn new(gate: &'g Gate<ManualClock>, clock: ManualClock, memory: SharedMemory) -> Self {
        let probe_interval = duration_to_nanos(gate.config().sampler.probe_interval).max(1);
        Sluicegate {
            gate,
            clock,
            memory,
            probe_interval,
            permits: IdMap::default(),
            tickets: IdMap::default(),
            slots: Vec::new(),
            payload: None,
        }
    }

    /// Moves the gate's clock to `now` (never backwards).
    fn at(&self, now: Nanos) {
        if now > self.clock.now() {
            self.clock.set(Duration::from_nanos(now));
        }
    }

    fn admission(&mut self, id: AttemptId, admission: Admission<'g, ManualClock>) -> Offer {
        match admission {
            Admission::Now(permit) => {
                self.permits.insert(id, permit);
                Offer::Admit
            }
            Admission::Wait(ticket) => {
                let until = duration_to_nanos(ticket.ready_at());
                self.tickets.insert(id, ticket);
                Offer::WaitUntil(until)
            }
            Admission::Slot(ticket) => {
                let until = duration_to_nanos(ticket.until());
                self.slots.push((id, ticket));
                Offer::WaitUntil(until)
            }
        }
    }

    /// Takes attempt `id`'s wait for a slot off the list, if it waits for one.
    fn take_slot(&mut self, id: AttemptId) -> Option<SlotTicket<'g, ManualClock>> {
        let at = self.slots.iter().rposition(|(of, _)| *of == id)?;
        Some(self.slots.remove(at).1)
    }
}

fn refusal(retry_after: Option<Duration>) -> Offer {
    Offer::Refuse {
        retry_after: retry_after.map(duration_to_nanos),
    }
}

impl Strategy for Sluicegate<'_> {
    fn payload(&mut self, id: AttemptId, bytes: u64) {
        self.payload = Some((id, bytes));
    }

    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, _: &BackendView) -> Offer {
        self.at(now);
        let request = if urgent { URGENT } else { NON_URGENT };
        let cost = match self.payload.take() {
            Some((of, bytes)) if of == id => bytes,
            _ => 0,
        };
        match self.gate.begin(&request.with_cost(cost)) {
            Ok(admission) => self.admission(id, admission),
            Err(rejection) => refusal(rejection.retry_after),
        }
    }

    fn ready(&mut self, id: AttemptId, now: Nanos, _: &BackendView) -> Offer {
        self.at(now);
        if let Some(ticket) = self.take_slot(id) {
            return match ticket.admit() {
                Ok(permit) => {
                    self.permits.insert(id, permit);
                    Offer::Admit
                }
                Err(rejection) => refusal(rejection.retry_after),
            };
        }
        match self.tickets.remove(&id) {
            Some(ticket) => match ticket.admit() {
                Ok(permit) => {
                    self.permits.insert(id, permit);
                    Offer::Admit
                }
                Err(rejection) => refusal(rejection.retry_after),
            },
            // Not ours: nothing to wait for.
            None => Offer::Refuse { retry_after: None },
        }
    }

    fn abandon(&mut self, id: AttemptId, now: Nanos) {
        self.at(now);
        self.tickets.remove(&id);
        self.take_slot(id);
    }

    fn complete(&mut self, id: AttemptId, now: Nanos, ok: bool) {
        self.at(now);
        if let Some(permit) = self.permits.remove(&id) {
            if ok {
                permit.success();
            } else {
                permit.failure();
            }
        }
    }

    fn admitted(&mut self, now: Nanos) -> Option<AttemptId> {
        // Slots handed on wait with their tickets; the gate hands them to the newest first.
        let handed = (self.slots.len() as u64).saturating_sub(self.gate.slot_waiters());
        if handed == 0 {
            return None;
        }
        self.at(now);
        let at = self.slots.iter().rposition(|(_, t)| t.is_ready())?;
        let (id, ticket) = self.slots.remove(at);
        match ticket.admit() {
            Ok(permit) => {
                self.permits.insert(id, permit);
                Some(id)
            }
            Err(_) => None,
        }
    }

    fn timer(&mut self, now: Nanos, backend: &BackendView) -> Option<Nanos> {
        self.at(now);
        self.memory.set(backend.memory_used);
        self.gate.refresh_memory();
        Some(now.saturating_add(self.probe_interval))
    }

    fn switch_on(&mut self, now: Nanos) -> bool {
        self.at(now);
        self.gate.switch_unticked().0
    }

    fn switch_flips(&mut self) -> u64 {
        self.gate.switch_unticked().1
    }
}
