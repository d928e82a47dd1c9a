//! Statements with named parameters, and the one function that binds them.
//!
//! A statement's text lives in a `.sql` file beside this module, with `{name}` for the
//! store's table names (filled once, when the store opens) and `:name` for each parameter,
//! so the text says what it binds (River's rule: never a bind order kept in another file).
//! [`Statement::new`] turns the `:name`s into `$1, $2, …` (a name used twice binds once);
//! [`Statement::bind`] takes a [`Params`] and refuses a statement with a name left unbound,
//! and a parameter the statement does not name, before anything reaches the database.

pub(crate) mod claim;
pub(crate) mod deliveries;
pub(crate) mod endpoints;
pub(crate) mod enqueue;
pub(crate) mod ledger;
pub(crate) mod permits;

use std::collections::HashMap;
use std::sync::Arc;

use outboxkit_core::{Error, ErrorKind, Result};
use sqlx::postgres::{PgArguments, PgRow, Postgres};
use sqlx::query::Query;
use sqlx::query::QueryScalar;
use sqlx::{Arguments, AssertSqlSafe, Encode, FromRow, Type};

/// The token statements.
pub(crate) const TOKENS: &str = include_str!("tokens.sql");
/// The event-type catalogue statements.
pub(crate) const EVENT_TYPES: &str = include_str!("event_types.sql");
/// The endpoint and consumer statements.
pub(crate) const ENDPOINTS: &str = include_str!("endpoints.sql");
/// The operator statements.
pub(crate) const DELIVERIES: &str = include_str!("deliveries.sql");
/// The hot path: claim, complete, release, extend, mark sending.
pub(crate) const CLAIM: &str = include_str!("claim.sql");
/// The enqueue.
pub(crate) const ENQUEUE: &str = include_str!("enqueue.sql");
/// The rate-limit permits.
pub(crate) const PERMITS: &str = include_str!("permits.sql");
/// The ledger's reads.
pub(crate) const LEDGER: &str = include_str!("ledger.sql");
/// The console's records: audit log, sessions, activity.
pub(crate) const CONSOLE: &str = include_str!("console.sql");

type Bind<'q> = Box<
    dyn FnOnce(&mut PgArguments) -> std::result::Result<(), sqlx::error::BoxDynError> + Send + 'q,
>;

/// A statement whose parameters are named: the text sent (`$n` placeholders) and the name
/// of each `$n`, in order.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    /// Shared, so each execution hands sqlx the text without copying it.
    text: Arc<str>,
    names: Vec<String>,
}

/// The values of one execution, by name.
pub(crate) struct Params<'q> {
    values: HashMap<&'static str, Bind<'q>>,
    twice: Option<&'static str>,
}

impl<'q> Params<'q> {
    pub(crate) fn new() -> Self {
        Params {
            values: HashMap::new(),
            twice: None,
        }
    }

    /// Bind `value` to `:name`.
    pub(crate) fn set<T>(mut self, name: &'static str, value: T) -> Self
    where
        T: Encode<'q, Postgres> + Type<Postgres> + Send + 'q,
    {
        let bind: Bind<'q> = Box::new(move |args: &mut PgArguments| args.add(value));
        if self.values.insert(name, bind).is_some() {
            self.twice = Some(name);
        }
        self
    }
}

/// The statement `-- name: <name>` of a `.sql` file: its text up to the next `-- name:`.
pub(crate) fn section<'a>(file: &'a str, name: &str) -> Result<&'a str> {
    let marker = format!("-- name: {name}\n");
    let start = file
        .find(&marker)
        .map(|i| i + marker.len())
        .ok_or_else(|| misbound(format!("no statement `{name}` in its .sql file")))?;
    let end = file[start..]
        .find("-- name: ")
        .map_or(file.len(), |j| start + j);
    Ok(file[start..end].trim())
}

/// The statement `name` of `file`, parsed with `tables`.
pub(crate) fn load(file: &str, name: &str, tables: &[(&str, &str)]) -> Result<Statement> {
    Statement::new(section(file, name)?, tables)
}

fn misbound(what: String) -> Error {
    Error::new(ErrorKind::Unexpected, what)
}

impl Statement {
    /// Parse `template`: `{table}` names are replaced from `tables`, `:name` parameters
    /// become `$n`. A `::` cast, a quoted string or identifier and a `--` comment are left as
    /// they are. A `{…}` with no table of that name is an error (a typo in a `.sql` file
    /// fails when the store opens, with the name).
    pub(crate) fn new(template: &str, tables: &[(&str, &str)]) -> Result<Statement> {
        let mut text = String::with_capacity(template.len());
        let mut names: Vec<String> = Vec::new();
        let b = template.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            match c {
                b'\'' | b'"' => {
                    let end = template[i + 1..]
                        .find(c as char)
                        .map_or(b.len(), |j| i + 1 + j + 1);
                    text.push_str(&template[i..end]);
                    i = end;
                }
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    let end = template[i..].find('\n').map_or(b.len(), |j| i + j);
                    i = end; // comments are not sent
                }
                b'{' => {
                    let end = template[i..]
                        .find('}')
                        .map(|j| i + j)
                        .ok_or_else(|| misbound("an unclosed `{` in a statement".into()))?;
                    let name = &template[i + 1..end];
                    let (_, table) = tables.iter().find(|(n, _)| *n == name).ok_or_else(|| {
                        misbound(format!("a statement names an unknown table `{{{name}}}`"))
                    })?;
                    text.push_str(table);
                    i = end + 1;
                }
                b':' if b.get(i + 1) == Some(&b':') => {
                    text.push_str("::");
                    i += 2;
                }
                b':' if b
                    .get(i + 1)
                    .is_some_and(|n| n.is_ascii_lowercase() || *n == b'_') =>
                {
                    let start = i + 1;
                    let mut end = start;
                    while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                        end += 1;
                    }
                    let name = &template[start..end];
                    let n = match names.iter().position(|x| x == name) {
                        Some(k) => k + 1,
                        None => {
                            names.push(name.to_owned());
                            names.len()
                        }
                    };
                    text.push('$');
                    text.push_str(&n.to_string());
                    i = end;
                }
                _ => {
                    let len = template[i..].chars().next().map_or(1, char::len_utf8);
                    text.push_str(&template[i..i + len]);
                    i += len;
                }
            }
        }
        Ok(Statement {
            text: text.into(),
            names,
        })
    }

    /// The text sent to the server.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The parameter names, in `$n` order (`$1` is the first).
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The query with every parameter bound by name; an unbound name, a parameter the
    /// statement does not name, or one set twice is an error and nothing is sent.
    pub(crate) fn bind<'q>(
        &'q self,
        params: Params<'q>,
    ) -> Result<Query<'q, Postgres, PgArguments>> {
        // The text is ours: a template rendered with the (validated) schema name.
        Ok(sqlx::query_with(
            AssertSqlSafe(Arc::clone(&self.text)),
            self.arguments(params)?,
        ))
    }

    /// [`Statement::bind`] for a statement that returns one column.
    pub(crate) fn bind_scalar<'q, O>(
        &'q self,
        params: Params<'q>,
    ) -> Result<QueryScalar<'q, Postgres, O, PgArguments>>
    where
        (O,): for<'r> FromRow<'r, PgRow>,
    {
        Ok(sqlx::query_scalar_with(
            AssertSqlSafe(Arc::clone(&self.text)),
            self.arguments(params)?,
        ))
    }

    fn arguments<'q>(&self, mut params: Params<'q>) -> Result<PgArguments> {
        if let Some(name) = params.twice {
            return Err(misbound(format!("the parameter `:{name}` is set twice")));
        }
        let mut args = PgArguments::default();
        for name in &self.names {
            let bind = params.values.remove(name.as_str()).ok_or_else(|| {
                misbound(format!("the statement's parameter `:{name}` is not bound"))
            })?;
            bind(&mut args).map_err(|e| {
                misbound(format!("the parameter `:{name}` cannot be encoded")).with_source(e)
            })?;
        }
        if let Some(extra) = params.values.keys().next() {
            return Err(misbound(format!(
                "the parameter `:{extra}` is not named by the statement"
            )));
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: &[(&str, &str)] = &[("deliveries", "\"s\".deliveries")];

    #[test]
    fn names_become_numbered_placeholders_once_each() {
        let s = Statement::new(
            "SELECT d.id FROM {deliveries} d -- the hot table\n\
             WHERE d.next_attempt_at <= :now::int8 AND d.tenant = :tenant \
             AND d.lease_until > :now AND d.note <> ':not_a_param' AND d.status = 'a::b'",
            TABLES,
        )
        .unwrap();
        assert_eq!(
            s.text(),
            "SELECT d.id FROM \"s\".deliveries d \n\
             WHERE d.next_attempt_at <= $1::int8 AND d.tenant = $2 \
             AND d.lease_until > $1 AND d.note <> ':not_a_param' AND d.status = 'a::b'"
        );
        assert_eq!(s.names, ["now", "tenant"]);
    }

    #[test]
    fn a_file_holds_named_sections() {
        let file = "-- header\n\n-- name: one\nSELECT 1\n\n-- name: two\nSELECT :x::int8\n";
        assert_eq!(section(file, "one").unwrap(), "SELECT 1");
        assert_eq!(load(file, "two", TABLES).unwrap().text(), "SELECT $1::int8");
        assert!(section(file, "three").is_err());
    }

    /// Every statement of every `.sql` file parses with the store's table names.
    #[test]
    fn every_sql_file_parses() {
        let tables = [
            ("api_tokens", "\"s\".api_tokens"),
            ("audit", "\"s\".audit"),
            ("console_sessions", "\"s\".console_sessions"),
            ("event_types", "\"s\".event_types"),
            ("catalogue", "\"s\".catalogue"),
            ("endpoints", "\"s\".endpoints"),
            ("consumers", "\"s\".consumers"),
            ("all", "\"s\".delivery_rows"),
            ("attempts", "\"s\".attempts"),
            ("messages", "\"s\".messages"),
            ("queue", "\"s\".queue"),
            ("groups", "\"s\".groups"),
            ("history", "\"s\".history"),
            ("schema", "\"s\""),
            ("delivery_cols", "d.id"),
            ("message_cols", "id"),
            ("purge_cursor", "\"s\".purge_cursor"),
            ("exhausted_bound", "1000"),
            ("never", "1"),
            ("disabled_hold", "1"),
            // `claim::Sql::new` pastes the `claimable` section here before parsing.
            ("claimable", "true"),
            // ... and the completion's shared sections here (the real pasting is tested by
            // every completion the store runs).
            ("complete_input", "SELECT 1"),
            ("complete_finish", "fin AS (SELECT 1 AS id)"),
            ("complete_endpoints", "ep AS (SELECT 1)"),
            ("settled", "fin"),
            // `enqueue::Sql::new` pastes the `batch_routes` and `batch_groups` sections here.
            ("batch_routes", "SELECT 1"),
            ("batch_groups", "known AS (SELECT 1)"),
            // `ledger::Sql::new` pastes two `pick_half`s into the pick, each with its bounds.
            ("pick_after", "NULL"),
            ("pick_wrap", "NULL"),
            ("after", "''"),
            ("upto", ""),
            // `ledger::Sql::purge_partition` names one partition of the history here.
            ("part", "\"s\".history_1"),
        ];
        for file in [
            TOKENS,
            CONSOLE,
            EVENT_TYPES,
            ENDPOINTS,
            LEDGER,
            DELIVERIES,
            CLAIM,
            ENQUEUE,
        ] {
            let names: Vec<&str> = file
                .lines()
                .filter_map(|l| l.strip_prefix("-- name: "))
                .collect();
            assert!(!names.is_empty());
            for name in names {
                load(file, name, &tables).unwrap();
            }
        }
    }

    #[test]
    fn an_unknown_table_is_refused_by_name() {
        let e = Statement::new("SELECT 1 FROM {delivery}", TABLES).unwrap_err();
        assert!(e.to_string().contains("`{delivery}`"), "{e}");
    }

    #[test]
    fn binding_refuses_an_unbound_an_unknown_and_a_repeated_name() {
        let s = Statement::new("SELECT :a::int8 + :b::int8", TABLES).unwrap();
        let e = s.bind(Params::new().set("a", 1_i64)).err().unwrap();
        assert!(e.to_string().contains("`:b` is not bound"), "{e}");
        let e = s
            .bind(
                Params::new()
                    .set("a", 1_i64)
                    .set("b", 2_i64)
                    .set("c", 3_i64),
            )
            .err()
            .unwrap();
        assert!(e.to_string().contains("`:c` is not named"), "{e}");
        let e = s
            .bind(
                Params::new()
                    .set("a", 1_i64)
                    .set("a", 2_i64)
                    .set("b", 2_i64),
            )
            .err()
            .unwrap();
        assert!(e.to_string().contains("`:a` is set twice"), "{e}");
        assert!(s
            .bind(Params::new().set("b", 2_i64).set("a", 1_i64))
            .is_ok());
    }
}
