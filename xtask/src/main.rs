//! `cargo xtask <command>`: `ci` (what `.ci/run` runs after starting services), `tidy`.

use std::process::{Command, ExitCode};

fn cargo(args: &[&str]) -> bool {
    eprintln!("+ cargo {}", args.join(" "));
    Command::new(env!("CARGO"))
        .args(args)
        .current_dir(xtask::workspace_root())
        .status()
        .is_ok_and(|s| s.success())
}

fn tidy() -> bool {
    let problems = xtask::tidy(&xtask::workspace_root());
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
            eprintln!("usage: cargo xtask <ci|tidy>\n\n  ci    tidy, fmt --check, clippy -D warnings, test --workspace\n  tidy  house rules: no ignored tests, no todo!/unimplemented!, workspace lints, files <= 800 lines");
            return ExitCode::from(2);
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
