//! [`PostgresConfig`]: where the outbox lives in the database, its limits, and how to
//! connect (pool size, connect timeout, TLS through the URL's `sslmode`).

use std::str::FromStr;
use std::time::Duration;

use outboxkit_core::{Error, ErrorKind, Limits, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::Connection;

use crate::error::connect_error;

/// The longest identifier PostgreSQL keeps (`NAMEDATALEN - 1`).
const MAX_IDENT: usize = 63;

/// How a [`crate::PostgresStore`] is set up. Validated once by
/// [`crate::PostgresStore::new`]; bad values are [`outboxkit_core::ErrorKind::Misconfigured`].
///
/// ```
/// use outboxkit_postgres::PostgresConfig;
///
/// let config = PostgresConfig { schema: "billing_outbox".into(), ..PostgresConfig::default() };
/// assert_eq!(config.channel(), "outbox_wake_billing_outbox");
/// assert!(config.validate().is_ok());
/// assert!(PostgresConfig::new("Robert'); DROP TABLE x;--").validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresConfig {
    /// The schema holding the outbox tables: lowercase ASCII letters, digits and `_`,
    /// starting with a letter or `_`, at most 63 bytes. Several outboxes (and every test)
    /// can live in one database under different schemas. Default `outbox`.
    pub schema: String,
    /// Limits applied to every enqueue. Default [`Limits::default`].
    pub limits: Limits,
    /// The prefix of the LISTEN/NOTIFY channel; the schema name is appended
    /// (`{notify_channel}_{schema}`), so outboxes in other schemas do not wake each other.
    /// Same character rules as the schema; the whole channel name must fit in 63 bytes.
    /// Default `outbox_wake`.
    pub notify_channel: String,
    /// Whether `enqueue_in` and `enqueue_batch_in` queue a `NOTIFY` inside the caller's
    /// transaction (delivered when it commits). Default `true`. PostgreSQL serialises the
    /// commits of transactions that notify (through their WAL flush), which caps many
    /// concurrent writers at about one commit per disk flush; with `false` they write no
    /// `NOTIFY`, and the application calls [`crate::PostgresStore::notify`] after its commit
    /// (coalesced, off the transaction) or lets dispatchers find the work at their next poll.
    pub notify_in_transaction: bool,
    /// How long the wake-up listener waits before reconnecting after an error (doubled per
    /// failure up to [`PostgresConfig::listener_max_backoff`]). Default 100 ms.
    pub listener_backoff: Duration,
    /// The longest wait between reconnection attempts of the wake-up listener. Default 5 s.
    pub listener_max_backoff: Duration,
    /// How long [`PostgresConfig::connect_pool`] waits for the server (TCP, TLS and
    /// authentication), and how long the pool then waits for a free connection, before
    /// failing with `Unavailable`. Default 5 s.
    pub connect_timeout: Duration,
    /// The most connections [`PostgresConfig::connect_pool`] opens (enqueue, operator calls,
    /// lease extensions). Claims and completion writes run on the store's own two small
    /// pools beside it (at most 2 connections each), and the wake-up listener and notifier on
    /// one connection each, all outside this pool. Default 10.
    pub max_connections: u32,
    /// `enqueue_batch` (and `enqueue_batch_in`) writes a batch of at least this many
    /// messages, none of which carries an idempotency key, with binary `COPY`: one statement
    /// finds the destinations of the batch's (tenant, topic) pairs, then the messages and
    /// their deliveries are copied in (no `ON CONFLICT` pass, no per-row planning). Smaller
    /// batches, and batches with idempotency keys, go through the one batch statement.
    /// The stored rows are the same either way. `usize::MAX` never copies. Default 32.
    pub copy_batches_from: usize,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            schema: "outbox".to_owned(),
            limits: Limits::default(),
            notify_channel: "outbox_wake".to_owned(),
            notify_in_transaction: true,
            listener_backoff: Duration::from_millis(100),
            listener_max_backoff: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            max_connections: 10,
            copy_batches_from: 32,
        }
    }
}

impl PostgresConfig {
    /// The defaults with another schema.
    pub fn new(schema: impl Into<String>) -> Self {
        PostgresConfig {
            schema: schema.into(),
            ..PostgresConfig::default()
        }
    }

    /// The LISTEN/NOTIFY channel: `{notify_channel}_{schema}`.
    pub fn channel(&self) -> String {
        format!("{}_{}", self.notify_channel, self.schema)
    }

    /// Check every setting.
    pub fn validate(&self) -> Result<()> {
        check_ident("schema", &self.schema)?;
        check_ident("notify_channel", &self.notify_channel)?;
        if self.channel().len() > MAX_IDENT {
            return Err(Error::misconfigured(
                "notify_channel",
                "the channel name (prefix, '_', schema) must be at most 63 bytes",
            ));
        }
        if self.listener_backoff.is_zero() || self.listener_max_backoff < self.listener_backoff {
            return Err(Error::misconfigured(
                "listener_backoff",
                "must be positive and at most listener_max_backoff",
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::misconfigured(
                "connect_timeout",
                "must be longer than zero",
            ));
        }
        if self.max_connections == 0 {
            return Err(Error::misconfigured(
                "max_connections",
                "must be at least 1",
            ));
        }
        if self.copy_batches_from == 0 {
            return Err(Error::misconfigured(
                "copy_batches_from",
                "must be at least 1 (usize::MAX never copies)",
            ));
        }
        Ok(())
    }

    /// The pool settings of [`PostgresConfig::connect_pool`]: at most `max_connections`,
    /// waiting at most `connect_timeout` for a connection.
    pub fn pool_options(&self) -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
    }

    /// Connect a pool to `url`, checking first that one connection can be opened within
    /// `connect_timeout`, so that a bad URL, an unreachable host, refused credentials, a
    /// missing database or a failed TLS handshake is reported at once and by name (the
    /// message names the cause, never the password or the host).
    ///
    /// TLS follows the URL as in libpq: `sslmode=disable|prefer|require|verify-ca|verify-full`
    /// (default `prefer`) and `sslrootcert=PATH` (the certificates to trust; without it, the
    /// Mozilla roots). `require` encrypts without checking the certificate, `verify-ca`
    /// checks it against the roots, `verify-full` checks the host name too.
    ///
    /// ```no_run
    /// # async fn f() -> outboxkit_core::Result<()> {
    /// use outboxkit_postgres::PostgresConfig;
    ///
    /// let config = PostgresConfig::default();
    /// let pool = config
    ///     .connect_pool("postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem")
    ///     .await?;
    /// # drop(pool); Ok(()) }
    /// ```
    ///
    /// # Cancel Safety
    ///
    /// Cancelling it drops the connection being opened; nothing is written.
    pub async fn connect_pool(&self, url: &str) -> Result<PgPool> {
        self.validate()?;
        let options = connect_options(url)?;
        let probe =
            tokio::time::timeout(self.connect_timeout, PgConnection::connect_with(&options));
        match probe.await {
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "postgres did not answer within {} ms: the host is unreachable or the port is filtered",
                        self.connect_timeout.as_millis()
                    ),
                ))
            }
            Ok(Err(e)) => return Err(connect_error(e, options.get_ssl_mode())),
            Ok(Ok(conn)) => {
                // Closing is a courtesy to the server; a failure here changes nothing.
                let _ = conn.close().await;
            }
        }
        Ok(self.pool_options().connect_lazy_with(options))
    }
}

/// Parse a `postgres://` URL (with its `sslmode`, `sslrootcert`, … parameters).
pub fn connect_options(url: &str) -> Result<PgConnectOptions> {
    PgConnectOptions::from_str(url).map_err(|e| {
        // The driver's message may quote the URL (and so the password): keep it as the
        // source only.
        Error::misconfigured(
            "url",
            "is not a valid postgres url (postgres://user@host:port/db?sslmode=...)",
        )
        .with_source(e)
    })
}

/// A safe unquoted identifier: `[a-z_][a-z0-9_]*`, at most 63 bytes.
fn check_ident(field: &'static str, s: &str) -> Result<()> {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || s.len() > MAX_IDENT {
        return Err(Error::misconfigured(
            field,
            "must be 1-63 lowercase ASCII letters, digits or '_', not starting with a digit",
        ));
    }
    if s.starts_with("pg_") {
        return Err(Error::misconfigured(field, "must not start with 'pg_'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_table() {
        let cases = [
            ("outbox", true),
            ("_x1", true),
            ("outbox_test_0123abcd", true),
            ("", false),
            ("1abc", false),
            ("Outbox", false),
            ("a-b", false),
            ("a b", false),
            ("a\"b", false),
            ("pg_temp", false),
            (&"a".repeat(64), false),
        ];
        for (s, ok) in cases {
            assert_eq!(PostgresConfig::new(s).validate().is_ok(), ok, "{s:?}");
        }
    }

    #[test]
    fn channel_includes_schema_and_fits() {
        let c = PostgresConfig::new("s1");
        assert_eq!(c.channel(), "outbox_wake_s1");
        let long = PostgresConfig::new("a".repeat(60));
        assert!(
            long.validate().is_err(),
            "the channel name would be too long"
        );
    }

    #[test]
    fn copy_batches_from_must_be_positive() {
        let mut c = PostgresConfig::new("s1");
        c.copy_batches_from = 0;
        let e = c.validate().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misconfigured);
        assert!(e.to_string().contains("copy_batches_from"), "{e}");
        c.copy_batches_from = usize::MAX;
        assert!(c.validate().is_ok());
    }
}
