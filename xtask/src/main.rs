//! `cargo xtask <command>`: `ci` (what `.ci/run` runs after starting services), `tidy`,
//! `bench` (the benchmark harness, `outbox-bench`, built in release mode).

use std::process::{Command, ExitCode};

fn cargo(args: &[&str]) -> bool {
    eprintln!("+ cargo {}", args.join(" "));
    Command::new(env!("CARGO"))
        .args(args)
        .current_dir(xtask::workspace_root())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cargo run --release -p outbox-bench -- <args>`: the harness prints the table and writes
/// `target/bench/bench.{json,md}`.
fn bench(args: &[String]) -> bool {
    let mut all = vec!["run", "--release", "--quiet", "-p", "outbox-bench", "--"];
    all.extend(args.iter().map(String::as_str));
    cargo(&all)
}

fn tidy() -> bool {
    let root = xtask::workspace_root();
    let mut problems = xtask::tidy(&root);
    problems.extend(xtask::rust_version(&root));
    for p in &problems {
        eprintln!("tidy: {}: {}", p.path.display(), p.what);
    }
    if problems.is_empty() {
        eprintln!("tidy: ok");
    }
    problems.is_empty()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ok = match args.first().map(String::as_str) {
        Some("tidy") => tidy(),
        Some("bench") => bench(&args[1..]),
        Some("ci") => {
            tidy()
                && cargo(&["fmt", "--all", "--check"])
                && cargo(&[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ])
                && cargo(&["test", "--workspace"])
        }
        _ => {
            eprintln!("usage: cargo xtask <ci|tidy|bench>\n\n  ci     tidy, fmt --check, clippy -D warnings, test --workspace\n  tidy   house rules: no ignored tests, no todo!/unimplemented!, workspace lints, src/ files <= 600 lines\n         (others <= 800), rust-version >= every dependency's, the store file shape, every\n         conformance case listed, outbox-core free of runtime/I/O crates, crate layering,\n         no import circles between the files of a crate\n  bench  [--quick] [--only NAME] [--list]: each scenario beside a raw baseline (release build);\n         table printed and written to target/bench/bench.{{json,md}}");
            return ExitCode::from(2);
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
