//! A real local Redis Cluster for the tests: three `redis-server --cluster-enabled yes`
//! primaries on free loopback ports, each with its own directory under the system temp dir,
//! joined by `redis-cli --cluster create`. Idempotent: a healthy cluster left by an earlier
//! run (ports in `<dir>/ports`) is reused, and a file lock serialises test binaries that
//! start at once. Nodes keep an append-only file with `appendfsync always`, so a restarted
//! node comes back with everything it acknowledged. Never touches the shared 6379.

#![allow(dead_code)]

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// A running local cluster.
#[derive(Debug)]
pub struct Cluster {
    pub name: &'static str,
    pub dir: PathBuf,
    pub ports: Vec<u16>,
}

impl Cluster {
    /// The seed URLs, one per node.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The `redis+cluster://` URL naming every node.
    pub fn cluster_url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Stop node `port` (it writes its append-only file) and start it again with the same
    /// files, then wait until the cluster is healthy again.
    pub fn restart(&self, port: u16) {
        let _ = cli(port, &["SHUTDOWN"]);
        for _ in 0..100 {
            if cli(port, &["PING"]).is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        start_node(&self.dir, port);
        wait(
            || healthy(&self.ports),
            "the restarted cluster to be healthy",
        );
    }
}

/// Where `redis-server` is missing, the cluster is unavailable.
pub fn available() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok()
}

/// The cluster named `name` (one per name and test binary), started if needed.
pub fn cluster(name: &'static str) -> &'static Cluster {
    static MAIN: OnceLock<Cluster> = OnceLock::new();
    static SPARE: OnceLock<Cluster> = OnceLock::new();
    let cell = if name == "main" { &MAIN } else { &SPARE };
    cell.get_or_init(|| ensure(name))
}

fn ensure(name: &'static str) -> Cluster {
    let dir = std::env::temp_dir().join(format!("outbox-redis-cluster-{name}"));
    fs::create_dir_all(&dir).expect("cluster dir");
    let lock = File::create(dir.join("lock")).expect("cluster lock file");
    lock.lock().expect("cluster lock");
    let ports_file = dir.join("ports");
    if let Ok(text) = fs::read_to_string(&ports_file) {
        let ports: Vec<u16> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if ports.len() == 3 && healthy(&ports) {
            return Cluster { name, dir, ports };
        }
        // A broken earlier cluster of ours: stop what is left of it.
        for p in ports {
            let _ = cli(p, &["SHUTDOWN", "NOSAVE"]);
        }
    }
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    for &p in &ports {
        let node = dir.join(p.to_string());
        let _ = fs::remove_dir_all(&node);
        fs::create_dir_all(&node).expect("node dir");
        start_node(&dir, p);
    }
    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for p in &ports {
        create.arg(format!("127.0.0.1:{p}"));
    }
    let out = create
        .arg("--cluster-yes")
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        out.status.success(),
        "cluster create failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    wait(|| healthy(&ports), "the new cluster to be healthy");
    let text: Vec<String> = ports.iter().map(u16::to_string).collect();
    fs::write(&ports_file, text.join(" ")).expect("ports file");
    Cluster { name, dir, ports }
}

fn free_port() -> u16 {
    // A cluster node also listens on port + 10000 (the cluster bus): both must be free.
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let p = l.local_addr().expect("port").port();
        if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

fn start_node(dir: &Path, port: u16) {
    let node = dir.join(port.to_string());
    let status = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args(["--cluster-node-timeout", "2000"])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&node)
        .arg("--logfile")
        .arg(node.join("log"))
        .args(["--daemonize", "yes"])
        .status()
        .expect("redis-server");
    assert!(status.success(), "redis-server on {port} did not start");
    wait(
        || cli(port, &["PING"]).as_deref() == Some("PONG"),
        "a node to answer",
    );
}

/// `redis-cli -p port args…`'s output, or `None` when it failed.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

fn healthy(ports: &[u16]) -> bool {
    ports
        .iter()
        .all(|&p| cli(p, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok")))
}

fn wait(ok: impl Fn() -> bool, what: &str) {
    for _ in 0..400 {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}
