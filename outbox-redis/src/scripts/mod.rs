//! The Lua scripts, each its body plus the part of the shared prelude (`scripts/common.lua`)
//! that the body uses. They are called by SHA (`EVALSHA`); a call that meets `NOSCRIPT`
//! (after a restart or `SCRIPT FLUSH`) loads its script and runs again.
//!
//! Every script starts with a `#!lua` shebang (Redis 7): a script that writes is then
//! refused before it starts when Redis is over `maxmemory`, instead of failing half-way
//! (Redis does not roll a script back). The read-only ones say `no-writes`.
//!
//! The prelude runs on every call (a script is compiled once but its chunk, with every
//! `local function` of the prelude, is executed each time): the whole of it costs several
//! times an empty script. So each script carries only the prelude's definitions its body
//! reaches, directly or through other definitions (see [`prelude_for`]).

use std::sync::OnceLock;

use redis::Script;

const COMMON: &str = include_str!("common.lua");

/// One top-level definition of the prelude: the names it defines and its text.
struct Def {
    names: Vec<&'static str>,
    text: &'static str,
}

/// The prelude's top-level definitions in order. Each starts at a line beginning with
/// `local ` (or at the comment lines right above it, which describe it) and runs to the
/// next one. Lines before the first definition are dropped.
fn defs() -> Vec<Def> {
    let mut starts: Vec<usize> = Vec::new();
    let mut comment: Option<usize> = None;
    let mut pos = 0;
    for line in COMMON.split_inclusive('\n') {
        if line.starts_with("local ") {
            starts.push(comment.take().unwrap_or(pos));
        } else if line.starts_with("--") {
            comment.get_or_insert(pos);
        } else {
            comment = None;
        }
        pos += line.len();
    }
    starts.push(COMMON.len());
    starts
        .windows(2)
        .map(|w| {
            let text = &COMMON[w[0]..w[1]];
            let first = text
                .lines()
                .find(|l| l.starts_with("local "))
                .unwrap_or_default();
            let decl = first.trim_start_matches("local ");
            let names = match decl.strip_prefix("function ") {
                Some(f) => vec![f.split('(').next().unwrap_or_default().trim()],
                None => decl
                    .split('=')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .collect(),
            };
            Def { names, text }
        })
        .collect()
}

/// Whether `name` occurs in `text` as a whole identifier.
fn mentions(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The prelude definitions that `body` reaches, directly or through the definitions it
/// uses, in the prelude's order (a definition only refers to earlier ones). A name that
/// only appears in a comment or a string pulls its definition in too, which costs a
/// little time and is never wrong.
pub(crate) fn prelude_for(body: &str) -> String {
    let defs = defs();
    let mut used = vec![false; defs.len()];
    let mut todo: Vec<&str> = vec![body];
    while let Some(text) = todo.pop() {
        for (i, d) in defs.iter().enumerate() {
            if !used[i] && d.names.iter().any(|n| mentions(text, n)) {
                used[i] = true;
                todo.push(d.text);
            }
        }
    }
    defs.iter()
        .zip(used)
        .filter(|(_, u)| *u)
        .map(|(d, _)| d.text)
        .collect()
}

/// A script's full text: the shebang, the prelude it uses, its body.
fn source(body: &str, read_only: bool) -> String {
    let shebang = if read_only {
        "#!lua flags=no-writes\n"
    } else {
        "#!lua\n"
    };
    format!("{shebang}{}{body}", prelude_for(body))
}

/// The enqueue script's full text: sent with `EVAL` inside a caller's `MULTI`, where an
/// `EVALSHA` that meets `NOSCRIPT` could not be retried.
pub(crate) fn enqueue_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| source(include_str!("enqueue.lua"), false))
}

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
    pub(crate) permits: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let w = |body: &str| Script::new(&source(body, false));
        let r = |body: &str| Script::new(&source(body, true));
        Scripts {
            enqueue: Script::new(enqueue_source()),
            claim: w(include_str!("claim.lua")),
            complete: w(include_str!("complete.lua")),
            release: w(include_str!("release.lua")),
            lease: w(include_str!("lease.lua")),
            operator: w(include_str!("operator.lua")),
            list: r(include_str!("list.lua")),
            purge: w(include_str!("purge.lua")),
            stats: r(include_str!("stats.lua")),
            endpoint: w(include_str!("endpoint.lua")),
            tenancy: r(include_str!("tenancy.lua")),
            migrate: w(include_str!("migrate.lua")),
            permits: w(include_str!("permits.lua")),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 13] {
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
            &self.permits,
        ]
    }
}

#[cfg(test)]
mod tests {
    /// The claim kills at most core's one bound of exhausted rows.
    #[test]
    fn exhausted_bound_matches_core() {
        let claim = include_str!("claim.lua");
        let bound = format!(
            "local EXHAUSTED_STEP = {} ",
            outboxkit_core::claim_rules::EXHAUSTED_PER_CLAIM
        );
        assert!(claim.contains(&bound), "claim.lua must say `{bound}`");
    }

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

    /// Every top-level definition of the prelude is found, with its names.
    #[test]
    fn prelude_splits_into_every_definition() {
        let defs = super::defs();
        let locals = super::COMMON
            .lines()
            .filter(|l| l.starts_with("local "))
            .count();
        assert_eq!(defs.len(), locals);
        let names: Vec<&str> = defs.iter().flat_map(|d| d.names.clone()).collect();
        for n in [
            "P",
            "S",
            "K_SEQ",
            "k_d",
            "place",
            "counts",
            "purgeable",
            "flush",
            "wake",
        ] {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        assert!(defs
            .iter()
            .all(|d| d.text.starts_with("local ") || d.text.starts_with("--")));
    }

    /// A script carries what its body reaches (also through other definitions) and
    /// nothing else.
    #[test]
    fn a_script_carries_only_the_prelude_it_uses() {
        let enqueue = super::enqueue_source();
        assert!(enqueue.starts_with("#!lua\n-- Shared prelude"));
        // Used by the body, and reached through `flush` and `k_o`.
        for used in [
            "local function matches(",
            "local function flush(",
            "local counts = {}",
            "local function lp(",
            "local function wake(",
        ] {
            assert!(enqueue.contains(used), "{used}");
        }
        for unused in [
            "local function place(",
            "local function load(",
            "local function hold_for_endpoint(",
            // Only named in the comment of a definition enqueue uses: comments go with
            // the definition below them.
            "local function owns(",
        ] {
            assert!(!enqueue.contains(unused), "{unused}");
        }
        // `place` pulls in what it calls.
        let p = super::prelude_for("place(d, false)");
        for used in [
            "local function touch(",
            "local function k_x(",
            "local function finished(",
        ] {
            assert!(p.contains(used), "{used}");
        }
        assert!(super::prelude_for("return 1").is_empty());
    }

    #[test]
    fn mentions_matches_whole_identifiers_only() {
        assert!(super::mentions("x = k_d(id)", "k_d"));
        assert!(!super::mentions("x = k_dd(id)", "k_d"));
        assert!(!super::mentions("x = kk_d(id)", "k_d"));
        assert!(super::mentions("P", "P"));
    }
}
