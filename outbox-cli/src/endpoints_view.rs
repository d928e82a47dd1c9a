//! How `endpoints list` and `endpoints show` describe an endpoint: its last delivery, the
//! circuit a relay would start with, and the `--rate-limit` flag of `endpoints update`.

use crate::error::{CliError, CliResult};

/// The circuit state a relay adopts for an endpoint when it starts, from its last delivery:
/// `half-open` after a timeout, connection error or 5xx, else `closed`. A running relay
/// keeps its own, live state (its report and observer show it).
pub fn circuit_text(l: Option<&outboxkit_core::LastDelivery>) -> &'static str {
    outboxkit_dispatch::CircuitState::on_start(l).as_str()
}

/// [`circuit_text`] with what it means.
pub fn circuit_detail(l: Option<&outboxkit_core::LastDelivery>) -> String {
    match outboxkit_dispatch::CircuitState::on_start(l) {
        outboxkit_dispatch::CircuitState::Closed => "closed".to_owned(),
        s => format!(
            "{} (the last delivery failed in a retryable way: a relay sends one probe before the rest; repeated failures open the circuit)",
            s.as_str()
        ),
    }
}

/// How an endpoint's deliveries are ordered, as `list` and `show` print it.
pub fn fifo_text(fifo: bool) -> &'static str {
    if fifo {
        "fifo"
    } else {
        "per key"
    }
}

/// `--rate-limit` of `endpoints update`: a number per second, or `none` to remove it.
pub fn parse_rate_limit(s: &str) -> CliResult<Option<u32>> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let r = s.parse::<u32>().map_err(|_| {
        CliError::usage("invalid input: --rate-limit: use a number per second or `none`")
    })?;
    outboxkit_core::endpoint::check_rate_limit(Some(r))?;
    Ok(Some(r))
}

/// An endpoint's last delivery: `succeeded 204 at 2026-…`, or `-` before the first one.
pub fn last_delivery_text(l: Option<&outboxkit_core::LastDelivery>) -> String {
    match l {
        None => "-".to_owned(),
        Some(l) => match l.status_code {
            Some(code) => format!("{} {code} at {}", l.outcome.as_str(), l.at),
            None => format!("{} at {}", l.outcome.as_str(), l.at),
        },
    }
}
