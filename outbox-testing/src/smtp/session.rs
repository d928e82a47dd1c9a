//! One SMTP session of the stand-in: the protocol, AUTH, STARTTLS and the test certificate.

use std::collections::VecDeque;
use std::sync::{Arc, MutexGuard};

use base64::Engine as _;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_rustls::rustls;

use super::{Shared, SmtpMessage, SmtpReply, SmtpStage, State, Tls};

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What to do after a reply was chosen.
enum Step {
    Answer(u16),
    Drop,
    Stall,
}

/// Too long a line ends the session (the stand-in is not a target for memory abuse).
const MAX_LINE: u64 = 1 << 20;

impl Shared {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn step(&self, stage: SmtpStage, default: u16) -> Step {
        let mut s = self.state();
        if stage == SmtpStage::Data {
            s.data_commands += 1;
        }
        let reply = s.scripted.get_mut(&stage).and_then(VecDeque::pop_front);
        match reply {
            Some(SmtpReply::Code(c)) => Step::Answer(c),
            Some(SmtpReply::Drop) => Step::Drop,
            Some(SmtpReply::Stall) => Step::Stall,
            None => Step::Answer(s.refused.get(&stage).copied().unwrap_or(default)),
        }
    }

    pub(super) async fn serve(&self, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
        let mut encrypted = false;
        let io: Box<dyn Io> = match (&self.acceptor, self.tls) {
            (Some(acceptor), Tls::Implicit) => {
                encrypted = true;
                Box::new(acceptor.accept(tcp).await?)
            }
            _ => Box::new(tcp),
        };
        let mut conn = BufReader::new(io);
        let mut session = Session::default();
        if !self.answer(&mut conn, SmtpStage::Connect, 220).await? {
            return Ok(());
        }
        loop {
            let Some(line) = read_line(&mut conn).await? else {
                return Ok(());
            };
            let upper = line.to_ascii_uppercase();
            let verb = upper.split(' ').next().unwrap_or("");
            match verb {
                "EHLO" | "HELO" => match self.step(SmtpStage::Ehlo, 250) {
                    Step::Answer(c) if (200..300).contains(&c) => {
                        session = Session {
                            user: session.user.take(),
                            ..Session::default()
                        };
                        let mut lines = vec!["standin".to_owned()];
                        if self.auth.is_some() {
                            lines.push("AUTH PLAIN LOGIN".into());
                        }
                        if self.tls == Tls::Upgrade && !encrypted {
                            lines.push("STARTTLS".into());
                        }
                        lines.extend(["8BITMIME".into(), "SMTPUTF8".into()]);
                        write_multi(&mut conn, c, &lines).await?;
                    }
                    other => {
                        if !self.finish(&mut conn, other).await? {
                            return Ok(());
                        }
                    }
                },
                "STARTTLS" if self.tls == Tls::Upgrade && !encrypted => {
                    let Some(acceptor) = self.acceptor.clone() else {
                        return Ok(());
                    };
                    write_reply(&mut conn, 220).await?;
                    let tls = acceptor.accept(conn.into_inner()).await?;
                    conn = BufReader::new(Box::new(tls));
                    encrypted = true;
                    session = Session::default();
                }
                "AUTH" => {
                    let Some(user) = self.authenticate(&mut conn, &line).await? else {
                        write_reply(&mut conn, 535).await?;
                        continue;
                    };
                    session.user = Some(user);
                    write_reply(&mut conn, 235).await?;
                }
                "MAIL" => {
                    if self.tls == Tls::Upgrade && !encrypted
                        || self.auth.is_some() && session.user.is_none()
                    {
                        write_reply(&mut conn, 530).await?;
                        continue;
                    }
                    let step = self.step(SmtpStage::MailFrom, 250);
                    if matches!(step, Step::Answer(c) if (200..300).contains(&c)) {
                        session.from = Some(address(&line));
                        session.to.clear();
                    }
                    if !self.finish(&mut conn, step).await? {
                        return Ok(());
                    }
                }
                "RCPT" => {
                    if session.from.is_none() {
                        write_reply(&mut conn, 503).await?;
                        continue;
                    }
                    let step = self.step(SmtpStage::RcptTo, 250);
                    if matches!(step, Step::Answer(c) if (200..300).contains(&c)) {
                        session.to.push(address(&line));
                    }
                    if !self.finish(&mut conn, step).await? {
                        return Ok(());
                    }
                }
                "DATA" => {
                    if session.to.is_empty() {
                        write_reply(&mut conn, 503).await?;
                        continue;
                    }
                    let step = self.step(SmtpStage::Data, 354);
                    let go = matches!(step, Step::Answer(354));
                    if !self.finish(&mut conn, step).await? {
                        return Ok(());
                    }
                    if !go {
                        continue;
                    }
                    let Some(data) = read_data(&mut conn).await? else {
                        return Ok(());
                    };
                    let message = parse_message(
                        session.from.take().unwrap_or_default(),
                        std::mem::take(&mut session.to),
                        &data,
                        session.user.clone(),
                        encrypted,
                    );
                    self.state().received.push(message.clone());
                    let step = self.step(SmtpStage::EndOfData, 250);
                    match &step {
                        Step::Answer(c) if (200..300).contains(c) => {
                            self.state().messages.push(message)
                        }
                        Step::Drop => self.state().messages.push(message),
                        _ => {}
                    }
                    if !self.finish(&mut conn, step).await? {
                        return Ok(());
                    }
                }
                "RSET" => {
                    session.from = None;
                    session.to.clear();
                    write_reply(&mut conn, 250).await?;
                }
                "NOOP" => write_reply(&mut conn, 250).await?,
                "QUIT" => {
                    write_reply(&mut conn, 221).await?;
                    return Ok(());
                }
                _ => write_reply(&mut conn, 500).await?,
            }
        }
    }

    /// Answer the stage; false when the session ends.
    async fn answer(
        &self,
        conn: &mut Conn,
        stage: SmtpStage,
        default: u16,
    ) -> std::io::Result<bool> {
        let step = self.step(stage, default);
        self.finish(conn, step).await
    }

    async fn finish(&self, conn: &mut Conn, step: Step) -> std::io::Result<bool> {
        match step {
            Step::Answer(c) => {
                write_reply(conn, c).await?;
                Ok(c != 421)
            }
            Step::Drop => Ok(false),
            Step::Stall => {
                let mut sink = [0u8; 1024];
                while conn.read(&mut sink).await? > 0 {}
                Ok(false)
            }
        }
    }

    /// Run an `AUTH PLAIN` or `AUTH LOGIN` exchange; the user when it matches.
    async fn authenticate(&self, conn: &mut Conn, line: &str) -> std::io::Result<Option<String>> {
        let Some((user, password)) = &self.auth else {
            return Ok(None);
        };
        let mut words = line.split_whitespace().skip(1);
        let mechanism = words.next().unwrap_or("").to_ascii_uppercase();
        let initial = words.next().map(str::to_owned);
        let (u, p) = match mechanism.as_str() {
            "PLAIN" => {
                let response = match initial {
                    Some(r) => r,
                    None => {
                        conn.write_all(b"334 \r\n").await?;
                        read_line(conn).await?.unwrap_or_default()
                    }
                };
                let plain = decode(&response);
                let mut parts = plain.split('\0').skip(1);
                (
                    parts.next().unwrap_or("").to_owned(),
                    parts.next().unwrap_or("").to_owned(),
                )
            }
            "LOGIN" => {
                let u = match initial {
                    Some(r) => decode(&r),
                    None => {
                        conn.write_all(b"334 VXNlcm5hbWU6\r\n").await?;
                        decode(&read_line(conn).await?.unwrap_or_default())
                    }
                };
                conn.write_all(b"334 UGFzc3dvcmQ6\r\n").await?;
                (u, decode(&read_line(conn).await?.unwrap_or_default()))
            }
            _ => return Ok(None),
        };
        Ok((&u == user && &p == password).then_some(u))
    }
}

type Conn = BufReader<Box<dyn Io>>;

#[derive(Default)]
struct Session {
    user: Option<String>,
    from: Option<String>,
    to: Vec<String>,
}

fn decode(b64: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The address between `<` and `>` of a `MAIL FROM:`/`RCPT TO:` line.
fn address(line: &str) -> String {
    let start = line.find('<').map_or(line.len(), |i| i + 1);
    let end = line[start..].find('>').map_or(line.len(), |i| start + i);
    line[start..end].to_owned()
}

async fn read_line(conn: &mut Conn) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = (&mut *conn)
        .take(MAX_LINE)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 || !buf.ends_with(b"\n") {
        return Ok(None);
    }
    let line = String::from_utf8_lossy(&buf);
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
}

/// The message data up to the `.` line, dot-unstuffed; `None` when the client went away.
async fn read_data(conn: &mut Conn) -> std::io::Result<Option<String>> {
    let mut data = String::new();
    loop {
        let Some(line) = read_line(conn).await? else {
            return Ok(None);
        };
        if line == "." {
            return Ok(Some(data));
        }
        data.push_str(line.strip_prefix('.').unwrap_or(&line));
        data.push_str("\r\n");
    }
}

fn parse_message(
    from: String,
    to: Vec<String>,
    data: &str,
    user: Option<String>,
    encrypted: bool,
) -> SmtpMessage {
    let (head, body) = data.split_once("\r\n\r\n").unwrap_or((data, ""));
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = headers.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((n, v)) = line.split_once(':') {
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
    }
    SmtpMessage {
        from,
        to,
        headers,
        body: body.to_owned(),
        user,
        encrypted,
    }
}

fn text(code: u16) -> &'static str {
    match code {
        220 => "standin ready",
        221 => "bye",
        235 => "authenticated",
        250 => "ok queued as standin",
        354 => "end data with <CR><LF>.<CR><LF>",
        421 => "service not available",
        530 => "authentication or starttls required",
        535 => "authentication failed",
        400..=499 => "try again later",
        _ => "refused",
    }
}

async fn write_reply(conn: &mut Conn, code: u16) -> std::io::Result<()> {
    let line = format!("{code} {}\r\n", text(code));
    conn.write_all(line.as_bytes()).await?;
    conn.flush().await
}

async fn write_multi(conn: &mut Conn, code: u16, lines: &[String]) -> std::io::Result<()> {
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        let sep = if i + 1 == lines.len() { ' ' } else { '-' };
        out.push_str(&format!("{code}{sep}{l}\r\n"));
    }
    conn.write_all(out.as_bytes()).await?;
    conn.flush().await
}

/// A TLS acceptor with a fresh self-signed certificate for `localhost` and its PEM.
pub(super) fn test_tls() -> Result<(tokio_rustls::TlsAcceptor, String), Box<dyn std::error::Error>>
{
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), pem))
}
