//! `outbox relay --otlp-endpoint URL`: a span per delivery attempt, exported over OTLP/HTTP
//! (protobuf) in batches, joined to the producer's trace through the `traceparent` stored
//! with the message.
//!
//! The export goes through the relay's own HTTP stack (reqwest, as the webhooks): a small
//! [`opentelemetry_http::HttpClient`] runs each request on the relay's Tokio runtime, since
//! the SDK's batch processor exports from a thread of its own. A span carries ids, the topic,
//! the channel, the attempt number, the outcome and the HTTP status: never a payload, a
//! header value, a URL or a secret.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use outboxkit_core::model::{AttemptOutcome, DestinationKind};
use outboxkit_core::verdict::Verdict;
use outboxkit_core::Timestamp;
use outboxkit_dispatch::DeliveryEvent;

use crate::error::{CliError, CliResult};

/// The OTLP/HTTP path of traces, appended to an `--otlp-endpoint` that does not end in it.
const TRACES_PATH: &str = "/v1/traces";

/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of a collector's answer read (its body is only looked at for errors).
const MAX_ANSWER: usize = 64 * 1024;

/// The traces URL of `--otlp-endpoint`: the collector's base URL (`http://host:4318`, as
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) gets `/v1/traces` appended; a URL that already ends in
/// `/v1/traces` is used as it is.
pub fn traces_url(endpoint: &str) -> CliResult<String> {
    let bad = |why: &str| {
        CliError::usage(format!(
            "invalid input: --otlp-endpoint: {why} (e.g. http://127.0.0.1:4318)"
        ))
    };
    let parsed = url::Url::parse(endpoint.trim()).map_err(|_| bad("not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad("use an http:// or https:// URL with a host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("a query or fragment is not allowed"));
    }
    // The URL is logged: credentials go in OTEL_EXPORTER_OTLP_HEADERS.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "no user or password in the URL (set OTEL_EXPORTER_OTLP_HEADERS)",
        ));
    }
    let text = parsed.as_str().trim_end_matches('/');
    if text.ends_with(TRACES_PATH) {
        Ok(text.to_owned())
    } else {
        Ok(format!("{text}{TRACES_PATH}"))
    }
}

/// The exporter's HTTP client: reqwest requests run on the relay's runtime.
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let call = self
            .client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .timeout(EXPORT_TIMEOUT)
            .body(body);
        let answer = self
            .runtime
            .spawn(async move {
                let mut response = call.send().await?;
                let status = response.status();
                let mut body = Vec::new();
                while let Some(chunk) = response.chunk().await? {
                    let room = MAX_ANSWER.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if room <= chunk.len() {
                        break;
                    }
                }
                Ok::<_, reqwest::Error>((status, body))
            })
            .await;
        let (status, body) = match answer {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                // The error names the collector's address (the operator's), nothing else.
                tracing::warn!(error = %e, "exporting spans to --otlp-endpoint failed");
                return Err(Box::new(e));
            }
            Err(e) => return Err(Box::new(e)),
        };
        if !status.is_success() {
            tracing::warn!(
                status = status.as_u16(),
                "the --otlp-endpoint collector refused spans"
            );
        }
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = status;
        Ok(response)
    }
}

/// The trace pipeline of `--otlp-endpoint`: call [`Telemetry::shutdown`] when the relay
/// stops, so the spans of the last attempts are sent.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Export to `url` (from [`traces_url`]) as `service_name`, in batches. Must be called
    /// on the relay's runtime.
    pub fn start(url: String, service_name: &str) -> CliResult<Telemetry> {
        let failed = |e: &dyn std::fmt::Display| {
            CliError::failed(format!("cannot set up --otlp-endpoint: {e}"))
        };
        // The transport's TLS (ring, webpki roots): reqwest has no crypto provider of its own.
        let client = outboxkit_http::client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| failed(&e))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(RuntimeClient {
                client,
                runtime: tokio::runtime::Handle::current(),
            })
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed(&e))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(service_name.to_owned())
                    .build(),
            )
            .build();
        tracing::info!(url = %url, "exporting a span per delivery attempt over OTLP/HTTP");
        Ok(Telemetry { provider })
    }

    /// The observer that turns each attempt into a span.
    pub fn observer(&self) -> SpanObserver {
        SpanObserver {
            tracer: self.provider.tracer("outbox-relay"),
        }
    }

    /// Send what is queued and stop (off the runtime's workers: the export runs on them).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => tracing::debug!("the last spans were exported"),
            Ok(Err(e)) => tracing::warn!(error = %e, "flushing spans to --otlp-endpoint failed"),
            Err(e) => tracing::warn!(error = %e, "flushing spans to --otlp-endpoint failed"),
        }
    }
}

/// Makes a span of each delivery attempt (see [`SpanObserver::record`]).
#[derive(Debug)]
pub struct SpanObserver {
    tracer: SdkTracer,
}

fn system_time(t: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(t.as_unix_millis()).unwrap_or(0))
}

/// The span's status: an error for a failed attempt (a retry, a hold, dead), with the
/// failure's class; unset otherwise.
fn status_of(event: &DeliveryEvent<'_>) -> Status {
    let failed = matches!(
        event.verdict,
        Verdict::Retry { .. } | Verdict::Held { .. } | Verdict::Dead { .. }
    );
    if !failed {
        return Status::Unset;
    }
    let why = match event.outcome {
        Some(AttemptOutcome::Failed(class)) => class.as_str(),
        _ => event.verdict.name(),
    };
    Status::error(why)
}

impl SpanObserver {
    /// One span for the attempt, named `outbox.deliver {topic}`: kind CLIENT for a webhook,
    /// PRODUCER otherwise; a child of the message's stored `traceparent` (a remote parent),
    /// from the attempt's start to its end; attributes `outbox.delivery_id`,
    /// `outbox.message_id`, `outbox.topic`, `outbox.channel`, `outbox.attempt`,
    /// `outbox.outcome` (the verdict), `outbox.endpoint_id` for a webhook,
    /// `outbox.error_class` for a failure and `http.response.status_code` when there was an
    /// answer.
    pub fn record(&self, event: &DeliveryEvent<'_>) {
        let parent = match event.traceparent {
            Some(tp) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from_bytes(tp.trace_id_bytes()),
                SpanId::from_bytes(tp.parent_id_bytes()),
                TraceFlags::new(tp.flags()),
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        let mut attributes = vec![
            KeyValue::new("outbox.delivery_id", event.delivery_id.to_string()),
            KeyValue::new("outbox.message_id", event.message_id.to_string()),
            KeyValue::new("outbox.topic", event.topic.to_string()),
            KeyValue::new("outbox.channel", event.kind.as_str()),
            KeyValue::new("outbox.attempt", i64::from(event.attempt)),
            KeyValue::new("outbox.outcome", event.verdict.name()),
        ];
        if let Some(e) = event.endpoint {
            attributes.push(KeyValue::new("outbox.endpoint_id", e.to_string()));
        }
        if let Some(AttemptOutcome::Failed(class)) = event.outcome {
            attributes.push(KeyValue::new("outbox.error_class", class.as_str()));
        }
        if let Some(code) = event.status_code {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
        }
        let kind = match event.kind {
            DestinationKind::Webhook => SpanKind::Client,
            _ => SpanKind::Producer,
        };
        let start = system_time(event.started_at);
        let mut span = self
            .tracer
            .span_builder(Cow::Owned(format!("outbox.deliver {}", event.topic)))
            .with_kind(kind)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        use opentelemetry::trace::Span as _;
        span.set_status(status_of(event));
        span.end_with_timestamp(start + event.duration);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_once() {
        for (given, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            (
                "https://otel.example.com/otlp",
                "https://otel.example.com/otlp/v1/traces",
            ),
            (
                "http://collector:4318/v1/traces",
                "http://collector:4318/v1/traces",
            ),
        ] {
            assert_eq!(traces_url(given).unwrap(), url, "{given}");
        }
        for bad in [
            "collector:4318",
            "ftp://x/",
            "http://x/?a=1",
            "nope",
            "https://user:key@otel.example.com",
        ] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
