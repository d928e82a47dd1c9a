//! The custom headers of `outbox endpoints add|update` (`--header`, `--secret-header`,
//! `--remove-header`) and how `show`, `list` and `--json` describe them: names and plain
//! values; a secret value is never printed.

use std::fmt;

use clap::Args;
use outboxkit_core::endpoint_headers::check_inputs;
use outboxkit_core::{Endpoint, HeaderInput, HeaderNames, HeaderValue};
use serde_json::{json, Value};

use crate::error::CliResult;

/// What a secret value shows as in text.
pub const MASK: &str = "********";

/// `--header` and `--secret-header` (of `add` and `update`).
#[derive(Args, Clone, Default)]
pub struct HeaderArgs {
    /// A custom header sent with every request to the endpoint, `'Name: value'`
    /// (repeatable; on update it replaces a header of the same name).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub header: Vec<String>,
    /// A custom header whose value is sealed with OUTBOX_VAULT_KEY and never shown again
    /// (an API key the receiver expects), `'Name: value'` (repeatable).
    #[arg(long = "secret-header", value_name = "NAME: VALUE")]
    pub secret_header: Vec<String>,
}

impl fmt::Debug for HeaderArgs {
    // Header values (plain ones may be credentials too) stay out of debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HeaderArgs({} plain, {} secret)",
            self.header.len(),
            self.secret_header.len()
        )
    }
}

impl HeaderArgs {
    /// The headers given, parsed and checked (names, values, duplicates, count) before
    /// anything is opened or written.
    pub fn inputs(&self) -> CliResult<Vec<HeaderInput>> {
        let mut out = Vec::with_capacity(self.header.len() + self.secret_header.len());
        for h in &self.header {
            out.push(HeaderInput::parse(h, false)?);
        }
        for h in &self.secret_header {
            out.push(HeaderInput::parse(h, true)?);
        }
        check_inputs(&out, &HeaderNames::default())?;
        Ok(out)
    }
}

/// An endpoint's headers for `--json`: `{"name", "value", "secret"}`, `value` `null` when
/// secret.
pub fn headers_json(e: &Endpoint) -> Value {
    Value::Array(
        e.headers
            .iter()
            .map(|h| {
                json!({
                    "name": h.name,
                    "value": h.value.plain(),
                    "secret": h.value.is_secret(),
                })
            })
            .collect(),
    )
}

/// One header as text: `name: value`, or `name: ******** (secret)`.
pub fn header_text(name: &str, value: &HeaderValue) -> String {
    match value {
        HeaderValue::Plain(v) => format!("{name}: {v}"),
        HeaderValue::Secret(_) => format!("{name}: {MASK} (secret)"),
    }
}

/// The header names for `list`: `x-route, authorization (secret)`, or `-`.
pub fn header_names(e: &Endpoint) -> String {
    if e.headers.is_empty() {
        return "-".to_owned();
    }
    e.headers
        .iter()
        .map(|h| {
            if h.value.is_secret() {
                format!("{} (secret)", h.name)
            } else {
                h.name.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
