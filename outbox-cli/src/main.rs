//! The `outbox` command line (demo, relay, operator tools) arrives with issue 9.

fn main() {
    eprintln!("outbox: the command line is not built yet; see issue 9");
    std::process::exit(2);
}
