//! The conformance case list: every `pub async fn` case of the suite is named in a case-list
//! macro (so every store runs it), and every name in the lists is a case.
//!
//! A case is a `pub async fn` in `outbox-testing/src/conformance/cases/**` or
//! `conformance/txn.rs`. A list is a macro invocation whose arguments are `$setup; name,
//! name, …` (`$crate::__conformance_case!($setup; …)`, `$crate::__transaction_case!(…)` and
//! the token list), anywhere under `outbox-testing/src`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{rust_files, Problem};

/// Where the suite lives.
pub const CONFORMANCE: &str = "outbox-testing/src/conformance";

/// The names of the `pub async fn`s in `text`.
fn cases_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub async fn "))
        .map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            rest[..end].to_owned()
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// The names in every `…!($setup; a, b, …)` of `text`.
fn listed_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("!(") {
        let args = &rest[at + 2..];
        rest = args;
        let Some(close) = args.find(')') else { break };
        let args = &args[..close];
        let Some((setup, names)) = args.split_once(';') else {
            continue;
        };
        let setup = setup.trim();
        let is_var = setup.strip_prefix('$').is_some_and(|v| {
            !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if !is_var {
            continue;
        }
        out.extend(
            names.split(',').map(|n| n.trim().to_owned()).filter(|n| {
                !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }),
        );
    }
    out
}

/// Check that the cases and the case lists under `root` name the same set.
pub fn case_lists(root: &Path) -> Vec<Problem> {
    let dir = root.join(CONFORMANCE);
    let mut case_files = Vec::new();
    rust_files(&dir.join("cases"), &mut case_files);
    case_files.push(dir.join("txn.rs"));
    case_files.sort();
    let mut cases: Vec<(String, PathBuf)> = Vec::new();
    for f in &case_files {
        if let Ok(text) = fs::read_to_string(f) {
            cases.extend(cases_in(&text).into_iter().map(|c| (c, f.clone())));
        }
    }
    let mut list_files = Vec::new();
    rust_files(&root.join("outbox-testing/src"), &mut list_files);
    list_files.sort();
    let mut listed: Vec<(String, PathBuf)> = Vec::new();
    for f in &list_files {
        if let Ok(text) = fs::read_to_string(f) {
            listed.extend(listed_in(&text).into_iter().map(|c| (c, f.clone())));
        }
    }
    let mut problems = Vec::new();
    if cases.is_empty() || listed.is_empty() {
        problems.push(Problem {
            path: dir,
            what: "has no conformance cases or no case-list macro (`$crate::__conformance_case!($setup; …)`)".into(),
        });
        return problems;
    }
    for (case, file) in &cases {
        if !listed.iter().any(|(l, _)| l == case) {
            problems.push(Problem {
                path: file.clone(),
                what: format!(
                    "case `{case}` is in no case list: add it to `__conformance_cases!` in conformance/cases.rs (or the token or transaction list), so every store runs it"
                ),
            });
        }
    }
    for (name, file) in &listed {
        if !cases.iter().any(|(c, _)| c == name) {
            problems.push(Problem {
                path: file.clone(),
                what: format!(
                    "a case list names `{name}`, which is no `pub async fn` case in conformance/cases/ or conformance/txn.rs"
                ),
            });
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
    fn reads_cases_and_lists() {
        assert_eq!(
            cases_in("pub async fn a_b(fx: Fixture) {}\npub(crate) async fn helper() {}\n  pub async fn c<T>() {}\npub fn d() {}\n"),
            ["a_b", "c"]
        );
        assert_eq!(
            listed_in("macro_rules! m { ($setup:path; $($case:ident),*) => {} }\n$crate::__conformance_cases!($setup);\n$crate::__x_case!($setup;\n  a,\n  b,\n\n  c,\n);\n"),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn an_unlisted_case_is_reported() {
        let t = Scratch::tidy_workspace("cases-unlisted");
        t.write(
            "outbox-testing/src/conformance/cases/tokens.rs",
            "pub async fn tokens_round_trip(fx: Fixture) {}\n",
        );
        assert_one(
            &tidy(t.root()),
            "outbox-testing/src/conformance/cases/tokens.rs",
            "case `tokens_round_trip` is in no case list",
        );
    }

    #[test]
    fn a_listed_name_that_is_no_case_is_reported() {
        let t = Scratch::tidy_workspace("cases-unknown");
        let list = t.read("outbox-testing/src/conformance/cases.rs").replace(
            "claim_is_fair,",
            "claim_is_fair,\n            claim_is_gone,",
        );
        t.write("outbox-testing/src/conformance/cases.rs", &list);
        assert_one(
            &tidy(t.root()),
            "outbox-testing/src/conformance/cases.rs",
            "names `claim_is_gone`, which is no `pub async fn` case",
        );
    }

    #[test]
    fn a_token_list_in_another_file_counts() {
        let t = Scratch::tidy_workspace("cases-tokens");
        t.write(
            "outbox-testing/src/conformance/cases/tokens.rs",
            "pub async fn tokens_round_trip(fx: Fixture) {}\n",
        );
        t.write(
            "outbox-testing/src/conformance/tokens.rs",
            "macro_rules! token_conformance_tests {\n    ($setup:path) => {\n        $crate::__conformance_case!($setup; tokens_round_trip);\n    };\n}\n",
        );
        let p = tidy(t.root());
        assert!(p.is_empty(), "{p:#?}");
    }
}
