//! [`HttpMailer`]'s `send_detailed`: the same call as `send`, keeping the attempt in full —
//! the request headers as sent (the API key `[redacted]`), the answer's headers and body
//! within the cap, the timings (`connect` when this send opened the connection) and the
//! remote address.

use bytes::Bytes;
use http::header::{HeaderMap, AUTHORIZATION};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpInfo;
use outboxkit_core::model::REDACTED;
use outboxkit_core::{
    Accepted, AttemptDetail, IdempotencyKey, MailError, MailMessage, MailSent, Stopwatch,
};

use crate::config::DEFAULT_MAX_BODY;
use crate::error::mail_failure;
use crate::mailer::{deadline_passed, from_status, next_chunk, provider_id, HttpMailer};
use crate::timing::ConnectStamp;

impl HttpMailer {
    /// [`outboxkit_core::Mailer::send_detailed`]: the mail, keeping the exchange in full. A
    /// request that could not be built was never sent: it keeps no detail.
    pub(crate) async fn send_keeping_detail(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> MailSent {
        let request = match self.request(message, key) {
            Ok(r) => r,
            Err(e) => {
                return MailSent {
                    result: Err(e),
                    detail: None,
                }
            }
        };
        let mut detail = Box::new(AttemptDetail {
            request_headers: recorded(request.headers()),
            ..AttemptDetail::default()
        });
        let watch = Stopwatch::start();
        // One deadline from connect to the end of the body read; what arrived before it
        // passed (the answer's headers) stays in the detail.
        let result =
            match tokio::time::timeout(self.timeout(), exchange(self, request, &mut detail, watch))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(deadline_passed()),
            };
        detail.timing.total = watch.elapsed();
        MailSent {
            result,
            detail: Some(detail),
        }
    }
}

/// The request headers as sent, `authorization` redacted.
fn recorded(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            let value = if k == AUTHORIZATION {
                REDACTED.to_owned()
            } else {
                String::from_utf8_lossy(v.as_bytes()).into_owned()
            };
            (k.as_str().to_owned(), value)
        })
        .collect()
}

async fn exchange(
    mailer: &HttpMailer,
    request: http::Request<Full<Bytes>>,
    detail: &mut AttemptDetail,
    watch: Stopwatch,
) -> Result<Accepted, MailError> {
    let response = mailer
        .client()
        .request(request)
        .await
        .map_err(|e| mail_failure(&e))?;
    detail.timing.first_byte = Some(watch.elapsed());
    let ext = response.extensions();
    detail.timing.connect = ext.get::<ConnectStamp>().and_then(ConnectStamp::claim);
    detail.remote_addr = ext.get::<HttpInfo>().map(|i| i.remote_addr().to_string());
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
    let mut body = response.into_body();
    let mut read = Vec::new();
    let mut more = false;
    while let Some(chunk) = next_chunk(&mut body).await {
        let room = DEFAULT_MAX_BODY.saturating_sub(read.len());
        read.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if read.len() >= limit {
            more = read.len() > cap || next_chunk(&mut body).await.is_some();
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
