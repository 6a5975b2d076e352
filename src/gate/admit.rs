//! The request path: hard ceilings, the shared level, classification, tokens, and release.
//!
//! Every function here runs on a request's path (admission or release): no lock shared by all
//! requests, no allocation, no system call beyond reading the clock. The sampler's tick, which
//! learns and sets the limits these read, is in `tick.rs`.

use super::*;

impl<C: Clock> Inner<C> {
    pub(super) fn refuse(&self, reason: RejectReason, retry_after: Option<Nanos>) -> Rejection {
        self.stripes.bump(match reason {
            RejectReason::InFlightCeiling => Event::RefusedInFlight,
            RejectReason::MemoryCeiling => Event::RefusedMemory,
            RejectReason::RateLimited => Event::RefusedRate,
            RejectReason::TooManyWaiters => Event::RefusedWaiters,
            // The gate itself never refuses for these (they come from the breakers and limiters
            // of `breaker` and `limit`); counted with the nearest kind should one ever pass here.
            RejectReason::ConcurrencyLimited => Event::RefusedInFlight,
            RejectReason::CircuitOpen
            | RejectReason::QuotaExhausted
            | RejectReason::ExceedsCapacity => Event::RefusedRate,
            // A request whose deadline passes before its token comes: no token in time for it.
            RejectReason::DeadlineExceeded => Event::RefusedRate,
            RejectReason::Cancelled => Event::Abandoned,
        });
        // Every refusal says when to come back: a capacity refusal when the work in flight has
        // turned over, a memory refusal once memory has been read again.
        let retry_after = retry_after.unwrap_or_else(|| match reason {
            RejectReason::MemoryCeiling => self.hot.memory_hint.load(Ordering::Relaxed),
            _ => self.hot.drain_hint.load(Ordering::Relaxed),
        });
        Rejection {
            reason,
            retry_after: Some(Duration::from_nanos(retry_after)),
        }
    }

    /// The hard ceilings, checked before anything else. With the switch off the in-flight ceiling is
    /// left to [`Turnstile::try_enter`], which enforces it anyway, so the common path reads the
    /// shared word once; with the switch on it is checked here too, so that a request refused at the
    /// ceiling does not take a token first. Always inlined, for the reason given at
    /// [`Inner::enter`].
    #[inline(always)]
    pub(super) fn check_ceilings(&self) -> Result<SwitchBits, Rejection> {
        if self
            .memory
            .reached(self.hot.max_memory_ratio.load(Ordering::Relaxed))
            && self.memory_still_reached()
        {
            return Err(self.refuse(RejectReason::MemoryCeiling, None));
        }
        let status = self.switch.load_bits();
        if status.on() {
            // The non-urgent floor may go a little above the ceiling (see `floor_slots`), and
            // urgent requests into their room (see `Inner::enter_urgent_room`).
            let room = self.hot.urgent_room.load(Ordering::Relaxed);
            if self.turnstile.current() >= self.hot.floor_ceiling().saturating_add(room) {
                return Err(self.refuse(RejectReason::InFlightCeiling, None));
            }
        }
        Ok(status)
    }

    /// Admits a request while the switch is off (always inlined: see [`Inner::enter`]).
    #[inline(always)]
    pub(super) fn enter_unpaced(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        self.enter(None, 0, Class::Unknown(request), request.cost(), None)
    }

    /// Takes an in-flight slot (refusing at the ceiling) and hands out the permit. `now` is the time
    /// if the caller has read the clock already.
    ///
    /// Below the shared level (the ceiling less the urgent reserve, and below the soft memory mark)
    /// any request enters without being classified; above it, see [`Inner::enter_near_ceiling`].
    ///
    /// `uncounted` is the urgency of a request classified but not yet counted (see
    /// [`Inner::count_class`]): counted here with the admission, on the same lookup of this
    /// thread's counters, or with the refusal.
    ///
    /// Always inlined, as are [`Inner::enter_unpaced`] and [`Inner::enter_with_token`]: left to
    /// the compiler, they were calls whose 40-byte result came back through memory and was copied
    /// again by the caller in pieces of other widths, stalling loads on store forwarding. Measured
    /// on an AMD EPYC (`benches/interleaved.rs`): switch off 1.61x governor's `check()` with them
    /// as calls, 0.9x inlined; switch on 3.2x and 2.1x.
    #[inline(always)]
    pub(super) fn enter(
        &self,
        now: Option<Nanos>,
        waited: Nanos,
        class: Class<'_, '_>,
        cost: u64,
        uncounted: Option<Urgency>,
    ) -> Result<Permit<'_, C>, Rejection> {
        if cost > 0 {
            if let Err(rejection) = self.charge(cost) {
                self.count_uncounted(uncounted);
                return Err(rejection);
            }
        }
        let shared = self.hot.shared_cap.load(Ordering::Relaxed);
        let (slot, uncounted) = if self.turnstile.try_enter(shared) {
            let (slot, classified) = self.regular_slot(now, class);
            (slot, uncounted.or(classified))
        } else {
            match self.enter_near_ceiling(now, class) {
                Ok(slot) => (slot, uncounted),
                Err(rejection) => {
                    if cost > 0 {
                        self.declared.fetch_sub(cost, Ordering::Relaxed);
                    }
                    self.count_uncounted(uncounted);
                    // A flood that is only refused still runs the tick: nothing else may come.
                    self.maybe_tick(now.unwrap_or_else(|| self.clock.now()));
                    return Err(rejection);
                }
            }
        };
        Ok(self.permit(now, waited, cost, slot, uncounted))
    }

    /// The permit of a request that has just taken its slot: counted (with its class, if
    /// `uncounted`), and timed if it is one of the calls timed.
    #[inline(always)]
    pub(super) fn permit(
        &self,
        now: Option<Nanos>,
        waited: Nanos,
        cost: u64,
        slot: Slot,
        uncounted: Option<Urgency>,
    ) -> Permit<'_, C> {
        self.permit_at(now, waited, cost, slot, uncounted, None)
    }

    /// [`Inner::permit`] of a request whose slot was taken at `level` in flight, if known (a
    /// slot handed to a waiter, maybe one of several handed at once), else at the count now.
    #[inline(always)]
    pub(super) fn permit_at(
        &self,
        now: Option<Nanos>,
        waited: Nanos,
        cost: u64,
        slot: Slot,
        uncounted: Option<Urgency>,
        level: Option<u64>,
    ) -> Permit<'_, C> {
        let seq = self.stripes.admit(uncounted.map(Self::class_event));
        let started = if seq & self.hot.sample_mask.load(Ordering::Relaxed) == 0 {
            let now = now.unwrap_or_else(|| self.clock.now());
            // The count this request just raised: its line is in this core's cache.
            let level = level.unwrap_or_else(|| self.turnstile.current());
            if level >= self.ticks.early_level.load(Ordering::Relaxed) {
                self.tick_early(now);
            }
            self.maybe_tick(now);
            let start = TimedStart::new(now, level);
            self.ledger.enter(start.at(), start.level());
            start.0
        } else {
            UNTIMED
        };
        Permit {
            inner: self,
            started,
            waited,
            outcome: Outcome::Succeeded,
            charge: Charge::new(cost, slot),
        }
    }

    /// Whether memory, read at or above its ceiling, is still there: unless declared costs
    /// explain the reading, until the next one. Where they do, the declared bytes released since
    /// have come off it: a reading taken at a peak of large payloads would otherwise refuse every
    /// request until the next one, with the payloads long gone and the service idle.
    #[cold]
    fn memory_still_reached(&self) -> bool {
        let room = self.hot.declared_room.load(Ordering::Relaxed);
        room == u64::MAX || self.declared.load(Ordering::Relaxed) >= room
    }

    /// Adds a declared memory cost to the bytes in flight, refusing it if they had already reached
    /// the room below the memory ceiling: memory crosses it by at most this one request's cost.
    #[cold]
    pub(super) fn charge(&self, cost: u64) -> Result<(), Rejection> {
        let room = self.hot.declared_room.load(Ordering::Relaxed);
        let before = self.declared.fetch_add(cost, Ordering::Relaxed);
        if before >= room {
            self.declared.fetch_sub(cost, Ordering::Relaxed);
            return Err(self.refuse(RejectReason::MemoryCeiling, None));
        }
        Ok(())
    }

    /// Above the shared level: urgent requests may use the rest of the in-flight ceiling (up to the
    /// level where memory reaches its hard ceiling); non-urgent requests stop at their own cap (the
    /// ceiling less the urgent reserve), except between the memory marks, where a share of them
    /// shrinking from all to none is admitted, and on the non-urgent floor. With a learned figure,
    /// requests on the floor do not count against the urgent requests' ceiling: the floor's slots
    /// lie beside the urgent headroom, not in it. With fixed numbers only, the floor may take the
    /// urgent reserve, never a slot above the ceiling or where the memory marks stop non-urgent
    /// work.
    #[cold]
    pub(super) fn enter_near_ceiling(
        &self,
        now: Option<Nanos>,
        class: Class<'_, '_>,
    ) -> Result<Slot, Rejection> {
        let hot = &self.hot;
        let learning = hot.learning.load(Ordering::Relaxed);
        // Whether the request holds a token of the non-urgent floor already; whether it holds
        // none of the whole gate either.
        let (mut on_floor, mut past_cap) = (false, false);
        let urgency = match class {
            Class::Known(u) => u,
            Class::Floor if learning => {
                if self.enter_floor() {
                    return Ok(Slot::Floor);
                }
                return Err(self.refuse(RejectReason::InFlightCeiling, None));
            }
            Class::Floor => {
                on_floor = true;
                Urgency::NonUrgent
            }
            Class::PastCap => {
                past_cap = true;
                Urgency::NonUrgent
            }
            Class::Unknown(request) => {
                // Without a route table or lookup the urgency needs no clock (a refusal at the
                // ceiling stays cheap). Not waiting for the lookup here: an unknown urgency counts
                // as urgent, as a failed lookup does.
                let u = match request.urgency().or_else(|| self.hot.implicit_urgency()) {
                    Some(u) => u,
                    None => {
                        let now = now.unwrap_or_else(|| self.clock.now());
                        self.classify_cached(request, now)
                            .unwrap_or(Urgency::Urgent)
                    }
                };
                self.count_class(u);
                u
            }
        };
        let ceiling = hot.max_in_flight.load(Ordering::Relaxed);
        let memory_hard = hot.memory_hard_cap.load(Ordering::Relaxed);
        // The cap of the request's class, and for a non-urgent one the cap of the memory marks
        // alone (where the non-urgent floor stops with fixed numbers).
        let (cap, memory_cap) = match urgency {
            Urgency::Urgent => {
                let credit = hot.floor_credit.load(Ordering::Relaxed);
                let cap = ceiling
                    .saturating_add(self.floor_in_flight.current().min(credit))
                    .min(memory_hard);
                (cap, memory_hard)
            }
            Urgency::NonUrgent => {
                let soft = hot.memory_soft_cap.load(Ordering::Relaxed);
                let n = self.turnstile.current();
                let memory_cap = if n >= soft && n < memory_hard && memory_hard > soft {
                    // Between the marks: admit the share (hard - n) / (hard - soft), spread evenly.
                    let share = (memory_hard - n) as f64 / (memory_hard - soft) as f64;
                    let k = hot.thinning.fetch_add(1, Ordering::Relaxed);
                    if !evenly(k, share) {
                        return Err(self.refuse(RejectReason::MemoryCeiling, None));
                    }
                    memory_hard
                } else {
                    soft.min(memory_hard)
                };
                // A non-urgent request on the floor of fixed numbers may take the urgent reserve;
                // one without a token has no slot but the floor's.
                let own = if on_floor {
                    ceiling
                } else if past_cap {
                    0
                } else {
                    hot.non_urgent_cap.load(Ordering::Relaxed)
                };
                (own.min(memory_cap), memory_cap)
            }
        };
        if self.turnstile.try_enter(cap) {
            return Ok(self.slot_of(urgency));
        }
        if urgency == Urgency::Urgent && self.enter_urgent_room(cap) {
            return Ok(Slot::Urgent);
        }
        // The non-urgent floor: whatever urgent demand takes, non-urgent requests get
        // `non_urgent_qps` of the ceiling.
        if urgency == Urgency::NonUrgent && learning {
            let now = now.unwrap_or_else(|| self.clock.now());
            if self.non_urgent.reserve(now, 0, &hot.bucket(false)).is_ok() && self.enter_floor() {
                return Ok(Slot::Floor);
            }
        } else if urgency == Urgency::NonUrgent
            && !on_floor
            && self.enter_fixed_floor(now, ceiling.min(memory_cap))
        {
            return Ok(Slot::Regular);
        }
        let n = self.turnstile.current();
        let memory_bound = match urgency {
            Urgency::Urgent => n >= memory_hard,
            Urgency::NonUrgent => n >= hot.memory_soft_cap.load(Ordering::Relaxed).min(memory_hard),
        };
        let reason = if memory_bound {
            RejectReason::MemoryCeiling
        } else {
            RejectReason::InFlightCeiling
        };
        Err(self.refuse(reason, None))
    }

    /// The slot of a request of `urgency` admitted regularly: an urgent one is counted among the
    /// urgent requests in flight while the gate watches them (see [`Inner::enter_urgent_room`]).
    #[inline]
    pub(super) fn slot_of(&self, urgency: Urgency) -> Slot {
        if urgency == Urgency::Urgent && self.hot.urgent_watch.load(Ordering::Relaxed) != u64::MAX {
            self.urgent_in_flight.enter();
            Slot::Urgent
        } else {
            Slot::Regular
        }
    }

    /// The slot of a request just admitted below the shared level: counted if urgent at or above
    /// the level from which the gate counts urgent requests (see [`Inner::watched_slot`]), with
    /// the class found there, if any.
    #[inline(always)]
    pub(super) fn regular_slot(
        &self,
        now: Option<Nanos>,
        class: Class<'_, '_>,
    ) -> (Slot, Option<Urgency>) {
        if self.turnstile.current() < self.hot.urgent_watch.load(Ordering::Relaxed) {
            (Slot::Regular, None)
        } else {
            self.watched_slot(now, class)
        }
    }

    /// The slot of a request admitted below the shared level at or above the level from which the
    /// gate counts urgent requests: classified if that is cheap (no lookup to wait for), so that
    /// the count is exact wherever it can decide anything. A class found here is returned to be
    /// counted with the admission: the urgent share of demand is then measured over every request
    /// from this level up, not only over those that met the ceiling (refused ones and their
    /// retries, mostly of one class).
    #[cold]
    pub(super) fn watched_slot(
        &self,
        now: Option<Nanos>,
        class: Class<'_, '_>,
    ) -> (Slot, Option<Urgency>) {
        match class {
            // Classified before, and counted on that path.
            Class::Known(u) => (self.slot_of(u), None),
            Class::Unknown(request) => {
                let now = now.unwrap_or_else(|| self.clock.now());
                match self.classify_cached(request, now) {
                    Some(u) => (self.slot_of(u), Some(u)),
                    None => (Slot::Regular, None),
                }
            }
            Class::Floor | Class::PastCap => (self.slot_of(Urgency::NonUrgent), None),
        }
    }

    /// Urgent room beyond the ceiling in force (`cap` for this request): while urgent demand is
    /// no flood, an urgent request may go in up to `urgent_room` more in all (before a knee
    /// shows, as long as urgent requests alone hold fewer than the ceiling). What is in flight
    /// above the working level is then non-urgent work draining (a lowered ceiling) or urgent
    /// work, never new non-urgent work.
    #[cold]
    pub(super) fn enter_urgent_room(&self, cap: u64) -> bool {
        let room = self.hot.urgent_room.load(Ordering::Relaxed);
        let alone = self.hot.urgent_alone_cap.load(Ordering::Relaxed);
        if room == 0 || self.urgent_in_flight.current() >= alone {
            return false;
        }
        let memory_hard = self.hot.memory_hard_cap.load(Ordering::Relaxed);
        if !self
            .turnstile
            .try_enter(cap.saturating_add(room).min(memory_hard))
        {
            return false;
        }
        self.urgent_in_flight.enter();
        true
    }

    /// The non-urgent floor with fixed numbers: a non-urgent request stopped by the urgent reserve
    /// takes a token of the floor (`non_urgent_qps`) free now and a slot below `cap` (the ceiling,
    /// and the memory marks' level), or neither: a token it cannot use goes back.
    pub(super) fn enter_fixed_floor(&self, now: Option<Nanos>, cap: u64) -> bool {
        if self.turnstile.current() >= cap {
            return false;
        }
        let now = now.unwrap_or_else(|| self.clock.now());
        let params = self.hot.bucket(false);
        let Ok(token) = self.non_urgent.reserve(now, 0, &params) else {
            return false;
        };
        if self.turnstile.try_enter(cap) {
            return true;
        }
        self.non_urgent.cancel(&token, now);
        false
    }

    /// Takes a slot on the non-urgent floor if the floor's level allows. The floor's own count
    /// rises after the slot is taken and falls before it is given back (see [`Inner::release`]),
    /// so that urgent requests never see more floor requests than there are.
    pub(super) fn enter_floor(&self) -> bool {
        if !self.turnstile.try_enter(self.hot.floor_cap()) {
            return false;
        }
        self.floor_in_flight.enter();
        true
    }

    /// Counts a classified request: the urgent share of demand sizes the urgent reserve.
    #[inline]
    pub(super) fn count_class(&self, urgency: Urgency) {
        self.stripes.bump(Self::class_event(urgency));
    }

    /// [`Inner::count_class`] for a request refused by [`Inner::enter`] before its class was
    /// counted with its admission.
    #[inline]
    pub(super) fn count_uncounted(&self, uncounted: Option<Urgency>) {
        if let Some(urgency) = uncounted {
            self.count_class(urgency);
        }
    }

    /// The counter of a class.
    #[inline]
    pub(super) fn class_event(urgency: Urgency) -> Event {
        match urgency {
            Urgency::Urgent => Event::ClassifiedUrgent,
            Urgency::NonUrgent => Event::ClassifiedNonUrgent,
        }
    }

    /// The counters of every thread (see [`Stripes::totals`]).
    pub(super) fn totals(&self) -> Counters {
        self.stripes.totals(self.turnstile.current())
    }

    #[inline]
    pub(super) fn release(&self, started: Nanos, outcome: Outcome, charge: Charge) {
        match charge.slot() {
            Slot::Floor => self.floor_in_flight.leave(),
            Slot::Urgent => self.urgent_in_flight.leave(),
            Slot::Regular => {}
        }
        self.turnstile.leave();
        let cost = charge.cost();
        if cost > 0 {
            self.declared.fetch_sub(cost, Ordering::Relaxed);
        }
        // Urgent requests waiting for a slot get this one before any new request can take it.
        if !self.slots.is_empty() {
            self.hand_on_slots();
        }
        // A success is counted by what it is not (see `Stripes::totals`), so that the common
        // release touches no counter of this thread's.
        match outcome {
            Outcome::Succeeded => {}
            Outcome::Failed => self.stripes.bump(Event::Failed),
            Outcome::Cancelled => self.stripes.bump(Event::Cancelled),
        }
        if started != UNTIMED {
            self.record_latency(started, outcome != Outcome::Cancelled);
        }
    }

    /// Records the latency of a timed request (one in `2^k`), unless it was cancelled (a latency
    /// the service did not finish), and takes it off the ledger. Out of line, so that the release
    /// of the others does not set up its frame.
    #[cold]
    #[inline(never)]
    pub(super) fn record_latency(&self, started: Nanos, served: bool) {
        let start = TimedStart(started);
        if served {
            let now = self.clock.now();
            self.settings
                .load()
                .ring
                .record(start.latency(now), start.level(), start.at());
        }
        self.ledger.leave(start.at(), start.level());
    }

    /// Urgency from the request itself, the route table, the lookup cache or the default; `None` when
    /// the lookup has to be asked.
    #[inline(always)]
    pub(super) fn classify_cached(&self, request: &Request<'_>, now: Nanos) -> Option<Urgency> {
        if let Some(u) = request.urgency().or_else(|| self.hot.implicit_urgency()) {
            return Some(u);
        }
        let settings = self.settings.load();
        if let Some(u) = settings.routes.classify(request) {
            return Some(u);
        }
        match (&self.lookup, &settings.cache) {
            (Some(_), Some(cache)) => request.with_name(|name| cache.get(name, now)),
            _ => Some(settings.config.routes.default_urgency),
        }
    }

    pub(super) async fn classify_by_lookup(&self, request: &Request<'_>, now: Nanos) -> Urgency {
        let Some(lookup) = &self.lookup else {
            return self.settings.load().config.routes.default_urgency;
        };
        let name = request.name();
        let answer = lookup.lookup(&name).await;
        self.remember(&name, answer, now)
    }

    pub(super) fn classify_by_lookup_blocking(&self, request: &Request<'_>, now: Nanos) -> Urgency {
        let Some(lookup) = &self.lookup else {
            return self.settings.load().config.routes.default_urgency;
        };
        let name = request.name();
        let answer = lookup.lookup_blocking(&name);
        self.remember(&name, answer, now)
    }

    pub(super) fn remember(
        &self,
        name: &str,
        answer: Result<Urgency, crate::lookup::LookupError>,
        now: Nanos,
    ) -> Urgency {
        if let Some(cache) = &self.settings.load().cache {
            cache.insert(name, &answer, now);
        }
        match answer {
            Ok(u) => u,
            Err(error) => {
                tracing::debug!(%error, name, "urgency lookup failed; treated as urgent");
                Urgency::Urgent
            }
        }
    }

    /// Draws a token for a request of `urgency` at `now`, with the switch on.
    ///
    /// The common cases (a token free right now; under a flood, no token in time once the split
    /// has happened) are inlined into the caller; waiting, the split and the spare token are in
    /// [`Inner::draw_rest`], so the result is built in place rather than moved out of a call
    /// (measured: the moves cost as much as a locked instruction).
    ///
    /// `D` is what the caller wants back: [`Gate::try_acquire`] asks for the [`Permit`] itself,
    /// so no [`Admission`] is built and moved on its common path.
    #[inline(always)]
    pub(super) fn draw<'g, D: Decided<'g, C>>(
        &'g self,
        status: SwitchBits,
        urgency: Urgency,
        cost: u64,
        now: Nanos,
    ) -> Result<D, Rejection> {
        let use_urgent = urgency == Urgency::Urgent || !status.split();
        if use_urgent
            && urgency == Urgency::NonUrgent
            && self.turnstile.current() >= self.hot.non_urgent_before_token.load(Ordering::Relaxed)
        {
            return self.enter_past_cap(cost, now).map(D::admitted);
        }
        let max_wait = self.hot.max_wait.load(Ordering::Relaxed);
        let params = self.hot.bucket(use_urgent);
        let first = if use_urgent {
            // The common admission: a token of the whole gate now and a slot below the shared
            // level, in one compare-and-swap of the turnstile. A request with a declared cost, or
            // one that finds no slot there, takes its slot the long way (`enter`).
            let cap = if cost == 0 {
                self.hot.shared_cap.load(Ordering::Relaxed)
            } else {
                0
            };
            match self.turnstile.draw(now, max_wait, &params, cap) {
                Drawn::Admitted(_) => {
                    let (slot, _) = self.regular_slot(Some(now), Class::Known(urgency));
                    let permit = self.permit(Some(now), 0, 0, slot, Some(urgency));
                    return Ok(D::admitted(permit));
                }
                Drawn::Reserved(token) => Ok(token),
                Drawn::Refused(retry_after) => Err(retry_after),
            }
        } else {
            self.non_urgent.reserve(now, max_wait, &params)
        };
        match &first {
            Ok(token) if token.wait == 0 => {
                // The class is counted with the admission (one lookup of this thread's counters).
                return self
                    .enter_drawn(now, use_urgent, urgency, cost, token, Some(urgency))
                    .map(D::admitted);
            }
            // The common refusal of a flood: the whole gate's bucket has no token in time and the
            // split has happened, so there is no other bucket to try: refused here, without the
            // call to `draw_rest` and its result moved back through memory.
            Err(retry_after) if use_urgent && status.split() => {
                self.count_class(urgency);
                return Err(self.refuse(RejectReason::RateLimited, Some(*retry_after)));
            }
            _ => {}
        }
        self.count_class(urgency);
        self.draw_rest(status, urgency, cost, now, use_urgent, first)
            .and_then(D::settle)
    }

    /// A non-urgent request that finds the in-flight level at its cap below a fixed ceiling before
    /// the split (see `HotLimits::non_urgent_before_token`): it draws no token of the whole gate
    /// and is refused at its cap, unless it gets in on the non-urgent floor. Counted with its
    /// class, as a drawn request is.
    #[cold]
    #[inline(never)]
    pub(super) fn enter_past_cap(&self, cost: u64, now: Nanos) -> Result<Permit<'_, C>, Rejection> {
        let uncounted = Some(Urgency::NonUrgent);
        if cost > 0 {
            if let Err(rejection) = self.charge(cost) {
                self.count_uncounted(uncounted);
                return Err(rejection);
            }
        }
        match self.enter_near_ceiling(Some(now), Class::PastCap) {
            Ok(slot) => Ok(self.permit(Some(now), 0, cost, slot, uncounted)),
            Err(rejection) => {
                if cost > 0 {
                    self.declared.fetch_sub(cost, Ordering::Relaxed);
                }
                self.count_uncounted(uncounted);
                Err(rejection)
            }
        }
    }

    /// Reserves a token of the bucket `urgent` names: the whole gate's (in the turnstile) or the
    /// non-urgent one.
    #[inline(always)]
    pub(super) fn reserve_in(
        &self,
        urgent: bool,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
    ) -> Result<Reservation, Nanos> {
        if urgent {
            self.turnstile.reserve(now, max_wait, params)
        } else {
            self.non_urgent.reserve(now, max_wait, params)
        }
    }

    /// Hands a token back to the bucket `urgent` names (see [`Bucket::cancel`]).
    pub(super) fn cancel_in(&self, urgent: bool, token: &Reservation, now: Nanos) {
        if urgent {
            self.turnstile.cancel(token, now);
        } else {
            self.non_urgent.cancel(token, now);
        }
    }

    /// [`Inner::enter_with_token`] for a request of `urgency` that holds `token` of the bucket
    /// `use_urgent` names. A non-urgent request holding a token of the non-urgent floor may use
    /// the floor's slots.
    #[inline(always)]
    pub(super) fn enter_drawn(
        &self,
        now: Nanos,
        use_urgent: bool,
        urgency: Urgency,
        cost: u64,
        token: &Reservation,
        uncounted: Option<Urgency>,
    ) -> Result<Permit<'_, C>, Rejection> {
        let class = if use_urgent {
            Class::Known(urgency)
        } else {
            Class::Floor
        };
        self.enter_with_token(now, class, cost, use_urgent, token, uncounted)
    }

    /// The rest of [`Inner::draw`], given what the first bucket answered (`first`, from the
    /// bucket `use_urgent` names): a wait, a refusal, the split, the spare token.
    #[cold]
    pub(super) fn draw_rest(
        &self,
        status: SwitchBits,
        urgency: Urgency,
        cost: u64,
        now: Nanos,
        mut use_urgent: bool,
        first: Result<Reservation, Nanos>,
    ) -> Result<Admission<'_, C>, Rejection> {
        let split = status.split();
        let max_wait = self.hot.max_wait.load(Ordering::Relaxed);
        let mut answer = Some(first);
        loop {
            let reserved = match answer.take() {
                Some(first) => first,
                None => self.reserve_in(use_urgent, now, max_wait, &self.hot.bucket(use_urgent)),
            };
            let (reason, retry_after) = match reserved {
                Ok(r) if r.wait == 0 => {
                    return self
                        .enter_drawn(now, use_urgent, urgency, cost, &r, None)
                        .map(Admission::Now);
                }
                Ok(r) => {
                    let waiting = self.waiters.fetch_add(1, Ordering::AcqRel);
                    if waiting < self.hot.max_waiters.load(Ordering::Relaxed) {
                        return Ok(Admission::Wait(Ticket {
                            inner: self,
                            cost,
                            reservation: r,
                            urgent_bucket: use_urgent,
                            urgency,
                            until: now.saturating_add(r.wait),
                            done: false,
                        }));
                    }
                    self.waiters.fetch_sub(1, Ordering::AcqRel);
                    self.cancel_in(use_urgent, &r, now);
                    (RejectReason::TooManyWaiters, r.wait)
                }
                Err(retry_after) => (RejectReason::RateLimited, retry_after),
            };
            // The urgent bucket cannot serve this request in time (its token is too far away, or
            // too many are already waiting for one): the original design's signal to give non-urgent requests
            // a bucket of their own.
            if use_urgent && !split {
                if self.switch.split() {
                    let settings = self.settings.load();
                    let whole = self.hot.bucket(true).interval();
                    tracing::info!(
                        target: "sluicegate::switch",
                        max_qps = if whole > 0 { 1e9 / whole as f64 } else { f64::INFINITY },
                        non_urgent_qps = settings.config.gate.non_urgent_qps,
                        cause = reason.as_str(),
                        "urgent bucket exhausted: non-urgent requests move to their own bucket"
                    );
                    self.non_urgent.drain(now, &self.hot.bucket(false));
                }
                if urgency == Urgency::NonUrgent {
                    use_urgent = false;
                    continue;
                }
            }
            // Work-conserving: a non-urgent request past its own bucket may still take a token of
            // the whole gate that is free right now, one that no urgent request has reserved.
            if !use_urgent && self.hot.learning.load(Ordering::Relaxed) {
                if let Ok(spare) = self.turnstile.reserve(now, 0, &self.hot.spare(true)) {
                    let class = Class::Known(urgency);
                    return self
                        .enter_with_token(now, class, cost, true, &spare, None)
                        .map(Admission::Now);
                }
            }
            return Err(self.refuse(reason, Some(retry_after)));
        }
    }

    /// [`Inner::enter`] for a request that has just taken `token` from the bucket `urgent` names.
    /// Refused at a ceiling after all, it gives the token back (while it is still the bucket's
    /// latest), or in a flood the bucket would run slower than its rate.
    #[inline(always)]
    pub(super) fn enter_with_token(
        &self,
        now: Nanos,
        class: Class<'_, '_>,
        cost: u64,
        urgent: bool,
        token: &Reservation,
        uncounted: Option<Urgency>,
    ) -> Result<Permit<'_, C>, Rejection> {
        self.enter(Some(now), 0, class, cost, uncounted)
            .inspect_err(|_| {
                self.cancel_in(urgent, token, now);
            })
    }
}
