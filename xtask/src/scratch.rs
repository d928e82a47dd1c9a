//! Scratch trees for the rules' tests: a small workspace that obeys every rule
//! ([`Scratch::tidy_workspace`]), which a test then breaks in exactly one way.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::shape::{STORES, STORE_FILES};
use crate::Problem;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A temporary directory, removed on drop.
#[derive(Debug)]
pub(crate) struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const MEMBERS: &[(&str, &str)] = &[
    ("outbox-core", "outboxkit-core"),
    ("outbox-dispatch", "outboxkit-dispatch"),
    ("outbox-postgres", "outboxkit-postgres"),
    ("outbox-sqlite", "outboxkit-sqlite"),
    ("outbox-redis", "outboxkit-redis"),
    ("outbox-http", "outboxkit-http"),
    ("outbox-smtp", "outboxkit-smtp"),
    ("outbox-broker", "outboxkit-broker"),
    ("outbox-testing", "outboxkit-testing"),
    ("outbox-serve", "outboxkit-serve"),
    ("outbox-cli", "outboxkit-cli"),
];

impl Scratch {
    /// An empty scratch directory.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "xtask-tidy-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A workspace that obeys every rule of [`crate::tidy`].
    pub fn tidy_workspace(name: &str) -> Self {
        let t = Self::new(name);
        let members: Vec<String> = MEMBERS.iter().map(|(d, _)| format!("\"{d}\"")).collect();
        let mut root = format!(
            "[workspace]\nmembers = [\n    {},\n]\n\n[workspace.dependencies]\n",
            members.join(",\n    ")
        );
        for (dir, package) in MEMBERS {
            root += &format!("{package} = {{ path = \"{dir}\" }}\n");
        }
        root += "tokio = { version = \"1\", default-features = false }\n";
        t.write("Cargo.toml", &root);
        for (dir, package) in MEMBERS {
            let deps = match *dir {
                "outbox-core" => "tokio = { workspace = true, features = [\"sync\"] }\n",
                _ => "outboxkit-core.workspace = true\n",
            };
            t.write(
                &format!("{dir}/Cargo.toml"),
                &format!(
                    "[package]\nname = \"{package}\"\n\n[dependencies]\n{deps}\n[lints]\nworkspace = true\n"
                ),
            );
            t.write(&format!("{dir}/src/lib.rs"), "//! A crate.\n");
        }
        for store in STORES {
            for (file, trait_name) in STORE_FILES {
                let body = match trait_name {
                    Some(tr) => format!("//! A store part.\n\nimpl {tr} for Store {{}}\n"),
                    None => "//! The claim's internals.\n".to_owned(),
                };
                t.write(&format!("{store}/{file}.rs"), &body);
            }
        }
        t.write(
            "outbox-testing/src/memory/mod.rs",
            "//! The memory store.\n",
        );
        t.write(
            "outbox-testing/src/conformance/cases.rs",
            "mod claim;\npub use claim::*;\n\nmacro_rules! __conformance_cases {\n    ($setup:path) => {\n        $crate::__conformance_case!($setup;\n            claim_is_exclusive,\n            claim_is_fair,\n        );\n    };\n}\n",
        );
        t.write(
            "outbox-testing/src/conformance/cases/claim.rs",
            "pub async fn claim_is_exclusive(fx: Fixture) {}\n\npub async fn claim_is_fair(fx: Fixture) {}\n\npub(crate) async fn a_helper(fx: &Fixture) {}\n",
        );
        t.write(
            "outbox-testing/src/conformance/txn.rs",
            "pub async fn enqueue_in_commits(t: TxnFixture) {}\n\nmacro_rules! transaction_tests {\n    ($setup:path) => {\n        $crate::__transaction_case!($setup; enqueue_in_commits);\n    };\n}\n",
        );
        t
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.0
    }

    /// Write `text` to `rel`, making its folders.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// The text of `rel`.
    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.0.join(rel)).unwrap()
    }

    /// Remove the file `rel`.
    pub fn remove(&self, rel: &str) {
        fs::remove_file(self.0.join(rel)).unwrap();
    }

    /// Add `line` to the `[dependencies]` of `crate_dir`.
    pub fn add_dep(&self, crate_dir: &str, line: &str) {
        let rel = format!("{crate_dir}/Cargo.toml");
        let m = self
            .read(&rel)
            .replace("[dependencies]\n", &format!("[dependencies]\n{line}\n"));
        self.write(&rel, &m);
    }
}

/// `problems` is exactly one, about the file ending in `path`, saying `what`.
#[track_caller]
pub(crate) fn assert_one(problems: &[Problem], path: &str, what: &str) {
    assert_eq!(problems.len(), 1, "expected one problem: {problems:#?}");
    let p = &problems[0];
    assert!(p.path.ends_with(path), "{p:?} is not about {path}");
    assert!(p.what.contains(what), "{p:?} does not say {what:?}");
}

#[test]
fn the_tidy_workspace_is_tidy() {
    let t = Scratch::tidy_workspace("tidy");
    let p = crate::tidy(t.root());
    assert!(p.is_empty(), "{p:#?}");
}
