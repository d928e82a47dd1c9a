//! `SmtpStandIn`: a small real SMTP server on a loopback port for tests. It records each
//! accepted message, answers chosen codes per stage, can drop the connection after the
//! message data or stall, and can require AUTH (PLAIN/LOGIN) and STARTTLS or implicit TLS
//! with a certificate generated at start.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

mod session;

use session::test_tls;

/// A step of an SMTP session, for [`SmtpStandIn::script`] and [`SmtpStandIn::refuse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SmtpStage {
    /// The greeting after the connection is accepted (default `220`).
    Connect,
    /// `EHLO`/`HELO` (default `250` with the extensions).
    Ehlo,
    /// `MAIL FROM` (default `250`).
    MailFrom,
    /// `RCPT TO` (default `250`).
    RcptTo,
    /// The `DATA` command (default `354`).
    Data,
    /// The end of the message data, `.` (default `250`: the message is accepted).
    EndOfData,
}

/// How the stand-in answers at a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SmtpReply {
    /// Answer this code (a generic text follows it).
    Code(u16),
    /// Close the connection without answering. At [`SmtpStage::EndOfData`] the message is
    /// recorded first: the worst case, the server kept the message and crashed before
    /// saying so.
    Drop,
    /// Never answer; keep reading until the client goes away.
    Stall,
}

/// One message the stand-in accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmtpMessage {
    /// The `MAIL FROM` address.
    pub from: String,
    /// The `RCPT TO` addresses.
    pub to: Vec<String>,
    /// The header lines, in order, as (name, value) with folded lines joined.
    pub headers: Vec<(String, String)>,
    /// Everything after the blank line that ends the headers.
    pub body: String,
    /// The user that authenticated on the session, if any.
    pub user: Option<String>,
    /// Whether the session was encrypted (STARTTLS or implicit TLS).
    pub encrypted: bool,
}

impl SmtpMessage {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Message-ID` header.
    pub fn message_id(&self) -> Option<&str> {
        self.header("message-id")
    }
}

/// Which TLS the stand-in speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tls {
    /// Clear text only.
    None,
    /// `STARTTLS` offered and required.
    Upgrade,
    /// TLS from the first byte.
    Implicit,
}

/// Settings of an [`SmtpStandIn`], started with [`SmtpStandInBuilder::start`].
#[derive(Clone, Debug)]
pub struct SmtpStandInBuilder {
    tls: Tls,
    auth: Option<(String, String)>,
}

impl SmtpStandInBuilder {
    /// Offer STARTTLS and refuse `MAIL FROM` (`530`) before it.
    pub fn starttls(mut self) -> Self {
        self.tls = Tls::Upgrade;
        self
    }

    /// Speak TLS from the first byte (`smtps`).
    pub fn implicit_tls(mut self) -> Self {
        self.tls = Tls::Implicit;
        self
    }

    /// Offer `AUTH PLAIN LOGIN` and refuse `MAIL FROM` (`530`) before a successful one
    /// with this user and password (`535` for wrong ones).
    pub fn auth(mut self, user: &str, password: &str) -> Self {
        self.auth = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Bind `127.0.0.1:0` and serve until the stand-in is dropped. With TLS, a self-signed
    /// certificate for `localhost` is generated here ([`SmtpStandIn::certificate_pem`]).
    ///
    /// # Panics
    /// When the loopback port cannot be bound or the certificate cannot be made: a test
    /// fixture, not library code.
    pub async fn start(self) -> SmtpStandIn {
        let (acceptor, pem) = if self.tls == Tls::None {
            (None, None)
        } else {
            let (a, p) = test_tls().expect("the stand-in's test certificate");
            (Some(a), Some(p))
        };
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let shared = Arc::new(Shared {
            tls: self.tls,
            auth: self.auth,
            acceptor,
            state: Mutex::new(State::default()),
        });
        let server = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let server = Arc::clone(&server);
                tokio::spawn(async move {
                    server.state().connections += 1;
                    let _ = server.serve(tcp).await;
                });
            }
        });
        SmtpStandIn {
            addr,
            pem,
            shared,
            _task: Arc::new(AbortOnDrop(task)),
        }
    }
}

/// A real SMTP server on a loopback port. Clones share the server and its record; it stops
/// when the last clone is dropped.
///
/// ```
/// use outboxkit_testing::{SmtpReply, SmtpStage, SmtpStandIn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let smtp = SmtpStandIn::builder().auth("app", "secret").start().await;
/// smtp.script(SmtpStage::RcptTo, SmtpReply::Code(451)); // the next RCPT TO only
/// smtp.refuse(SmtpStage::EndOfData, 554); // every message until heal()
/// smtp.heal();
/// assert!(smtp.messages().is_empty());
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SmtpStandIn {
    addr: SocketAddr,
    pem: Option<String>,
    shared: Arc<Shared>,
    _task: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Default)]
struct State {
    scripted: HashMap<SmtpStage, VecDeque<SmtpReply>>,
    refused: HashMap<SmtpStage, u16>,
    messages: Vec<SmtpMessage>,
    received: Vec<SmtpMessage>,
    connections: usize,
    data_commands: usize,
}

struct Shared {
    tls: Tls,
    auth: Option<(String, String)>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("tls", &self.tls)
            .field("auth", &self.auth.is_some())
            .finish_non_exhaustive()
    }
}

impl SmtpStandIn {
    /// A plain server: no TLS, no AUTH.
    pub fn builder() -> SmtpStandInBuilder {
        SmtpStandInBuilder {
            tls: Tls::None,
            auth: None,
        }
    }

    /// A plain server started at once.
    pub async fn start() -> SmtpStandIn {
        Self::builder().start().await
    }

    /// The bound address (`127.0.0.1:port`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The PEM of the self-signed certificate (for `localhost`) when TLS is on: add it to
    /// the client's trusted roots.
    pub fn certificate_pem(&self) -> Option<&str> {
        self.pem.as_deref()
    }

    /// Answer the next arrival at `stage` with `reply` (queued: one reply per arrival,
    /// before any [`SmtpStandIn::refuse`]).
    pub fn script(&self, stage: SmtpStage, reply: SmtpReply) {
        self.shared
            .state()
            .scripted
            .entry(stage)
            .or_default()
            .push_back(reply);
    }

    /// Answer `code` at `stage` every time until [`SmtpStandIn::heal`].
    pub fn refuse(&self, stage: SmtpStage, code: u16) {
        self.shared.state().refused.insert(stage, code);
    }

    /// Forget every refusal and scripted reply.
    pub fn heal(&self) {
        let mut s = self.shared.state();
        s.refused.clear();
        s.scripted.clear();
    }

    /// The accepted messages, in order.
    pub fn messages(&self) -> Vec<SmtpMessage> {
        self.shared.state().messages.clone()
    }

    /// Every message whose data arrived, in order, whatever the answer to it (refused,
    /// deferred and dropped ones too).
    pub fn received(&self) -> Vec<SmtpMessage> {
        self.shared.state().received.clone()
    }

    /// How many connections were accepted.
    pub fn connections(&self) -> usize {
        self.shared.state().connections
    }

    /// How many `DATA` commands arrived (accepted or not).
    pub fn data_commands(&self) -> usize {
        self.shared.state().data_commands
    }
}
