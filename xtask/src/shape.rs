//! The store shape: every store has the same file set, and each store trait's impl lives in
//! its one file (or under its folder) and nowhere else in that store.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{rust_files, Problem};

/// The store folders.
pub const STORES: &[&str] = &[
    "outbox-sqlite/src",
    "outbox-postgres/src",
    "outbox-redis/src",
    "outbox-testing/src/memory",
];

/// The files every store has (`X.rs` or `X/mod.rs`), with the trait impl each one holds.
pub const STORE_FILES: &[(&str, Option<&str>)] = &[
    ("store", Some("DeliveryStore")),
    ("deliveries", Some("OperatorStore")),
    ("enqueue", Some("MessageStore")),
    ("endpoints", Some("EndpointStore")),
    ("ledger", Some("Ledger")),
    ("tokens", Some("TokenStore")),
    ("event_types", Some("EventTypeStore")),
    ("claim", None),
];

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Skip a `<…>` at the start of `s` (nested, `->` inside is no closer); the rest after it.
fn skip_generics(s: &str) -> Option<&str> {
    let mut depth = 0;
    let mut prev = ' ';
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if prev != '-' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[i + 1..]);
                }
            }
            _ => {}
        }
        prev = c;
    }
    None
}

/// The traits named by `impl Trait for` / `impl<…> path::Trait<…> for` in `text` (comment
/// lines left out), each with its line number.
pub(crate) fn trait_impls(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("impl") {
            let before_ok = rest[..at].chars().next_back().is_none_or(|c| !is_ident(c));
            let mut s = &rest[at + 4..];
            rest = s;
            if !before_ok || !s.starts_with(['<', ' ']) {
                continue;
            }
            if s.starts_with('<') {
                match skip_generics(s) {
                    Some(after) => s = after,
                    None => continue,
                }
            }
            let s = s.trim_start();
            let end = s
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(s.len());
            let path = &s[..end];
            let mut after = &s[end..];
            if after.starts_with('<') {
                match skip_generics(after) {
                    Some(a) => after = a,
                    None => continue,
                }
            }
            let name = path.rsplit("::").next().unwrap_or_default();
            let spaced = after.starts_with(char::is_whitespace);
            let after = after.trim_start();
            if !name.is_empty()
                && spaced
                && after.starts_with("for")
                && (after.len() == 3 || after[3..].starts_with(char::is_whitespace))
            {
                out.push((name.to_owned(), n + 1));
            }
        }
    }
    out
}

/// The file `X.rs` or `X/mod.rs` of a store, if there is one.
fn store_file(dir: &Path, name: &str) -> Option<PathBuf> {
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Check the shape of every store of [`STORES`] under `root`.
pub fn store_shape(root: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    for store in STORES {
        let dir = root.join(store);
        if !dir.is_dir() {
            problems.push(Problem {
                path: dir,
                what: "missing: a store folder of the store shape".into(),
            });
            continue;
        }
        let mut homes_present = Vec::new();
        for (name, trait_name) in STORE_FILES {
            match store_file(&dir, name) {
                Some(p) => homes_present.push((*name, *trait_name, p)),
                None => problems.push(Problem {
                    path: dir.join(format!("{name}.rs")),
                    what: match trait_name {
                        Some(t) => format!(
                            "missing: every store has `{name}.rs` (or `{name}/mod.rs`) holding its `impl {t}`"
                        ),
                        None => format!(
                            "missing: every store has `{name}.rs` (or `{name}/mod.rs`) holding the claim's internals"
                        ),
                    },
                }),
            }
        }
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        files.sort();
        let mut found: Vec<(&str, PathBuf)> = Vec::new();
        for f in &files {
            let Ok(text) = fs::read_to_string(f) else {
                continue;
            };
            for (tr, line) in trait_impls(&text) {
                let Some((home, _)) = STORE_FILES.iter().find(|(_, t)| *t == Some(tr.as_str()))
                else {
                    continue;
                };
                let at_home = *f == dir.join(format!("{home}.rs")) || f.starts_with(dir.join(home));
                if at_home {
                    found.push((home, f.clone()));
                } else {
                    problems.push(Problem {
                        path: f.clone(),
                        what: format!(
                            "line {line} has `impl {tr} for …`, which belongs in `{home}.rs` (or under `{home}/`) of the store"
                        ),
                    });
                }
            }
        }
        for (name, trait_name, path) in homes_present {
            let Some(t) = trait_name else { continue };
            if !found.iter().any(|(h, _)| *h == name) {
                problems.push(Problem {
                    path,
                    what: format!("has no `impl {t} for …` (the store's `{t}` lives here)"),
                });
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::{assert_one, Scratch};
    use crate::tidy;

    #[test]
    fn finds_trait_impls() {
        let text = "impl DeliveryStore for A {}\nimpl<S: Store + ?Sized> outboxkit_core::Ledger for Arc<S> {}\nimpl<F: Fn() -> u8> TokenStore<F> for B {}\n// impl MessageStore for C\nimpl A {}\nfn simple_impl() {}\nimpl fmt::Debug for A {}\n";
        let names: Vec<_> = trait_impls(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["DeliveryStore", "Ledger", "TokenStore", "Debug"]);
    }

    #[test]
    fn a_missing_store_file_is_reported() {
        let t = Scratch::tidy_workspace("shape-missing");
        t.remove("outbox-redis/src/deliveries.rs");
        t.write(
            "outbox-redis/src/lib.rs",
            "//! A crate.\nimpl OperatorStore for Store {}\n",
        );
        let p = tidy(t.root());
        assert_eq!(p.len(), 2, "{p:#?}");
        assert!(
            p[0].path.ends_with("outbox-redis/src/deliveries.rs"),
            "{p:?}"
        );
        assert!(p[0]
            .what
            .contains("missing: every store has `deliveries.rs`"));
        assert!(p[1].path.ends_with("outbox-redis/src/lib.rs"), "{p:?}");
        assert!(p[1]
            .what
            .contains("`impl OperatorStore for …`, which belongs in `deliveries.rs`"));
    }

    #[test]
    fn an_impl_outside_its_file_is_reported() {
        let t = Scratch::tidy_workspace("shape-stray");
        t.write(
            "outbox-testing/src/memory/state.rs",
            "//! State.\nimpl<C: Clock> Ledger for Store<C> {}\n",
        );
        assert_one(
            &tidy(t.root()),
            "outbox-testing/src/memory/state.rs",
            "line 2 has `impl Ledger for …`, which belongs in `ledger.rs`",
        );
    }

    #[test]
    fn a_file_without_its_impl_is_reported() {
        let t = Scratch::tidy_workspace("shape-no-impl");
        t.write("outbox-postgres/src/tokens.rs", "//! Nothing.\n");
        assert_one(
            &tidy(t.root()),
            "outbox-postgres/src/tokens.rs",
            "has no `impl TokenStore for …`",
        );
    }

    #[test]
    fn a_folder_module_may_hold_the_impl_anywhere_under_it() {
        let t = Scratch::tidy_workspace("shape-dir");
        t.remove("outbox-sqlite/src/claim.rs");
        t.write("outbox-sqlite/src/claim/mod.rs", "//! Claim.\nmod pick;\n");
        t.write("outbox-sqlite/src/claim/pick.rs", "//! Pick.\n");
        t.remove("outbox-sqlite/src/store.rs");
        t.write("outbox-sqlite/src/store/mod.rs", "//! Store.\nmod hot;\n");
        t.write(
            "outbox-sqlite/src/store/hot.rs",
            "impl DeliveryStore for SqliteStore {}\n",
        );
        let p = tidy(t.root());
        assert!(p.is_empty(), "{p:#?}");
    }
}
