//! OpenTelemetry traces, off by default. When `log.otlp_endpoint` is set, each request is a
//! `request` span carrying its `request_id` — the id of the refusal body, the `x-request-id`
//! header and the decision-log line — with one child span per pipeline stage (`body`,
//! `digest`, `signature`, `replay`, `token`, `mcp`, `policy`, `quota`, `upstream`), exported
//! in batches over OTLP/HTTP (protobuf). Spans carry metadata only, like the decision log.

use std::io;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The OTLP exporter could not be built (e.g. its HTTP client).
    #[error("cannot build the OTLP exporter for {endpoint}: {reason}")]
    ExporterUnavailable {
        /// `log.otlp_endpoint`.
        endpoint: String,
        /// What failed.
        reason: String,
    },
}

/// Keeps the exporter alive; dropping it flushes the spans still batched and stops it.
#[derive(Debug)]
pub struct OtelGuard(SdkTracerProvider);

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("warning: OTLP exporter did not flush on shutdown: {e}");
        }
    }
}

/// Sets up diagnostic logging on stderr (`filter`, `RUST_LOG` overrides it) and, when
/// `otlp_endpoint` is set (the full traces URL, e.g. `http://collector:4318/v1/traces`), the
/// span exporter. Build it before the async runtime and drop the guard after it.
pub fn init_tracing(filter: &str, otlp_endpoint: Option<&str>) -> Result<Option<OtelGuard>, OtelError> {
    let env = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let Some(endpoint) = otlp_endpoint else {
        // One layer: its filter is the subscriber's. A per-layer filter would keep its own
        // bookkeeping at every span's creation, entry and exit.
        let _ = tracing_subscriber::registry().with(env).with(stderr_log(ansi)).try_init();
        return Ok(None);
    };
    let fmt = stderr_log(ansi).with_filter(env);
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| OtelError::ExporterUnavailable { endpoint: endpoint.to_owned(), reason: e.to_string() })?;
    let provider =
        SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(Resource::builder().with_service_name("portcullis").build()).build();
    // Spans are exported whatever `log.level` says: the request span is info level, the stage
    // spans trace level under their own target (so the stderr log never pays for them).
    let spans = tracing_subscriber::filter::Targets::new()
        .with_target("portcullis", tracing::Level::INFO)
        .with_target(crate::stage::STAGE_SPAN_TARGET, tracing::Level::TRACE);
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("portcullis")).with_filter(spans);
    let _ = tracing_subscriber::registry().with(fmt).with(otel).try_init();
    Ok(Some(OtelGuard(provider)))
}

/// The diagnostic log's layer: stderr, no target, fields as [`crate::telemetry::LogFields`].
fn stderr_log<S>(ansi: bool) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer().with_writer(io::stderr).with_ansi(ansi).with_target(false).fmt_fields(crate::telemetry::LogFields)
}
