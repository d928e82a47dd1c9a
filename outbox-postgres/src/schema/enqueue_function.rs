//! The SQL enqueue function, `<schema>.enqueue(tenant, topic, payload, …)`: what
//! [`crate::PostgresStore::enqueue_in`] does, callable from any language's driver inside its
//! own transaction (`enqueue_function.sql` says what it does and how).
//!
//! Its text is built here from the store's own `one` statement of `sql/enqueue.sql`, so the
//! fan-out cannot drift from `enqueue_in`'s; `migrate()` installs it when its text changed
//! (a digest in the function's comment tells), and [`crate::migration_script`] ends with it.

use outboxkit_core::{Error, ErrorKind, Result};

use crate::config::PostgresConfig;
use crate::schema::Tables;
use crate::sql::Statement;

const TEMPLATE: &str = include_str!("enqueue_function.sql");

/// The function's signature, as `to_regprocedure` names it.
pub(crate) const SIGNATURE: &str =
    "enqueue(text, text, json, text, text, timestamptz, jsonb, text[])";

/// The variables the function sets, one per parameter of the `one` statement (`:name` is
/// `in_name`); a parameter the statement gains is an error here until the function sets it.
const VARIABLES: [&str; 14] = [
    "id",
    "tenant",
    "topic",
    "payload",
    "ordering_key",
    "idempotency_key",
    "available_at",
    "headers",
    "cause",
    "now",
    "did_hi",
    "did_lo",
    "recipients",
    "channel",
];

/// The function's SQL for one config, and the tag its comment starts with once installed.
pub(crate) struct Function {
    /// The helper type and functions, the function, and its comment.
    pub text: String,
    /// `outbox <digest of the text>`: the installed function is this one when its comment
    /// (`obj_description`) starts with it.
    pub tag: String,
}

impl Function {
    /// The function for `config`.
    pub(crate) fn new(config: &PostgresConfig) -> Result<Function> {
        config.validate()?;
        let tables = Tables::new(&config.schema);
        let enqueue = crate::sql::enqueue::Sql::new(&tables)?;
        let write = with_variables(&enqueue.one)?;
        let limits = &config.limits;
        let text = TEMPLATE
            .replace("{schema}", &tables.schema)
            .replace("{channel}", &format!("'{}'", config.channel()))
            .replace("{max_payload_bytes}", &limits.max_payload_bytes.to_string())
            .replace("{max_delay_ms}", &limits.max_delay.as_millis().to_string())
            .replace("{max_headers}", &limits.max_headers.to_string())
            .replace("{max_recipients}", &limits.max_recipients.to_string())
            .replace("{write}", &write);
        let tag = format!("outbox {:016x}", fnv1a(&text));
        let text = text.replace("\n'outbox: write", &format!("\n'{tag}: write"));
        Ok(Function { text, tag })
    }

    /// Whether `comment`, the installed function's, says it is this one.
    pub(crate) fn is_installed(&self, comment: Option<&str>) -> bool {
        comment.is_some_and(|c| {
            c.strip_prefix(self.tag.as_str())
                .is_some_and(|r| r.starts_with(':'))
        })
    }
}

/// `statement`'s text with each `$n` replaced by the variable `in_<name of $n>`.
fn with_variables(statement: &Statement) -> Result<String> {
    let names = statement.names();
    if let Some(n) = names.iter().find(|n| !VARIABLES.contains(&n.as_str())) {
        return Err(Error::new(
            ErrorKind::Unexpected,
            format!(
                "the enqueue statement binds :{n}, which the SQL enqueue function does not set"
            ),
        ));
    }
    let text = statement.text();
    let mut out = String::with_capacity(text.len() + 8 * names.len());
    let mut quoted = false;
    let mut chars = text.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c != '$' || quoted {
            out.push(c);
            continue;
        }
        let mut n = 0usize;
        let mut digits = 0;
        while let Some(&(_, d)) = chars.peek() {
            let Some(v) = d.to_digit(10) else { break };
            n = n * 10 + v as usize;
            digits += 1;
            chars.next();
        }
        let name = (digits > 0)
            .then(|| names.get(n.wrapping_sub(1)))
            .flatten()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "the enqueue statement holds a `$` that is not one of its parameters",
                )
            })?;
        out.push_str("in_");
        out.push_str(name);
    }
    Ok(out)
}

/// FNV-1a, 64 bits: a digest that tells whether the installed function is this text.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_becomes_a_variable_and_the_tag_is_in_the_comment() {
        let f = Function::new(&PostgresConfig::new("billing")).unwrap();
        assert!(!f.text.contains("{write}") && !f.text.contains("{schema}"));
        assert!(f.text.contains("in_did_lo") && f.text.contains("pg_notify(in_channel::text"));
        assert!(!f.text.contains("$1"), "a positional parameter was left");
        assert!(f.text.contains("'outbox_wake_billing'"));
        assert!(f.text.contains(&format!("'{}: write", f.tag)));
        assert!(f.is_installed(Some(&format!("{}: write a message", f.tag))));
        assert!(!f.is_installed(Some("outbox: write a message")) && !f.is_installed(None));
        let other = PostgresConfig {
            limits: outboxkit_core::Limits {
                max_payload_bytes: 10,
                ..Default::default()
            },
            ..PostgresConfig::new("billing")
        };
        let changed = Function::new(&other).unwrap();
        assert!(changed.text.contains("limit of 10 bytes"));
        assert_ne!(changed.tag, f.tag);
    }
}
