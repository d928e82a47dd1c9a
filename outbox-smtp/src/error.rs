//! SMTP failures → [`MailError`]: the classification table, a pure function of the stage a
//! send reached and what went wrong there.

use outboxkit_core::{MailError, MailErrorCode, MailOutcome};

/// How far a send got. Everything before [`Stage::Body`] leaves the message certainly not
/// sent; once the message data is on the wire, a lost answer leaves it maybe sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    /// Connecting, the greeting, `EHLO`, `STARTTLS`, `AUTH`.
    Connect = 0,
    /// `MAIL FROM`.
    MailFrom = 1,
    /// `RCPT TO`.
    RcptTo = 2,
    /// The `DATA` command.
    Data = 3,
    /// The message data, its final `.` and the answer to it.
    Body = 4,
}

impl Stage {
    pub(crate) fn from_u8(v: u8) -> Stage {
        match v {
            0 => Stage::Connect,
            1 => Stage::MailFrom,
            2 => Stage::RcptTo,
            3 => Stage::Data,
            _ => Stage::Body,
        }
    }
}

/// What went wrong at a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server answered this code (4xx or 5xx).
    Reply(u16),
    /// The connection failed, was lost, or the answer could not be read.
    Lost,
    /// The deadline passed.
    Deadline,
    /// TLS could not be set up (handshake, certificate, or STARTTLS not offered).
    Tls,
    /// The server offers none of the configured AUTH mechanisms.
    NoAuthMechanism,
}

fn error(code: MailErrorCode, outcome: MailOutcome, detail: &str) -> MailError {
    MailError::new(code, outcome, detail)
}

/// The mail error of a failure at a stage.
///
/// | stage | failure | result |
/// | --- | --- | --- |
/// | any | 4xx (421, 450, 451, 452, …) | `unavailable`, not sent (retried) |
/// | connect | 5xx (AUTH 535, greeting 554, …) | `configuration-refused`, not sent |
/// | connect | TLS, no AUTH mechanism | `configuration-refused`, not sent |
/// | `MAIL FROM` | 5xx | `configuration-refused` (the sender), not sent |
/// | `RCPT TO` | 5xx (550, 551, 553, …) | `message-refused` (the recipient), not sent |
/// | `DATA`, end of data | 5xx (552, 554, …) | `message-refused`, not sent |
/// | before the data | connection lost | `unavailable`, not sent |
/// | before the data | deadline | `timeout`, not sent |
/// | data sent | connection lost | `unavailable`, maybe sent |
/// | data sent | deadline | `timeout`, maybe sent |
///
/// Details never carry the server's text (it may quote an address).
pub(crate) fn classify(stage: Stage, failure: Failure) -> MailError {
    use MailErrorCode as C;
    use MailOutcome as O;
    let sent = stage == Stage::Body;
    match failure {
        Failure::Reply(code) if (400..500).contains(&code) => match stage {
            Stage::Connect => error(C::Unavailable, O::NotSent, "the smtp server is busy (4xx)"),
            Stage::MailFrom | Stage::RcptTo | Stage::Data => error(
                C::Unavailable,
                O::NotSent,
                "the smtp server deferred the message (4xx)",
            ),
            Stage::Body => error(
                C::Unavailable,
                O::NotSent,
                "the smtp server deferred the message data (4xx)",
            ),
        },
        Failure::Reply(code) if (500..600).contains(&code) => match stage {
            Stage::Connect => error(
                C::ConfigurationRefused,
                O::NotSent,
                "the smtp server refused the session or the credentials (5xx)",
            ),
            Stage::MailFrom => error(
                C::ConfigurationRefused,
                O::NotSent,
                "the smtp server refused the sender (5xx)",
            ),
            Stage::RcptTo => error(
                C::MessageRefused,
                O::NotSent,
                "the smtp server refused the recipient (5xx)",
            ),
            Stage::Data | Stage::Body => error(
                C::MessageRefused,
                O::NotSent,
                "the smtp server refused the message (5xx)",
            ),
        },
        Failure::Reply(_) | Failure::Lost if sent => error(
            C::Unavailable,
            O::Unknown,
            "the smtp connection was lost after the message data was sent",
        ),
        Failure::Reply(_) | Failure::Lost => error(
            C::Unavailable,
            O::NotSent,
            "the smtp connection failed before the message was sent",
        ),
        Failure::Deadline if sent => error(
            C::Timeout,
            O::Unknown,
            "the smtp server did not answer the message data in time",
        ),
        Failure::Deadline => error(
            C::Timeout,
            O::NotSent,
            "the smtp server did not answer in time, before the message was sent",
        ),
        Failure::Tls => error(
            C::ConfigurationRefused,
            O::NotSent,
            "tls with the smtp server failed (handshake, certificate, or starttls not offered)",
        ),
        Failure::NoAuthMechanism => error(
            C::ConfigurationRefused,
            O::NotSent,
            "the smtp server offers none of the configured auth mechanisms",
        ),
    }
}

/// The failure a lettre error stands for.
pub(crate) fn failure(e: &lettre::transport::smtp::Error) -> Failure {
    if let Some(code) = e.status() {
        return Failure::Reply(u16::from(code));
    }
    if e.is_tls() {
        return Failure::Tls;
    }
    if e.is_timeout() {
        return Failure::Deadline;
    }
    Failure::Lost
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classification_table() {
        use Failure as F;
        use MailErrorCode as C;
        use MailOutcome as O;
        use Stage as S;
        let rows = [
            (S::Connect, F::Reply(421), C::Unavailable, O::NotSent),
            (
                S::Connect,
                F::Reply(535),
                C::ConfigurationRefused,
                O::NotSent,
            ),
            (
                S::Connect,
                F::Reply(554),
                C::ConfigurationRefused,
                O::NotSent,
            ),
            (S::Connect, F::Tls, C::ConfigurationRefused, O::NotSent),
            (
                S::Connect,
                F::NoAuthMechanism,
                C::ConfigurationRefused,
                O::NotSent,
            ),
            (S::Connect, F::Lost, C::Unavailable, O::NotSent),
            (S::Connect, F::Deadline, C::Timeout, O::NotSent),
            (S::MailFrom, F::Reply(451), C::Unavailable, O::NotSent),
            (
                S::MailFrom,
                F::Reply(550),
                C::ConfigurationRefused,
                O::NotSent,
            ),
            (S::RcptTo, F::Reply(450), C::Unavailable, O::NotSent),
            (S::RcptTo, F::Reply(452), C::Unavailable, O::NotSent),
            (S::RcptTo, F::Reply(550), C::MessageRefused, O::NotSent),
            (S::RcptTo, F::Reply(551), C::MessageRefused, O::NotSent),
            (S::RcptTo, F::Reply(553), C::MessageRefused, O::NotSent),
            (S::RcptTo, F::Lost, C::Unavailable, O::NotSent),
            (S::Data, F::Reply(554), C::MessageRefused, O::NotSent),
            (S::Data, F::Lost, C::Unavailable, O::NotSent),
            (S::Body, F::Reply(451), C::Unavailable, O::NotSent),
            (S::Body, F::Reply(552), C::MessageRefused, O::NotSent),
            (S::Body, F::Reply(554), C::MessageRefused, O::NotSent),
            (S::Body, F::Lost, C::Unavailable, O::Unknown),
            (S::Body, F::Deadline, C::Timeout, O::Unknown),
        ];
        for (stage, failure, code, outcome) in rows {
            let e = classify(stage, failure);
            assert_eq!(
                (e.code, e.outcome),
                (code, outcome),
                "{stage:?} {failure:?}"
            );
        }
    }

    #[test]
    fn stages_round_trip_through_u8() {
        for s in [
            Stage::Connect,
            Stage::MailFrom,
            Stage::RcptTo,
            Stage::Data,
            Stage::Body,
        ] {
            assert_eq!(Stage::from_u8(s as u8), s);
        }
    }
}
