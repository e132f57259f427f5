//! Logging and tracing.
//!
//! Logs: `tracing` to stderr, filtered by `MURNODE_LOG` (default `info`), as text or JSON
//! lines. Stdout is kept for the ready line and command output.
//!
//! Traces: every hop a task takes carries a W3C `traceparent` (HTTP requests in and out,
//! `/murmur/task/1` submits), always, so a task's trace id is the same on every node — but
//! a capsule's own `message/send` carries one only while spans are exported, as the
//! runtime specification says ([`exporting`]). Spans
//! are exported with OpenTelemetry over OTLP only when the standard environment asks for it
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, protocol from
//! `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the default, or `http/json`; service name
//! from `OTEL_SERVICE_NAME`, default `murnode`; `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turn it off). Otherwise no exporter, no OpenTelemetry layer,
//! and no cost beyond formatting one header per hop.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

pub use murmur_api::TraceContext;

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Keeps span export running; flushes what is buffered when dropped.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("warning: flushing spans to the OTLP endpoint failed: {err}");
        }
    }
}

/// Whether this process exports spans (set once by [`init`]).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans are exported over OTLP: what decides if a capsule's outgoing message
/// carries a `traceparent`.
#[must_use]
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the OTEL_* environment asks for span export.
fn otlp_requested() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.eq_ignore_ascii_case("none"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

fn otlp_provider() -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig;
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|_| "http/protobuf".into());
    let protocol = match protocol.trim() {
        "http/protobuf" | "" => opentelemetry_otlp::Protocol::HttpBinary,
        "http/json" => opentelemetry_otlp::Protocol::HttpJson,
        other => {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported by murnode; use http/protobuf (port 4318) or http/json"
            ));
        }
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "murnode".into());
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
    Ok(SdkTracerProvider::builder().with_resource(resource).with_batch_exporter(exporter).build())
}

/// Installs the global subscriber (and, when the environment asks, the OTLP span
/// exporter). Call once, first thing in `main`; keep the result until the end.
pub fn init(format: LogFormat) -> Telemetry {
    // libp2p-kad warns "no known peers" on every periodic bootstrap of a node that has none
    // yet (the first node of a mesh); that is expected, so only its errors are shown.
    let filter =
        EnvFilter::try_from_env("MURNODE_LOG").unwrap_or_else(|_| EnvFilter::new("info,libp2p_kad=error"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let mut telemetry = Telemetry::default();
    let mut problem = None;
    let otel = if otlp_requested() {
        match otlp_provider() {
            Ok(provider) => {
                let tracer = provider.tracer("murnode");
                telemetry.provider = Some(provider);
                EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
                // Only our own spans: the exporter's HTTP stack must not trace itself.
                let targets = tracing_subscriber::filter::Targets::new()
                    .with_target("murmur_node", tracing::Level::INFO)
                    // The agent loop's session, turn and tool-call spans.
                    .with_target("murmur_agent", tracing::Level::INFO);
                Some(tracing_opentelemetry::layer().with_tracer(tracer).with_filter(targets))
            }
            Err(err) => {
                problem = Some(err);
                None
            }
        }
    } else {
        None
    };
    // A second init (in tests) keeps the first subscriber; that is fine.
    let _ = tracing_subscriber::registry().with(fmt).with(otel).try_init();
    if let Some(problem) = problem {
        tracing::warn!("span export is off: {problem}");
    }
    telemetry
}

/// Makes `span` a child of the remote span `parent` in the exported trace (nothing happens
/// while span export is off).
pub fn set_parent(span: &tracing::Span, parent: &TraceContext) {
    let remote = SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        if parent.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() },
        true,
        TraceState::default(),
    );
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
}

/// The trace context to send on the next hop: the current span's, when spans are
/// exported, else a child of `fallback` (so the trace id still travels).
#[must_use]
pub fn current_or(fallback: &TraceContext) -> TraceContext {
    let context = tracing::Span::current().context();
    let span = context.span();
    let current = span.span_context();
    if current.is_valid() {
        TraceContext {
            trace_id: current.trace_id().to_bytes(),
            span_id: current.span_id().to_bytes(),
            sampled: current.is_sampled(),
        }
    } else {
        fallback.child()
    }
}

/// A span for work on a task that arrived with `traceparent` (a child of it).
#[must_use]
pub fn task_span(name: &'static str, task: &str, capsule: &str, traceparent: Option<&str>) -> tracing::Span {
    let parent = traceparent.and_then(TraceContext::parse);
    let trace_id = parent.map(|p| p.trace_id_hex()).unwrap_or_default();
    let span = match name {
        "task.accept" => tracing::info_span!("task.accept", task, capsule, trace_id = %trace_id),
        _ => tracing::info_span!("task.run", task, capsule, trace_id = %trace_id),
    };
    if let Some(parent) = &parent {
        set_parent(&span, parent);
    }
    span
}

/// The trace id of a `traceparent` header, if it is valid.
#[must_use]
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    TraceContext::parse(traceparent).map(|c| c.trace_id_hex())
}
