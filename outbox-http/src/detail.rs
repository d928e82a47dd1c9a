//! [`HttpTransport`]'s `send_detailed`: the same exchange as `send`, keeping the attempt in
//! full (DESIGN §18) — the request headers as sent, the response headers and body within
//! the cap, the timings and the remote address.

use http::header::{HeaderMap, HeaderValue, AUTHORIZATION, PROXY_AUTHORIZATION};
use hyper_util::client::legacy::connect::HttpInfo;
use outboxkit_core::model::REDACTED;
use outboxkit_core::{AttemptDetail, ErrorClass, Sent, SignedRequest, Stopwatch, WebhookResponse};

use crate::error::webhook_failure;
use crate::timing::ConnectStamp;
use crate::transport::{failed, HttpTransport, EXCERPT_BYTES};

impl HttpTransport {
    /// Send `request`, keeping the attempt in full
    /// ([`outboxkit_core::WebhookTransport::send_detailed`]). A request refused by the egress
    /// policy, or one whose headers are not valid HTTP, was never sent: it keeps no detail.
    pub(crate) async fn send_keeping_detail(&self, request: SignedRequest) -> Sent {
        let transport = self;
        let nothing_sent = |response| Sent {
            response,
            detail: None,
        };
        if let Err(refusal) = transport.policy().check_url(&request.url) {
            return nothing_sent(failed(ErrorClass::EgressRefused, refusal.to_string()));
        }
        let deadline = transport.deadline(&request);
        let Some(http) = transport.build(request) else {
            return nothing_sent(failed(
                ErrorClass::Network,
                "a request header is not valid http".into(),
            ));
        };
        let mut detail = Box::new(AttemptDetail {
            request_headers: recorded(http.headers()),
            ..AttemptDetail::default()
        });
        let watch = Stopwatch::start();
        // One deadline from connect to the end of the body read; what arrived before it passed
        // (the response's headers) stays in the detail.
        let response =
            match tokio::time::timeout(deadline, exchange(transport, http, &mut detail, watch))
                .await
            {
                Ok(response) => response,
                Err(_) => failed(ErrorClass::Timeout, "the deadline passed".into()),
            };
        detail.timing.total = watch.elapsed();
        Sent {
            response,
            detail: Some(detail),
        }
    }
}

async fn exchange(
    transport: &HttpTransport,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
    detail: &mut AttemptDetail,
    watch: Stopwatch,
) -> WebhookResponse {
    let response = match transport.client().request(request).await {
        Ok(r) => r,
        Err(e) => {
            let (class, text) = webhook_failure(&e);
            return failed(class, text);
        }
    };
    detail.timing.first_byte = Some(watch.elapsed());
    let ext = response.extensions();
    detail.timing.connect = ext.get::<ConnectStamp>().and_then(ConnectStamp::claim);
    detail.remote_addr = ext.get::<HttpInfo>().map(|i| i.remote_addr().to_string());
    detail.response_headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), text(v)))
        .collect();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let cap = transport.config().response_body_cap;
    let mut body = transport
        .read_body(response.into_body(), cap.max(EXCERPT_BYTES))
        .await;
    let answer = WebhookResponse::answered(
        status,
        retry_after,
        &String::from_utf8_lossy(&body.kept[..body.kept.len().min(EXCERPT_BYTES)]),
    );
    // The kept bytes move into the detail: the body is copied once, from the wire.
    detail.response_body_truncated = body.read > cap || body.unread;
    body.kept.truncate(cap);
    detail.response_body = body.kept;
    answer
}

/// The headers as they go on the wire, in order, an `authorization` value as [`REDACTED`].
/// (The client adds `host` from the URL on HTTP/1.1.)
fn recorded(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            let value = if k == AUTHORIZATION || k == PROXY_AUTHORIZATION {
                REDACTED.to_owned()
            } else {
                text(v)
            };
            (k.as_str().to_owned(), value)
        })
        .collect()
}

/// A header value as text (bytes that are not UTF-8 replaced).
fn text(v: &HeaderValue) -> String {
    String::from_utf8_lossy(v.as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_values_are_redacted_and_the_rest_kept_in_order() {
        let mut h = HeaderMap::new();
        h.append("webhook-signature", HeaderValue::from_static("v1,abc="));
        h.append(AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        h.append(PROXY_AUTHORIZATION, HeaderValue::from_static("Basic eA=="));
        h.append("x-tag", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(
            recorded(&h),
            vec![
                ("webhook-signature".to_owned(), "v1,abc=".to_owned()),
                ("authorization".to_owned(), REDACTED.to_owned()),
                ("proxy-authorization".to_owned(), REDACTED.to_owned()),
                ("x-tag".to_owned(), "caf\u{fffd}".to_owned()),
            ]
        );
    }
}
