//! The receiver's server side: the accept loop, one task per connection, the answer bodies
//! and a socket wrapper that can close with a TCP reset.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Reply, Shared};

/// Accept connections until told to stop (or every handle is gone).
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A failed accept (out of descriptors, an aborted handshake) is not fatal.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        shared.connected();
        tokio::spawn(serve_connection(stream, shared.clone(), stop.clone()));
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let reset = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Resettable {
        stream,
        reset: reset.clone(),
    });
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let reset = reset.clone();
        async move { answer(req, &shared, &reset).await }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::select! {
        _ = conn => {}
        () = stopped(&mut stop) => {}
    }
}

/// Resolves once the receiver is told to stop or every handle is gone.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// The service's error for [`Reply::Reset`]: hyper then drops the connection unanswered.
#[derive(Debug)]
struct ResetRequested;

impl std::fmt::Display for ResetRequested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reset requested by the script")
    }
}

impl std::error::Error for ResetRequested {}

async fn answer(
    req: Request<Incoming>,
    shared: &Shared,
    reset: &AtomicBool,
) -> Result<Response<ReplyBody>, ResetRequested> {
    let (parts, body) = req.into_parts();
    // A client that gives up mid-body gets nothing recorded: it sent no request.
    let body = body.collect().await.map_err(|_| ResetRequested)?.to_bytes();
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let _busy = InFlight::enter(shared);
    let reply = shared.record(
        parts.method.as_str().to_owned(),
        parts.uri.path().to_owned(),
        headers,
        body.to_vec(),
    );
    let response = match reply {
        Reply::Status(s) => respond(s, ReplyBody::empty()),
        Reply::RetryAfter(s, value) => {
            let mut r = respond(s, ReplyBody::empty());
            if let Ok(v) = HeaderValue::from_str(&value) {
                r.headers_mut().insert(RETRY_AFTER, v);
            }
            r
        }
        Reply::Delay(wait, s) => {
            tokio::time::sleep(wait).await;
            respond(s, ReplyBody::empty())
        }
        Reply::StallAfterHeaders(s) => respond(s, ReplyBody::Stall),
        Reply::HugeBody(s, len) => respond(
            s,
            ReplyBody::Repeat {
                remaining: len as u64,
                then_stall: false,
            },
        ),
        Reply::EndlessBody(s, len) => respond(
            s,
            ReplyBody::Repeat {
                remaining: len as u64,
                then_stall: true,
            },
        ),
        Reply::Redirect(s, location) => {
            let mut r = respond(s, ReplyBody::empty());
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(LOCATION, v);
            }
            r
        }
        Reply::Reset => {
            reset.store(true, Ordering::SeqCst);
            return Err(ResetRequested);
        }
        Reply::Body(s, text) => {
            let mut r = respond(s, ReplyBody::Full(Some(Bytes::from(text))));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
    };
    Ok(response)
}

/// One request being answered (`Shared::in_flight`), from its record to its answer.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response with this status (an invalid status becomes 500).
fn respond(status: u16, body: ReplyBody) -> Response<ReplyBody> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// The bodies the receiver sends.
pub(crate) enum ReplyBody {
    /// All at once (`None` once sent, or empty).
    Full(Option<Bytes>),
    /// `remaining` bytes, streamed in chunks; then the end, or (`then_stall`) nothing ever.
    Repeat { remaining: u64, then_stall: bool },
    /// Never a byte, never the end.
    Stall,
}

const CHUNK: usize = 16 * 1024;

impl ReplyBody {
    fn empty() -> Self {
        ReplyBody::Full(None)
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ReplyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ReplyBody::Repeat {
                remaining,
                then_stall,
            } => {
                if *remaining == 0 {
                    return if *then_stall {
                        Poll::Pending
                    } else {
                        Poll::Ready(None)
                    };
                }
                let n = (*remaining).min(CHUNK as u64);
                *remaining -= n;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; n as usize])))))
            }
            // Pending with no waker registered: nothing will ever wake it; the connection
            // ends when the client closes it or the receiver stops.
            ReplyBody::Stall => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReplyBody::Full(b) => b.is_none(),
            ReplyBody::Repeat {
                remaining,
                then_stall,
            } => *remaining == 0 && !*then_stall,
            ReplyBody::Stall => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReplyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ReplyBody::Repeat {
                remaining,
                then_stall: false,
            } => SizeHint::with_exact(*remaining),
            ReplyBody::Repeat {
                then_stall: true, ..
            } => SizeHint::default(),
            ReplyBody::Stall => SizeHint::default(),
        }
    }
}

/// A TCP stream that closes with a reset (`SO_LINGER` 0) when its flag is set.
struct Resettable {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for Resettable {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            // A zero linger never blocks on close: the kernel sends RST and discards.
            #[allow(deprecated)]
            let _ = self.stream.set_linger(Some(Duration::ZERO));
        }
    }
}

impl AsyncRead for Resettable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Resettable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
