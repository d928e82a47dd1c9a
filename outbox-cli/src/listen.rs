//! `outbox listen`: a local receiver that verifies Standard Webhooks signatures, answers as a
//! careful receiver does and prints each event (for developers wiring an endpoint).
//!
//! With `--forward-to URL` (the Stripe CLI pattern), a verified request is forwarded to the
//! local application (same body, its content type and `webhook-*` headers) and the sender
//! gets the application's status and body; 502 when the application does not answer.
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
    /// Forward each verified request to this `http://` URL (your application, e.g.
    /// `http://127.0.0.1:3000/hooks`) and answer the sender with its status and body.
    #[arg(long, value_name = "URL", conflicts_with = "status")]
    forward_to: Option<String>,
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
    forward_to: Option<hyper::Uri>,
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
    let forward_to = a.forward_to.as_deref().map(forward_target).transpose()?;
    let config = Arc::new(Config {
        forward_to,
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
        Ok(()) => match &c.forward_to {
            None => done(&mut seen, c.status, "verified"),
            Some(to) => match forward(to, &parts.headers, &c.names, body).await {
                Ok(app) => {
                    seen.status = app.status().as_u16();
                    seen.verdict = format!("verified, forwarded: {}", app.status());
                    app
                }
                Err(e) => done(
                    &mut seen,
                    StatusCode::BAD_GATEWAY,
                    &format!("verified; FORWARD FAILED: {e}"),
                ),
            },
        },
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

/// `--forward-to`: an `http://host:port/path` URL.
fn forward_target(url: &str) -> CliResult<hyper::Uri> {
    let uri: hyper::Uri = url.parse().map_err(|_| {
        CliError::usage(format!("invalid input: --forward-to: `{url}` is not a URL"))
    })?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(CliError::usage(format!(
            "invalid input: --forward-to: `{url}` must be an http:// URL with a host (the local application)"
        )));
    }
    Ok(uri)
}

/// The longest application answer passed back to the sender.
const FORWARD_BODY_MAX: usize = 64 * 1024;

/// POST `body` to the application at `to` with the request's content type and webhook
/// headers; its answer (status, content type, body up to [`FORWARD_BODY_MAX`]).
async fn forward(
    to: &hyper::Uri,
    headers: &hyper::HeaderMap,
    names: &HeaderNames,
    body: Bytes,
) -> Result<Response<Full<Bytes>>, String> {
    let host = to.host().unwrap_or("127.0.0.1");
    let port = to.port_u16().unwrap_or(80);
    let work = async {
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let path = to.path_and_query().map_or("/", |p| p.as_str());
        let authority = to.authority().map_or(host.to_owned(), |a| a.to_string());
        let mut req = Request::post(path)
            .header(hyper::header::HOST, authority)
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let keep = [
            hyper::header::CONTENT_TYPE.as_str(),
            names.id.as_str(),
            names.timestamp.as_str(),
            names.signature.as_str(),
        ];
        for name in keep {
            if let Some(v) = headers.get(name) {
                if let Ok(n) = hyper::header::HeaderName::from_bytes(name.as_bytes()) {
                    req.headers_mut().insert(n, v.clone());
                }
            }
        }
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let (parts, incoming) = resp.into_parts();
        let bytes = Limited::new(incoming, FORWARD_BODY_MAX)
            .collect()
            .await
            .map_err(|e| format!("the application's answer: {e}"))?
            .to_bytes();
        let mut r = Response::new(Full::new(bytes));
        *r.status_mut() = parts.status;
        if let Some(ct) = parts.headers.get(hyper::header::CONTENT_TYPE) {
            r.headers_mut()
                .insert(hyper::header::CONTENT_TYPE, ct.clone());
        }
        Ok(r)
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), work)
        .await
        .map_err(|_| "the application did not answer within 10 s".to_owned())?
}
