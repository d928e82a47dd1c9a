//! [`RedisConfig`]: the key prefix, limits, timeouts and TLS roots of a
//! [`crate::RedisStore`], and the client for a `redis://` or `rediss://` URL.

use std::time::Duration;

use outboxkit_core::{Error, ErrorKind, Limits, Result};

use crate::error::connect_error;

/// How a [`crate::RedisStore`] stores and talks to Redis. Validated once by
/// [`crate::RedisStore::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// Every key starts with this prefix. It must contain a Redis Cluster hash tag
    /// (`{…}` with something inside), so that one outbox lives in one cluster slot and
    /// every script is cluster-safe. Default `{outbox}`. Two stores with different
    /// prefixes share nothing.
    pub prefix: String,
    /// Limits applied to every enqueue. Default [`Limits::default`].
    pub limits: Limits,
    /// The most attempts kept in one delivery's ledger (1–10000, default 100): older
    /// entries are dropped, and the attempt numbers of the kept ones stay as they were.
    pub attempts_cap: u32,
    /// How long one command may wait for its reply before failing with `Unavailable`.
    /// Default 10 s.
    pub response_timeout: Duration,
    /// How long one connection attempt may take. Default 5 s.
    pub connection_timeout: Duration,
    /// How long opening the store may take in all (connecting with its retries, the version
    /// check and loading the scripts) before it fails with `Unavailable`, so that an
    /// unreachable Redis is reported instead of waited for. Default 5 s.
    pub setup_timeout: Duration,
    /// The certificates (PEM) a `rediss://` connection trusts, in place of the system's
    /// roots: a private CA, or a server's self-signed certificate. Default `None` (the
    /// system's roots). Used by [`RedisConfig::client`].
    pub tls_root_cert: Option<Vec<u8>>,
    /// How many hash slots (shards) the outbox is spread over (1–64, default 1). Shard 0's
    /// keys start with `prefix` itself; shard `i > 0`'s with the prefix whose hash tag has
    /// `:i` appended (`{outbox}` → `{outbox:1}`), so each shard is one Redis Cluster slot.
    /// A message's shard comes from its ordering key (or idempotency key, or id); see the
    /// crate docs for what that means for `enqueue_in` and ordering.
    pub shards: u16,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            prefix: "{outbox}".to_owned(),
            limits: Limits::default(),
            attempts_cap: 100,
            response_timeout: Duration::from_secs(10),
            connection_timeout: Duration::from_secs(5),
            setup_timeout: Duration::from_secs(5),
            tls_root_cert: None,
            shards: 1,
        }
    }
}

impl RedisConfig {
    /// The default configuration under another prefix.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        RedisConfig {
            prefix: prefix.into(),
            ..RedisConfig::default()
        }
    }

    /// Check every setting.
    pub fn validate(&self) -> Result<()> {
        check_prefix(&self.prefix)?;
        if !(1..=10_000).contains(&self.attempts_cap) {
            return Err(Error::misconfigured(
                "attempts_cap",
                "must be from 1 to 10000",
            ));
        }
        if !(1..=64).contains(&self.shards) {
            return Err(Error::misconfigured("shards", "must be from 1 to 64"));
        }
        if self.response_timeout.is_zero()
            || self.connection_timeout.is_zero()
            || self.setup_timeout.is_zero()
        {
            return Err(Error::misconfigured(
                "timeout",
                "timeouts must be longer than zero",
            ));
        }
        Ok(())
    }

    /// The client for `url`: `redis://host:port/db`, or `rediss://host:port/db` for TLS
    /// (rustls; the server's certificate is checked against [`RedisConfig::tls_root_cert`]
    /// when set, else the system's roots, and must name the host). Connects to nothing.
    ///
    /// ```
    /// use outboxkit_redis::RedisConfig;
    ///
    /// assert!(RedisConfig::default().client("rediss://cache.internal:6380/0").is_ok());
    /// assert!(RedisConfig::default().client("http://cache.internal").is_err());
    /// ```
    pub fn client(&self, url: &str) -> Result<redis::Client> {
        let invalid = |e: redis::RedisError| {
            // The driver's message may quote the URL (and so the password): keep it as the
            // source only.
            Error::misconfigured("url", "is not a valid redis url (redis://… or rediss://…)")
                .with_source(e)
        };
        match &self.tls_root_cert {
            Some(pem) if url.starts_with("rediss://") => redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            )
            .map_err(invalid),
            _ => redis::Client::open(url).map_err(invalid),
        }
    }

    /// Open one connection through `client` and `PING` it, within `connection_timeout`,
    /// so that an unreachable server, a failed TLS handshake or refused credentials is
    /// reported at once and by name (never the host or the password), instead of as a
    /// setup timeout after the connection manager's retries.
    ///
    /// # Cancel Safety
    ///
    /// Cancelling it drops the connection being opened; nothing is written.
    pub async fn probe(&self, client: &redis::Client) -> Result<()> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let attempt = async {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<()>(&mut conn).await
        };
        match tokio::time::timeout(self.connection_timeout, attempt).await {
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "redis did not answer within {} ms: the host is unreachable or the port is filtered",
                    self.connection_timeout.as_millis()
                ),
            )),
            Ok(Err(e)) => Err(connect_error(e)),
            Ok(Ok(())) => Ok(()),
        }
    }
}

impl RedisConfig {
    /// The key prefix of shard `i`: the prefix itself for shard 0, else the prefix with
    /// `:i` added inside its hash tag (`app:{outbox}:` → `app:{outbox:2}:`).
    pub fn shard_prefix(&self, i: u16) -> String {
        if i == 0 {
            return self.prefix.clone();
        }
        let close = self
            .prefix
            .find('{')
            .and_then(|open| self.prefix[open..].find('}').map(|c| open + c));
        match close {
            Some(c) => format!("{}:{i}{}", &self.prefix[..c], &self.prefix[c..]),
            None => format!("{}:{i}", self.prefix),
        }
    }
}

/// A prefix is valid when it is at most 200 bytes of visible ASCII and contains a hash tag:
/// a `{` followed later by a `}` with at least one character between the first `{` and the
/// first `}` after it (the part Redis Cluster hashes).
fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > 200 || !prefix.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::misconfigured(
            "prefix",
            "must be 1-200 visible ASCII characters",
        ));
    }
    let tagged = prefix
        .find('{')
        .and_then(|open| prefix[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    if !tagged {
        return Err(Error::misconfigured(
            "prefix",
            "must contain a non-empty hash tag such as `{outbox}`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_need_a_hash_tag() {
        let cases = [
            ("{outbox}", true),
            ("app:{outbox}:", true),
            ("{a}", true),
            ("{outbox-test-1f2e}", true),
            ("outbox", false),
            ("{}", false),
            ("{}{x}", false),
            ("}{", false),
            ("{outbox", false),
            ("", false),
            ("{out box}", false),
        ];
        for (prefix, ok) in cases {
            let r = RedisConfig::with_prefix(prefix).validate();
            assert_eq!(r.is_ok(), ok, "{prefix:?}");
            if let Err(e) = r {
                assert_eq!(e.kind(), outboxkit_core::ErrorKind::Misconfigured);
                assert_eq!(e.field(), Some("prefix"));
            }
        }
    }

    #[test]
    fn shards_have_their_own_hash_tags() {
        let mut c = RedisConfig::with_prefix("app:{outbox}:x");
        c.shards = 3;
        assert!(c.validate().is_ok());
        let got: Vec<String> = (0..3).map(|i| c.shard_prefix(i)).collect();
        assert_eq!(
            got,
            ["app:{outbox}:x", "app:{outbox:1}:x", "app:{outbox:2}:x"]
        );
        c.shards = 0;
        assert_eq!(c.validate().unwrap_err().field(), Some("shards"));
        c.shards = 65;
        assert_eq!(c.validate().unwrap_err().field(), Some("shards"));
    }

    #[test]
    fn attempts_cap_is_bounded() {
        let mut c = RedisConfig::default();
        assert!(c.validate().is_ok());
        c.attempts_cap = 0;
        assert_eq!(c.validate().unwrap_err().field(), Some("attempts_cap"));
    }
}
