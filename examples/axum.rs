//! An axum service behind the gate: `/pay` is urgent, `/browse` is not.
//!
//! The layer admits, delays or refuses each request; a refused one gets 429 or 503 with
//! `Retry-After` and a problem body (a gRPC request, a `grpc-status`), and an admitted one keeps
//! its permit until its response body has been sent. `/metrics` (outside the layer) shows the
//! gate's metrics in the Prometheus text format. Run with:
//!
//! ```text
//! cargo run --example axum --features tower,metrics              # serves on 127.0.0.1:3000
//! curl -i http://127.0.0.1:3000/pay
//! curl http://127.0.0.1:3000/metrics
//! cargo run --example axum --features tower,metrics -- --smoke   # asks itself, then exits
//! ```

use axum::{routing::get, Router};
use metrics_exporter_prometheus::PrometheusBuilder;
use sluicegate::middleware::tower::SluiceLayer;
use sluicegate::{Config, Gate};

/// Routes are urgent unless listed otherwise by default (`default_urgency = "urgent"`); here
/// everything is non-urgent unless listed, so the `urgent` list is what marks `/pay`.
const CONFIG: &str = r#"
[routes]
default_urgency = "non_urgent"
urgent = ["/pay", "/pay/*"]
non_urgent = ["/browse*"]
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let smoke = std::env::args().any(|a| a == "--smoke");

    // The recorder first: the gate registers its metrics when it is built.
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    // The layer, in ten lines.
    let gate = Gate::new(Config::from_toml_str(CONFIG)?)?;
    let app = Router::new()
        .route("/pay", get(|| async { "paid\n" }))
        .route("/browse", get(|| async { "the catalogue\n" }))
        .layer(SluiceLayer::new(gate.clone()));

    // Metrics, outside the layer so that a scrape is never refused. The gate publishes on its
    // tick; `snapshot()` runs a tick that is due, so an idle gate's figures are fresh too.
    let scraped = gate.clone();
    let app = app.route(
        "/metrics",
        get(move || {
            scraped.snapshot();
            std::future::ready(prometheus.render())
        }),
    );
    let address = if smoke {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    };
    let listener = tokio::net::TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    let server = axum::serve(listener, app);

    if !smoke {
        println!("serving on http://{local} (/pay urgent, /browse non-urgent)");
        return Ok(server.await?);
    }
    let server = tokio::spawn(async move { server.await });
    let reply = get_once(local, "/pay").await?;
    println!("GET /pay -> {reply}");
    println!("{:?}", gate.snapshot().counters);
    let metrics = get_once(local, "/metrics").await?;
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("sluicegate_in_flight"))
    {
        println!("GET /metrics -> {line}");
    }
    server.abort();
    Ok(())
}

/// One request to the server, with the HTTP client hyper-util provides; the status and body.
async fn get_once(
    address: std::net::SocketAddr,
    path: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    use http_body_util::{BodyExt, Empty};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let uri: http::Uri = format!("http://{address}{path}").parse()?;
    let response =
        tokio::time::timeout(std::time::Duration::from_secs(10), client.get(uri)).await??;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(format!(
        "{status} {}",
        String::from_utf8_lossy(&body).trim_end()
    ))
}
