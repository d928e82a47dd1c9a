//! `outbox listen`: a local receiver that verifies Standard Webhooks signatures, answers as a
//! careful receiver does and prints each event (for developers wiring an endpoint).
//!
//! Answers: `--status` (default 200) only to a POST whose signature verifies; 401 for a
//! missing or wrong signature, 400 for a timestamp outside the tolerance or a missing or
//! malformed `webhook-id`/`webhook-timestamp`, 405 for another method, 413 for a body over
//! `--max-body`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use outboxkit_core::signing::{verify, VerifyError};
use outboxkit_core::{Clock, HeaderNames, SystemClock, WebhookSecret};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::error::{CliError, CliResult};
use crate::util::{emit, parse_flag_duration};

/// `listen`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox listen --port 8787 --secret whsec_…\n  outbox listen --port 8787 --secret whsec_old… --secret whsec_new… --status 503   # valid requests get 503 (to test retries)\n  outbox listen --port 0 --secret whsec_… --count 1 --json"
)]
pub struct ListenArgs {
    /// The port to listen on (on 127.0.0.1; 0 picks a free one, printed on stderr).
    #[arg(long, default_value_t = 8787)]
    port: u16,
    /// The endpoint's `whsec_…` secret (repeat during a rotation).
    #[arg(long, required = true)]
    secret: Vec<String>,
    /// Stop after this many requests (default: run until Ctrl-C).
    #[arg(long)]
    count: Option<usize>,
    /// The status to answer valid requests with (e.g. 503 to watch the sender retry).
    /// Invalid requests always get the status that says why (400, 401, 405, 413).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(200..=599))]
    status: u16,
    /// How far a signature's timestamp may be from now, either way.
    #[arg(long, default_value = "5m")]
    tolerance: String,
    /// The largest body accepted, in bytes; larger ones get 413.
    #[arg(long, default_value_t = 1024 * 1024)]
    max_body: usize,
    /// Print each request as one JSON object per line (JSON Lines) instead of text.
    #[arg(long)]
    json: bool,
}

/// What one request was and how it was answered.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    webhook_id: Option<String>,
    status: u16,
    verdict: String,
    body: Option<String>,
}

struct Config {
    secrets: Vec<WebhookSecret>,
    tolerance: std::time::Duration,
    max_body: usize,
    status: StatusCode,
    names: HeaderNames,
}

/// Run the listener.
pub async fn run(a: ListenArgs) -> CliResult<()> {
    let secrets = a
        .secret
        .iter()
        .map(|s| WebhookSecret::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let tolerance = parse_flag_duration("tolerance", &a.tolerance)?;
    let status = StatusCode::from_u16(a.status)
        .map_err(|_| CliError::usage("invalid input: --status: not an HTTP status"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], a.port));
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot listen on {addr}: {e}")))?;
    eprintln!("listening on http://{local}/ (Ctrl-C to stop)");
    let config = Arc::new(Config {
        secrets,
        tolerance,
        max_body: a.max_body,
        status,
        names: HeaderNames::default(),
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<Seen>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = tokio::spawn(accept_loop(listener, config, tx, stop_rx));
    let mut printed = 0;
    let result = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            seen = rx.recv() => {
                let Some(seen) = seen else { break Ok(()) };
                if let Err(e) = print(&seen, a.json) {
                    break Err(e);
                }
                printed += 1;
                if a.count.is_some_and(|n| printed >= n) {
                    break Ok(());
                }
            }
        }
    };
    // Let the answers being written reach their senders; a client that keeps a connection
    // open without a request in flight is not waited for long.
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
    result
}

fn print(s: &Seen, json: bool) -> CliResult<()> {
    if json {
        let v = serde_json::json!({
            "method": s.method,
            "path": s.path,
            "webhook_id": s.webhook_id,
            "status": s.status,
            "verified": s.verdict == "verified",
            "verdict": s.verdict,
            "body": s.body,
        });
        return emit(&format!("{v}\n"));
    }
    let mut text = format!(
        "{} {} [{}] id={} -> {}\n",
        s.method,
        s.path,
        s.verdict,
        s.webhook_id.clone().unwrap_or_default(),
        s.status
    );
    if let Some(b) = &s.body {
        text.push_str(b);
        text.push('\n');
    }
    emit(&text)
}

/// Accept connections until `stop` turns true; then let every open connection finish the
/// answer it is writing (hyper's graceful shutdown) and return.
async fn accept_loop(
    listener: TcpListener,
    config: Arc<Config>,
    tx: mpsc::UnboundedSender<Seen>,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let config = config.clone();
        let tx = tx.clone();
        let mut stop = stop.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let config = config.clone();
                let tx = tx.clone();
                async move {
                    let (seen, response) = answer(req, &config).await;
                    let _ = tx.send(seen);
                    Ok::<_, Infallible>(response)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    while connections.join_next().await.is_some() {}
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn reply(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *r.status_mut() = status;
    r
}

async fn answer(req: Request<Incoming>, c: &Config) -> (Seen, Response<Full<Bytes>>) {
    let mut seen = Seen {
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
        webhook_id: req
            .headers()
            .get(&c.names.id)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        status: 0,
        verdict: String::new(),
        body: None,
    };
    let done = |seen: &mut Seen, status: StatusCode, verdict: &str| {
        seen.status = status.as_u16();
        seen.verdict = verdict.to_owned();
        reply(status, verdict)
    };
    if req.method() != Method::POST {
        let mut r = done(
            &mut seen,
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use POST",
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return (seen, r);
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > c.max_body as u64) {
        let r = done(&mut seen, StatusCode::PAYLOAD_TOO_LARGE, "body too large");
        return (seen, r);
    }
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, c.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let r = done(&mut seen, StatusCode::PAYLOAD_TOO_LARGE, "body too large");
            return (seen, r);
        }
    };
    seen.body = Some(String::from_utf8_lossy(&body).into_owned());
    let secrets: Vec<&WebhookSecret> = c.secrets.iter().collect();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let verdict = verify(
        &secrets,
        &c.names,
        header,
        &body,
        SystemClock.now(),
        c.tolerance,
    );
    let r = match verdict {
        Ok(()) => done(&mut seen, c.status, "verified"),
        Err(e @ (VerifyError::NoSupportedSignature | VerifyError::Mismatch)) => done(
            &mut seen,
            StatusCode::UNAUTHORIZED,
            &format!("SIGNATURE INVALID: {e}"),
        ),
        Err(VerifyError::MissingHeader(h)) if h == c.names.signature => done(
            &mut seen,
            StatusCode::UNAUTHORIZED,
            &format!("SIGNATURE INVALID: missing header {h}"),
        ),
        Err(e) => done(
            &mut seen,
            StatusCode::BAD_REQUEST,
            &format!("REJECTED: {e}"),
        ),
    };
    (seen, r)
}
