//! What `SluiceLayer` adds to a request, next to the tower layers a service would otherwise use.
//!
//! Run with `cargo bench --features tower --bench layer`. One in-process `service_fn` (no
//! network) answering `200 OK` with an empty axum body; one call is `ready().await`, `call`,
//! the answer awaited and dropped (which releases a permit held by the body), on a current-thread
//! tokio runtime. Contenders:
//!
//! | bench | the service |
//! |---|---|
//! | `bare` | the `service_fn` alone |
//! | `sluicegate` | behind `SluiceLayer` (shipped defaults, switch off, every request admitted) |
//! | `limit_load_shed` | behind `LoadShedLayer` + `ConcurrencyLimitLayer` (1,000) |
//! | `tower_governor` | behind `tower_governor`'s `GovernorLayer` (one global key, a quota never reached) |
//!
//! After the criterion group, the same four are measured again in alternating rounds (each round
//! times every contender over the same number of calls, so the machine's drift hits them alike),
//! and the medians are printed with the ratios: whole call, and added cost (contender − bare),
//! sluicegate ÷ limit + load shed. The bar is an added cost of at most 1.5× that of limit + load
//! shed.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::body::Body;
use criterion::{criterion_group, criterion_main, Criterion};
use sluicegate::middleware::tower::SluiceLayer;
use sluicegate::{Config, Gate};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::GlobalKeyExtractor;
use tower_governor::GovernorLayer;

/// Calls per contender in one alternating round.
const ROUND: u64 = 20_000;
/// Alternating rounds.
const ROUNDS: usize = 21;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn handler(
    _request: http::Request<Body>,
) -> impl Future<Output = Result<http::Response<Body>, Infallible>> {
    std::future::ready(Ok(http::Response::new(Body::empty())))
}

fn request() -> http::Request<Body> {
    let mut request = http::Request::new(Body::empty());
    *request.uri_mut() = http::Uri::from_static("/pay/submit");
    request
}

/// `n` calls through `service`: ready, call, the answer awaited and dropped.
async fn calls<S, R>(service: &mut S, n: u64) -> Duration
where
    S: Service<http::Request<Body>, Response = http::Response<R>>,
    S::Error: std::fmt::Debug,
{
    let start = Instant::now();
    for _ in 0..n {
        let ready = service.ready().await.expect("ready");
        let response = ready.call(request()).await.expect("answered");
        black_box(response);
    }
    start.elapsed()
}

/// The contenders' services, each with its own type (no boxing, which would add its own cost).
struct Contenders<A, B, C, D> {
    bare: A,
    sluice: B,
    limit: C,
    governor: D,
}

/// The names, in the order of [`for_each!`]'s output.
const NAMES: [&str; 4] = ["bare", "sluicegate", "limit_load_shed", "tower_governor"];

// Four opaque service types, one per contender: naming them would mean naming each layer's.
#[allow(clippy::type_complexity)]
fn contenders() -> Contenders<
    impl Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    impl Service<http::Request<Body>, Response = http::Response<impl Sized>, Error = Infallible>,
    impl Service<http::Request<Body>, Response = http::Response<Body>, Error = tower::BoxError>,
    impl Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
> {
    let gate = Gate::new(Config::default()).expect("the shipped defaults");
    let governor_config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .key_extractor(GlobalKeyExtractor)
        .finish()
        .expect("a valid quota");
    Contenders {
        bare: tower::service_fn(handler),
        sluice: SluiceLayer::new(gate).layer(tower::service_fn(handler)),
        limit: ServiceBuilder::new()
            .load_shed()
            .concurrency_limit(1000)
            .service(tower::service_fn(handler)),
        governor: GovernorLayer::new(governor_config).layer(tower::service_fn(handler)),
    }
}

/// Runs `$run` with `$s` bound to each contender in turn, `$i` its index in [`NAMES`].
macro_rules! for_each {
    ($c:expr, |$i:ident, $s:ident| $run:expr) => {{
        {
            let $i = 0;
            let $s = &mut $c.bare;
            $run
        }
        {
            let $i = 1;
            let $s = &mut $c.sluice;
            $run
        }
        {
            let $i = 2;
            let $s = &mut $c.limit;
            $run
        }
        {
            let $i = 3;
            let $s = &mut $c.governor;
            $run
        }
    }};
}

fn layer_group(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("layer");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    let mut c = contenders();
    for_each!(c, |i, service| {
        group.bench_function(NAMES[i], |b| {
            b.iter_custom(|iters| rt.block_on(calls(service, iters)));
        });
    });
    group.finish();
    interleaved(&rt);
}

fn per_call(elapsed: Duration) -> f64 {
    elapsed.as_nanos() as f64 / ROUND as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Alternating rounds; prints the medians (ns per call) and the ratios.
fn interleaved(rt: &tokio::runtime::Runtime) {
    let mut c = contenders();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); NAMES.len()];
    rt.block_on(async {
        for_each!(c, |_i, service| {
            calls(service, ROUND).await; // warm-up
        });
        for _ in 0..ROUNDS {
            for_each!(c, |i, service| {
                times[i].push(per_call(calls(service, ROUND).await));
            });
        }
    });
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    println!("\ninterleaved medians over {ROUNDS} rounds of {ROUND} calls (ns per call):");
    for (name, m) in NAMES.iter().zip(&medians) {
        println!("  {name:<16} {m:8.1}");
    }
    let [bare, sluice, limit, governor] = [medians[0], medians[1], medians[2], medians[3]];
    println!(
        "  whole call:  sluicegate / limit_load_shed = {:.2}x, sluicegate / tower_governor = {:.2}x",
        sluice / limit,
        sluice / governor
    );
    println!(
        "  added cost:  sluicegate {:.1} ns, limit_load_shed {:.1} ns, tower_governor {:.1} ns; \
         sluicegate / limit_load_shed = {:.2}x (bar: 1.5x)",
        sluice - bare,
        limit - bare,
        governor - bare,
        (sluice - bare) / (limit - bare)
    );
}

/// The criterion entry point. (`criterion_group!` generates an undocumented `pub fn benches`,
/// hence the `allow`.)
#[allow(missing_docs)]
mod suite {
    use super::*;

    criterion_group!(benches, layer_group);
}
criterion_main!(suite::benches);
