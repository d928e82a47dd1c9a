//! What a completion writes beside a claimed row, kept on the store from the claim that
//! leased it: the completion's fence `SELECT` (the row's kind and target, run, due time and
//! attempt count, read back by rowid under the token) is skipped when this process claimed
//! the row. Sound while the token holds: nothing changes those columns of a leased row but
//! its own settle (which clears the token), a discard or a new lease (which clear or replace
//! it); the settle `UPDATE` is fenced by the token either way, so an entry never makes a lost
//! lease succeed.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use outboxkit_core::{ClaimToken, Lease};

use super::seq_of_token;

/// A leased row as its lease left it.
#[derive(Clone, Debug)]
pub(crate) struct Fence {
    pub(crate) seq: i64,
    pub(crate) token: ClaimToken,
    /// The endpoint of a webhook row; `None` for the other kinds.
    pub(crate) webhook: Option<String>,
    pub(crate) run: i64,
    pub(crate) due_at: i64,
    /// Attempts recorded in the ledger so far.
    pub(crate) attempt_count: i64,
}

/// The fences of rows this store claimed and has not settled yet, by row.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    rows: Mutex<HashMap<i64, Fence>>,
}

/// The most entries kept: past it the map starts over (leases never settled — a stopped
/// dispatcher, a row discarded after its lease ran out — would otherwise stay forever);
/// a missing entry only costs the fence `SELECT`.
const MAX_KEPT: usize = 1 << 16;

impl Fences {
    /// Keep the fences of a committed claim.
    pub(crate) fn keep(&self, fences: Vec<Fence>) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        if rows.len() + fences.len() > MAX_KEPT {
            rows.clear();
        }
        for f in fences {
            rows.insert(f.seq, f);
        }
    }

    /// The fence of `lease`'s row if this store leased it with this very token (removed: a
    /// row is settled once per lease).
    pub(crate) fn take(&self, lease: &Lease) -> Option<Fence> {
        let seq = seq_of_token(&lease.token)?;
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        match rows.get(&seq) {
            Some(f) if f.token == lease.token => rows.remove(&seq),
            _ => None,
        }
    }
}
