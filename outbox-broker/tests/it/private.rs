//! Brokers of our own: a private `nats-server` on a free loopback port with its own store
//! directory (stopped and started by the test), and a loopback TCP proxy the test can cut
//! (for RabbitMQ, whose shared instance must not be stopped).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait_listening(port: u16) {
    for _ in 0..200 {
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the private nats-server did not start on port {port}");
}

/// A `nats-server` of this test's own.
pub struct PrivateNats {
    port: u16,
    dir: tempfile::TempDir,
    config: Option<PathBuf>,
    jetstream: bool,
    child: Option<Child>,
}

impl PrivateNats {
    /// Start one, with JetStream when `jetstream`, and the given config file text (users,
    /// permissions, limits) when some.
    pub async fn start(jetstream: bool, config: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = config.map(|text| {
            let p = dir.path().join("nats.conf");
            std::fs::write(&p, text).unwrap();
            p
        });
        let mut s = PrivateNats {
            port: free_port(),
            dir,
            config,
            jetstream,
            child: None,
        };
        s.spawn().await;
        s
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let mut cmd = Command::new("nats-server");
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        if self.jetstream {
            cmd.arg("-js").arg("-sd").arg(self.dir.path().join("store"));
        }
        cmd.arg("-l")
            .arg(self.dir.path().join("nats.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        self.child = Some(cmd.spawn().expect("nats-server runs"));
        wait_listening(self.port).await;
    }

    /// Kill it (its store directory stays).
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.unwrap();
        }
    }

    /// Start it again on the same port and store.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.spawn().await;
    }
}

/// A loopback TCP proxy to `target`; `cut()` drops every connection and refuses new ones
/// until `heal()`.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Proxy {
    pub async fn start(target: (String, u16)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let (tx, _) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(tx);
        let (c, g) = (cut.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let mut rx = g.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect((target.0.as_str(), target.1)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = rx.changed() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            cut,
            generation,
        }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}
