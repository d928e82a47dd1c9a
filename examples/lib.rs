//! Shared pieces of the runnable examples (`cargo run -p outboxkit-examples --example NAME`):
//! the shutdown signal every example stops on. The examples themselves are the files beside
//! this one: `axum_orders.rs` (PostgreSQL), `sqlite_notes.rs` (SQLite), `redis_multi.rs`
//! (Redis).

use tokio::sync::watch;

/// One shutdown signal for the whole process: fired by Ctrl-C, by SIGTERM (on Unix), or by
/// the program itself through [`Shutdown::trigger`]. Every task waits on a clone.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal not yet fired, listening for Ctrl-C and SIGTERM.
    pub fn new() -> Self {
        let (tx, _) = watch::channel(false);
        let signal = Shutdown { tx };
        let on_signal = signal.clone();
        tokio::spawn(async move {
            let ctrl_c = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            #[cfg(unix)]
            let term = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let term = std::future::pending::<()>();
            tokio::select! {
                () = ctrl_c => {}
                () = term => {}
            }
            on_signal.trigger();
        });
        signal
    }

    /// Fire the signal.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Resolves once the signal has fired.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|fired| *fired).await;
    }
}
