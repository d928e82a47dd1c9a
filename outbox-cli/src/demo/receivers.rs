//! The demo's own stand-ins: a loopback webhook receiver that answers a scripted sequence of
//! statuses and counts the requests, and an in-memory mailer that refuses until healed.
//!
//! They are small on purpose and cover only what the demo tells its story with. The test kit
//! (`outboxkit-testing`) has the full ones (signature checks, delays, resets, recorded
//! requests); the shipped binary links no test code, so the demo does not use it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use outboxkit_core::{
    Accepted, IdempotencyKey, MailCapabilities, MailError, MailErrorCode, MailMessage, MailOutcome,
    Mailer,
};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A webhook receiver on `127.0.0.1` (an ephemeral port), HTTP/1.1 with keep-alive. Each
/// request is read whole and counted, then answered: first from the script, then with the
/// standing status (200, or the one given to [`Receiver::refuse`]). The server stops when
/// the receiver is dropped.
#[derive(Debug)]
pub(crate) struct Receiver {
    addr: SocketAddr,
    answers: Arc<Answers>,
    stop: watch::Sender<bool>,
}

#[derive(Debug)]
struct Answers {
    script: Mutex<Script>,
    count: AtomicUsize,
}

#[derive(Debug)]
struct Script {
    queued: VecDeque<u16>,
    standing: u16,
}

impl Answers {
    fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count one request and pick its answer.
    fn next(&self) -> u16 {
        let mut s = self.script();
        // Counted under the script's lock: the n-th request counted gets the n-th answer.
        self.count.fetch_add(1, Ordering::SeqCst);
        s.queued.pop_front().unwrap_or(s.standing)
    }
}

impl Receiver {
    /// Bind `127.0.0.1:0` and start serving.
    pub(crate) async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let answers = Arc::new(Answers {
            script: Mutex::new(Script {
                queued: VecDeque::new(),
                standing: 200,
            }),
            count: AtomicUsize::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(accept_loop(listener, answers.clone(), stopped));
        Ok(Receiver {
            addr,
            answers,
            stop,
        })
    }

    /// `http://127.0.0.1:PORT/hook`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Queue answers, one per request, given before the standing status.
    pub(crate) fn script(&self, statuses: impl IntoIterator<Item = u16>) {
        self.answers.script().queued.extend(statuses);
    }

    /// Make the standing answer this status.
    pub(crate) fn refuse(&self, status: u16) {
        self.answers.script().standing = status;
    }

    /// Make the standing answer 200 again (queued answers are kept).
    pub(crate) fn heal(&self) {
        self.answers.script().standing = 200;
    }

    /// How many requests arrived.
    pub(crate) fn count(&self) -> usize {
        self.answers.count.load(Ordering::SeqCst)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the receiver is gone: stop as well.
    let _ = stop.wait_for(|s| *s).await;
}

/// Accept connections until the receiver is dropped; each connection is a task that ends
/// then too.
async fn accept_loop(
    listener: TcpListener,
    answers: Arc<Answers>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            () = stopped(&mut stop) => return,
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
        let answers = answers.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answers = answers.clone();
                async move { Ok::<_, Infallible>(answer(req, &answers).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                () = stopped(&mut stop) => {}
            }
        });
    }
}

async fn answer(req: Request<Incoming>, answers: &Answers) -> Response<Empty<Bytes>> {
    // Read the body whole first: a client that gives up mid-body sent no request, and is
    // not counted.
    let status = match req.into_body().collect().await {
        Ok(_) => answers.next(),
        Err(_) => 400,
    };
    let mut r = Response::new(Empty::new());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// A [`Mailer`] that keeps nothing but a count of what it accepted, refusing every send with
/// a code and outcome while told to. Not idempotent: two sends with one key are two e-mails.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    state: Mutex<MailState>,
}

#[derive(Debug, Default)]
struct MailState {
    refusal: Option<(MailErrorCode, MailOutcome)>,
    accepted: usize,
}

impl Mailbox {
    fn state(&self) -> MutexGuard<'_, MailState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fail every send with `code` and `outcome` until [`Mailbox::heal`].
    pub(crate) fn refuse(&self, code: MailErrorCode, outcome: MailOutcome) {
        self.state().refusal = Some((code, outcome));
    }

    /// Accept sends again.
    pub(crate) fn heal(&self) {
        self.state().refusal = None;
    }

    /// How many messages were accepted.
    pub(crate) fn accepted(&self) -> usize {
        self.state().accepted
    }
}

#[async_trait]
impl Mailer for Mailbox {
    async fn send(
        &self,
        _message: &MailMessage,
        _key: &IdempotencyKey,
    ) -> Result<Accepted, MailError> {
        let mut s = self.state();
        if let Some((code, outcome)) = s.refusal {
            return Err(MailError::new(code, outcome, "refused by the demo mailer"));
        }
        s.accepted += 1;
        Ok(Accepted {
            provider_id: Some(format!("demo-{}", s.accepted)),
        })
    }

    fn capabilities(&self) -> MailCapabilities {
        MailCapabilities { idempotent: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_core::{EndpointUrl, SignedRequest, WebhookResponse, WebhookTransport};

    fn post(url: &str) -> SignedRequest {
        SignedRequest {
            url: EndpointUrl::parse(url).unwrap(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: b"{}".to_vec(),
            timeout: Duration::from_secs(5),
        }
    }

    fn status(r: &WebhookResponse) -> u16 {
        match r {
            WebhookResponse::Answered { status, .. } => *status,
            WebhookResponse::Failed { class, detail } => panic!("no answer: {class:?} {detail}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_receiver_answers_its_script_then_the_standing_status_and_counts() {
        let rx = Receiver::start().await.unwrap();
        let http = outboxkit_http::HttpTransport::new(super::super::loopback_policy()).unwrap();
        rx.script([503, 410]);
        rx.refuse(401);
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(status(&http.send(post(&rx.url())).await));
        }
        assert_eq!(seen, [503, 410, 401, 401]);
        rx.script([500]);
        rx.heal();
        seen.clear();
        for _ in 0..2 {
            seen.push(status(&http.send(post(&rx.url())).await));
        }
        assert_eq!(
            seen,
            [500, 200],
            "a queued answer comes before the standing one"
        );
        assert_eq!(rx.count(), 6);
    }

    #[tokio::test]
    async fn the_mailbox_refuses_until_healed_and_counts_what_it_accepts() {
        let mail = Mailbox::default();
        let m = MailMessage {
            to: "customer@example.com".into(),
            subject: "s".into(),
            text: "t".into(),
            html: None,
            reply_to: None,
            from_name: None,
        };
        let key = IdempotencyKey::new("outbox-1").unwrap();
        mail.refuse(MailErrorCode::Unavailable, MailOutcome::NotSent);
        let e = mail.send(&m, &key).await.unwrap_err();
        assert_eq!(
            (e.code, e.outcome),
            (MailErrorCode::Unavailable, MailOutcome::NotSent)
        );
        assert_eq!(mail.accepted(), 0);
        mail.heal();
        mail.send(&m, &key).await.unwrap();
        mail.send(&m, &key).await.unwrap();
        assert_eq!(mail.accepted(), 2, "not idempotent: one key, two e-mails");
        assert!(mail.available() && !mail.capabilities().idempotent);
    }
}
