//! The Lua programs: a body per operation (`scripts/<name>.lua`) and the shared prelude
//! (`scripts/common.lua`). They run as **Redis Functions**: one library holds the whole
//! prelude and every body as a function, loaded once per server (`FUNCTION LOAD REPLACE` at
//! start-up, and again when a call meets a server that lost it: a restart without
//! persistence, a fail-over to a replica that never had it, `FUNCTION DELETE`), called with
//! `FCALL`. The prelude's definitions are then made once, at load; a call runs only
//! `begin(prefix)` and its body. The library's name carries a hash of its text
//! (`outbox_<hash>`, its functions `outbox_<hash>_<name>`), so processes of two versions
//! sharing a server each call their own code.
//!
//! Where the server refuses `FUNCTION LOAD` (an ACL without `@scripting` functions, a proxy
//! that does not pass them), the store falls back to scripts: each body with the part of the
//! prelude it reaches (see [`prelude_for`]) as one script, called by SHA (`EVALSHA`); a call
//! that meets `NOSCRIPT` loads its script and runs again. A script's chunk executes its
//! whole prelude on every call, which is what the functions save.
//!
//! Writes are refused before they start when Redis is over `maxmemory` (Redis does not roll
//! a script back): a script starts with a `#!lua` shebang, a function has no `allow-oom`
//! flag. The read-only ones say `no-writes`.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// What every call runs before its body: the per-call state from the prefix.
const BEGIN: &str = "begin(KEYS[1])\n";

/// A script's full text: the shebang, the prelude it uses, `begin`, its body.
fn source(body: &str, read_only: bool) -> String {
    let shebang = if read_only {
        "#!lua flags=no-writes\n"
    } else {
        "#!lua\n"
    };
    let start = format!("{BEGIN}{body}");
    format!("{shebang}{}{start}", prelude_for(&start))
}

/// The enqueue script's full text: sent with `EVAL` inside a caller's `MULTI`, where an
/// `EVALSHA` or `FCALL` that meets a server without it could not be retried.
pub(crate) fn enqueue_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| source(include_str!("enqueue.lua"), false))
}

/// The bodies: (name, text, read-only).
const BODIES: [(&str, &str, bool); 12] = [
    ("enqueue", include_str!("enqueue.lua"), false),
    ("claim", include_str!("claim.lua"), false),
    ("complete", include_str!("complete.lua"), false),
    ("release", include_str!("release.lua"), false),
    ("lease", include_str!("lease.lua"), false),
    ("operator", include_str!("operator.lua"), false),
    ("list", include_str!("list.lua"), true),
    ("purge", include_str!("purge.lua"), false),
    ("stats", include_str!("stats.lua"), true),
    ("endpoint", include_str!("endpoint.lua"), false),
    ("tenancy", include_str!("tenancy.lua"), true),
    ("migrate", include_str!("migrate.lua"), false),
];

/// The function library's code after its shebang: the whole prelude once, then each body
/// registered as a function `<library>_<name>` whose callback runs `begin` and the body
/// (`KEYS` and `ARGV` are the callback's parameters, so a body reads as in a script).
fn library_code(library: &str) -> String {
    let mut code: String = defs().iter().map(|d| d.text).collect();
    for (name, body, read_only) in BODIES {
        let flags = if read_only {
            ", flags = { 'no-writes' }"
        } else {
            ""
        };
        code.push_str(&format!(
            "redis.register_function{{ function_name = '{library}_{name}'{flags},\n  \
             callback = function(KEYS, ARGV)\n{BEGIN}{body}\nend }}\n"
        ));
    }
    code
}

/// One operation: its function's name and its fallback script.
pub(crate) struct Program {
    pub(crate) function: String,
    pub(crate) script: Script,
}

pub(crate) struct Scripts {
    pub(crate) enqueue: Program,
    pub(crate) claim: Program,
    pub(crate) complete: Program,
    pub(crate) release: Program,
    pub(crate) lease: Program,
    pub(crate) operator: Program,
    pub(crate) list: Program,
    pub(crate) purge: Program,
    pub(crate) stats: Program,
    pub(crate) endpoint: Program,
    pub(crate) tenancy: Program,
    pub(crate) migrate: Program,
    /// The `FUNCTION LOAD` text of the library.
    pub(crate) library: String,
    /// Whether calls go to the functions (else to the scripts); set at start-up.
    functions: AtomicBool,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        // The name hashes the code with a placeholder for the name itself.
        let hash = Script::new(&library_code("outbox_")).get_hash()[..16].to_owned();
        let name = format!("outbox_{hash}");
        let library = format!("#!lua name={name}\n{}", library_code(&name));
        let mut programs = BODIES.into_iter().map(|(op, body, read_only)| Program {
            function: format!("{name}_{op}"),
            script: if op == "enqueue" {
                Script::new(enqueue_source())
            } else {
                Script::new(&source(body, read_only))
            },
        });
        let mut take = || programs.next().expect("one program per body");
        Scripts {
            enqueue: take(),
            claim: take(),
            complete: take(),
            release: take(),
            lease: take(),
            operator: take(),
            list: take(),
            purge: take(),
            stats: take(),
            endpoint: take(),
            tenancy: take(),
            migrate: take(),
            library,
            functions: AtomicBool::new(true),
        }
    }

    /// Whether calls go to the function library.
    pub(crate) fn functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// Call the scripts from now on (the server refused the library).
    pub(crate) fn use_scripts(&self) {
        self.functions.store(false, Ordering::Relaxed);
    }

    pub(crate) fn all(&self) -> [&Program; 12] {
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
            "local function begin(",
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

    /// The library defines the prelude once and registers every body as a function named
    /// after the library, the read-only ones with `no-writes`; its name follows its code.
    #[test]
    fn the_library_registers_every_body_once() {
        let s = super::Scripts::new();
        let name = s.enqueue.function.trim_end_matches("_enqueue");
        assert!(s.library.starts_with(&format!("#!lua name={name}\n")));
        assert_eq!(s.library.matches("local function place(").count(), 1);
        for p in s.all() {
            let reg = format!("function_name = '{}'", p.function);
            assert_eq!(s.library.matches(&reg).count(), 1, "{reg}");
        }
        assert_eq!(s.library.matches("flags = { 'no-writes' }").count(), 3);
        assert_eq!(
            s.library
                .matches("callback = function(KEYS, ARGV)\nbegin(KEYS[1])\n")
                .count(),
            12
        );
        // The prelude no longer reads KEYS at load time (a library has no KEYS then).
        assert!(!super::COMMON.contains("= KEYS"));
        assert_eq!(super::Scripts::new().library, s.library);
    }

    #[test]
    fn mentions_matches_whole_identifiers_only() {
        assert!(super::mentions("x = k_d(id)", "k_d"));
        assert!(!super::mentions("x = k_dd(id)", "k_d"));
        assert!(!super::mentions("x = kk_d(id)", "k_d"));
        assert!(super::mentions("P", "P"));
    }
}
