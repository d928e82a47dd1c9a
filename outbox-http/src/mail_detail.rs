//! [`HttpMailer`]'s `send_detailed`: the same call as `send`, keeping the attempt in full —
//! the request headers (the API key `[redacted]`), the answer's headers and body within the
//! cap, the timings (no `connect`: reqwest's pool does not say whether it opened a
//! connection) and the remote address.

use outboxkit_core::model::REDACTED;
use outboxkit_core::{Accepted, AttemptDetail, IdempotencyKey, MailMessage, MailSent, Stopwatch};
use reqwest::header::{AUTHORIZATION, USER_AGENT};

use crate::config::{DEFAULT_MAX_BODY, DEFAULT_USER_AGENT};
use crate::error::mail_failure;
use crate::mailer::{from_status, provider_id, HttpMailer};

impl HttpMailer {
    /// [`outboxkit_core::Mailer::send_detailed`]: the mail, keeping the exchange in full.
    pub(crate) async fn send_keeping_detail(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> MailSent {
        let mailer = self;
        let request = match mailer.request(message, key).build() {
            Ok(r) => r,
            Err(e) => {
                return MailSent {
                    result: Err(mail_failure(&e)),
                    detail: None,
                }
            }
        };
        let mut request_headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .map(|(k, v)| {
                let value = if k == AUTHORIZATION {
                    REDACTED.to_owned()
                } else {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                };
                (k.as_str().to_owned(), value)
            })
            .collect();
        // The client adds its user-agent when it sends.
        if !request.headers().contains_key(USER_AGENT) {
            request_headers.push((
                USER_AGENT.as_str().to_owned(),
                DEFAULT_USER_AGENT.to_owned(),
            ));
        }
        let mut detail = Box::new(AttemptDetail {
            request_headers,
            ..AttemptDetail::default()
        });
        let watch = Stopwatch::start();
        let result = exchange(mailer, request, &mut detail, watch).await;
        detail.timing.total = watch.elapsed();
        MailSent {
            result,
            detail: Some(detail),
        }
    }
}

async fn exchange(
    mailer: &HttpMailer,
    request: reqwest::Request,
    detail: &mut AttemptDetail,
    watch: Stopwatch,
) -> Result<Accepted, outboxkit_core::MailError> {
    let mut response = mailer
        .client()
        .execute(request)
        .await
        .map_err(|e| mail_failure(&e))?;
    detail.timing.first_byte = Some(watch.elapsed());
    detail.remote_addr = response.remote_addr().map(|a| a.to_string());
    detail.response_headers = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let status = response.status().as_u16();
    let cap = mailer.response_body_cap();
    let ok = (200..300).contains(&status);
    // A 2xx body is read for the provider id (up to the read cap); any other only for the
    // record (up to the cap).
    let limit = if ok { DEFAULT_MAX_BODY } else { cap };
    let mut read = Vec::new();
    let mut more = false;
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = DEFAULT_MAX_BODY.saturating_sub(read.len());
        read.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if read.len() >= limit {
            more = read.len() > cap || !matches!(response.chunk().await, Ok(None));
            break;
        }
    }
    let accepted = ok.then(|| provider_id(&read));
    detail.response_body_truncated = more || read.len() > cap;
    read.truncate(cap);
    detail.response_body = read;
    match accepted {
        Some(provider_id) => Ok(Accepted { provider_id }),
        None => Err(from_status(status)),
    }
}
