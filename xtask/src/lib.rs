//! Project automation behind `cargo xtask`: `ci`, `tidy` (house rules), and `bench`.
//!
//! `tidy` checks: no ignored tests or `todo!`/`unimplemented!`, every crate on the workspace
//! lints, file sizes, the store file shape ([`store_shape`]), the conformance case lists
//! ([`case_lists`]), a pure `outbox-core` ([`core_is_pure`]), the crate layers
//! ([`layering`]) and no import circles between the files of a crate ([`import_circles`]).

use std::fs;
use std::path::{Path, PathBuf};

mod caselist;
mod circles;
mod deps;
mod manifest;
#[cfg(test)]
mod scratch;
mod shape;

pub use caselist::case_lists;
pub use circles::import_circles;
pub use deps::{core_is_pure, layering};
pub use shape::store_shape;

/// The longest Rust file tidy accepts anywhere (tests, examples, benches).
pub const MAX_LINES: usize = 800;

/// The longest file tidy accepts under a workspace crate's `src/`.
pub const MAX_SRC_LINES: usize = 600;

/// One broken house rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub what: String,
}

/// The workspace root (the parent of this crate's folder).
///
/// `cargo run` (behind `cargo xtask`) sets `CARGO_MANIFEST_DIR` for the running binary too, and
/// that one is taken first: a target directory shared between checkouts (a clean clone in CI, a
/// worktree) may hold an xtask built from another checkout, whose compile-time path would make
/// `tidy` check and `bench` measure that other checkout.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p.is_dir() {
            if name == "target" || name.starts_with('.') {
                continue;
            }
            rust_files(&p, out);
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// Check every house rule under `root` (see the functions it calls).
pub fn tidy(root: &Path) -> Vec<Problem> {
    let mut problems = house_rules(root);
    problems.extend(store_shape(root));
    problems.extend(case_lists(root));
    problems.extend(core_is_pure(root));
    problems.extend(layering(root));
    problems.extend(import_circles(root));
    problems
}

/// The `src/` Rust files of the workspace members.
fn member_src_files(root: &Path, manifest: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for member in workspace_members(manifest) {
        rust_files(&root.join(member).join("src"), &mut files);
    }
    files
}

/// No ignored tests, no `todo!`/`unimplemented!`, every crate on the workspace lints, no
/// member's `src/` file over [`MAX_SRC_LINES`] lines and no other Rust file over
/// [`MAX_LINES`].
fn house_rules(root: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let src_files = member_src_files(root, &manifest);
    // Built from pieces so this file does not flag itself.
    let banned = [
        format!("#[{}", "ignore"),
        format!("{}!(", "todo"),
        format!("{}!(", "unimplemented"),
    ];
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    for f in &files {
        let Ok(text) = fs::read_to_string(f) else {
            continue;
        };
        for b in &banned {
            if text.contains(b.as_str()) {
                problems.push(Problem {
                    path: f.clone(),
                    what: format!("contains `{b}`"),
                });
            }
        }
        let lines = text.lines().count();
        if src_files.contains(f) {
            if lines > MAX_SRC_LINES {
                problems.push(Problem {
                    path: f.clone(),
                    what: format!(
                        "has {lines} lines (limit {MAX_SRC_LINES} under a crate's src/): split it by responsibility"
                    ),
                });
            }
        } else if lines > MAX_LINES {
            problems.push(Problem {
                path: f.clone(),
                what: format!("has {lines} lines (limit {MAX_LINES})"),
            });
        }
    }
    if manifest.is_empty() {
        problems.push(Problem {
            path: root.join("Cargo.toml"),
            what: "unreadable".into(),
        });
        return problems;
    }
    for member in workspace_members(&manifest) {
        let path = root.join(&member).join("Cargo.toml");
        match fs::read_to_string(&path) {
            Ok(text) if opts_into_workspace_lints(&text) => {}
            Ok(_) => problems.push(Problem {
                path,
                what: "does not say `[lints] workspace = true`".into(),
            }),
            Err(_) => problems.push(Problem {
                path,
                what: "missing".into(),
            }),
        }
    }
    problems
}

/// A `rust-version` as numbers (`"1.89"` is `[1, 89, 0]`).
fn parse_version(v: &str) -> Option<[u32; 3]> {
    let mut out = [0; 3];
    let mut parts = v.trim().split('.');
    for slot in &mut out {
        match parts.next() {
            Some(p) => *slot = p.parse().ok()?,
            None => break,
        }
    }
    parts.next().is_none().then_some(out)
}

/// The `rust-version` of `[workspace.package]` in a root manifest.
fn workspace_rust_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package {
            if let Some(rest) = line.strip_prefix("rust-version") {
                let value = rest.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_owned());
            }
        }
    }
    None
}

/// Every `"rust_version":"…"` in `cargo metadata` output, with the package it belongs to:
/// the highest one and its package.
fn highest_rust_version(metadata: &str) -> Option<([u32; 3], String)> {
    let key = "\"rust_version\":\"";
    let mut best: Option<([u32; 3], String)> = None;
    let mut rest = metadata;
    while let Some(at) = rest.find(key) {
        let after = &rest[at + key.len()..];
        let Some(end) = after.find('"') else { break };
        let version = &after[..end];
        // The package's name is the last `"name":"…"` before its rust_version.
        let before = &rest[..at];
        let name = before
            .rfind("\"name\":\"")
            .map(|n| {
                let s = &before[n + 8..];
                s[..s.find('"').unwrap_or(s.len())].to_owned()
            })
            .unwrap_or_default();
        if let Some(v) = parse_version(version) {
            if best.as_ref().is_none_or(|(b, _)| v > *b) {
                best = Some((v, format!("{name} {version}")));
            }
        }
        rest = &after[end..];
    }
    best
}

/// Check that the workspace's `rust-version` is at least the highest `rust-version` of any
/// package in the locked dependency graph (for this host), so it states a toolchain that
/// can really build it. Runs `cargo metadata --locked`.
pub fn rust_version(root: &Path) -> Vec<Problem> {
    let manifest_path = root.join("Cargo.toml");
    let problem = |what: String| {
        vec![Problem {
            path: manifest_path.clone(),
            what,
        }]
    };
    let Some(declared) = fs::read_to_string(&manifest_path)
        .ok()
        .and_then(|m| workspace_rust_version(&m))
    else {
        return problem("has no `rust-version` in `[workspace.package]`".into());
    };
    let Some(declared_v) = parse_version(&declared) else {
        return problem(format!("`rust-version = {declared:?}` is not a version"));
    };
    let host = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        });
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.args(["metadata", "--format-version", "1", "--locked"])
        .arg("--manifest-path")
        .arg(&manifest_path);
    if let Some(host) = &host {
        cmd.args(["--filter-platform", host]);
    }
    let output = match cmd.output() {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => {
            return problem(format!(
                "`cargo metadata --locked` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => return problem(format!("cannot run cargo metadata: {e}")),
    };
    let metadata = String::from_utf8_lossy(&output);
    match highest_rust_version(&metadata) {
        Some((needed, who)) if needed > declared_v => problem(format!(
            "says `rust-version = \"{declared}\"` but the dependency graph needs more ({who})"
        )),
        _ => Vec::new(),
    }
}

fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn opts_into_workspace_lints(manifest: &str) -> bool {
    let mut in_lints = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_lints = line == "[lints]";
        } else if in_lints && line.replace(' ', "") == "workspace=true" {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_lints_and_members() {
        assert!(opts_into_workspace_lints(
            "[package]\nname='x'\n\n[lints]\nworkspace = true\n"
        ));
        assert!(!opts_into_workspace_lints(
            "[package]\nname='x'\n[dependencies]\nworkspace = true\n"
        ));
        assert_eq!(
            workspace_members("[workspace]\nmembers = [\n \"a\",\n \"b\",\n]\n"),
            vec!["a", "b"]
        );
    }

    #[test]
    fn reads_rust_versions() {
        assert_eq!(parse_version("1.89"), Some([1, 89, 0]));
        assert_eq!(parse_version("1.89.1"), Some([1, 89, 1]));
        assert_eq!(parse_version("1.x"), None);
        assert_eq!(
            workspace_rust_version("[workspace]\n[workspace.package]\nrust-version = \"1.89\"\n"),
            Some("1.89".into())
        );
        let meta = r#"{"packages":[{"name":"a","rust_version":"1.70"},{"name":"uuid","rust_version":"1.89.0"},{"name":"b","rust_version":null}]}"#;
        assert_eq!(
            highest_rust_version(meta),
            Some(([1, 89, 0], "uuid 1.89.0".into()))
        );
    }

    #[test]
    fn flags_banned_markers_in_a_scratch_tree() {
        let t = scratch::Scratch::tidy_workspace("markers");
        t.write(
            "outbox-core/src/lib.rs",
            &format!("fn f() {{ {}!() }}\n", "todo"),
        );
        t.write(
            "outbox-cli/Cargo.toml",
            "[package]\nname = \"outboxkit-cli\"\n",
        );
        let p = tidy(t.root());
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].path.ends_with("outbox-core/src/lib.rs"), "{p:?}");
        assert!(p[0].what.contains(&format!("{}!(", "todo")), "{p:?}");
        assert!(p[1].path.ends_with("outbox-cli/Cargo.toml"), "{p:?}");
        assert!(p[1].what.contains("[lints] workspace = true"), "{p:?}");
    }

    #[test]
    fn flags_long_src_files_in_a_scratch_tree() {
        let t = scratch::Scratch::tidy_workspace("size");
        let lines = |n: usize| "// line\n".repeat(n);
        t.write("outbox-dispatch/src/run.rs", &lines(MAX_SRC_LINES));
        t.write("outbox-dispatch/tests/long.rs", &lines(MAX_LINES));
        assert!(tidy(t.root()).is_empty());
        t.write("outbox-dispatch/src/run.rs", &lines(MAX_SRC_LINES + 1));
        scratch::assert_one(
            &tidy(t.root()),
            "outbox-dispatch/src/run.rs",
            "has 601 lines (limit 600 under a crate's src/): split it",
        );
        t.write("outbox-dispatch/src/run.rs", "//! Short.\n");
        t.write("outbox-dispatch/tests/long.rs", &lines(MAX_LINES + 1));
        scratch::assert_one(
            &tidy(t.root()),
            "outbox-dispatch/tests/long.rs",
            "has 801 lines (limit 800)",
        );
    }
}
