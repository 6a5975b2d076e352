//! The demo's load generator: open loop, as real users are.
//!
//! Requests are scheduled at a fixed rate (Poisson arrivals from a seed, or evenly spaced) and
//! each one is sent at its scheduled time whether or not the earlier ones have been answered, so
//! a slow server faces the same demand as a fast one (a closed loop, where each client waits for
//! its answer before asking again, would slow down with the server and hide its collapse). Each
//! request has its own connection from a pool (hyper's client over loopback); a client that has
//! waited `client_timeout` since the request's scheduled time gives up and closes the connection,
//! as a browser would.
//!
//! Latency is measured from the scheduled time, not the time the request left: a generator that
//! falls behind would otherwise hide its own delay (coordinated omission). How late requests
//! left is measured too, and the rate actually offered is reported beside the target.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64Mcg;
use sluicegate::RejectReason;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::server::{NON_URGENT_PATH, URGENT_PATH};

/// Extra time given to requests still running when the schedule ends, beyond the client timeout
/// that bounds each of them: room for a busy runtime to deliver their last outcomes.
const DRAIN_SLACK: Duration = Duration::from_secs(2);

/// How requests are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Arrivals {
    /// Poisson arrivals: exponential gaps, as independent users make.
    Poisson,
    /// Evenly spaced.
    Even,
}

/// What to send: the rate, for how long, which share is urgent, and when clients give up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Target requests per second.
    pub(crate) rate: f64,
    /// How long requests are scheduled for.
    pub(crate) duration: Duration,
    /// Share of requests to the urgent route.
    pub(crate) urgent_share: f64,
    /// How long a client waits for its answer, from the request's scheduled time.
    pub(crate) client_timeout: Duration,
    /// How requests are spaced.
    pub(crate) arrivals: Arrivals,
    /// Seed of the arrival times and of which requests are urgent.
    pub(crate) seed: u64,
}

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A 2xx answer, in time.
    Answered,
    /// Refused with 429 or 503, for the reason its problem body names (`None`: none it knows).
    Refused(u16, Option<&'static str>),
    /// Any other status.
    OtherStatus(u16),
    /// No answer before the client timeout.
    TimedOut,
    /// The connection failed.
    Failed,
}

/// One request's fate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    /// When it was scheduled, from the start of the run.
    pub(crate) scheduled: Duration,
    /// Whether it went to the urgent route.
    pub(crate) urgent: bool,
    /// How it ended.
    pub(crate) outcome: Outcome,
    /// From its scheduled time to its outcome.
    pub(crate) latency: Duration,
    /// From its scheduled time to the moment it was handed to the client.
    pub(crate) lag: Duration,
}

/// Running totals, read by the progress bar.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub(crate) sent: AtomicU64,
    pub(crate) answered: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl Live {
    fn count(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Answered => &self.answered,
            Outcome::Refused(..) => &self.refused,
            Outcome::TimedOut => &self.timed_out,
            Outcome::OtherStatus(_) | Outcome::Failed => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the generator did.
#[derive(Debug)]
pub(crate) struct Generated {
    /// Requests sent.
    pub(crate) sent: u64,
    /// Requests sent, by the whole second of the schedule they were scheduled in.
    pub(crate) sent_per_second: Vec<u64>,
    /// From the first scheduled time to the last request handed to the client.
    pub(crate) sending_span: Duration,
    /// Every request whose outcome came back before the drain ended.
    pub(crate) records: Vec<Record>,
}

/// The gaps between requests, from a seed.
struct Schedule {
    rng: Pcg64Mcg,
    exp: Option<Exp<f64>>,
    gap: f64,
    urgent_share: f64,
}

impl Schedule {
    fn new(plan: &Plan) -> Schedule {
        let rate = plan.rate.max(f64::MIN_POSITIVE);
        Schedule {
            rng: Pcg64Mcg::seed_from_u64(plan.seed),
            exp: match plan.arrivals {
                Arrivals::Poisson => Exp::new(rate).ok(),
                Arrivals::Even => None,
            },
            gap: 1.0 / rate,
            urgent_share: plan.urgent_share,
        }
    }

    /// The gap to the next request in seconds, and whether that request is urgent.
    fn next(&mut self) -> (f64, bool) {
        let gap = match &self.exp {
            Some(exp) => exp.sample(&mut self.rng),
            None => self.gap,
        };
        let urgent = self.rng.random::<f64>() < self.urgent_share;
        (gap, urgent)
    }
}

/// Everything a request task needs.
#[derive(Clone)]
struct Target {
    client: Client<HttpConnector, Empty<Bytes>>,
    urgent: Uri,
    non_urgent: Uri,
    timeout: Duration,
    live: Arc<Live>,
    records: mpsc::UnboundedSender<Record>,
}

/// Sends requests to `address` as `plan` says, from `start` on, and returns once every request
/// has an outcome (each is bounded by the client timeout).
pub(crate) async fn drive(
    address: SocketAddr,
    plan: Plan,
    start: Instant,
    live: Arc<Live>,
) -> Result<Generated, http::uri::InvalidUri> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(usize::MAX)
        .build(connector);
    let (sender, mut receiver) = mpsc::unbounded_channel();
    let target = Target {
        client,
        urgent: format!("http://{address}{URGENT_PATH}").parse()?,
        non_urgent: format!("http://{address}{NON_URGENT_PATH}").parse()?,
        timeout: plan.client_timeout,
        live,
        records: sender,
    };
    let mut schedule = Schedule::new(&plan);
    let end = plan.duration.as_secs_f64();
    let (mut at, mut urgent) = schedule.next();
    let mut sent = 0u64;
    let slots = plan.duration.as_secs_f64().ceil().max(1.0) as usize;
    let mut sent_per_second = vec![0u64; slots];
    let mut last_sent = start;
    while at < end {
        let scheduled = start + Duration::from_secs_f64(at);
        if Instant::now() < scheduled {
            tokio::time::sleep_until(scheduled).await;
        }
        let task = target.clone();
        last_sent = Instant::now();
        tokio::spawn(async move { task.send(scheduled - start, scheduled, urgent).await });
        sent += 1;
        sent_per_second[(at as usize).min(slots - 1)] += 1;
        target.live.sent.fetch_add(1, Ordering::Relaxed);
        let (gap, next_urgent) = schedule.next();
        at += gap;
        urgent = next_urgent;
    }
    drop(target);

    // Outcomes wait in the channel meanwhile. Every request task ends by its own timeout; one
    // that outlives it by more than the slack is reported as unfinished.
    let deadline = Instant::now() + plan.client_timeout + DRAIN_SLACK;
    let mut records = Vec::with_capacity(usize::try_from(sent).unwrap_or(0));
    while let Ok(Some(record)) = tokio::time::timeout_at(deadline, receiver.recv()).await {
        records.push(record);
    }
    Ok(Generated {
        sent,
        sent_per_second,
        sending_span: last_sent.saturating_duration_since(start),
        records,
    })
}

/// The reason named by a refusal's problem body (`"reason":"in_flight_ceiling"`), if one the gate
/// knows.
fn reason(body: &[u8]) -> Option<&'static str> {
    const KEY: &[u8] = b"\"reason\":\"";
    let start = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &body[start..];
    let name = &rest[..rest.iter().position(|&b| b == b'"')?];
    RejectReason::ALL
        .iter()
        .map(RejectReason::as_str)
        .find(|known| known.as_bytes() == name)
}

impl Target {
    /// Sends one request scheduled at `scheduled` and records its outcome.
    async fn send(self, offset: Duration, scheduled: Instant, urgent: bool) {
        let lag = scheduled.elapsed();
        let uri = if urgent {
            self.urgent.clone()
        } else {
            self.non_urgent.clone()
        };
        let exchange = async {
            let request = http::Request::get(uri).body(Empty::<Bytes>::new())?;
            let response = self.client.request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
        };
        let outcome = match tokio::time::timeout_at(scheduled + self.timeout, exchange).await {
            Err(_) => Outcome::TimedOut,
            Ok(Err(_)) => Outcome::Failed,
            Ok(Ok((status, _))) if status.is_success() => Outcome::Answered,
            Ok(Ok((status, body)))
                if status == StatusCode::TOO_MANY_REQUESTS
                    || status == StatusCode::SERVICE_UNAVAILABLE =>
            {
                Outcome::Refused(status.as_u16(), reason(&body))
            }
            Ok(Ok((status, _))) => Outcome::OtherStatus(status.as_u16()),
        };
        self.live.count(outcome);
        let _ = self.records.send(Record {
            scheduled: offset,
            urgent,
            outcome,
            latency: scheduled.elapsed(),
            lag,
        });
    }
}
