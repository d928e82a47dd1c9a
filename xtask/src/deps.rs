//! The dependency rules: `outbox-core` stays pure (no runtime or I/O crate), and the crates
//! keep their layers (the server does not pull in the engine, the CLI not the test kit,
//! adapters neither each other nor the engine).

use std::fs;
use std::path::Path;

use crate::manifest::{self, Dep};
use crate::Problem;

/// Runtime and I/O crates `outbox-core` must not depend on (tokio is allowed with `sync` only).
pub const IMPURE: &[&str] = &[
    "async-std",
    "smol",
    "async-io",
    "async-net",
    "mio",
    "socket2",
    "hyper",
    "hyper-util",
    "reqwest",
    "ureq",
    "sqlx",
    "tokio-postgres",
    "postgres",
    "rusqlite",
    "redis",
    "lettre",
    "axum",
    "tower",
    "tower-http",
    "actix-web",
    "warp",
    "async-nats",
    "lapin",
    "tokio-util",
    "tokio-rustls",
    "tempfile",
    "tracing-subscriber",
    "metrics-exporter-prometheus",
];

/// The adapter crates: (folder, package).
pub const ADAPTERS: &[(&str, &str)] = &[
    ("outbox-postgres", "outboxkit-postgres"),
    ("outbox-sqlite", "outboxkit-sqlite"),
    ("outbox-redis", "outboxkit-redis"),
    ("outbox-http", "outboxkit-http"),
    ("outbox-smtp", "outboxkit-smtp"),
    ("outbox-broker", "outboxkit-broker"),
];

/// The engine, which no adapter and not the server depends on.
const DISPATCH: &str = "outboxkit-dispatch";

/// The normal dependencies of `crate_dir`, resolved against the root manifest; a problem when
/// a manifest cannot be read.
fn resolved_deps(root: &Path, crate_dir: &str) -> Result<(String, Vec<Dep>), Problem> {
    let path = root.join(crate_dir).join("Cargo.toml");
    let text = fs::read_to_string(&path).map_err(|_| Problem {
        path: path.clone(),
        what: "missing (the dependency rules cannot check it)".into(),
    })?;
    let workspace = fs::read_to_string(root.join("Cargo.toml"))
        .map(|m| manifest::workspace_dependencies(&m))
        .unwrap_or_default();
    let deps = manifest::resolve(manifest::dependencies(&text), &workspace);
    Ok((text, deps))
}

/// `outbox-core/Cargo.toml` has no runtime or I/O crate among its `[dependencies]`: nothing
/// of [`IMPURE`], and tokio with no feature but `sync` (also through `[features]`).
pub fn core_is_pure(root: &Path) -> Vec<Problem> {
    let path = root.join("outbox-core/Cargo.toml");
    let (text, deps) = match resolved_deps(root, "outbox-core") {
        Ok(d) => d,
        Err(p) => return vec![p],
    };
    let mut problems = Vec::new();
    let mut problem = |what: String| {
        problems.push(Problem {
            path: path.clone(),
            what,
        })
    };
    let mut tokio_keys = Vec::new();
    for d in &deps {
        if d.package == "tokio" {
            tokio_keys.push(d.key.clone());
            let extra: Vec<_> = d.features.iter().filter(|f| *f != "sync").collect();
            if !extra.is_empty() {
                problem(format!(
                    "depends on tokio with features {extra:?}: outbox-core may use tokio with `sync` only (it performs no I/O and never sleeps)"
                ));
            }
        } else if IMPURE.contains(&d.package.as_str()) {
            problem(format!(
                "depends on `{}`, a runtime or I/O crate: outbox-core performs no I/O of its own",
                d.package
            ));
        }
    }
    for (feature, enables) in manifest::features(&text) {
        for e in enables {
            let Some((dep, f)) = e.split_once('/') else {
                continue;
            };
            if tokio_keys.iter().any(|k| dep.trim_end_matches('?') == k) && f != "sync" {
                problem(format!(
                    "feature `{feature}` turns on tokio's `{f}`: outbox-core may use tokio with `sync` only"
                ));
            }
        }
    }
    problems
}

/// The layers: `outbox-serve` has no `outboxkit-dispatch`; `outbox-cli` has no
/// `outboxkit-testing` and no `rcgen`; an adapter depends on no other adapter and not on
/// `outboxkit-dispatch` (all in `[dependencies]`; dev-dependencies are free).
pub fn layering(root: &Path) -> Vec<Problem> {
    let mut rules: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "outbox-serve",
            vec![DISPATCH],
            "the admin server serves the store traits and never runs the engine",
        ),
        (
            "outbox-cli",
            vec!["outboxkit-testing", "rcgen"],
            "test fakes and certificate generation stay out of the shipped binary",
        ),
    ];
    for (dir, package) in ADAPTERS {
        let mut banned: Vec<&str> = ADAPTERS
            .iter()
            .map(|(_, p)| *p)
            .filter(|p| p != package)
            .collect();
        banned.push(DISPATCH);
        rules.push((
            dir,
            banned,
            "adapters never depend on each other nor on the engine",
        ));
    }
    let mut problems = Vec::new();
    for (dir, banned, why) in rules {
        let deps = match resolved_deps(root, dir) {
            Ok((_, deps)) => deps,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        for d in deps {
            if banned.contains(&d.package.as_str()) {
                problems.push(Problem {
                    path: root.join(dir).join("Cargo.toml"),
                    what: format!("`[dependencies]` has `{}`: {why}", d.package),
                });
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use crate::scratch::{assert_one, Scratch};
    use crate::tidy;

    #[test]
    fn core_with_a_runtime_tokio_is_impure() {
        let t = Scratch::tidy_workspace("core-tokio");
        t.write(
            "outbox-core/Cargo.toml",
            "[package]\nname = \"outboxkit-core\"\n[dependencies]\ntokio = { workspace = true, features = [\n  \"sync\",\n  \"rt\",\n] }\n[lints]\nworkspace = true\n",
        );
        assert_one(
            &tidy(t.root()),
            "outbox-core/Cargo.toml",
            "tokio with features [\"rt\"]",
        );
    }

    #[test]
    fn core_tokio_features_come_from_the_root_manifest_too() {
        let t = Scratch::tidy_workspace("core-tokio-root");
        let root = t.read("Cargo.toml").replace(
            "tokio = { version = \"1\", default-features = false }",
            "tokio = { version = \"1\", default-features = false, features = [\"time\"] }",
        );
        t.write("Cargo.toml", &root);
        assert_one(
            &tidy(t.root()),
            "outbox-core/Cargo.toml",
            "tokio with features [\"time\"]",
        );
    }

    #[test]
    fn core_feature_turning_on_tokio_io_is_impure() {
        let t = Scratch::tidy_workspace("core-feature");
        let core = t.read("outbox-core/Cargo.toml") + "[features]\nnet = [\"tokio/net\"]\n";
        t.write("outbox-core/Cargo.toml", &core);
        assert_one(
            &tidy(t.root()),
            "outbox-core/Cargo.toml",
            "feature `net` turns on tokio's `net`",
        );
    }

    #[test]
    fn core_with_an_io_crate_is_impure() {
        let t = Scratch::tidy_workspace("core-io");
        let core = t.read("outbox-core/Cargo.toml").replace(
            "[dependencies]\n",
            "[dependencies]\nhttp-client = { version = \"1\", package = \"reqwest\" }\n",
        );
        t.write("outbox-core/Cargo.toml", &core);
        assert_one(
            &tidy(t.root()),
            "outbox-core/Cargo.toml",
            "depends on `reqwest`",
        );
    }

    #[test]
    fn serve_must_not_depend_on_dispatch() {
        let t = Scratch::tidy_workspace("serve-dispatch");
        t.add_dep("outbox-serve", "outboxkit-dispatch.workspace = true");
        assert_one(
            &tidy(t.root()),
            "outbox-serve/Cargo.toml",
            "has `outboxkit-dispatch`",
        );
    }

    #[test]
    fn cli_must_not_depend_on_testing_or_rcgen() {
        let t = Scratch::tidy_workspace("cli-testing");
        t.add_dep("outbox-cli", "outboxkit-testing.workspace = true");
        assert_one(
            &tidy(t.root()),
            "outbox-cli/Cargo.toml",
            "has `outboxkit-testing`",
        );
        let t = Scratch::tidy_workspace("cli-rcgen");
        t.add_dep("outbox-cli", "rcgen = \"0.14\"");
        assert_one(&tidy(t.root()), "outbox-cli/Cargo.toml", "has `rcgen`");
    }

    #[test]
    fn adapters_must_not_depend_on_each_other_or_dispatch() {
        let t = Scratch::tidy_workspace("adapter-adapter");
        t.add_dep("outbox-smtp", "outboxkit-http.workspace = true");
        assert_one(
            &tidy(t.root()),
            "outbox-smtp/Cargo.toml",
            "has `outboxkit-http`",
        );
        let t = Scratch::tidy_workspace("adapter-dispatch");
        t.add_dep("outbox-redis", "outboxkit-dispatch = { workspace = true }");
        assert_one(
            &tidy(t.root()),
            "outbox-redis/Cargo.toml",
            "has `outboxkit-dispatch`",
        );
    }

    #[test]
    fn dev_dependencies_are_free() {
        let t = Scratch::tidy_workspace("dev-deps");
        for dir in ["outbox-serve", "outbox-cli", "outbox-postgres"] {
            let m = t.read(&format!("{dir}/Cargo.toml"))
                + "[dev-dependencies]\noutboxkit-dispatch.workspace = true\noutboxkit-testing.workspace = true\noutboxkit-sqlite.workspace = true\n";
            t.write(&format!("{dir}/Cargo.toml"), &m);
        }
        let core = t.read("outbox-core/Cargo.toml")
            + "[dev-dependencies]\ntokio = { workspace = true, features = [\"rt\", \"macros\"] }\n";
        t.write("outbox-core/Cargo.toml", &core);
        let p = tidy(t.root());
        assert!(p.is_empty(), "{p:#?}");
    }
}
