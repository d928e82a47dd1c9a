//! The Lua scripts, each the shared prelude (`scripts/common.lua`) plus its body. They are
//! called by SHA (`EVALSHA`); `redis::Script` loads a script again when the server answers
//! `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
//!
//! Every script starts with a `#!lua` shebang (Redis 7): a script that writes is then
//! refused before it starts when Redis is over `maxmemory`, instead of failing half-way
//! (Redis does not roll a script back). The read-only ones say `no-writes`.

use redis::Script;

macro_rules! source {
    ($file:literal) => {
        concat!("#!lua\n", include_str!("common.lua"), include_str!($file))
    };
    ($file:literal, read_only) => {
        concat!(
            "#!lua flags=no-writes\n",
            include_str!("common.lua"),
            include_str!($file)
        )
    };
}

/// The enqueue script's full text: sent with `EVAL` inside a caller's `MULTI`, where an
/// `EVALSHA` that meets `NOSCRIPT` could not be retried.
pub(crate) const ENQUEUE: &str = source!("enqueue.lua");

pub(crate) struct Scripts {
    pub(crate) enqueue: Script,
    pub(crate) claim: Script,
    pub(crate) complete: Script,
    pub(crate) release: Script,
    pub(crate) lease: Script,
    pub(crate) operator: Script,
    pub(crate) list: Script,
    pub(crate) purge: Script,
    pub(crate) stats: Script,
    pub(crate) endpoint: Script,
    pub(crate) tenancy: Script,
    pub(crate) migrate: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            enqueue: Script::new(ENQUEUE),
            claim: Script::new(source!("claim.lua")),
            complete: Script::new(source!("complete.lua")),
            release: Script::new(source!("release.lua")),
            lease: Script::new(source!("lease.lua")),
            operator: Script::new(source!("operator.lua")),
            list: Script::new(source!("list.lua", read_only)),
            purge: Script::new(source!("purge.lua")),
            stats: Script::new(source!("stats.lua", read_only)),
            endpoint: Script::new(source!("endpoint.lua")),
            tenancy: Script::new(source!("tenancy.lua", read_only)),
            migrate: Script::new(source!("migrate.lua")),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 12] {
        [
            &self.enqueue,
            &self.claim,
            &self.complete,
            &self.release,
            &self.lease,
            &self.operator,
            &self.list,
            &self.purge,
            &self.stats,
            &self.endpoint,
            &self.tenancy,
            &self.migrate,
        ]
    }
}

#[cfg(test)]
mod tests {
    /// The hold times written by the scripts are the ones outboxkit-core defines.
    #[test]
    fn hold_constants_match_core() {
        let common = include_str!("common.lua");
        let never = format!(
            "local HOLD_NEVER = '{}'",
            outboxkit_core::Timestamp::MAX.as_unix_millis()
        );
        let hold = format!(
            "local DISABLED_HOLD_MS = {}",
            outboxkit_core::endpoint::DISABLED_HOLD.as_millis()
        );
        assert!(common.contains(&never), "{never}");
        assert!(common.contains(&hold), "{hold}");
    }
}
