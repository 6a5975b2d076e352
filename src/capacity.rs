//! Learned capacity: what the service can sustain, estimated from what the gate measures.
//!
//! # Why these figures, and why this way
//!
//! A service with `W` ways of working in parallel (threads, connections, cores) and a base latency
//! `L0` (the latency of a request that does not queue) completes at most `C = W / L0` requests per
//! second. Below `W` requests in flight latency stays at `L0`; above it the extra requests queue and
//! latency climbs by `1 / C` per request, while throughput stays at `C`. So the in-flight level at
//! which latency starts to climb (the *knee*) is `C × L0`, Little's law at the knee. This is the BBR
//! insight (Cardwell et al., 2016) that Sentinel's and kratos' adaptive limits apply to servers.
//!
//! The estimator keeps:
//! * `capacity`: the highest smoothed completion rate seen over the last few seconds
//!   ([`RATE_WINDOW`]);
//! * `base_latency`: the mean latency of the latest *clean* rounds (rounds of at least
//!   [`ROUND_SAMPLES`] latencies during which the ceiling refused nothing and the service was not
//!   seen saturated), the highest and lowest fifth of them left out ([`ROUND_TRIM`]). Not the
//!   minimum BBR uses: the minimum of noisy means is biased low, and a knee set low wastes
//!   capacity. Nor their median, which needs half as many rounds again for the same precision:
//!   the knee's error is most of the queue the ceiling keeps (see [`KNEE_SIGMAS`]).
//! * the knee `capacity × base_latency`, and the in-flight ceiling a little above it
//!   ([`ceiling_headroom`]: half the square root of the knee, and half a request, rounded to the
//!   nearest request: [`confirmed_ceiling`]), so that the service always has a short queue of
//!   work and never idles, yet a congested service is not slowed by a long one. Under a dense
//!   overload a freed worker is refilled at once, and the queue shrinks to what the demand at
//!   the ceiling needs ([`refill_headroom`]: about one request at ten times the capacity). The
//!   knee's own error joins that headroom ([`knee_headroom`], [`KNEE_SIGMAS`]): a ceiling set
//!   below the workers by a knee measured low is the throttling trap below, and nothing measured
//!   while it holds can show it. While the capacity is only a lower bound (no queue seen within
//!   the rate window, e.g. at the usual load) the ceiling sits at twice the knee
//!   ([`UNCONFIRMED_HEADROOM`]): not a cap on the usual load, yet a flood is still stopped on its
//!   first requests. A confirmed ceiling never exceeds that one, whatever the knee's error.
//!
//! Under saturation the capacity is the mean completion rate of the saturated ticks
//! ([`SATURATED_SAMPLES`]), not the highest: the maximum of a noisy rate sits above the rate, and
//! a knee set high is a standing queue. Saturation stays confirmed while the ceiling refuses and
//! the latency of the last several ticks shows at least half the queue the ceiling allows;
//! latency below that is room.
//!
//! The knee's error is a margin kept blind: most of the time the knee is not that far off, and
//! the margin is a standing queue that slows a congested service. So under a confirmed
//! saturation the ceiling is also trimmed by what the low tail of the latencies says of the
//! queue it keeps ([`crate::low_tail`]: the share of latencies below the tenth percentile of
//! clean ones, three times as precise as the mean for exponential times). When that share shows
//! more queue than the headroom intends, out of its binomial noise, half the excess comes off
//! ([`TAIL_SIGMAS`], [`TAIL_SAMPLES`]); when it shows less, or none it can tell, half the trim
//! goes back, so that a ceiling trimmed below the workers (where no queue shows at all) rises
//! again within a few latencies. Never more than the headroom and the knee's error, once a
//! latency on the requests admitted since the ceiling last moved, and not before the excess a
//! flood left above the ceiling has drained. While the low tail judges, the mean latency alone
//! no longer proves room (the trimmed ceiling shows little queue by design), and a queue it
//! shows keeps the saturation confirmed and the saturated ticks' rates counted, as a queue in
//! the mean does. (Over seeds 1 to 8 of the backend family the auto gate's mean goodput rose on 23
//! of its 32 overload steps, by up to 0.3 % of the capacity, and fell on none; over the 720 runs
//! of `sim_seeds` its mean goodput went from 0.9872 to 0.9884.)
//!
//! Halving and giving back kept the ceiling swinging around the queue the share can just tell
//! from none (four to five requests on 100 workers judged on 200 latencies), not the queue
//! intended, and the knee it trims moves tick by tick with the capacity's noise. So under a dense
//! overload ([`WORKERS_LOAD`] requests offered per completion) each reading of the low tail also
//! *measures the workers* ([`Learned::workers`]): the requests in flight when the latencies'
//! requests were admitted, less the queue their share shows, with the error that one standard
//! error of the share makes in that queue. Readings are weighed by their noise (a Kalman filter
//! of a figure that may drift by [`WORKERS_DRIFT`]); a share too low to measure a queue (below
//! [`TAIL_MEASURABLE`] of the share with none) only caps the figure, and one at or above the
//! share with none reads no queue. Once measured, the ceiling is the workers, the queue intended
//! and [`WORKERS_SIGMAS`] of their error (a chance in eleven of a worker left idle, which costs
//! ten times what a request queued costs a congested service), recomputed every tick, so the
//! knee's noise no longer moves it; it never rises above the knee's margin. Not on services too
//! small for the share to tell a queue of [`WORKERS_RESOLUTION`] requests (ten or twenty
//! workers, where one queued request delays every latency past the threshold): there the
//! trim stands as above, as it does under a lighter overload. (Over seeds 1 to 8 of the backend
//! family: 1,836 bars met against 1,828, eight more of goodput against a static limit told the
//! workers and none fewer; the mean lead over that limit grew at all twelve 5x and 10x steps of
//! the six backends it applies to, e.g. 50,000 rps at 20 ms, 10x, from −0.0031 to −0.0021 and
//! 1,000 rps at 100 ms, 10x, from −0.0066 to −0.0050, and stayed at the other twelve steps; the
//! 720 runs of `sim_seeds` went from 0.9893 to 0.9897 of the capacity, their lead over that
//! limit from +0.0027 to +0.0031; the built-in scenarios moved by at most 0.2 % of goodput.)
//!
//! A tick's rate pulls that mean down only when the tick shows a queue out of the noise of its
//! latencies ([`QUEUE_SIGMAS`] standard errors of the mean latency of the last several ticks,
//! from the spread of single latencies measured on clean ticks). A tick that refused without
//! such a queue may have been a burst the ceiling cut at a load under the capacity: its rate is a
//! lower bound, which may raise the mean but not lower it. So is a tick that ends with fewer
//! requests in flight than the knee (the end of an overload: refusals at its start, then workers
//! idle on the falling demand), unless memory holds them there. (Counted in full, the load of the
//! moment pulled the capacity down to it, the ceiling followed, refused more of that load, and
//! the next ticks measured less still: in `hover`, at 0.9 to 1.1 times the capacity, the estimate
//! swung between 0.8 and 1.1 of it; after `slow-backend` it stayed at the demand for 15 s.) When
//! the ceiling refuses while latency shows room ([`FLAT_TICKS`]), the mean grows with the
//! capacity: the service was not saturated at it.
//!
//! A queue is read two ways: from the latencies measured, and from Little's law, the requests in
//! flight over the completion rate. The first lags a queue by a whole latency (the requests that
//! show it have to complete), which on a 500 ms service is five ticks of a flood admitted; the
//! second shows it at once, but only on two ticks in a row while the ceiling refuses (on the first
//! tick after a step the requests just admitted have not had time to complete), or memory does:
//! on a large service with large requests the memory ceiling holds the requests in flight before
//! the learned one does, and its refusals say as much of a queue (though nothing of room, so they
//! never make the capacity grow). A queue seen
//! without refusals counts only when the requests in flight show it too: a few slow requests at a
//! low rate are noise, not saturation.
//!
//! The traps, and what avoids them:
//! * **The start.** The first completions are the quickest requests of those sent at the start;
//!   their latency is not the service's. Nothing is used until [`STARTUP_LATENCIES`] latencies
//!   have passed and either [`SETTLED_ROUNDS`] clean rounds were measured while the latency the
//!   requests in flight imply (Little's law) held steady ([`CLIMBING`], [`CLIMB_TICKS`]),
//!   or a probe measured the base (see [`Learned::settled`]); until then the configured or the
//!   seed's figures stand. A climb calls for that probe only when it is a flood's: it meets a
//!   ceiling, keeps growing, or lasts ([`CLIMB_LATENCIES`]). A stretch of slow requests at the
//!   usual load climbs as high for a tick or two and drains, and a probe then, its ceiling a
//!   share of a knee from the light load's rate, held a 10-worker service at one request for
//!   3.5 s. A flood that the unlearned ceiling does not reach (a little over the capacity) need
//!   not wait for the start-up's end: the latency the requests in flight imply, rising on
//!   [`CLIMB_TICKS`] ticks in a row while their count grows out of its noise on each, to
//!   [`CLIMBING`] times the mean of the first [`ROUND_SAMPLES`] latencies (until those are in,
//!   the lowest latency the requests in flight have implied: a flood that slows a small service
//!   delivers its first fifty late), calls for the probe at once. A pipeline filling at the usual load grows its requests in flight too, but its
//!   completions rise with them, and the latency they imply falls.
//! * **Measuring throughput while throttling.** If the ceiling is below the knee, the measured rate
//!   is what the gate admits, and an estimate built on it would shrink towards it. The ceiling is
//!   always above the knee, and above it by the knee's error too ([`Learned::knee_noise`]), so
//!   that under overload the service is saturated and the measured rate is its capacity. (Without
//!   the error, a 1,000 rps service at 100 ms, its base learned in a 3 s warm-up and its first
//!   saturated rates from a tick or two, began 7 of its 90 overload steps over 30 seeds below its
//!   workers and stayed there, below 0.95 of its capacity (0.76 on the worst); with it, 1.) And
//!   when the ceiling refuses requests while latency stays at its base for [`FLAT_TICKS`] ticks
//!   and a whole latency (proof that the service has room: the requests that show it were
//!   admitted while the ceiling refused), the capacity estimate grows by [`GROWTH`] (by
//!   [`GENTLE_GROWTH`] once saturation was seen), at most once per base latency and never past
//!   [`MAX_GROWTH`] times the highest rate measured.
//! * **A base learned at a lighter load.** Many services are quicker at their usual load than at
//!   their knee (warm caches, idle cores), so the base they show then is below the latency of
//!   plain work at the knee. The knee is then low, the ceiling holds the service below its
//!   capacity, its plain latency reads as a queue, and the rate the ceiling admits becomes the
//!   capacity, tick after tick: the throttling trap again, with a spiral. A saturated capacity
//!   that falls by [`DECAYED`] (and [`DECAY_SIGMAS`] standard errors of its noise) below where it
//!   was first established, with nothing saying the service slowed and the requests in flight
//!   falling with it (the rate follows the ceiling down), calls for a probe; the base
//!   it finds replaces the lighter load's when it is higher, on [`DECAYED_PROBE_ROUNDS`] rounds of
//!   its own, and the capacity is measured afresh. (Seen: 10 % quicker at the usual load, the
//!   capacity fell from 980 to 690 of 1,000 through a 10 s flood, and on. On the family's short
//!   steps the guard is too slow to show: a 5 s step at 1,000 rps ends before the decay stands
//!   out of the noise of its first figures.)
//! * **A base learned low, and kept.** A round is left out for what is known of saturation (the
//!   ceiling refusing, saturation confirmed, requests in flight above a confirmed knee), never
//!   for its own latency: rounds kept only while near the base keep a base that is too low (the
//!   quick first requests of a filling pipeline), since every round of the true latency then
//!   looks like a queue. (It did: on 200 rps at 500 ms the knee stayed 30 % low, and the gate
//!   held the service at two thirds of its capacity through every overload.)
//! * **Base latency drifting up under a standing queue.** Latencies measured while the ceiling
//!   refuses, or while more requests are in flight than a confirmed knee, include the queue and are
//!   not taken as base latency. When the base latency is older than [`BASE_WINDOW`] and the service
//!   is still saturated, the ceiling is lowered below the knee ([`PROBE_DEPTH`]) until the queue
//!   has drained and [`PROBE_ROUNDS`] rounds were measured (their trimmed mean is the base it
//!   finds): BBR's "probe RTT". A probe that finds a clearly lower base is followed by a deeper
//!   one at once ([`REPROBE`]); one that finds the same base pools its rounds with the older ones,
//!   so that the base does not rest on a probe's handful. A slow service probes at most every
//!   [`BASE_WINDOW_LATENCIES`] base latencies.
//! * **A service that changes speed.** When it slows down while saturated (latency up and the
//!   ceiling refusing, completions below [`SLOWED`] of the saturated mean, or of the best before
//!   that mean is measured, on [`SLOWED_TICKS`] ticks in a row), a probe comes after a second
//!   instead of [`BASE_WINDOW`], and the rates remembered from the faster service are dropped once
//!   the probe shows the slower base ([`SLOWER`]); otherwise capacity × old base would shrink the
//!   ceiling into a spiral. When it gets faster, clean rounds well below the base, and out of the
//!   noise of a round ([`FASTER_SIGMAS`]), replace the older ones ([`FASTER_ROUNDS`]), and while
//!   saturated a lower latency with a higher rate triggers a probe ([`FASTER_LATENCY`],
//!   [`FASTER_RATE`]). Completions that fall with nothing refused are a load that fell, not a
//!   slower service: at the end of an overload the queue still drains, and judged as a slower
//!   service it reset the capacity to the falling rate. Nor is a rate a fifth under the highest
//!   of a noisy rate a slower service when it is near the saturated mean.
//! * **A slow, spread-out service at its usual load.** With few completions a tick and service
//!   times spread as widely as their mean, a base from the start-up's quicker rounds sits below the
//!   true mean latency until the usual load's rounds correct it, and meanwhile the latency of now
//!   reads as a queue. A queue seen without refusals therefore counts as saturation only when the
//!   requests in flight grow too ([`BACKLOG_SIGMAS`]) while the completion rate stays flat
//!   ([`RATE_FLAT`]), over two latencies at least: a saturated service that nothing turns away
//!   gathers a backlog, one that keeps up does not, and a rise of the load it serves raises its
//!   completions too. (Taken as saturation, it set the ceiling at a knee from the rate offered, and
//!   the ceiling then held the rate there: 200 rps at 500 ms lost a third of its requests at half
//!   its capacity.)
//! * **A burst at the usual load.** On a small service the requests in flight pass a ceiling at
//!   twice the knee now and then, and for a moment there is a queue with refusals. Until
//!   saturation is confirmed, refusals of less than [`REFUSED_SHARE`] of a tick's requests count
//!   only on [`REFUSED_TICKS`] ticks in a row; a flood turns away far more at once. (Taken as
//!   saturation, a burst of 2 refusals in 600 requests made the knee of half the load the
//!   ceiling.) After it was confirmed too: slivers of refusals after an overload, with the
//!   latency of a heavy-tailed service, kept renewing the confirmation, and the ceiling stayed
//!   at a knee measured on the falling load for 20 s. Nor does a burst caught in the requests in
//!   flight at a tick's end count as a queue on a service quicker than the tick ([`TIMELY`]) when
//!   the latency of the tick's own requests shows none.
//! * **Noise.** Rates and latencies are smoothed over at least [`RATE_SAMPLES`] completions and
//!   [`LATENCY_SAMPLES`] latencies, so that a slow service (few completions per tick) is not judged
//!   on a handful of requests.
//!
//! * **A probe that does not reach below the knee.** Its ceiling is a share of a knee that may be
//!   too high; if the service completed as much under it as before ([`SHALLOW_PROBE_RATE`]), it
//!   stayed saturated and what it measured still holds a queue: a higher base from it is not
//!   taken, and the next probe of a chain that finds lower bases goes twice as deep.
//!
//! A gate started cold into a flood that its unlearned ceiling (the configured one, or the original design's
//! 1,000) turns away probes two ticks later, its ceiling a share of the capacity times the latency
//! of the requests admitted at the lowest levels (those that met the least queue, and had the
//! longest to complete in; those of them still in service count with the time they have been in it;
//! the lowest tick's latency without enough of them), or of the knee its first requests show where
//! lower (the latency of each against the requests in flight when it was admitted,
//! [`crate::hinge`]; passed by [`Estimator::observe_with_levels`]: a flood that fills the ceiling
//! within milliseconds leaves every aggregate of its first tick the queue's), and waits for the
//! requests then in flight to complete (twice the larger of the latency of now and the one Little's
//! law gives them) before it measures, and in any case until a tick finds them drained to its
//! ceiling: the requests that waited out the flood's queue complete last, and their latencies are
//! that queue. The base before such a probe is the start-up's (the quickest of the first requests,
//! or the flood's queue), so it is not kept against a higher one the probe finds, and the rate the
//! probe is judged against is the best the flood has shown, not the smoothed ramp of the first
//! ticks: a probe whose rate fell below it reached below the knee, and needs no deeper one. (Over
//! 256 cold starts, seeds 1 to 8 of `sim_cold_start`, mean goodput went from 0.7952 to 0.8155.)
//! (Until it has learned anything, the gate also runs its tick early whenever the requests in
//! flight double, once the service has answered as many as it holds: a slight flood is then told
//! milliseconds in, before the unlearned ceiling fills; a heavy one fills it before the service has
//! turned over what it holds, and waits for the ticks as before.) A flood that fills that ceiling
//! slowly (a small service at 1.5 times its capacity queues 10 requests a tick, within the noise of
//! a tick's count) shows in its single requests: their latencies against their admission levels
//! climb past the knee (the hinge of the cold pairs, refitted as they come), and requests in flight
//! past [`CLIMBING`] times that knee on [`CLIMB_TICKS`] ticks in a row call for the probe. (10
//! workers at 50 ms started at 1.5x: told at 60 in flight, 0.7 s in, where the implied latency's
//! climb was told at 470, 2.5 s in, the service slowed fivefold by their queue. Over 256 cold
//! starts, mean goodput 0.8155 to 0.8346; 200 rps at 50 ms 0.511 to 0.646.) Known limit: fed
//! aggregates alone ([`Estimator::observe`]), without the admission levels, such a flood is
//! measured as the base until it fills the ceiling.
//!
//! ```
//! use sluicegate::capacity::{Estimator, TickSample};
//!
//! // 20 workers, 50 ms each: 400 completions a second, 40 a 100 ms tick, at full load.
//! let mut e = Estimator::new();
//! for i in 1..=60u64 {
//!     e.observe(&TickSample {
//!         now: i * 100_000_000,
//!         elapsed: 100_000_000,
//!         completed: 40,
//!         latency_sum: 40 * 50_000_000,
//!         latency_count: 40,
//!         in_flight: 20,
//!         ceiling_refused: false,
//!         ceiling_refusals: 0,
//!         memory_refusals: 0,
//!         turned_away: false,
//!         ceiling_reached_at: None,
//!     });
//! }
//! let learned = e.learned();
//! assert!(learned.settled);
//! assert_eq!(learned.capacity, Some(400.0));
//! assert_eq!(learned.knee, Some(20));
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use crate::clock::Nanos;
use crate::hinge;
use crate::low_tail::LowTail;

/// The (admission level, latency) pairs kept from the cold start for the knee of its probe.
pub const COLD_PAIRS: usize = 4096;
/// How long the highest completion rate is remembered.
pub const RATE_WINDOW: Duration = Duration::from_secs(3);
/// How long the base latency is trusted before it is re-measured.
pub const BASE_WINDOW: Duration = Duration::from_secs(10);
/// Room above a capacity confirmed saturated that the switch threshold and the rate of the whole
/// gate leave, so that the in-flight ceiling, not the rate, holds a saturated service.
pub const HEADROOM: f64 = 0.15;
/// The queue the ceiling allows above a confirmed knee, in square roots of the knee (see
/// [`ceiling_headroom`]).
pub const QUEUE_ROOM: f64 = 0.5;
/// Headroom while the capacity is only a lower bound (no queue seen lately): the ceiling then sits
/// at twice the knee measured, so that a service that was never saturated is not capped near its
/// usual load, yet a sudden flood is still stopped at once.
pub const UNCONFIRMED_HEADROOM: f64 = 1.0;
/// Capacity growth factor while the ceiling refuses requests and latency stays at its base.
pub const GROWTH: f64 = 1.5;
/// The capacity estimate never grows past this multiple of the highest completion rate measured.
pub const MAX_GROWTH: f64 = 4.0;
/// Capacity growth factor once the service has been seen saturated.
pub const GENTLE_GROWTH: f64 = 1.1;
/// The probe's ceiling, as a share of the knee.
pub const PROBE_DEPTH: f64 = 0.9;
/// Completions a rate is smoothed over (at least).
pub const RATE_SAMPLES: f64 = 200.0;
/// Latencies a latency is smoothed over (at least).
pub const LATENCY_SAMPLES: f64 = 100.0;
/// Latencies per round: the base latency is the trimmed mean of round means, each over this many
/// calls.
pub const ROUND_SAMPLES: u64 = 50;
/// Clean rounds needed before latency is compared with the base latency.
pub const SETTLED_ROUNDS: usize = 5;
/// Latencies that must pass after the first one before the estimates are used: the first
/// completions are the quickest of the requests sent at the start.
pub const STARTUP_LATENCIES: f64 = 5.0;
/// The startup is measured in at most this many times the first latency.
pub const STARTUP_GROWTH: f64 = 4.0;
/// Rounds in a row below `FASTER × base` that mean the service got faster.
pub const FASTER_ROUNDS: usize = 3;
/// See [`FASTER_ROUNDS`].
pub const FASTER: f64 = 0.8;
/// Standard errors (of the mean of [`FASTER_ROUNDS`] rounds, from the spread of the rounds
/// behind them) by which those rounds must fall below the base to say the service got faster.
pub const FASTER_SIGMAS: f64 = 4.0;
/// A probe that finds a base above this multiple of the previous one means the service slowed.
pub const SLOWER: f64 = 1.25;
/// While saturated, latency below this share of the base means the service got faster.
pub const FASTER_LATENCY: f64 = 0.9;
/// A capacity this much above the one at the last probe means the service got faster.
pub const FASTER_RATE: f64 = 1.25;
/// A probe under which the service still completed this share of its capacity did not reach
/// below the knee: another, deeper one follows.
pub const SHALLOW_PROBE_RATE: f64 = 0.97;
/// The deepest a chain of probes goes, as a share of the knee.
pub const MIN_PROBE_DEPTH: f64 = 0.05;
/// A probe that finds a base below this share of the previous one is followed by another.
pub const REPROBE: f64 = 0.9;
/// Before the base latency is settled, requests in flight that imply (Little's law) a latency
/// this many times the one they implied at the first round mean a queue is building. Three
/// times: on a slow service the first round implies too little (its completions lag the filling
/// pipeline by a tick) and a tick of a few completions too much (seen at 500 ms a request, no
/// queue: 0.29 s, then 0.61 s a second later). A flood that the unlearned ceiling does not stop
/// triples it within a few ticks.
pub const CLIMBING: f64 = 3.0;
/// Ticks in a row that must show a climb ([`CLIMBING`]) before a gate that has not settled
/// probes: a flood's queue lasts and grows, while on a small service the requests in flight of a
/// single tick are few and noisy (at 100 rps and 50 ms, a Poisson count of about 5, and 2 at the
/// first round: three times that was reached by noise, and the probe that followed refused 64
/// requests at half the capacity).
pub const CLIMB_TICKS: u32 = 2;
/// A climb ([`CLIMBING`]) that neither keeps growing (by [`BACKLOG_SIGMAS`] standard deviations
/// of the requests in flight it began with) nor meets a ceiling calls for a probe only once it
/// has lasted this many of the first round's latencies: a flood's queue lasts, while a stretch of
/// slow requests at the usual load builds a queue that drains within a few latencies. (Probed
/// as a flood, such a stretch on 10 workers at 0.6 of their capacity held the ceiling at one
/// request, a share of a knee learned from the light load's rate, for 3.5 s: 0.77 of the
/// capacity through the overload that followed, against 0.94 for a static limit.)
pub const CLIMB_LATENCIES: f64 = 10.0;
/// Clean rounds a probe measures (at least) before it ends: the base it finds is their mean,
/// and a single round of a service whose times are widely spread (5 % of requests 20 times
/// slower) is as likely as not to miss the mean by a fifth.
pub const PROBE_ROUNDS: usize = 3;
/// Clean rounds a probe measures after the saturated capacity decayed ([`DECAYED`]): the base it
/// finds replaces the older rounds rather than joining them, so it rests on more of its own.
pub const DECAYED_PROBE_ROUNDS: usize = 9;
/// Rounds the base latency is taken over.
pub const ROUNDS: usize = 31;
/// The share of the rounds left out at each end of their sorted list before their mean is the
/// base latency: a round holding a burst or a few of a heavy tail's slow requests is left out as
/// a median would leave it, and the rest are averaged. The median's variance is π/2 times the
/// mean's, this one's about 1.1 times, and the knee's error is most of the queue the ceiling
/// keeps. (Over 30 seeds of the family, the median left 4 runs of 720 more than 0.05 of the
/// capacity behind a static limit told the workers; this leaves 1. Trimming 30 % met fewer of
/// the grid's bars.)
pub const ROUND_TRIM: f64 = 0.2;
/// The variance of the trimmed mean of [`ROUND_TRIM`] as a multiple of the plain mean's, for
/// round means that spread normally.
const TRIMMED_VARIANCE: f64 = 1.1;
/// Latency at most `GROWTH_SIGNAL × base` while the ceiling refuses means the service has room.
pub const GROWTH_SIGNAL: f64 = 1.1;
/// Ticks in a row that must show room before the capacity estimate grows.
pub const FLAT_TICKS: u32 = 2;
/// Ticks in a row showing a queue (without the ceiling refusing) that mean the service is
/// saturated.
pub const QUEUED_TICKS: u32 = 3;
/// A queue seen without refusals counts as saturation only once the requests in flight have grown
/// by this many standard deviations (square roots of their count) while the completion rate
/// stayed flat.
pub const BACKLOG_SIGMAS: f64 = 3.0;
/// "Flat": the completion rate has not risen above this multiple of where it was.
pub const RATE_FLAT: f64 = 1.05;
/// Before saturation is confirmed, ceiling refusals below this share of a tick's requests
/// (completed and refused) are a burst at the usual load unless they last [`REFUSED_TICKS`] ticks.
pub const REFUSED_SHARE: f64 = 0.01;
/// See [`REFUSED_SHARE`].
pub const REFUSED_TICKS: u32 = 2;
/// Latency above `QUEUE_SIGNAL × base` means a queue has formed: the service is saturated.
pub const QUEUE_SIGNAL: f64 = 1.2;
/// A base latency this many times shorter than the tick makes the tick's own latency timely: the
/// requests completed in the tick waited in the queue it held.
pub const TIMELY: f64 = 4.0;

/// The completion rate has fallen below this share of the saturated mean (of the best in the
/// window, before that mean is measured): the service slowed.
pub const SLOWED: f64 = 0.8;
/// Ticks in a row the completion rate must stay below [`SLOWED`] of the best (with a queue) to
/// mean the service slowed: the best is the highest of a noisy rate, and on a service whose times
/// are widely spread a single tick falls a fifth below it by chance (seen: a probe every 1.2 s
/// through an overload of the heavy-tail scenario, each one measuring the base on a handful of
/// requests).
pub const SLOWED_TICKS: u32 = 3;
/// How many standard errors the mean latency of the last several ticks must stand above the base
/// for a saturated tick's rate to lower the saturated mean: below that, the queue may be the noise
/// of a few latencies, and the tick a burst at a load under the capacity.
pub const QUEUE_SIGMAS: f64 = 1.5;
/// Weight of one clean tick in the estimate of how widely single latencies spread.
const SPREAD_WEIGHT: f64 = 0.05;
/// Weight of one tick in the latency that tells a full service: several ticks' latencies, so
/// that a queue a few requests long stands out of their noise.
const FULL_WEIGHT: f64 = 0.2;
/// Shortest gap between two probes for a slowed service.
const SLOW_PROBE_GAP_NS: Nanos = 1_000_000_000;
/// A probe ends after at least this long even without a clean round.
const PROBE_LONGEST_NS: Nanos = 2_000_000_000;
/// The base latency is trusted for at least this many base latencies (a probe costs a few).
pub const BASE_WINDOW_LATENCIES: f64 = 100.0;
/// Completions the saturated completion rate is averaged over (at least, and over at least
/// [`SATURATED_TICKS`] ticks).
pub const SATURATED_SAMPLES: f64 = 1000.0;
/// Base latencies after the requests in flight reached the ceiling after which a tick can tell a
/// saturated service from one with room: the requests admitted at the ceiling have had time to
/// complete (see [`TickSample::ceiling_reached_at`]).
pub const REACHED_LATENCIES: f64 = 2.0;
/// Saturated ticks before their mean replaces the windowed maximum as the capacity.
pub const SATURATED_TICKS: u64 = 5;
/// A saturated capacity that falls this share below where it was first established, with nothing
/// saying the service slowed, calls for a probe of the base latency (see the throttling trap).
pub const DECAYED: f64 = 0.05;
/// ... and at least this many standard errors of the two figures' Poisson noise.
pub const DECAY_SIGMAS: f64 = 3.0;
/// Standard errors of the knee's own noise ([`Learned::knee_noise`]) the ceiling allows above
/// a confirmed knee (see [`knee_headroom`]). Two: once a dense overload shrinks the queue for
/// the gaps between arrivals ([`refill_headroom`]), this is the margin that keeps a knee
/// measured low from setting the ceiling below the workers (at 1.5, a 50,000 rps service at
/// 20 ms, its base 2.8 % low from its warm-up, began a 5x step at 960 for 1,000 workers, and the
/// capacity measured under that ceiling decayed with it: 0.967 of the capacity, against 1.002 for
/// a static limit on the same draws).
pub const KNEE_SIGMAS: f64 = 2.0;
/// Standard errors of the measured workers ([`Learned::workers`]) the confirmed ceiling allows
/// above them, besides the queue it intends. A ceiling below the workers leaves one idle for
/// every request it is short, a whole request's share of the capacity; one above them keeps a
/// request queued, which costs its wait and, on a congested service, a fraction of a request
/// (a tenth on the simulator's backends). The margin that weighs the two leaves about one chance
/// in eleven of sitting below the workers: 1.34 standard errors of a normal error.
pub const WORKERS_SIGMAS: f64 = 1.34;
/// How far the workers may move between two readings of the low tail, as a share of the knee
/// (one standard deviation): the service's parallelism changes with a deploy, not from one
/// tick to the next, and a change of its speed resets the reading (see [`Learned::workers`]).
pub const WORKERS_DRIFT: f64 = 0.001;
/// Requests offered at the ceiling per completion ([`Learned::offered_load`]) from which the
/// low tail's readings measure the workers and set the ceiling. Under a dense overload the
/// requests in flight stay at the ceiling and every latency read was queued behind the same
/// workers; under a light one the level falls below the workers between arrivals, a reading
/// mixes latencies that queued with latencies that did not, and the workers it gives come out
/// low (measured at all loads, the `hover` scenario, whose load hovers around the capacity,
/// answered 94.1 % of its capacity against 96.4 %).
pub const WORKERS_LOAD: f64 = 3.0;
/// A reading of the low tail measures the queue while its share keeps at least this part of the
/// share with no queue; below it, the share says only that the queue is at least that long.
pub const TAIL_MEASURABLE: f64 = 0.25;
/// Requests of queue the low tail must tell apart (at [`TAIL_MEASURABLE`]) before its readings
/// measure the workers. On a service of ten or twenty workers one queued request delays every
/// latency past the threshold, and a reading says only that there is a queue.
pub const WORKERS_RESOLUTION: f64 = 3.0;
/// Standard errors (binomial) by which the share of quick latencies under saturation must miss
/// the share the intended queue leaves before the ceiling is trimmed (see [`crate::low_tail`]).
pub const TAIL_SIGMAS: f64 = 2.0;
/// Latencies of saturated ticks the low tail is judged on, at least.
pub const TAIL_SAMPLES: f64 = 200.0;
/// Latencies of saturated ticks after which a low tail within its noise of the intended queue
/// starts a fresh count (the queue may have moved since the first of them).
pub const TAIL_MOST_SAMPLES: f64 = 5000.0;

/// The chance the ceiling allows, under an overload, that a request completes when no other is
/// queued to take its worker (see [`refill_headroom`]).
pub const IDLE_CHANCE: f64 = 0.05;

/// Requests the ceiling allows above a confirmed knee `k`: [`QUEUE_ROOM`] × √k + ½.
///
/// Enough that the service never idles for want of a request, few enough that the queue stays
/// short. Why a square root: the number of workers that finish in a short span varies like the
/// square root of their number (the square-root staffing rule of many-server queues), so a
/// queue of that order keeps every worker busy, while a share of the knee (the earlier 15 %)
/// is far more than that on a large service, and every queued request slows a congested
/// service further.
pub fn ceiling_headroom(k: f64) -> f64 {
    QUEUE_ROOM * k.max(0.0).sqrt() + 0.5
}

/// Requests the ceiling needs above the workers to keep them busy when `load` requests are
/// offered at the ceiling for each one completed ([`Learned::offered_load`]): ln(1 /
/// [`IDLE_CHANCE`]) ÷ ln(`load`), less the half request [`confirmed_ceiling`] rounds by, and at
/// least that half request; unbounded while the ceiling turns nobody away (`load` ≤ 1).
///
/// Why: with the requests in flight at the ceiling, each completion is a step down and each
/// request offered a step up, so the requests in flight sit `j` below the ceiling about a share
/// `load`^−`j` of the time; a worker idles only when they fall more than the queue below it.
/// Under a dense overload a freed worker is refilled at once, and a queue kept for the gaps
/// between arrivals only slows a congested service: at 10 times its capacity one request is
/// enough, where [`ceiling_headroom`] keeps 5.5 on a hundred workers and 16 on a thousand. Near
/// the capacity the gaps are long, and the square-root rule is the smaller.
pub fn refill_headroom(load: f64) -> f64 {
    if load > 1.0 {
        ((1.0 / IDLE_CHANCE).ln() / load.ln() - 0.5).max(0.5)
    } else {
        f64::INFINITY
    }
}

/// Whether `in_flight` requests are within what a probe's `ceiling` keeps, with room for the
/// urgent headroom and the non-urgent floor above it: the excess a flood left has drained.
fn drained(in_flight: u64, ceiling: u64) -> bool {
    in_flight <= ceiling.saturating_add(ceiling / 4).saturating_add(4)
}

/// The length of a run of ticks in a row on which something held: one more than `ticks` if it
/// held on this one, else 0.
fn streak(ticks: u32, held: bool) -> u32 {
    if held {
        ticks.saturating_add(1)
    } else {
        0
    }
}

/// The relative variance of a moving mean after a tick of `completed` completions was folded in
/// at `weight`, from its variance before (`None` for the first tick): the tick's Poisson noise,
/// `1 / completed`, weighted as the mean weighs the tick.
fn folded_noise(before: Option<f64>, weight: f64, completed: u64) -> f64 {
    let noise = 1.0 / completed.max(1) as f64;
    match before {
        Some(v) => (1.0 - weight).powi(2) * v + weight * weight * noise,
        None => noise,
    }
}

/// Whether the requests in flight grew from `before` to `now` by more than [`BACKLOG_SIGMAS`]
/// standard deviations of a Poisson count of `before` (at least one request each): a backlog, or a
/// climb that keeps growing, rather than the noise of a count.
fn grew_out_of_noise(before: u64, now: u64) -> bool {
    let before = before as f64;
    now as f64 - before >= BACKLOG_SIGMAS * before.sqrt().max(1.0)
}

/// The sample variance of `values`, in one pass (Welford); `None` below two values.
fn sample_variance(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut mean, mut m2) = (0.0, 0.0, 0.0);
    for v in values {
        n += 1.0;
        let d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }
    (n >= 2.0).then(|| m2 / (n - 1.0))
}

/// Whether the latest [`FASTER_ROUNDS`] of `rounds` say the service got faster than the base `b`:
/// each below [`FASTER`] of it, and their mean below it by more than [`FASTER_SIGMAS`] standard
/// errors, a round's error taken from the spread of the rounds behind them. Without the second
/// test a service whose rounds spread widely passed for a faster one by chance: three rounds of
/// 50 exponential requests (each known to 14 %) come out under 0.84 of the mean a few times in a
/// thousand, and every round behind them was dropped. The base then rested on the three quickest
/// (1,000 rps at 100 ms: 81 ms, the knee 83 for 100 workers, the capacity decaying under a ceiling
/// below them: 0.84 of the capacity at 2x, seed 22 of `sim_seeds`).
fn got_faster(rounds: &VecDeque<f64>, b: f64) -> bool {
    let n = rounds.len();
    if n <= FASTER_ROUNDS {
        return false;
    }
    let latest = rounds.range(n - FASTER_ROUNDS..);
    if !latest.clone().all(|r| *r < FASTER * b) {
        return false;
    }
    let latest_mean = latest.sum::<f64>() / FASTER_ROUNDS as f64;
    sample_variance(rounds.range(..n - FASTER_ROUNDS).copied()).is_none_or(|variance| {
        b - latest_mean > FASTER_SIGMAS * (variance / FASTER_ROUNDS as f64).sqrt()
    })
}

/// Appends a round's mean latency, keeping only the latest [`ROUNDS`].
fn push_round(rounds: &mut VecDeque<f64>, mean: f64) {
    if rounds.len() == ROUNDS {
        rounds.pop_front();
    }
    rounds.push_back(mean);
}

/// The queue the ceiling intends above a knee `k` known exactly, with `load` requests offered at
/// the ceiling per completion: the smaller of [`ceiling_headroom`] and [`refill_headroom`]. The
/// confirmed ceiling allows for the knee's error besides ([`knee_headroom`]); the low tail
/// judges the queue it sees against this one.
fn intended_queue(k: f64, load: f64) -> f64 {
    ceiling_headroom(k).min(refill_headroom(load))
}

/// Requests the ceiling allows above a confirmed knee `k` known to a relative standard error
/// `noise` ([`Learned::knee_noise`]) with `load` requests offered at the ceiling per completion
/// ([`Learned::offered_load`]): the queue it intends (the smaller of [`ceiling_headroom`] and
/// [`refill_headroom`]) and [`KNEE_SIGMAS`] of the knee's error, added in quadrature.
///
/// Why the error: a ceiling below the service's parallelism holds it below its capacity, and the
/// estimates cannot see it (a throttled service is as consistent with Little's law as a saturated
/// one, see the module docs). A knee learned from a 3 s warm-up of a 1,000 rps service at 100 ms is
/// known to about 3 % (1,500 latencies), and its first saturated rate to about 7 % (two ticks of
/// completions), against a headroom of 5.5 %: without the error, 7 of its 90 overload steps over 30
/// seeds of the family began below the workers, and stayed there. Why in quadrature: the two
/// margins cover independent shortfalls (the workers that finish together, the knee's error), and
/// their sum would be a margin for both at their worst at once: a longer standing queue on every
/// service, for a case that rarely happens.
pub fn knee_headroom(k: f64, noise: f64, load: f64) -> f64 {
    let k = k.max(0.0);
    let error = KNEE_SIGMAS * noise.max(0.0) * k;
    intended_queue(k, load).hypot(error)
}

/// The in-flight ceiling over a knee `k` confirmed saturated, known to a relative standard
/// error `noise`, with `load` requests offered at the ceiling per completion: `k` plus
/// [`knee_headroom`], rounded to the nearest request (rounded up, the half request of the
/// headroom became a whole one, a standing queue one request longer than the headroom intends).
pub fn confirmed_ceiling(k: f64, noise: f64, load: f64) -> u64 {
    let k = k.max(0.0);
    let c = (k + knee_headroom(k, noise, load)).round();
    if c.is_finite() && c >= 1.0 {
        c as u64
    } else {
        1
    }
}

const RATE_WINDOW_NS: Nanos = RATE_WINDOW.as_nanos() as Nanos;
const BASE_WINDOW_NS: Nanos = BASE_WINDOW.as_nanos() as Nanos;

/// What one sampler tick measured, as the estimator needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TickSample {
    /// The tick's time.
    pub now: Nanos,
    /// Time since the previous tick.
    pub elapsed: Nanos,
    /// Requests released since the previous tick.
    pub completed: u64,
    /// Sum and number of the handler latencies recorded since the previous tick.
    pub latency_sum: u64,
    /// Number of latencies in `latency_sum`.
    pub latency_count: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Whether the in-flight ceiling refused a request since the previous tick.
    pub ceiling_refused: bool,
    /// How many requests the in-flight ceiling refused since the previous tick; 0 if they were
    /// not counted, and then `ceiling_refused` counts in full. Before saturation is confirmed,
    /// refusals of less than [`REFUSED_SHARE`] of the tick's requests are a burst, not a flood.
    pub ceiling_refusals: u64,
    /// How many requests the memory ceiling refused since the previous tick (at the level where
    /// memory is projected to reach a mark, or above the ceiling). Memory then holds the requests
    /// in flight as the in-flight ceiling would: a queue they show is saturation. They say nothing
    /// of the service's room, so they never make the capacity grow.
    pub memory_refusals: u64,
    /// Whether the gate refused any request since the previous tick, for whatever reason (the
    /// ceiling, memory, the rate): demand then exceeded what was admitted, so requests in flight
    /// that stay level do not show that the service keeps up with demand.
    pub turned_away: bool,
    /// When a timed call first found the requests in flight at the learned ceiling, if the gate
    /// watched for it (it does while saturation is unconfirmed) and has turned requests away on
    /// every tick since: a tick that ends two base latencies after it confirms a queue that the
    /// requests in flight imply at the tick's rate without waiting for a second tick. `None` from
    /// a caller that does not watch.
    pub ceiling_reached_at: Option<Nanos>,
}

/// The learned figures, as [`crate::Snapshot::learned`] shows them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Learned {
    /// Completions per second the service sustains, once measured.
    pub capacity: Option<f64>,
    /// Latency of a request that does not queue, once measured.
    #[serde(serialize_with = "crate::snapshot::optional_seconds")]
    pub base_latency: Option<Duration>,
    /// The in-flight level at which latency starts to climb (capacity × base latency).
    pub knee: Option<u64>,
    /// The learned in-flight ceiling (the knee plus headroom, lower while probing).
    pub ceiling: Option<u64>,
    /// Whether the ceiling is lowered to re-measure the base latency.
    pub probing: bool,
    /// How many times the base latency has been re-measured by lowering the ceiling.
    pub probes: u64,
    /// Whether the capacity was measured while the service was saturated (a queue with the ceiling
    /// refusing, within [`RATE_WINDOW`]); otherwise it is a lower bound, and the gate's limits
    /// leave room above it.
    pub confirmed: bool,
    /// Whether the figures rest on enough measurements to be used (a few latencies after the
    /// first, and a few rounds of them, or a probe). Until then the gate keeps the configured or
    /// the original design's figures.
    pub settled: bool,
    /// The knee's relative standard error: of the base latency (the spread of the rounds behind
    /// it) and of the capacity (the Poisson noise of the completions behind it). The
    /// confirmed ceiling allows for it ([`knee_headroom`]).
    pub knee_noise: f64,
    /// Requests offered at the in-flight ceiling per request completed, over the last several
    /// ticks: 1 while the ceiling turns nobody away, 10 under a tenfold overload. The denser the
    /// demand at the ceiling, the sooner a freed worker is refilled, and the shorter the queue
    /// the confirmed ceiling keeps for it ([`refill_headroom`]).
    pub offered_load: f64,
    /// Requests the low tail of latency took off the confirmed ceiling: the part of the knee's
    /// margin the queue showed was not needed (see [`crate::low_tail`]); 0 without it.
    pub trim: f64,
    /// The service's parallelism, measured while it is saturated: the requests in flight when
    /// the timed requests were admitted, less the queue the low tail of their latencies shows
    /// (see [`crate::low_tail`]), weighed reading by reading, under a dense overload
    /// ([`WORKERS_LOAD`]). Once measured, the confirmed ceiling there sits the intended queue and
    /// [`WORKERS_SIGMAS`] of this figure's error above it (never above the knee's margin); under
    /// a lighter overload the figure is kept but not in force, and the trim of the low tail's
    /// verdicts applies. `None` until a dense
    /// saturation has been read, on a service too small for the low tail to measure a queue of
    /// [`WORKERS_RESOLUTION`] requests, and after anything that resets the trim (a probe, a
    /// slower service, the end of saturation).
    pub workers: Option<f64>,
}

impl Default for Learned {
    /// Nothing learned: no figures, nothing offered beyond what completes.
    fn default() -> Self {
        Learned {
            capacity: None,
            base_latency: None,
            knee: None,
            ceiling: None,
            probing: false,
            probes: 0,
            confirmed: false,
            settled: false,
            knee_noise: 0.0,
            offered_load: 1.0,
            trim: 0.0,
            workers: None,
        }
    }
}

/// The estimator's state; one tick at a time.
#[derive(Debug, Clone)]
pub struct Estimator {
    rate: Option<f64>,
    latency: Option<f64>,
    /// (value, time) of the highest smoothed rate in the window; and a runner-up from later on, to
    /// fall back to when the best ages out.
    rate_best: Option<(f64, Nanos)>,
    rate_next: Option<(f64, Nanos)>,
    /// Capacity the service has shown it can exceed (the ceiling refused while latency stayed flat).
    rate_floor: f64,
    last_growth: Nanos,
    base: Option<(f64, Nanos)>,
    /// Latency of the recent clean rounds (no ceiling refusal, no queue), newest last.
    clean: VecDeque<f64>,
    /// The clean rounds from before the probe under way.
    before_probe: VecDeque<f64>,
    /// The round being gathered: latency sum, count, and whether it stayed clean.
    round: (f64, u64, bool),
    probe: Option<Probe>,
    probes: u64,
    /// When a queue was last seen: within [`RATE_WINDOW`] of it, the measured rate is the
    /// service's capacity.
    queue_seen: Option<Nanos>,
    /// The latest tick's time.
    now: Nanos,
    /// Ticks in a row in which the ceiling refused while latency stayed at its base.
    flat_ticks: u32,
    /// When the latest streak of such ticks began.
    flat_since: Nanos,
    /// When the first latency was recorded.
    first_latency_at: Option<Nanos>,
    /// The first tick that found requests in flight or completed: the first requests were
    /// admitted by then. (Not that tick's start: a gate idle since it was built runs its first
    /// tick on its first request, and the tick's span is the idle time.)
    started_at: Option<Nanos>,
    /// The mean latency of the first tick that recorded any.
    first_latency: Option<f64>,
    /// Whether a probe has measured the base latency.
    probe_measured: bool,
    /// The probe that should follow at once, because the last one found a clearly lower base. A
    /// probe begun for any other reason starts at [`PROBE_DEPTH`], and not cold.
    follow_up: Option<FollowUp>,
    /// The capacity when the base latency was last re-measured by a probe.
    rate_at_base: Option<f64>,
    /// The completion rate of the latest tick.
    tick_rate: Option<f64>,
    /// The lowest latency of any tick so far.
    lowest_latency: Option<f64>,
    /// The reference a climb is measured against (see [`Estimator::climbed`]): at the first clean
    /// round since the rounds were last cleared, the higher of its mean latency and the latency
    /// the requests in flight then implied (Little's law).
    first_round_latency: Option<f64>,
    /// Ticks in a row on which the requests in flight showed a climb (see
    /// [`Estimator::climbed`]).
    climb_ticks: u32,
    /// The requests in flight and the time at the first tick of the current climb.
    climb_from: (u64, Nanos),
    /// Whether the figures rest on enough measurements (see [`Estimator::try_settle`]).
    settled: bool,
    /// Ticks in a row whose latency showed a queue.
    queued_ticks: u32,
    /// Where the current run of queued ticks is measured from: see [`BacklogFrom`].
    streak_from: BacklogFrom,
    /// Ticks in a row on which the requests in flight, at the rate measured, showed a queue.
    implied_ticks: u32,
    /// Mean completion rate of the ticks the service was saturated in (the ceiling refusing
    /// while a queue was confirmed), and how many ticks it holds: under saturation the service
    /// completes exactly its capacity, so a mean estimates it without the upward bias of the
    /// windowed maximum.
    saturated: Option<(f64, u64)>,
    /// Relative variance of the saturated mean: the Poisson noise of its ticks' completions, as
    /// the mean weighs them.
    saturated_noise: f64,
    /// Relative variance of the smoothed rate, likewise.
    rate_noise: f64,
    /// Where the current run of confirmed saturation started, to tell a decay by.
    saturated_start: Option<SaturatedStart>,
    /// Saturated ticks count only from here on (the refill after a probe is not the service's
    /// rate).
    steady_from: Nanos,
    /// Latency shows a queue and the ceiling refuses while completions fell well below the
    /// saturated mean (or the best, before that mean is measured), on [`SLOWED_TICKS`] ticks in
    /// a row: the service slowed.
    slowing: bool,
    /// Ticks in a row on which the ceiling refused while latency showed a queue.
    refused_queue_ticks: u32,
    /// Ticks in a row, before the figures settled, on which the ceiling turned away more than a
    /// sliver of the requests (see [`Estimator::update_probe`]).
    cold_refused_ticks: u32,
    /// Before the figures settled and before any probe: how the latency the requests in flight
    /// imply moved, tick after tick (see [`Estimator::update_probe`]).
    cold_climb: ColdClimb,
    /// The (admission level, latency) pairs of the cold start, the earliest [`COLD_PAIRS`]: the
    /// knee a cold flood's probe starts from where they show it (see [`crate::hinge`]).
    cold_pairs: ColdPairs,
    /// The hinge of the cold pairs, tick after tick, and how long the requests in flight have
    /// been well past its knee.
    cold_hinge: ColdHinge,
    /// Ticks in a row on which latency showed a queue and the ceiling refused while completions
    /// were well below the saturated mean (see `slowing`).
    slow_ticks: u32,
    /// How widely single latencies spread around the base: the squared coefficient of variation,
    /// measured on clean ticks (a tick's mean latency over n requests strays from the base by
    /// about the base × √(this ÷ n)).
    latency_spread: Option<f64>,
    /// Mean latency and latencies a tick, both over the last several ticks ([`FULL_WEIGHT`]).
    recent_latency: Option<(f64, f64)>,
    /// Requests offered at the ceiling per completion, over the last several ticks
    /// ([`FULL_WEIGHT`]): see [`Learned::offered_load`].
    offered_load: f64,
    /// The latencies of clean ticks, whose low tail tells a queue (see [`crate::low_tail`]).
    low_tail: LowTail,
    /// What the low tail of saturated ticks says.
    tail: TailVerdict,
    /// Latencies of saturated ticks since `tail_from`, and how many of them were at or below the
    /// low tail's threshold.
    tail_count: (f64, f64),
    /// Saturated ticks count towards the low tail from here on: a latency after the ceiling
    /// last moved, so that they are of requests admitted under it.
    tail_from: Nanos,
    /// Requests the low tail took off the confirmed ceiling; never negative.
    trim: f64,
    /// The admission levels of the latencies in `tail_count`, summed.
    tail_levels: f64,
    /// The workers measured under a confirmed saturation (see [`Learned::workers`]).
    workers: Option<Workers>,
}

/// The parallelism of a saturated service, measured by the low tail of latency: the requests in
/// flight when the latencies' requests were admitted, less the queue the share of quick latencies
/// shows. Readings are weighed by their noise (a Kalman filter of a constant that may drift by
/// [`WORKERS_DRIFT`]).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Workers {
    mean: f64,
    variance: f64,
}

/// One reading of the low tail for [`Workers`].
#[derive(Debug, Clone, Copy)]
struct WorkersReading {
    /// Mean admission level of the latencies read.
    level: f64,
    /// The queue their share shows; `None` when the share is at or above the share with none,
    /// and the reading says only that the workers are at least `level`.
    queue: Option<f64>,
    /// Its variance, from the binomial noise of the share.
    variance: f64,
    /// The share is in the range where it measures the queue (see [`TAIL_MEASURABLE`]); below
    /// it the queue is only a lower bound, and the reading an upper bound of the workers.
    measured: bool,
}

impl Workers {
    /// The estimate after `reading`, from `before` (`None`: nothing measured yet), the knee `k`
    /// setting the drift allowed since the last reading.
    fn after(before: Option<Workers>, reading: WorkersReading, k: f64) -> Option<Workers> {
        let z = reading.level - reading.queue.unwrap_or(0.0);
        let Some(w) = before else {
            return (reading.measured && reading.queue.is_some()).then_some(Workers {
                mean: z,
                variance: reading.variance,
            });
        };
        // At least a tenth of a request of drift, so that a small service's figure stays movable.
        let variance = w.variance + (WORKERS_DRIFT * k).powi(2).max(0.01);
        if reading.queue.is_none() && z <= w.mean {
            // No queue at a level the workers already exceed: nothing new (a demand that fell
            // below the capacity reads so too).
            return Some(Workers {
                mean: w.mean,
                variance,
            });
        }
        if !reading.measured {
            // A queue longer than the share can measure: the workers are at most this many.
            return Some(Workers {
                mean: w.mean.min(z),
                variance,
            });
        }
        let gain = variance / (variance + reading.variance);
        Some(Workers {
            mean: w.mean + gain * (z - w.mean),
            variance: (1.0 - gain) * variance,
        })
    }

    /// The ceiling they call for: the queue intended at `load` requests offered per completion,
    /// and [`WORKERS_SIGMAS`] of their own error, above them.
    fn ceiling(&self, load: f64) -> f64 {
        self.mean + intended_queue(self.mean, load) + WORKERS_SIGMAS * self.variance.sqrt()
    }
}

/// The point a backlog is measured from: when the current run of queued ticks began, or when its
/// completion rate last rose.
#[derive(Debug, Clone, Copy, Default)]
struct BacklogFrom {
    /// Requests in flight then.
    in_flight: u64,
    /// The smoothed completion rate then.
    rate: f64,
    /// The tick's time then.
    at: Nanos,
}

/// The latency the requests in flight imply (Little's law), tick after tick, before the figures
/// settle: a flood the unlearned ceiling does not stop makes it climb while their count grows; a
/// pipeline filling at the usual load does not (its completions rise with its requests in flight,
/// and the implied latency falls from the first ticks' lagging rate towards the service's).
#[derive(Debug, Clone, Copy, Default)]
struct ColdClimb {
    /// The mean latency of the first [`ROUND_SAMPLES`] latencies measured, from the start: what
    /// a climb is measured against. Not the lowest tick's (on a slow service, one quick request
    /// that completed first), nor Little's law at the first clean round (a flood's first round
    /// already holds its queue), nor that round's mean (rounds are not gathered during the
    /// start-up, which a flood prolongs).
    first_round: Option<f64>,
    /// The latencies towards `first_round` so far: their sum and count.
    gathered: (f64, u64),
    /// Ticks in a row on which the implied latency rose while the requests in flight grew out of
    /// the noise of their count. On each of them, not over the run: on a small service a burst
    /// at the usual load doubles a count of a few requests in one tick, and the next tick's noise
    /// then looks like a climb that goes on (10 workers at half their capacity, 5 in flight, then
    /// 9, then 18: taken for a flood, the probe held one request in flight for seconds).
    ticks: u32,
    /// The last tick's requests in flight and the latency they implied.
    last: Option<(u64, f64)>,
    /// The lowest latency the requests in flight have implied so far: the climb's reference
    /// until `first_round` is in. In a flood it is never below the service's latency (the
    /// requests of the first tick are in service or queued, none idle), and on a filling
    /// pipeline it is the service's or near it (Little's law holds tick by tick there, against
    /// the completions of the tick). A small service slowed by a flood's queue completes its
    /// first fifty requests late: 10 workers at 50 ms, started at 5x, took nine ticks, by when
    /// 873 requests were in flight and the service was slowed ninefold.
    lowest_implied: Option<f64>,
}

impl ColdClimb {
    /// Takes in a tick's requests in flight and the latency they imply, and the sum and count of
    /// its latencies.
    fn observe(&mut self, in_flight: u64, implied: Option<f64>, latency_sum: u64, latencies: u64) {
        if self.first_round.is_none() {
            self.gathered.0 += latency_sum as f64;
            self.gathered.1 += latencies;
            if self.gathered.1 >= ROUND_SAMPLES {
                self.first_round = Some(self.gathered.0 / self.gathered.1 as f64);
            }
        }
        let rising = matches!(
            (self.last, implied),
            (Some((before, then)), Some(now)) if now > then && grew_out_of_noise(before, in_flight)
        );
        self.ticks = streak(self.ticks, rising);
        self.last = implied.map(|i| (in_flight, i));
        if let Some(i) = implied {
            self.lowest_implied = Some(self.lowest_implied.map_or(i, |l: f64| l.min(i)));
        }
    }

    /// Whether this is a flood's climb: the implied latency rose on [`CLIMB_TICKS`] ticks in a
    /// row or more while the requests in flight grew out of their noise, to [`CLIMBING`] times
    /// the first latencies' mean, or, until those are in, the lowest latency implied so far.
    fn flood(&self) -> bool {
        let reference = self.first_round.or(self.lowest_implied);
        let high = matches!(
            (self.last, reference),
            (Some((_, implied)), Some(first)) if implied > CLIMBING * first
        );
        high && self.ticks >= CLIMB_TICKS
    }
}

/// The hinge of a cold start's pairs (see [`crate::hinge`]), refitted on the ticks that bring new
/// ones ([`COLD_HINGE_EVERY_TICK`]), and the ticks in a row on which the requests in flight were
/// past [`CLIMBING`] times its knee. A flood that the unlearned ceiling does not stop, on a small
/// service, climbs too slowly for the noise of a tick's count ([`ColdClimb`]); its single requests
/// show the hinge long before (10 workers at 50 ms started at 1.5x: 470 in flight when the climb
/// was told, 2.5 s in, and a service slowed fivefold by their queue). A pipeline filling at the
/// usual load shows none: its latencies do not climb with the level.
#[derive(Debug, Clone, Copy, Default)]
struct ColdHinge {
    /// How many pairs the hinge was last fitted on.
    fitted_on: usize,
    hinge: Option<hinge::Hinge>,
    /// Ticks in a row with the requests in flight past [`CLIMBING`] times its knee.
    ticks: u32,
}

/// Below this many cold pairs their hinge is refitted on every tick that brings new ones (a fit
/// of a thousand took about 0.3 ms here, of 4,096 about 1.3 ms); above it, as they grow by a
/// quarter.
const COLD_HINGE_EVERY_TICK: usize = 1024;

impl ColdHinge {
    fn observe(&mut self, pairs: &[(u32, u64)], in_flight: u64) {
        // On every tick that brings new pairs while they are few (a small service, whose flood
        // climbs slowly, brings a few dozen a tick), then as they grow by a quarter: a fit of
        // the full 4,096 takes over a millisecond, on the request that runs the tick.
        let due = if pairs.len() < COLD_HINGE_EVERY_TICK {
            pairs.len() > self.fitted_on
        } else {
            pairs.len() > self.fitted_on + self.fitted_on / 4
        };
        if due {
            self.fitted_on = pairs.len();
            self.hinge = hinge::fit(pairs);
        }
        let past = self
            .hinge
            .is_some_and(|h| in_flight as f64 > CLIMBING * h.knee.max(1.0));
        self.ticks = streak(self.ticks, past);
    }

    /// The hinge of `pairs`: the one fitted last when it was fitted on all of them (the tick that
    /// starts a cold probe has just refitted it), else a fresh fit.
    fn of(&self, pairs: &[(u32, u64)]) -> Option<hinge::Hinge> {
        if pairs.len() == self.fitted_on {
            self.hinge
        } else {
            hinge::fit(pairs)
        }
    }

    /// Whether the requests in flight have been past [`CLIMBING`] times the knee on
    /// [`CLIMB_TICKS`] ticks in a row.
    fn flood(&self) -> bool {
        self.ticks >= CLIMB_TICKS
    }
}

/// The first [`COLD_PAIRS`] (admission level, latency) pairs of a cold start, in a buffer
/// allocated once. Its `Debug` gives their count, not the pairs.
#[derive(Clone)]
struct ColdPairs(Vec<(u32, u64)>);

impl ColdPairs {
    fn new() -> Self {
        ColdPairs(Vec::with_capacity(COLD_PAIRS))
    }

    /// Keeps `levels` and `latencies`, index for index, while there is room.
    fn keep(&mut self, levels: &[u32], latencies: &[u64]) {
        let room = COLD_PAIRS.saturating_sub(self.0.len());
        self.0.extend(
            levels
                .iter()
                .copied()
                .zip(latencies.iter().copied())
                .take(room),
        );
    }

    fn pairs(&self) -> &[(u32, u64)] {
        &self.0
    }

    /// The mean latency of the requests admitted at the lowest levels: the fifth of the pairs
    /// with the lowest, at least [`hinge::MIN_SIDE`] of them (and any at the same level as the
    /// last of those); `None` with fewer pairs. These met the least queue, and, admitted first,
    /// had the longest to complete in: the least inflated by the flood and the least cut short
    /// by the start, whose quickest requests complete first (the cold probe's latency).
    ///
    /// Not all of them have completed on a service slower than the first ticks: a flood took
    /// each level up to the last of those on its way up, and the levels without a pair are
    /// requests still in service after `open_for` (nanoseconds since the first were admitted,
    /// or less). Their latency is at least that, and the mean counts them so (the exponential's
    /// estimate under censoring: all the time spent in service, over the requests completed). Of
    /// only those completed, 100 workers at 500 ms started at 5x measured 22 ms half a second in,
    /// and the probe held 12 of the 100 workers for ten seconds.
    fn low_level_latency(&self, open_for: f64) -> Option<f64> {
        if self.0.len() < hinge::MIN_SIDE {
            return None;
        }
        let take = (self.0.len() / 5).max(hinge::MIN_SIDE);
        let mut levels: Vec<u32> = self.0.iter().map(|&(level, _)| level).collect();
        let (_, &mut cut, _) = levels.select_nth_unstable(take - 1);
        let (sum, count) = self
            .0
            .iter()
            .filter(|&&(level, _)| level <= cut)
            .fold((0.0, 0u32), |(sum, count), &(_, latency)| {
                (sum + latency as f64, count + 1)
            });
        let open = f64::from(cut.saturating_sub(count));
        Some((sum + open * open_for.max(0.0)) / f64::from(count))
    }
}

impl std::fmt::Debug for ColdPairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ColdPairs({} pairs)", self.0.len())
    }
}

/// The figures of a run of confirmed saturation when its saturated mean was first established
/// ([`SATURATED_TICKS`]), against which a decay is told (the throttling trap of a base learned
/// at a lighter load).
#[derive(Debug, Clone, Copy)]
struct SaturatedStart {
    /// The saturated mean then.
    mean: f64,
    /// The share the mean must fall by to have decayed: [`DECAYED`], and [`DECAY_SIGMAS`] of the
    /// noise of both figures.
    share: f64,
    /// The requests in flight then.
    in_flight: u64,
    /// Whether a probe for a decay has run since (one per run of saturation).
    probed: bool,
}

/// What the low tail of the latest saturated ticks says of the queue (see [`crate::low_tail`]).
#[derive(Debug, Clone, Copy, Default)]
struct TailVerdict {
    /// Whether it has judged since saturation was confirmed.
    judged: bool,
    /// A queue, out of the noise of the share.
    queue: bool,
    /// Less queue than the ceiling intends, as the share reads it (the point estimate: a share
    /// within the noise of none reads as little or no queue).
    short: bool,
}

impl TailVerdict {
    /// At least the queue the ceiling intends (a request or more): the service is saturated.
    fn saturated(&self) -> bool {
        self.judged && !self.short
    }
}

/// A probe to follow the one that just ended: its depth, and whether it continues a chain begun
/// cold (see `Probe::cold`). One value, so that neither can outlive the chain it belongs to.
#[derive(Debug, Clone, Copy)]
struct FollowUp {
    depth: f64,
    cold: bool,
}

/// Clean rounds a probe measures before it may end: more after a decay, whose base replaces the
/// older rounds rather than joining them.
fn probe_rounds(decayed: bool) -> usize {
    if decayed {
        DECAYED_PROBE_ROUNDS
    } else {
        PROBE_ROUNDS
    }
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    start: Nanos,
    end: Nanos,
    /// Measurements from here on are taken as base latency.
    clean_from: Nanos,
    ceiling: u64,
    /// The probe ends here even if no clean round was measured.
    hard_end: Nanos,
    /// The base latency before the probe.
    base_before: Option<f64>,
    /// The smoothed completion rate when the probe began.
    rate_before: Option<f64>,
    /// The share of the knee the probe's ceiling is at.
    depth: f64,
    /// Completions and time since `clean_from`: the rate the service kept under the probe.
    completed: u64,
    measured: Nanos,
    /// Begun because the saturated capacity decayed ([`DECAYED`]): the base may be one measured
    /// at a lower load, too low for the knee.
    decayed: bool,
    /// Begun before the gate settled (a gate started into a flood, its base measured with the
    /// queue in it), or following such a probe: its knee may be many times too high.
    cold: bool,
    /// Begun before the gate settled, and not following another probe: the base before it is
    /// the start-up's, no measured base (the quickest of the first requests, or a flood's
    /// queue).
    from_startup: bool,
    /// Whether a tick has seen the excess above the ceiling drained ([`drained`]). A cold probe
    /// measures only from the tick after: the requests that waited out the flood's queue
    /// complete last, and their latencies are that queue.
    drained: bool,
}

impl Default for Estimator {
    fn default() -> Self {
        Self::new()
    }
}

impl Estimator {
    /// Nothing learned yet.
    pub fn new() -> Self {
        Estimator {
            rate: None,
            latency: None,
            rate_best: None,
            rate_next: None,
            rate_floor: 0.0,
            last_growth: 0,
            base: None,
            clean: VecDeque::with_capacity(ROUNDS),
            before_probe: VecDeque::with_capacity(ROUNDS),
            round: (0.0, 0, true),
            probe: None,
            probes: 0,
            queue_seen: None,
            now: 0,
            flat_ticks: 0,
            flat_since: 0,
            first_latency_at: None,
            started_at: None,
            first_latency: None,
            probe_measured: false,
            follow_up: None,
            rate_at_base: None,
            tick_rate: None,
            lowest_latency: None,
            first_round_latency: None,
            climb_ticks: 0,
            climb_from: (0, 0),
            latency_spread: None,
            recent_latency: None,
            settled: false,
            queued_ticks: 0,
            streak_from: BacklogFrom::default(),
            implied_ticks: 0,
            saturated: None,
            saturated_noise: 0.0,
            rate_noise: 0.0,
            steady_from: 0,
            saturated_start: None,
            slowing: false,
            slow_ticks: 0,
            refused_queue_ticks: 0,
            cold_refused_ticks: 0,
            cold_climb: ColdClimb::default(),
            cold_hinge: ColdHinge::default(),
            cold_pairs: ColdPairs::new(),
            offered_load: 1.0,
            low_tail: LowTail::new(),
            tail: TailVerdict::default(),
            tail_count: (0.0, 0.0),
            tail_from: 0,
            trim: 0.0,
            tail_levels: 0.0,
            workers: None,
        }
    }

    /// Learns from one tick; returns the figures now in force. Without the tick's latencies
    /// themselves the low tail tells nothing (see [`Estimator::observe_with_latencies`]).
    pub fn observe(&mut self, s: &TickSample) -> Learned {
        self.observe_with_latencies(s, &[])
    }

    /// Learns from one tick and the latencies (nanoseconds) recorded in it, all of them or a
    /// fair sample; returns the figures now in force.
    pub fn observe_with_latencies(&mut self, s: &TickSample, latencies: &[u64]) -> Learned {
        self.observe_with_levels(s, latencies, &[])
    }

    /// As [`Estimator::observe_with_latencies`], with the requests in flight when each latency's
    /// request was admitted (itself included), index for index; a shorter `levels` leaves the
    /// rest without one. Before the figures settle, they are kept (the earliest
    /// [`COLD_PAIRS`]) for the knee of a cold flood's probe.
    pub fn observe_with_levels(
        &mut self,
        s: &TickSample,
        latencies: &[u64],
        levels: &[u32],
    ) -> Learned {
        if self.cold_start() {
            self.cold_pairs.keep(levels, latencies);
        }
        self.now = self.now.max(s.now);
        if self.started_at.is_none() && (s.in_flight > 0 || s.completed > 0) {
            self.started_at = Some(s.now);
        }
        self.hold_cold_probe_until_drained(s);
        if s.elapsed > 0 && s.completed > 0 {
            let secs = s.elapsed as f64 / 1e9;
            let rate = s.completed as f64 / secs;
            self.tick_rate = Some(rate);
            let weight = (s.completed as f64 / RATE_SAMPLES).min(1.0);
            self.rate_noise = folded_noise(self.rate.map(|_| self.rate_noise), weight, s.completed);
            let smoothed = match self.rate {
                Some(r) => r + weight * (rate - r),
                None => rate,
            };
            self.rate = Some(smoothed);
            self.note_rate(smoothed, s.now);
        }
        if s.latency_count > 0 && self.first_latency_at.is_none() {
            self.first_latency_at = Some(s.now);
            self.first_latency = Some(s.latency_sum as f64 / s.latency_count as f64);
        }
        if s.latency_count > 0 {
            let l = s.latency_sum as f64 / s.latency_count as f64;
            self.lowest_latency = Some(self.lowest_latency.map_or(l, |m: f64| m.min(l)));
        }
        let tick_latency =
            (s.latency_count > 0).then(|| s.latency_sum as f64 / s.latency_count as f64);
        if let Some(l) = tick_latency {
            let n = s.latency_count as f64;
            self.recent_latency = Some(match self.recent_latency {
                Some((m, c)) => (m + FULL_WEIGHT * (l - m), c + FULL_WEIGHT * (n - c)),
                None => (l, n),
            });
            let weight = (s.latency_count as f64 / LATENCY_SAMPLES).min(1.0);
            self.latency = Some(match self.latency {
                Some(old) => old + weight * (l - old),
                None => l,
            });
        }
        self.expire_rate(s.now);
        // Whether the ceiling counted its refusals (if not, `ceiling_refused` stands for them in
        // full). The load offered at the ceiling is measured only where it did, and not under a
        // probe, whose ceiling is below the knee on purpose.
        let refusals_counted = s.ceiling_refusals > 0 || !s.ceiling_refused;
        if refusals_counted && s.completed > 0 && self.probe.is_none() {
            let offered = 1.0 + s.ceiling_refusals as f64 / s.completed as f64;
            self.offered_load += FULL_WEIGHT * (offered - self.offered_load);
        }

        // Until a few clean rounds have set the base latency, "above the base" means nothing.
        // Little's law gives the latency of the requests in flight now (in flight ÷ completion
        // rate) without waiting for them to complete: on a slow service the latencies measured
        // lag a queue by a whole latency, the requests in flight do not.
        // The higher of the smoothed rate and the tick's: the smoothed one lags a rise in the
        // requests in flight, and a lagging rate would read as a queue.
        let implied = self.implied_latency(s.in_flight);
        // A ceiling held the requests in flight: the learned one, or memory's (on a large
        // service with large requests memory binds first, and waiting for the latencies to show
        // the queue it holds cost two ticks of it).
        let held = s.ceiling_refused || s.memory_refusals > 0;
        // On a service quick against the tick its own completions waited in any queue the tick
        // held, and there are hundreds of them: when their latency shows none, the requests in
        // flight at the tick's end are a burst caught in a snapshot. (Taken for a queue, two such
        // snapshots on a small service at half its capacity confirmed the load offered as the
        // capacity: 10,000 rps at 1 ms, 10 workers, 0.6 % of requests refused.)
        let calm = tick_latency
            .zip(self.base_latency())
            .is_some_and(|(l, b)| b * TIMELY <= s.elapsed as f64 && l <= QUEUE_SIGNAL * b);
        let implied_high = held
            && self.probe.is_none()
            && !calm
            && matches!((implied, self.base_latency()), (Some(i), Some(b)) if i > QUEUE_SIGNAL * b);
        // On two ticks in a row: on the first tick after a step the requests just admitted have
        // not had a tick to complete, whatever the service's room.
        self.implied_ticks = streak(self.implied_ticks, implied_high);
        // Or on one, if the ceiling was reached two base latencies before it ended: the requests
        // admitted then have had time to complete, and a service with room would have completed
        // them at the rate they came.
        let reached_long_ago = matches!(
            (s.ceiling_reached_at, self.base_latency()),
            (Some(at), Some(b)) if s.now.saturating_sub(at) as f64 >= REACHED_LATENCIES * b
        );
        let implied_queue = self.implied_ticks >= 2 || (implied_high && reached_long_ago);
        let queued = self.settled() && (self.queued() || implied_queue);
        // A lasting queue without refusals must also show in the requests in flight (Little's
        // law: a latency up by a fifth at the rate measured means a fifth more in flight than the
        // knee); otherwise it is the noise of a few slow requests at a low rate.
        let crowded = self
            .knee_exact()
            .is_some_and(|k| s.in_flight as f64 > QUEUE_SIGNAL * k);
        let queue_streak = queued && (crowded || held);
        // Without refusals, a lasting queue must also be a growing one: a saturated service that
        // nothing turns away gathers a backlog, more requests in flight while its completions
        // stay flat. A latency above the base while completions keep up with demand is no
        // saturation: that is the usual load of a service with widely spread service times,
        // whose base comes from the quicker rounds. Taken as saturation, it set the ceiling at a
        // knee from the rate offered, and the ceiling then held the rate there (seen: 200 rps,
        // 500 ms, at half its capacity). The growth counts from the last time the completion
        // rate rose (the requests in flight of a higher load that is served are no backlog), and
        // over two latencies at least (the completions of a higher load lag it by one).
        let rate = self.rate.unwrap_or(0.0);
        if queue_streak && (self.queued_ticks == 0 || rate > RATE_FLAT * self.streak_from.rate) {
            self.streak_from = BacklogFrom {
                in_flight: s.in_flight,
                rate,
                at: s.now,
            };
        }
        self.queued_ticks = streak(self.queued_ticks, queue_streak);
        let backlog = {
            let from = self.streak_from;
            let long = self
                .latency
                .is_some_and(|l| s.now.saturating_sub(from.at) as f64 >= 2.0 * l);
            long && grew_out_of_noise(from.in_flight, s.in_flight)
        };
        let lasting = self.queued_ticks >= QUEUED_TICKS && (backlog || s.turned_away);
        // Before saturation is confirmed, a tick on which the ceiling turned away only a sliver of
        // the requests counts when the next one does too: on a small service a burst at the usual
        // load passes a ceiling at twice the knee now and then, and the queue it makes for a
        // moment is no saturation. (Taken as one, the knee measured at the usual load became the
        // ceiling: 10,000 rps at 1 ms, half its capacity, 3.5 % of requests refused after 2
        // refusals of 600 requests.) A flood turns away a large share at once, or a small one
        // tick after tick.
        self.refused_queue_ticks = streak(self.refused_queue_ticks, queued && held);
        // Refusals not counted by the ceiling count in full.
        let refusals = s.ceiling_refusals.saturating_add(s.memory_refusals);
        let sliver = refusals_counted
            && refusals > 0
            && (refusals as f64) < REFUSED_SHARE * s.completed.saturating_add(refusals) as f64;
        let refusals_tell = !sliver || self.refused_queue_ticks >= REFUSED_TICKS;
        self.cold_refused_ticks = streak(
            self.cold_refused_ticks,
            !self.settled && s.ceiling_refused && !sliver,
        );
        let saturated_now = queued && ((held && refusals_tell) || lasting);
        if self.cold_start() {
            self.cold_climb
                .observe(s.in_flight, implied, s.latency_sum, s.latency_count);
            self.cold_hinge
                .observe(self.cold_pairs.pairs(), s.in_flight);
        }
        if saturated_now {
            // A queue has formed while the ceiling turned requests away, or has lasted: the
            // service is saturated and the measured rate is its capacity, so the floor that carried
            // the capacity past what was measured can go. (A single queued tick without refusals
            // is a burst or noise at the usual load; the rate measured then is only a lower
            // bound.)
            self.rate_floor = 0.0;
            self.queue_seen = Some(s.now);
        }
        // Once saturation was seen, the ceiling holds the queue short (see `ceiling_headroom`);
        // a latency of the last several ticks above half the queue it allows, while the ceiling
        // refuses more than a sliver, keeps proving the service saturated. (Several ticks: that
        // queue is a few requests, and one tick's latency swings by more.)
        self.update_trim(s, held, latencies, levels);
        let full = self.confirmed()
            && held
            && refusals_tell
            && self.probe.is_none()
            && (self.tail.saturated()
                || matches!((self.recent_latency, self.base_latency()), (Some((l, _)), Some(b)) if l > b * self.room_signal()));
        if full {
            self.rate_floor = 0.0;
            self.queue_seen = Some(s.now);
        }
        // Against the saturated mean once it is measured: the windowed best is the highest of a
        // noisy rate, and a rate a fifth below it may be the service's usual one.
        let reference = self
            .saturated_mean()
            .or(self.rate_best.map(|(best, _)| best));
        // With the ceiling refusing: completions that fall with no one turned away are a demand
        // that fell (the end of an overload, its queue still draining), not a slower service.
        let slow_tick = queued
            && held
            && self
                .rate
                .zip(reference)
                .is_some_and(|(now, reference)| now < SLOWED * reference);
        self.slow_ticks = streak(self.slow_ticks, slow_tick);
        self.slowing = self.slow_ticks >= SLOWED_TICKS;
        if !self.confirmed() || self.slowing {
            self.saturated = None;
            self.saturated_start = None;
        } else if held && self.probe.is_none() && s.now >= self.steady_from && s.elapsed > 0 {
            let rate = s.completed as f64 / (s.elapsed as f64 / 1e9);
            let (mean, n) = self.saturated.unwrap_or((rate, 0));
            // A refusal without a queue to show for it is a burst the ceiling cut, not a service
            // kept busy all tick: its rate is a lower bound, which may raise the mean but not
            // lower it. (Counted in full, the rate of a load just under the capacity pulled the
            // capacity down to it, and the ceiling with it: the throttling trap.)
            // Nor is a tick that ends with fewer requests in flight than the knee, the ceiling
            // no longer binding (the end of an overload: refusals at its start, then workers left
            // idle by a falling demand), unless memory holds them there: its rate is a lower
            // bound too. (Counted, a heavy-tailed service's last tick of a flood, at two thirds
            // of its capacity, left the ceiling below a burst 2.6 s later.)
            let below_knee = s.memory_refusals == 0
                && self
                    .knee_exact()
                    .is_some_and(|k| (s.in_flight as f64) < k - self.trim);
            let queue_shown = (full || saturated_now)
                && (self.stands_out() || self.tail.saturated())
                && !below_knee;
            if queue_shown || rate >= mean {
                // A plain mean of the first ticks, then a moving one over SATURATED_SAMPLES.
                let weight = (s.completed as f64 / SATURATED_SAMPLES)
                    .min(1.0 / SATURATED_TICKS as f64)
                    .max(1.0 / (n + 1) as f64);
                let before = (n > 0).then_some(self.saturated_noise);
                self.saturated_noise = folded_noise(before, weight, s.completed);
                self.saturated = Some((mean + weight * (rate - mean), n + 1));
                if n + 1 == SATURATED_TICKS {
                    // The first capacity measured saturated is the one to tell a faster service by
                    // (the one at the last clean round may be a lower bound from the usual load).
                    self.rate_at_base = self.capacity();
                    if self.saturated_start.is_none() {
                        // Poisson noise of the completions behind the first mean and behind the
                        // moving one, taken as weighted now (`weight` is at its largest while the
                        // first mean is taken, so the noise is if anything overstated).
                        let first =
                            rate.max(mean) * SATURATED_TICKS as f64 * s.elapsed as f64 / 1e9;
                        let moving = s.completed as f64 * (2.0 - weight) / weight;
                        let noise = (1.0 / first.max(1.0) + 1.0 / moving.max(1.0)).sqrt();
                        let share = DECAYED.max(DECAY_SIGMAS * noise);
                        self.saturated_start = self.saturated_mean().map(|mean| SaturatedStart {
                            mean,
                            share,
                            in_flight: s.in_flight,
                            probed: false,
                        });
                    }
                }
            }
        }

        // Base latency: the trimmed mean of the latest clean rounds (ticks where nothing queued
        // because of us, or the drained part of a probe). Not a minimum: the minimum of noisy means
        // is biased low, and a knee set low wastes capacity.
        let probing_clean = self.probe.is_some_and(|p| s.now >= p.clean_from);
        // Above a confirmed knee the requests queue, whatever the latency says: a base measured
        // there would drift up with the queue, and the knee with it.
        let above_knee = self.confirmed() && self.knee().is_some_and(|k| s.in_flight > k);
        let clean_tick = match self.probe {
            Some(_) => probing_clean,
            None => !s.ceiling_refused && !saturated_now && !above_knee,
        };
        if clean_tick && self.settled() {
            if let (Some(l), Some(b)) = (tick_latency, self.base_latency()) {
                let z = (l - b) / b;
                let sample = z * z * s.latency_count as f64;
                self.latency_spread = Some(match self.latency_spread {
                    Some(v) => v + SPREAD_WEIGHT * (sample - v),
                    None => sample,
                });
            }
        }
        // Rounds of the startup are not the service's (see `past_startup`), except for a first
        // base to start from.
        let startup = !self.past_startup();
        if startup && self.base.is_some() && self.probe.is_none() {
            // Nothing to gather yet.
        } else if self.probe.is_none() || probing_clean {
            let r = &mut self.round;
            r.0 += s.latency_sum as f64;
            r.1 += s.latency_count;
            r.2 &= clean_tick;
            if r.1 >= ROUND_SAMPLES {
                let (sum, count, clean) = std::mem::replace(r, (0.0, 0, true));
                if clean {
                    let mean = sum / count as f64;
                    if self.clean.is_empty() {
                        // The higher of the two: the round's mean is the quick requests that
                        // completed first on a filling pipeline, and the requests in flight of a
                        // single tick are a noisy count on a small service.
                        self.first_round_latency = self
                            .implied_latency(s.in_flight)
                            .map_or(mean, |implied| implied.max(mean))
                            .into();
                    }
                    push_round(&mut self.clean, mean);
                    // The service got faster: the latest rounds are all well below the base,
                    // and out of a round's noise, so the older ones describe a service that is
                    // gone.
                    let faster = self.base.is_some_and(|(b, _)| got_faster(&self.clean, b));
                    if faster {
                        let keep = self.clean.len() - FASTER_ROUNDS;
                        self.clean.drain(..keep);
                    }
                    // A probe's rounds set the base when it ends, all of them at once: a base
                    // from its first round would meet the rates of before (a slower service's
                    // base times a faster one's rate: a knee twice too high while it lasts).
                    if self.probe.is_none() {
                        if let Some(base) = self.base_of_rounds() {
                            self.base = Some((base, s.now));
                        }
                        self.rate_at_base = self.capacity();
                    }
                }
            }
        }
        if self.base.is_none() {
            if let Some(l) = self.latency {
                // Until the first round is complete.
                self.base = Some((l, s.now));
            }
        }

        if clean_tick && self.settled() && !startup {
            self.low_tail.record_clean(latencies);
        }

        // Growth: the ceiling refused while latency stayed at its base, tick after tick (a single
        // quiet tick in a queue is noise, not room).
        if let (Some(b), Some(l), Some(c)) = (self.base_latency(), self.latency, self.capacity()) {
            let room = self.room_signal() * b;
            // Room is a latency at the base; once the low tail judges, it must show no queue
            // either, and the trim must have given back all it took (a trimmed ceiling shows
            // room by design).
            let latency_room = l <= room && implied.is_none_or(|i| i <= room);
            let room_shown =
                latency_room && (!self.tail.judged || (!self.tail.queue && self.trim <= 0.0));
            let flat = s.ceiling_refused && self.probe.is_none() && room_shown;
            self.flat_ticks = streak(self.flat_ticks, flat);
            if self.flat_ticks == 1 {
                self.flat_since = s.now;
            }
            let step = (b as Nanos).max(s.elapsed);
            // The latencies that show room must come from requests admitted while the ceiling
            // refused: those completed in the first latency of the streak were admitted before
            // it, and say nothing about the level the ceiling holds.
            let evidence = s.now.saturating_sub(self.flat_since) as f64 >= l;
            if self.flat_ticks >= FLAT_TICKS
                && evidence
                && s.now.saturating_sub(self.last_growth) >= step
            {
                // Fast while the capacity has never been seen (a service that was never saturated
                // can be far from its knee); gently once it has, so as not to overshoot into a
                // queue that the probe then has to drain.
                let gain = if self.confirmed() {
                    GENTLE_GROWTH
                } else {
                    GROWTH
                };
                // Never beyond a few times what the service has been seen to complete: past that,
                // refusals with flat latency mean something else holds the service back.
                let measured = self.rate_best.map_or(c, |(r, _)| r);
                self.rate_floor = (c * gain).min(measured * MAX_GROWTH);
                // The saturated mean grows with it: the room shown says the service was not
                // saturated at that mean, and the next queue would otherwise drop the capacity
                // back to it.
                if let Some((mean, _)) = self.saturated.as_mut() {
                    *mean = mean.max(self.rate_floor);
                }
                self.last_growth = s.now;
            }
        }

        let climbed = self.climbed(s.in_flight);
        if climbed && self.climb_ticks == 0 {
            self.climb_from = (s.in_flight, s.now);
        }
        self.climb_ticks = streak(self.climb_ticks, climbed);
        self.update_probe(s);
        self.try_settle(s.in_flight);
        self.learned()
    }

    /// Whether the overload is dense enough for the low tail to measure the workers and for their
    /// figure to set the ceiling ([`WORKERS_LOAD`]).
    fn dense_overload(&self) -> bool {
        self.offered_load >= WORKERS_LOAD
    }

    /// Once the workers are measured, the trim is what takes the confirmed ceiling (which moves
    /// with the knee, tick by tick) down to the ceiling they call for; never negative, so that
    /// the knee's margin still bounds the ceiling from above.
    fn trim_to_workers(&mut self, k: f64) {
        if let Some(workers) = self.workers.filter(|_| self.dense_overload()) {
            let confirmed = k + knee_headroom(k, self.knee_noise(), self.offered_load);
            let wanted = workers.ceiling(self.offered_load);
            self.trim = (confirmed - wanted).clamp(0.0, self.most_trim().max(0.0));
        }
    }

    /// The most the low tail may take off the confirmed ceiling: its headroom and the knee's
    /// own error below the knee (a knee measured high by that much).
    fn most_trim(&self) -> f64 {
        match self.knee_exact() {
            Some(k) => {
                let noise = self.knee_noise();
                knee_headroom(k, noise, self.offered_load) + TAIL_SIGMAS * noise * k
            }
            None => 0.0,
        }
    }

    /// Under a confirmed saturation, with the ceiling refusing, compares the share of quick
    /// latencies with the share the intended queue would leave, and trims the ceiling by half
    /// the queue's excess (or gives half the trim back when there is less queue than intended,
    /// or none the share can tell): see [`crate::low_tail`]. Under a dense overload the same
    /// readings measure the workers ([`Workers`]), and once they are measured the trim is what
    /// sets the ceiling just above them ([`Estimator::trim_to_workers`]). At most once a
    /// latency, on the latencies of requests admitted since the ceiling last moved.
    fn update_trim(&mut self, s: &TickSample, held: bool, latencies: &[u64], levels: &[u32]) {
        let (Some(k), Some(b), Some(x)) = (self.knee_exact(), self.base_latency(), self.capacity())
        else {
            return;
        };
        if !self.confirmed() || self.probe.is_some() || self.slowing {
            self.trim = 0.0;
            self.workers = None;
            self.tail = TailVerdict::default();
            self.restart_tail_count(s.now, b);
            return;
        }
        self.trim_to_workers(k);
        let Some(threshold) = self.low_tail.threshold() else {
            return;
        };
        // An excess above the ceiling (the flood let in before saturation was confirmed) is
        // not the queue the ceiling keeps: count from a latency after it drained.
        let ceiling = self.learned().ceiling.unwrap_or(u64::MAX);
        if s.in_flight > ceiling.saturating_add(ceiling / 8 + 2) {
            self.restart_tail_count(s.now, b);
            return;
        }
        if !held || latencies.is_empty() || s.now < self.tail_from {
            return;
        }
        let below = LowTail::count_below(latencies, threshold) as f64;
        self.tail_count.0 += latencies.len() as f64;
        self.tail_count.1 += below;
        self.tail_levels += if levels.len() >= latencies.len() {
            levels[..latencies.len()]
                .iter()
                .map(|&l| f64::from(l))
                .sum::<f64>()
        } else {
            s.in_flight as f64 * latencies.len() as f64
        };
        let (n, below) = self.tail_count;
        if n < TAIL_SAMPLES {
            return;
        }
        let share = below / n;
        let binomial = |p: f64| TAIL_SIGMAS * (p * (1.0 - p) / n).sqrt();
        // Below this share the queue stands out of the noise of the share with none.
        let none = self.low_tail.share_below(threshold);
        let queue_line = none - binomial(none);
        let dense = self.dense_overload();
        let mut queue_of = |share: f64| {
            self.low_tail
                .delay_for_share(share)
                .map_or(0.0, |d| d as f64 / 1e9 * x)
        };
        let resolution = queue_of(queue_line.max(0.0));
        let queue = queue_of(share);
        // The workers: the requests in flight at admission less the queue the share shows,
        // weighed by the share's noise (one standard error either side, in requests). Only under
        // a dense overload (under a light one the requests in flight fall below the workers
        // between arrivals, and a reading mixes queued and unqueued latencies), and not on a
        // service whose low tail cannot tell a queue of a few requests (`WORKERS_RESOLUTION`):
        // there the knee's margin and the trim below stand.
        if dense {
            self.workers = if queue_of(TAIL_MEASURABLE * none) >= WORKERS_RESOLUTION {
                let error = (share.max(0.5 / n) * (1.0 - share) / n).sqrt();
                let longer = queue_of((share - error).max(0.0));
                let shorter = queue_of((share + error).min(1.0));
                let reading = WorkersReading {
                    level: self.tail_levels / n,
                    queue: (share < none).then_some(queue),
                    // Levels are whole requests: no reading is finer than half of one.
                    variance: ((longer - shorter) / 2.0).max(0.5).powi(2),
                    measured: share >= TAIL_MEASURABLE * none,
                };
                Workers::after(self.workers, reading, k)
            } else {
                None
            };
        }
        // The queue the ceiling intends, and at least the one the share can tell from none.
        let intended = intended_queue(k, self.offered_load).max(1.0);
        let target = intended.max(resolution);
        self.tail = TailVerdict {
            judged: true,
            queue: share < queue_line,
            short: queue < intended,
        };
        let moved = if self.workers.is_some() && dense {
            // Measured: the ceiling follows the workers, and every reading starts a fresh count.
            self.trim_to_workers(k);
            true
        } else if self.tail.queue && queue > target {
            // More queue than intended, out of the noise: take off half its excess (a share of
            // 0 says only that every request waited past the threshold, a lower bound).
            self.trim = (self.trim + ((queue - target) / 2.0).max(1.0)).min(self.most_trim());
            true
        } else if !self.tail.queue || self.tail.short {
            // Less queue than intended, or none the share can tell: the trim must prove itself
            // again, and half of it goes back (a ceiling trimmed below the workers shows no
            // queue at all, and must not stay there).
            self.trim = if self.trim > 1.0 {
                self.trim / 2.0
            } else {
                0.0
            };
            true
        } else {
            // About the queue intended: a fresh count now and then, the queue may move.
            n >= TAIL_MOST_SAMPLES
        };
        if moved {
            self.restart_tail_count(s.now, b);
        }
    }

    /// The low tail counts afresh, from a base latency `b` after `now`: the latencies of
    /// requests admitted under the ceiling of now.
    fn restart_tail_count(&mut self, now: Nanos, b: f64) {
        self.tail_count = (0.0, 0.0);
        self.tail_levels = 0.0;
        self.tail_from = now.saturating_add(b as Nanos);
    }

    /// A cold probe measures nothing until a tick has seen the flood's excess drained, and
    /// nothing of that tick: the requests that waited out the queue complete last, and their
    /// latencies are the queue. Its end moves with its first clean moment. (Measured from the
    /// planned moment, 10 workers at 1 ms started at 1.1x took its rounds from the drain's
    /// tail, 67 and 31 ms, and kept a base of 33 ms.)
    fn hold_cold_probe_until_drained(&mut self, s: &TickSample) {
        let Some(p) = self.probe.as_mut().filter(|p| p.cold && !p.drained) else {
            return;
        };
        p.drained = drained(s.in_flight, p.ceiling);
        let from = s.now.saturating_add(1);
        if from > p.clean_from {
            p.end = p.end.saturating_add(from - p.clean_from);
            p.clean_from = from;
        }
    }

    fn update_probe(&mut self, s: &TickSample) {
        if let Some(p) = self.probe.as_mut() {
            if s.now >= p.clean_from {
                p.completed += s.completed;
                p.measured = p.measured.saturating_add(s.elapsed);
            }
        }
        if let Some(p) = self.probe {
            // A probe ends once its time is up and PROBE_ROUNDS clean rounds have been measured (a
            // slow service may need longer for them), and in any case at its hard end.
            if (s.now >= p.end && self.clean.len() >= probe_rounds(p.decayed))
                || s.now >= p.hard_end
            {
                self.probe = None;
                self.probe_measured |= !self.clean.is_empty();
                // The ceiling rises again; the service refills within a latency or two.
                self.steady_from = s
                    .now
                    .saturating_add((2.0 * self.latency.unwrap_or(0.0)) as Nanos);
                // The base the probe found: the trimmed mean of its rounds.
                if let Some(base) = self.base_of_rounds() {
                    self.base = Some((base, s.now));
                }
                // A probe's ceiling is a share of a knee that may itself be too high (a service
                // that got faster, a gate started into a flood): while each probe finds a clearly
                // lower base, probe again at once, deeper.
                let mut now_base = self.base.map(|(b, _)| b);
                // A probe whose ceiling was still above the knee (a knee set too high, by a base
                // measured with a queue in it) kept the service saturated: its completion rate
                // did not fall. A higher base it measured is that queue, not the service: the
                // base stays. (A lower one is nearer the truth whatever it holds; the next probe
                // then goes twice as deep.)
                let saturated_through = p.measured > 0
                    && p.rate_before.is_some_and(|c| {
                        let rate = p.completed as f64 / (p.measured as f64 / 1e9);
                        rate >= SHALLOW_PROBE_RATE * c
                    });
                // Only a higher base is suspect: a lower one, queue or not, is nearer the truth.
                // A probe begun from the start-up has no base of before to keep: whatever it
                // measured is nearer the service than the first requests were. (Kept, 10 workers
                // at 50 ms started at 2x kept the start-up's 33 ms against the probe's 53: the
                // probe's ceiling of 7 still completed more than the ramp of the first ticks,
                // and the ceiling then held 7 workers of 10 for the rest of the step.)
                let shallow = !p.from_startup
                    && saturated_through
                    && matches!((p.base_before, now_base), (Some(before), Some(after)) if after > before);
                if shallow {
                    if let Some(before) = p.base_before {
                        self.base = Some((before, s.now));
                        now_base = Some(before);
                        std::mem::swap(&mut self.clean, &mut self.before_probe);
                    }
                }
                // The same service as before: the probe's few rounds join the older ones, so
                // that the base rests on many rounds, not on a probe's handful. Not after a
                // decay, when it finds a higher base: the older rounds are the lower load's, and
                // pooled with them the probe's would leave the knee low and the trap shut.
                let raised = p.decayed
                    && matches!((p.base_before, now_base), (Some(before), Some(after)) if after > before);
                let same = !shallow
                    && !raised
                    && matches!((p.base_before, now_base), (Some(before), Some(after))
                    if after >= REPROBE * before && after <= SLOWER * before);
                if same && !self.clean.is_empty() {
                    for r in self.clean.drain(..) {
                        push_round(&mut self.before_probe, r);
                    }
                    std::mem::swap(&mut self.clean, &mut self.before_probe);
                    if let Some(base) = self.base_of_rounds() {
                        self.base = Some((base, s.now));
                        now_base = Some(base);
                    }
                }
                self.before_probe.clear();
                if !same && !shallow {
                    // A different service: its saturated rate is measured afresh.
                    self.saturated = None;
                }
                // A clearly lower base: another probe follows, deeper than this one: by half when
                // the service stayed saturated through a chain begun cold (the knee may be many
                // times too high), else as deep again as the first. (Once settled, a base is off
                // by a share, not a multiple, and a rate that held under the probe is as likely
                // the noise of a rate measured low before it: halved on a 10-worker service after
                // a false alarm of a slower service, the follow-up held 4 workers of 10 for 2 s.)
                // From the start-up, a lower base is no news (the start-up's was the flood's): a
                // probe follows only if this one did not reach below the knee.
                let lower = matches!((p.base_before, now_base), (Some(before), Some(after)) if after < REPROBE * before)
                    && (saturated_through || !p.from_startup);
                self.follow_up = lower.then(|| {
                    let factor = if saturated_through && p.cold {
                        0.5
                    } else {
                        PROBE_DEPTH
                    };
                    FollowUp {
                        depth: (p.depth * factor).max(MIN_PROBE_DEPTH),
                        cold: p.cold,
                    }
                });
                // The service slowed down: the rates remembered from before are a faster
                // service's, and with the new base they would put the knee too high.
                if let (Some(before), Some(after), Some(rate)) =
                    (p.base_before, now_base, p.rate_before)
                {
                    if !shallow && after > SLOWER * before {
                        self.rate_best = Some((rate, s.now));
                        self.rate_next = None;
                        self.rate_floor = 0.0;
                        self.saturated = None;
                    }
                }
                self.rate_at_base = self.capacity();
                tracing::debug!(
                    target: "sluicegate::capacity",
                    base_latency_ms = self.base.map(|(b, _)| b / 1e6),
                    duration_ms = (s.now - p.start) as f64 / 1e6,
                    "base latency re-measured"
                );
            }
            return;
        }
        let (Some((base, at)), Some(knee), Some(latency)) = (self.base, self.knee(), self.latency)
        else {
            return;
        };
        let age = s.now.saturating_sub(at);
        // The service slowed down: the ceiling refuses, latency is up, and yet fewer requests
        // complete than the service managed moments ago. A queue of our making does not lower the
        // completion rate; a slower service does, and its new base latency must be measured
        // before the ceiling shrinks with the falling rate.
        let slowed = self.settled() && self.slowing;
        // A gate started into a flood never sees a clean round: measure the base latency by
        // probing instead.
        let unsettled = !self.settled() && self.past_startup();
        // A gate started into a flood that its unlearned ceiling (the configured one or the
        // seed's) turns away, tick after tick: the queue behind that ceiling is the flood's, and
        // each tick of it is a tick of answers too late. Probe at once rather than after the
        // start-up and ten latencies. (Waiting, 3,200 rps started at 10x held 1,000 requests in
        // flight for 64 workers for 1.7 s: a p99 of 491 ms over the next minute, SLO 100 ms.)
        let refused_cold = self.cold_refused_ticks >= CLIMB_TICKS;
        // Nor wait for the start-up when a flood the unlearned ceiling does not reach shows in
        // Little's law: the latency the requests in flight imply climbs tick after tick while
        // their count grows, to several times that of the first latencies (see `ColdClimb`).
        // The start-up lasts five latencies of a latency that climbs with the queue, and the
        // climb test of the settling waits for it and starts from a round that is already the
        // flood's. (Waiting for both, 64 workers at 20 ms started at 1.1 times their
        // capacity had 630 requests in flight when the probe began, half a second in: 1,127 late
        // answers in the first second of `hover`, and its p99 past the SLO. Probed on the third
        // tick, at 322 in flight: 353 late answers, and the p99 within the SLO.)
        let cold_flood = self.cold_start()
            && (refused_cold || self.cold_climb.flood() || self.cold_hinge.flood());
        // (Ten latencies, but for a gate that never settled the least inflated one: a flood that
        // filled the unlearned ceiling makes the latency of now mostly queue.)
        let gap_latency = if unsettled {
            self.lowest_latency.unwrap_or(latency).min(latency)
        } else {
            latency
        };
        // The saturated capacity decays while nothing says the service slowed: the throttling
        // trap. A base measured at a lower load (the usual one) can be below the latency the
        // service has at its knee without a queue; the knee is then low, the ceiling holds the
        // service below its capacity, the latency of its plain work reads as a queue, and the
        // rate it is held at becomes the capacity, tick after tick (seen: 1,000 rps at 100 ms, a
        // base 11 % low, the capacity from 860 down to 750 through a 5x step). A probe measures
        // the base where the service now works.
        // The requests in flight fall with it: the rate follows the ceiling down, the mark of
        // the trap (a service that slowed completes less at the same level).
        let decayed = self.saturated_start.is_some_and(|start| {
            !start.probed
                && self
                    .saturated_mean()
                    .is_some_and(|m| m < (1.0 - start.share) * start.mean)
                && (s.in_flight as f64) < (1.0 - start.share / 2.0) * start.in_flight as f64
        });
        let early = (slowed || unsettled || decayed)
            && age > SLOW_PROBE_GAP_NS.max((10.0 * gap_latency) as Nanos);
        // Started into an overload the ceiling does not yet stop: latency climbs round after
        // round while a queue builds. Its base is not what the rounds say; measure it.
        // (And the latency the requests in flight imply grows with it: a service merely warming
        // up has slower rounds after the quick first ones, and more requests in flight, but its
        // completions rise with them.)
        let climbing = unsettled
            && !self.clean.is_empty()
            && self.climb_ticks >= CLIMB_TICKS
            && (s.ceiling_refused || s.memory_refusals > 0 || self.climb_lasts(s));
        let follow_up = self.follow_up.take();
        // The service got faster while saturated: it completes clearly more than when its base
        // was measured, and requests take clearly less than that base even with the queue the
        // ceiling allows. (More completions alone only mean the load rose to the capacity.)
        let faster = s.ceiling_refused
            && self.settled()
            && latency < FASTER_LATENCY * base
            && self
                .rate_at_base
                .zip(self.capacity())
                .is_some_and(|(then, now)| now > FASTER_RATE * then)
            && age > SLOW_PROBE_GAP_NS.max((10.0 * latency) as Nanos);
        let again = follow_up.is_some() || faster;
        // A slow service re-measures less often: a probe lasts a few base latencies.
        let window = BASE_WINDOW_NS.max((BASE_WINDOW_LATENCIES * base) as Nanos);
        if climbing || again || cold_flood || (s.ceiling_refused && (age > window || early)) {
            // Long enough for the queue to drain (the current latency) and then for a base latency
            // to be measured, with a tick to spare.
            // Before the gate settled, the latency of now lags a flood's growing queue by a whole
            // latency; the requests in flight at the completion rate (Little's law) do not. (On
            // the smoothed latency alone, a probe begun 0.2 s into a flood measured its rounds
            // with the queue still in them, and the base it kept was the first tick's.)
            let cold = unsettled || cold_flood || follow_up.is_some_and(|f| f.cold);
            let from_startup = (unsettled || cold_flood) && follow_up.is_none();
            let queue_latency = if cold {
                latency.max(self.implied_latency(s.in_flight).unwrap_or(0.0))
            } else {
                latency
            };
            let drain = ((2.0 * queue_latency) as Nanos).saturating_add(s.elapsed);
            // Two base latencies, and long enough for its rounds at the current rate.
            let decayed = decayed && !(climbing || again || slowed || unsettled);
            let rounds = probe_rounds(decayed);
            let round = self.rate.filter(|r| *r > 0.0).map_or(0, |r| {
                (rounds as f64 * ROUND_SAMPLES as f64 / r * 1e9) as Nanos
            });
            let measure = ((2.0 * base) as Nanos).max(s.elapsed).max(round);
            self.probes += 1;
            // One probe for a decay per run of saturation: the base it finds is the knee's.
            if let Some(start) = self.saturated_start.as_mut().filter(|_| decayed) {
                start.probed = true;
            }
            let depth = follow_up.map_or(PROBE_DEPTH, |f| f.depth);
            // The old rounds are what is being re-measured; kept aside, to be pooled with the
            // probe's if it finds the same service.
            std::mem::swap(&mut self.clean, &mut self.before_probe);
            self.clean.clear();
            self.round = (0.0, 0, true);
            self.probe = Some(Probe {
                start: s.now,
                clean_from: s.now.saturating_add(drain),
                end: s.now.saturating_add(drain).saturating_add(measure),
                hard_end: s
                    .now
                    .saturating_add(drain)
                    .saturating_add(measure.saturating_mul(10).max(PROBE_LONGEST_NS)),
                // A probe that follows one which found a clearly lower base goes deeper: the knee
                // it starts from is still too high. A gate that has never settled starts from the
                // latency of the requests admitted at the lowest levels, the least inflated by the
                // queue it started into, or without enough of them from the lowest tick's. (Not
                // the lowest tick's first: it is the quickest of the first requests, 17 ms for 10
                // workers at 50 ms started at 1.1x, whose probe then held the service at 1 to 3
                // requests for the 2.5 s left of the step. Over 256 cold starts, seeds 1 to 8 of
                // `sim_cold_start`, mean goodput went from 0.7835 to 0.7952.)
                ceiling: {
                    let from = if unsettled || cold_flood {
                        let least_queued = self
                            .cold_pairs
                            .low_level_latency(
                                s.now.saturating_sub(self.started_at.unwrap_or(s.now)) as f64,
                            )
                            .unwrap_or_else(|| self.lowest_latency.unwrap_or(base).min(base));
                        let from_rate = self
                            .capacity()
                            .map_or(knee as f64, |c| c * least_queued / 1e9);
                        self.cold_hinge
                            .of(self.cold_pairs.pairs())
                            .map_or(from_rate, |h| from_rate.min(h.knee))
                    } else {
                        knee as f64
                    };
                    let ceiling = ((from * depth) as u64).max(1);
                    // A flood that filled the unlearned ceiling in the first milliseconds leaves
                    // no latency without its queue, and a knee from them may be above the
                    // requests in flight: a probe there would drain nothing and measure the
                    // queue as the base (50 workers at 1 ms, started at 5x: a probe's ceiling of
                    // 1,301, above the unlearned 1,000, and a base of 90 ms). Halve them instead;
                    // the probes that follow go deeper while each finds a clearly lower base.
                    if cold && ceiling >= s.in_flight {
                        (s.in_flight / 2).max(1)
                    } else {
                        ceiling
                    }
                },
                depth,
                completed: 0,
                measured: 0,
                decayed,
                cold,
                from_startup,
                drained: false,
                base_before: Some(base),
                // The smoothed rate lags a slowdown; the last tick's does not.
                // From the start-up, both lag the ramp of the first ticks: the best rate the
                // flood has shown is the service's.
                rate_before: match (self.rate, self.tick_rate) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
                .map(|r| {
                    if from_startup {
                        r.max(self.capacity().unwrap_or(0.0))
                    } else {
                        r
                    }
                }),
            });
        }
    }

    /// The mean of the clean rounds, the highest and lowest [`ROUND_TRIM`] of them left out.
    fn base_of_rounds(&self) -> Option<f64> {
        // On the stack: the tick runs on a request's path, which allocates nothing.
        let mut sorted = [0.0f64; ROUNDS];
        let n = self.clean.len().min(ROUNDS);
        for (slot, r) in sorted.iter_mut().zip(self.clean.iter()) {
            *slot = *r;
        }
        let rounds = &mut sorted[..n];
        rounds.sort_unstable_by(f64::total_cmp);
        let cut = (n as f64 * ROUND_TRIM) as usize;
        let kept = rounds.get(cut..n - cut).filter(|kept| !kept.is_empty())?;
        Some(kept.iter().sum::<f64>() / kept.len() as f64)
    }

    fn note_rate(&mut self, rate: f64, now: Nanos) {
        match self.rate_best {
            Some((best, _)) if rate < best => {
                if self.rate_next.is_none_or(|(next, _)| rate >= next) {
                    self.rate_next = Some((rate, now));
                }
            }
            _ => {
                self.rate_best = Some((rate, now));
                self.rate_next = None;
            }
        }
    }

    fn expire_rate(&mut self, now: Nanos) {
        if let Some((_, at)) = self.rate_best {
            if now.saturating_sub(at) > RATE_WINDOW_NS {
                self.rate_best = self.rate_next.take().or(self.rate.map(|r| (r, now)));
            }
        }
    }

    /// Completions per second the service has shown it sustains.
    pub fn capacity(&self) -> Option<f64> {
        let best = self.rate_best.map(|(r, _)| r);
        let measured = self.saturated_mean().or(match self.saturated {
            // The smoothed rate lags a rise: the first saturated ticks may already show more.
            Some((mean, _)) => Some(best.map_or(mean, |b| b.max(mean))),
            None => best,
        });
        measured
            .map(|r| r.max(self.rate_floor))
            .filter(|r| r.is_finite() && *r > 0.0)
    }

    /// The mean completion rate of the saturated ticks, once [`SATURATED_TICKS`] of them were
    /// measured.
    fn saturated_mean(&self) -> Option<f64> {
        self.saturated
            .filter(|(_, ticks)| *ticks >= SATURATED_TICKS)
            .map(|(mean, _)| mean)
    }

    /// Latency, as a multiple of the base, that tells room (below) from a full service (above)
    /// while the ceiling refuses: half the queue the ceiling allows once saturation was seen,
    /// [`GROWTH_SIGNAL`] before.
    fn room_signal(&self) -> f64 {
        if !self.confirmed() {
            return GROWTH_SIGNAL;
        }
        match self.knee_exact() {
            Some(k) if k > 0.0 => {
                let headroom = knee_headroom(k, self.knee_noise(), self.offered_load) - self.trim;
                1.0 + 0.5 * headroom.max(1.0) / k
            }
            _ => GROWTH_SIGNAL,
        }
    }

    /// The knee's relative standard error (see [`Learned::knee_noise`]).
    fn knee_noise(&self) -> f64 {
        let capacity = if self.saturated.is_some() {
            self.saturated_noise
        } else {
            self.rate_noise
        };
        let noise = (self.base_noise() + capacity).sqrt();
        if noise.is_finite() {
            noise
        } else {
            0.0
        }
    }

    /// The base latency's relative variance, from the spread of the rounds behind it (the
    /// older rounds while a probe measures new ones). Measured, not assumed: the rounds' spread
    /// holds the service's own (a heavy tail, a drift) as well as their sampling noise.
    fn base_noise(&self) -> f64 {
        let rounds = if self.probe.is_some() {
            &self.before_probe
        } else {
            &self.clean
        };
        let Some(b) = self.base_latency() else {
            return 0.0;
        };
        let n = rounds.len() as f64;
        let Some(variance) = sample_variance(rounds.iter().copied()) else {
            return 0.0;
        };
        TRIMMED_VARIANCE * variance / n / (b * b)
    }

    /// Whether the latency of the last several ticks stands above the base by more than
    /// [`QUEUE_SIGMAS`] of its noise (always, until the spread of latencies is measured).
    fn stands_out(&self) -> bool {
        match (
            self.recent_latency,
            self.base_latency(),
            self.latency_spread,
        ) {
            (Some((l, count)), Some(b), Some(spread)) if count > 0.0 => {
                // The noise of an average over ticks weighted by FULL_WEIGHT: α ÷ (2 − α) of
                // one tick's.
                let ticks = FULL_WEIGHT / (2.0 - FULL_WEIGHT);
                (l - b) / b > QUEUE_SIGMAS * (spread * ticks / count).sqrt()
            }
            (None, _, _) => false,
            _ => true,
        }
    }

    /// Latency without queueing, in nanoseconds.
    pub fn base_latency(&self) -> Option<f64> {
        self.base
            .map(|(b, _)| b)
            .filter(|b| b.is_finite() && *b > 0.0)
    }

    /// Whether the capacity estimate comes from a saturated service (a queue was seen within the
    /// rate window), rather than being a lower bound.
    pub fn confirmed(&self) -> bool {
        self.queue_seen
            .is_some_and(|at| self.now.saturating_sub(at) <= RATE_WINDOW_NS)
    }

    /// The latency Little's law gives `in_flight` requests at the completion rate: the higher of
    /// the smoothed rate and the last tick's, in nanoseconds.
    fn implied_latency(&self, in_flight: u64) -> Option<f64> {
        match (self.rate, self.tick_rate) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
        .filter(|r| *r > 0.0)
        .map(|r| in_flight as f64 / r * 1e9)
    }

    /// Whether the requests in flight now imply a latency well above ([`CLIMBING`]) the first
    /// clean round's (see `first_round_latency`), by more than their noise: a queue building. Not
    /// their count: on a slow service a pipeline filling at the usual load multiplies the requests
    /// in flight too, but the completions rise with them (at 500 ms a request, the count went from
    /// about 12 at the first round to 57, and the start-up probe that followed refused 200
    /// requests at half the load).
    fn climbed(&self, in_flight: u64) -> bool {
        let (Some(now), Some(first)) = (self.implied_latency(in_flight), self.first_round_latency)
        else {
            return false;
        };
        // The requests in flight that the first round's latency gives at the rate of now: a
        // climb must also stand out of their noise (a Poisson count), which on a small service
        // three times their number alone does not.
        let expected = in_flight as f64 * first / now;
        now > CLIMBING * first && in_flight as f64 - expected >= BACKLOG_SIGMAS * expected.sqrt()
    }

    /// Whether a climb of the requests in flight (see [`Estimator::climbed`]) is a flood's:
    /// it keeps growing (by [`BACKLOG_SIGMAS`] standard deviations of the count it began with),
    /// or it has lasted [`CLIMB_LATENCIES`] of the first round's latencies. A stretch of slow
    /// requests at the usual load raises the count as much, but the queue it builds drains
    /// within a few latencies.
    fn climb_lasts(&self, s: &TickSample) -> bool {
        let (from, since) = self.climb_from;
        let lasted = self
            .first_round_latency
            .is_some_and(|first| s.now.saturating_sub(since) as f64 >= CLIMB_LATENCIES * first);
        grew_out_of_noise(from, s.in_flight) || lasted
    }

    /// Before the figures settled and before any probe: what a flood met at the start is told
    /// by (see [`Estimator::update_probe`]).
    fn cold_start(&self) -> bool {
        !self.settled && self.probes == 0
    }

    /// Whether the base latency rests on enough clean rounds (or a probe) to compare latencies
    /// with.
    fn settled(&self) -> bool {
        self.settled
    }

    /// Settles once a few latencies have passed since the first one, and then either a few rounds
    /// were measured while the latency the requests in flight imply held steady (a gate started
    /// into a flood sees it grow with the queue, and its rounds measure the queue), or a probe
    /// measured the base.
    fn try_settle(&mut self, in_flight: u64) {
        if self.settled || !self.past_startup() {
            return;
        }
        let steady = !self.climbed(in_flight);
        if (self.clean.len() >= SETTLED_ROUNDS && steady) || self.probe_measured {
            self.settled = true;
        }
    }

    /// The first completions are the quickest requests of those sent at the start; their latency
    /// is not the service's until a few latencies have passed.
    fn past_startup(&self) -> bool {
        // Measured in the latency of now, but at most a few times the first one: a gate started
        // into a flood sees latency climb with the queue, and must not wait for it forever.
        match (self.first_latency_at, self.latency, self.first_latency) {
            (Some(at), Some(l), Some(first)) => {
                let l = l.min(STARTUP_GROWTH * first);
                self.now.saturating_sub(at) as f64 >= STARTUP_LATENCIES * l
            }
            _ => false,
        }
    }

    /// Whether the smoothed latency shows a queue above the base latency.
    fn queued(&self) -> bool {
        match (self.latency, self.base_latency()) {
            (Some(l), Some(b)) => l > QUEUE_SIGNAL * b,
            _ => false,
        }
    }

    /// The smoothed latency of the last ticks, in nanoseconds.
    pub fn latency(&self) -> Option<f64> {
        self.latency
    }

    fn knee_exact(&self) -> Option<f64> {
        let k = self.capacity()? * self.base_latency()? / 1e9;
        k.is_finite().then_some(k)
    }

    /// The in-flight level at which latency starts to climb.
    pub fn knee(&self) -> Option<u64> {
        self.knee_exact().map(|k| (k.ceil() as u64).max(1))
    }

    /// The figures in force.
    pub fn learned(&self) -> Learned {
        let knee = self.knee();
        let knee_noise = self.knee_noise();
        let ceiling = match (self.probe, knee) {
            (Some(p), _) => Some(p.ceiling),
            // Until the figures rest on enough measurements, the configured ceiling stands.
            (None, Some(_)) if !self.settled() => None,
            (None, Some(k)) => {
                let unconfirmed =
                    ((k as f64 * (1.0 + UNCONFIRMED_HEADROOM)).ceil() as u64).saturating_add(2);
                if self.confirmed() {
                    // Never above the ceiling of a capacity that is only a lower bound: a knee
                    // measured on a tick or two of a very slow service (a completion or none a
                    // tick) has an error as large as itself.
                    let confirmed = confirmed_ceiling(
                        self.knee_exact().unwrap_or(k as f64),
                        knee_noise,
                        self.offered_load,
                    );
                    let trimmed = (confirmed as f64 - self.trim).round().max(1.0) as u64;
                    Some(trimmed.min(unconfirmed))
                } else {
                    Some(unconfirmed)
                }
            }
            (None, None) => None,
        };
        Learned {
            capacity: self.capacity(),
            base_latency: self.base_latency().map(|b| Duration::from_nanos(b as u64)),
            knee,
            ceiling,
            probing: self.probe.is_some(),
            probes: self.probes,
            settled: self.settled(),
            confirmed: self.confirmed(),
            knee_noise,
            offered_load: self.offered_load,
            trim: self.trim,
            workers: self.workers.map(|w| w.mean),
        }
    }
}
