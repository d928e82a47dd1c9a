//! `--config FILE` and `OUTBOX_*` through the real binary: precedence flag > environment >
//! file > default, `OUTBOX_TENANT`, unknown keys refused with file and line, a file that
//! sets every relay flag, and the example `deploy/outbox.toml`.

use std::path::Path;

use crate::{outbox, outbox_cmd, sqlite_url, Run};

fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = outbox_cmd();
    c.args(args)
        .env_remove("OUTBOX_TENANT")
        .env_remove("OUTBOX_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    Run::from(c.output().expect("the outbox binary runs"))
}

/// The tenant `stats --json` reports (`every` for all tenants).
fn tenant_of(run: Run) -> String {
    let out = run.ok();
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats --json");
    v["tenant"].as_str().unwrap_or("every").to_owned()
}

fn migrated(dir: &Path) -> String {
    let url = sqlite_url(dir);
    outbox(&["migrate", "--store", &url]).ok();
    url
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_file_which_beats_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let file = dir.path().join("outbox.toml");
    std::fs::write(
        &file,
        format!("store = \"{url}\"\n\n[stats]\ntenant = \"from-file\"\njson = true\n"),
    )
    .unwrap();
    let cfg = file.to_str().unwrap();
    let stats = |extra: &[&str], env: &[(&str, &str)]| {
        let mut a = vec!["stats", "--config", cfg];
        a.extend_from_slice(extra);
        tenant_of(run(&a, env))
    };
    assert_eq!(stats(&[], &[]), "from-file");
    assert_eq!(stats(&[], &[("OUTBOX_TENANT", "from-env")]), "from-env");
    assert_eq!(
        stats(&["--tenant", "from-flag"], &[("OUTBOX_TENANT", "from-env")]),
        "from-flag"
    );
    assert_eq!(stats(&["--tenant=from-flag"], &[]), "from-flag");
    // OUTBOX_CONFIG names the file too.
    assert_eq!(
        tenant_of(run(&["stats"], &[("OUTBOX_CONFIG", cfg)])),
        "from-file"
    );
    // Without a file or a variable, the default: every tenant.
    assert_eq!(
        tenant_of(run(&["stats", "--store", &url, "--json"], &[])),
        "every"
    );
    // OUTBOX_TENANT alone, without a file.
    assert_eq!(
        tenant_of(run(
            &["stats", "--store", &url, "--json"],
            &[("OUTBOX_TENANT", "acme")]
        )),
        "acme"
    );
}

#[test]
fn unknown_keys_are_refused_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        format!("store = \"{url}\"\n\npoll-intervall = \"1s\"\n"),
    )
    .unwrap();
    let r = run(
        &["relay", "--config", file.to_str().unwrap(), "--until-idle"],
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("bad.toml:3: unknown key `poll-intervall`"),
        "{}",
        r.stderr
    );

    std::fs::write(&file, "[relay]\ntenant-window = \"acme=1d\"\n").unwrap();
    let r = run(&["relay", "--config", file.to_str().unwrap()], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("bad.toml:2: unknown key `tenant-window` (not a flag of `outbox relay`)"),
        "{}",
        r.stderr
    );

    std::fs::write(&file, "[relay]\nuntil-idle = \"yes\"\n").unwrap();
    let r = run(&["relay", "--config", file.to_str().unwrap()], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("bad.toml:2: `until-idle` is a switch"),
        "{}",
        r.stderr
    );

    std::fs::write(&file, "store = [\n").unwrap();
    let r = run(&["relay", "--config", file.to_str().unwrap()], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("bad.toml:"), "{}", r.stderr);
}

/// A flag on the command line that conflicts with one from the environment wins over it:
/// `tokens create --admin` with OUTBOX_TENANT set makes an admin token.
#[test]
fn a_conflicting_flag_on_the_command_line_leaves_the_variable_unused() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let env = [("OUTBOX_TENANT", "acme")];
    let admin = run(
        &[
            "tokens", "create", "--store", &url, "--admin", "--label", "ops", "--json",
        ],
        &env,
    )
    .ok();
    assert!(admin.contains("\"token\""), "{admin}");
    // Without --admin, the variable gives the tenant.
    let tenant = run(
        &[
            "tokens", "create", "--store", &url, "--label", "support", "--json",
        ],
        &env,
    )
    .ok();
    assert!(tenant.contains("acme"), "{tenant}");
}

/// Every flag `outbox relay --help` lists, as a key of `[relay]`: none is refused.
#[test]
fn every_relay_flag_is_a_key_of_the_file() {
    let help = outbox(&["relay", "--help"]).ok();
    let mut toml = String::from("[relay]\n");
    let mut count = 0;
    for line in help.lines().map(str::trim_start) {
        let Some(rest) = line.strip_prefix("--") else {
            continue;
        };
        let name = rest.split([' ', '=']).next().unwrap();
        if ["help", "version", "config"].contains(&name) {
            continue;
        }
        let value = if rest.contains('<') { "\"x\"" } else { "true" };
        toml.push_str(&format!("{name} = {value}\n"));
        count += 1;
    }
    assert!(count >= 30, "{help}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("all.toml");
    std::fs::write(&file, &toml).unwrap();
    // `--help` comes first: the file is checked, its values are not parsed.
    let r = run(
        &["relay", "--config", file.to_str().unwrap(), "--help"],
        &[],
    );
    assert_eq!(r.code, 0, "{}\n{toml}", r.stderr);
}

/// A relay configured only by its file (with the egress flags at the top level) delivers
/// what is due and prints its report.
#[test]
fn the_relay_runs_from_a_file_that_sets_its_options() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        format!(
            "store = \"{url}\"\nnamespace = \"outbox\"\nallow-private = true\nallow-http = true\n\
             connect-timeout = \"3s\"\n\n[relay]\nuntil-idle = true\njson = true\nbatch-size = 10\n\
             concurrency = 4\nendpoint-concurrency = 2\nmax-connections = 4\npoll-interval = \"50ms\"\n\
             webhook-timeout = \"5s\"\nresponse-body-cap = 4096\nlease = \"30s\"\nshutdown-grace = \"1s\"\n\
             held-probe-interval = \"1m\"\nforward-traceparent = true\nmail-key-prefix = \"ob\"\n"
        ),
    )
    .unwrap();
    outbox(&[
        "enqueue",
        "--store",
        &url,
        "--topic",
        "order.created",
        "--data",
        "{}",
    ])
    .ok();
    let r = run(&["relay", "--config", file.to_str().unwrap()], &[]);
    let out = r.ok();
    let report: serde_json::Value = serde_json::from_str(&out).expect("a JSON report");
    assert!(report["batches"].as_u64().is_some(), "{out}");
}

/// The example file in the repository is accepted (its store overridden by the flag).
#[test]
fn the_example_config_file_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/outbox.toml");
    let r = run(
        &[
            "relay",
            "--config",
            example.to_str().unwrap(),
            "--store",
            &url,
            "--until-idle",
            "--json",
        ],
        &[],
    );
    let out = r.ok();
    assert!(out.contains("\"batches\""), "{out}");
}
