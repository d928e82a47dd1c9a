//! The SMTP stand-in observed through a raw SMTP client on its loopback port.

use outboxkit_testing::{SmtpReply, SmtpStage, SmtpStandIn};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

struct Client {
    conn: BufReader<TcpStream>,
}

impl Client {
    async fn connect(smtp: &SmtpStandIn) -> (Client, u16) {
        let conn = BufReader::new(TcpStream::connect(smtp.addr()).await.unwrap());
        let mut c = Client { conn };
        let greeting = c.reply().await;
        (c, greeting)
    }

    /// The code of the next reply (its last line when multi-line); 0 when closed.
    async fn reply(&mut self) -> u16 {
        loop {
            let mut line = String::new();
            if self.conn.read_line(&mut line).await.unwrap() == 0 {
                return 0;
            }
            if line.as_bytes().get(3) != Some(&b'-') {
                return line[..3].parse().unwrap();
            }
        }
    }

    async fn send(&mut self, line: &str) -> u16 {
        self.conn
            .get_mut()
            .write_all(format!("{line}\r\n").as_bytes())
            .await
            .unwrap();
        self.reply().await
    }
}

#[tokio::test]
async fn the_smtp_stand_in_records_a_dot_unstuffed_message() {
    let smtp = SmtpStandIn::start().await;
    let (mut c, greeting) = Client::connect(&smtp).await;
    assert_eq!(greeting, 220);
    assert_eq!(c.send("EHLO test").await, 250);
    assert_eq!(c.send("MAIL FROM:<a@example.com>").await, 250);
    assert_eq!(c.send("RCPT TO:<b@example.com>").await, 250);
    assert_eq!(c.send("DATA").await, 354);
    let data = "Message-ID: <k1@example.com>\r\nSubject: Hi\r\n\r\n..leading dot\r\nbye\r\n.";
    assert_eq!(c.send(data).await, 250);
    assert_eq!(c.send("QUIT").await, 221);
    let got = smtp.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].from, "a@example.com");
    assert_eq!(got[0].to, vec!["b@example.com".to_owned()]);
    assert_eq!(got[0].message_id(), Some("<k1@example.com>"));
    assert_eq!(got[0].header("subject"), Some("Hi"));
    assert_eq!(got[0].body, ".leading dot\r\nbye\r\n");
    assert_eq!((smtp.connections(), smtp.data_commands()), (1, 1));
}

#[tokio::test]
async fn the_smtp_stand_in_answers_scripted_codes_refuses_and_heals() {
    let smtp = SmtpStandIn::start().await;
    smtp.script(SmtpStage::RcptTo, SmtpReply::Code(451));
    smtp.refuse(SmtpStage::EndOfData, 554);
    let (mut c, _) = Client::connect(&smtp).await;
    c.send("EHLO test").await;
    assert_eq!(c.send("MAIL FROM:<a@example.com>").await, 250);
    assert_eq!(
        c.send("RCPT TO:<b@example.com>").await,
        451,
        "scripted once"
    );
    assert_eq!(c.send("RCPT TO:<b@example.com>").await, 250);
    assert_eq!(c.send("DATA").await, 354);
    assert_eq!(c.send("Subject: x\r\n\r\nbody\r\n.").await, 554);
    assert!(smtp.messages().is_empty());
    assert_eq!(smtp.received().len(), 1, "the refused data was seen");
    smtp.heal();
    c.send("MAIL FROM:<a@example.com>").await;
    c.send("RCPT TO:<b@example.com>").await;
    c.send("DATA").await;
    assert_eq!(c.send("Subject: x\r\n\r\nbody\r\n.").await, 250);
    assert_eq!(smtp.messages().len(), 1);
}

#[tokio::test]
async fn the_smtp_stand_in_drops_after_the_data_and_keeps_the_message() {
    let smtp = SmtpStandIn::start().await;
    smtp.script(SmtpStage::EndOfData, SmtpReply::Drop);
    let (mut c, _) = Client::connect(&smtp).await;
    c.send("EHLO test").await;
    c.send("MAIL FROM:<a@example.com>").await;
    c.send("RCPT TO:<b@example.com>").await;
    c.send("DATA").await;
    assert_eq!(
        c.send("Subject: x\r\n\r\nbody\r\n.").await,
        0,
        "closed, no answer"
    );
    assert_eq!(smtp.messages().len(), 1);
}

#[tokio::test]
async fn the_smtp_stand_in_requires_auth_and_starttls_before_mail() {
    let smtp = SmtpStandIn::builder()
        .starttls()
        .auth("app", "pw")
        .start()
        .await;
    assert!(smtp
        .certificate_pem()
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));
    let (mut c, _) = Client::connect(&smtp).await;
    c.send("EHLO test").await;
    assert_eq!(c.send("MAIL FROM:<a@example.com>").await, 530);
    // AUTH PLAIN with a wrong password ("\0app\0no").
    assert_eq!(c.send("AUTH PLAIN AGFwcABubw==").await, 535);
    assert_eq!(c.send("AUTH PLAIN AGFwcABwdw==").await, 235);
    assert_eq!(
        c.send("MAIL FROM:<a@example.com>").await,
        530,
        "STARTTLS first"
    );
    assert_eq!(c.send("STARTTLS").await, 220);
}
