//! `outbox relay` worker processes: spawned with their output in a log file, killed
//! (`SIGKILL`) or stopped (`SIGTERM`), and always killed when their guard drops.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::backend::Backend;

/// The relay binary built with this test.
pub const OUTBOX: &str = env!("CARGO_BIN_EXE_outbox");

/// The relay flags every scenario shares: loopback receivers, fast polling, a 1 s webhook
/// deadline and a 3 s lease (so a killed worker's claims come back within seconds).
pub fn fast_flags() -> Vec<String> {
    [
        "--allow-http",
        "--allow-private",
        "--poll-interval",
        "100ms",
        "--webhook-timeout",
        "1s",
        "--lease",
        "3s",
        "--held-probe-interval",
        "1s",
        "--shutdown-grace",
        "2s",
        "--concurrency",
        "32",
        "--batch-size",
        "50",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// One relay process. Dropping it kills it.
#[derive(Debug)]
pub struct Relay {
    child: Child,
    pub name: String,
    pub log: PathBuf,
    exit: Option<ExitStatus>,
}

impl Relay {
    /// Start `outbox relay` on `backend` with `flags` and extra environment.
    pub fn spawn(backend: &Backend, name: &str, flags: &[String], env: &[(&str, &str)]) -> Relay {
        let log = backend.path(&format!("{name}.log"));
        let out = File::create(&log).expect("create the relay log");
        let err = out.try_clone().expect("clone the log handle");
        let mut cmd = Command::new(OUTBOX);
        cmd.arg("relay")
            .args(backend.store_args())
            .args(flags)
            .env("OUTBOX_VAULT_KEY", &backend.vault_key)
            .env("OUTBOX_LOG", "warn")
            .env_remove("OUTBOX_STORE")
            .env_remove("OUTBOX_NAMESPACE")
            .env_remove("OUTBOX_MAIL_URL")
            .env_remove("OUTBOX_MAIL_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn outbox relay");
        Relay {
            child,
            name: name.to_owned(),
            log,
            exit: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` when the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// `kill -9` and reap.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// `SIGTERM`, then wait up to `grace` for a clean exit; `SIGKILL` after that. Returns
    /// the exit status when the process ended on its own.
    pub async fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exited() {
            return Some(s);
        }
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if sent {
            for _ in 0..(grace.as_millis() / 50).max(1) {
                if let Some(s) = self.exited() {
                    return Some(s);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.kill();
        None
    }

    /// The peak resident set (`VmHWM`) in KiB, while the process lives.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// Everything the process printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the output (for failure messages).
    pub fn tail(&self, n: usize) -> String {
        let out = self.output();
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fixed-size pool of relays that can be killed and restarted one at a time.
#[derive(Debug)]
pub struct Workers {
    pub relays: Vec<Relay>,
    flags: Vec<String>,
    started: usize,
}

impl Workers {
    /// Start `n` relays with `flags`.
    pub fn start(backend: &Backend, n: usize, flags: Vec<String>) -> Workers {
        let mut w = Workers {
            relays: Vec::with_capacity(n),
            flags,
            started: 0,
        };
        for _ in 0..n {
            let r = w.next(backend);
            w.relays.push(r);
        }
        w
    }

    fn next(&mut self, backend: &Backend) -> Relay {
        self.started += 1;
        Relay::spawn(
            backend,
            &format!("relay-{:03}", self.started),
            &self.flags,
            &[],
        )
    }

    /// `kill -9` relay `i` and start a new one in its place.
    pub fn kill_and_restart(&mut self, backend: &Backend, i: usize) {
        self.relays[i].kill();
        let fresh = self.next(backend);
        // The killed one is dropped (already reaped); its log stays on disk.
        self.relays[i] = fresh;
    }

    /// Fail when a relay ended without being told to (a crash of its own).
    pub fn check_alive(&mut self) -> Result<(), String> {
        for r in &mut self.relays {
            if let Some(status) = r.exited() {
                return Err(format!(
                    "{} exited on its own ({status}); its last output:\n{}",
                    r.name,
                    r.tail(30)
                ));
            }
        }
        Ok(())
    }

    /// The last lines of every relay's output (for failure messages).
    pub fn tails(&self, n: usize) -> String {
        self.relays
            .iter()
            .map(|r| format!("--- {} ---\n{}", r.name, r.tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn pids(&self) -> Vec<u32> {
        self.relays.iter().map(Relay::pid).collect()
    }

    /// The peak RSS of each live relay, in KiB.
    pub fn peak_rss_kib(&self) -> Vec<u64> {
        self.relays.iter().filter_map(Relay::peak_rss_kib).collect()
    }

    /// Stop every relay with `SIGTERM`; returns how many exited cleanly (status 0).
    pub async fn stop(&mut self) -> usize {
        let mut clean = 0;
        for r in &mut self.relays {
            if r.terminate(Duration::from_secs(10))
                .await
                .is_some_and(|s| s.success())
            {
                clean += 1;
            }
        }
        clean
    }

    /// How many relays were started in all (restarts included).
    pub fn started(&self) -> usize {
        self.started
    }
}
