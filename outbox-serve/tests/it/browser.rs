//! A real browser: headless Chromium driven through chromedriver (WebDriver) with
//! fantoccini. Log in with a token, find a dead delivery, open its timeline, replay it, and
//! see it succeed against a local receiver. Screenshots go to `target/console-*.png`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{ClientBuilder, Locator};
use outboxkit_core::DeliveryStatus;
use outboxkit_testing::conformance::require_backends;
use outboxkit_testing::WebhookReceiver;
use tokio::process::{Child, Command};

use crate::common::App;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")))
}

/// chromedriver on a free loopback port; killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn chromedriver() -> Driver {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Driver { child, port };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not start listening");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_in_find_a_dead_delivery_replay_it_and_see_it_succeed() {
    if !std::path::Path::new(CHROMEDRIVER).exists() || !std::path::Path::new(CHROMIUM).exists() {
        if require_backends() {
            panic!("chromium and chromium-driver are required (OUTBOX_TEST_REQUIRE_BACKENDS=1): apt-get install -y chromium chromium-driver");
        }
        eprintln!(
            "\n*** SKIPPING the browser test: chromium or chromedriver is not installed ***\n"
        );
        return;
    }
    // An app with a dead delivery: the receiver refused both attempts.
    let app = App::sqlite().await;
    let receiver = WebhookReceiver::start().await.unwrap();
    receiver.refuse(503);
    let endpoint = app.endpoint(&receiver.url_for("/hooks/orders")).await;
    app.enqueue("order.created", 1).await;
    app.dispatch_until(DeliveryStatus::Dead, 1).await;
    app.enqueue("invoice.paid", 2).await;
    receiver.heal();
    let refused = receiver.count();

    // The server on a real socket, and a dispatcher running beside it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stop_server = stop_rx.clone();
    let server = tokio::spawn(outboxkit_serve::serve(
        listener,
        app.router.clone(),
        async move {
            let _ = stop_server.changed().await;
        },
    ));
    let dispatcher = Arc::new(app.dispatcher());
    let mut stop_dispatch = stop_rx.clone();
    let d = dispatcher.clone();
    let relay = tokio::spawn(async move {
        d.run(async move {
            let _ = stop_dispatch.changed().await;
        })
        .await
    });

    let driver = chromedriver().await;
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a chromium session");
    let base = format!("http://{addr}");
    let shots = target_dir();
    std::fs::create_dir_all(&shots).unwrap();

    let result: Result<(), fantoccini::error::CmdError> = async {
        // Log in with the token.
        c.goto(&format!("{base}/console")).await?;
        assert!(c.current_url().await?.path().ends_with("/console/login"));
        c.find(Locator::Id("token"))
            .await?
            .send_keys(&app.writer)
            .await?;
        c.find(Locator::Id("login")).await?.click().await?;
        c.wait().for_element(Locator::Id("count-dead")).await?;
        assert_eq!(c.find(Locator::Id("count-dead")).await?.text().await?, "1");
        std::fs::write(shots.join("console-overview.png"), c.screenshot().await?).unwrap();

        // Find the dead delivery through the filters.
        c.find(Locator::LinkText("Deliveries"))
            .await?
            .click()
            .await?;
        c.wait().for_element(Locator::Id("status")).await?;
        c.find(Locator::Id("status"))
            .await?
            .select_by_value("dead")
            .await?;
        c.find(Locator::Id("filter")).await?.click().await?;
        // The filtered page, not the unfiltered one still showing while it loads: only the
        // server marks the chosen option `selected` in the markup.
        c.wait()
            .for_element(Locator::Css(r#"#status option[value="dead"][selected]"#))
            .await?;
        c.wait().for_element(Locator::Css("a.delivery")).await?;
        let links = c.find_all(Locator::Css("a.delivery")).await?;
        assert_eq!(links.len(), 1, "one dead delivery");
        links[0].click().await?;

        // Its timeline: two refused attempts with their status codes.
        c.wait().for_element(Locator::Id("timeline")).await?;
        let timeline = c.find(Locator::Id("timeline")).await?.text().await?;
        assert_eq!(timeline.matches("HTTP 503").count(), 2, "{timeline}");
        assert!(c
            .find(Locator::Id("delivery-status"))
            .await?
            .text()
            .await?
            .contains("dead"));
        std::fs::write(shots.join("console-timeline.png"), c.screenshot().await?).unwrap();

        // Replay it, behind the confirmation page.
        c.find(Locator::Id("action-replay")).await?.click().await?;
        c.wait().for_element(Locator::Id("confirm")).await?;
        c.find(Locator::Id("confirm")).await?.click().await?;
        c.wait().for_element(Locator::Id("flash")).await?;

        // See it succeed: the relay beside the server delivers it to the healed receiver.
        let page = c.current_url().await?;
        let mut status = String::new();
        for _ in 0..100 {
            c.goto(page.as_str()).await?;
            status = c.find(Locator::Id("delivery-status")).await?.text().await?;
            if status.contains("succeeded") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            status.contains("succeeded"),
            "the replayed delivery is {status}"
        );
        let timeline = c.find(Locator::Id("timeline")).await?.text().await?;
        assert!(timeline.contains("HTTP 200"), "{timeline}");
        std::fs::write(shots.join("console-replayed.png"), c.screenshot().await?).unwrap();

        // The endpoint page shows its last status, and nothing secret anywhere.
        c.goto(&format!("{base}/console/endpoints?tenant=acme"))
            .await?;
        let html = c.source().await?;
        assert!(html.contains(&endpoint.to_string()));
        assert!(!html.contains("whsec_") && !html.contains(&app.writer));

        // Rotate its secret: the new one is shown once, on the page that answers.
        c.find(Locator::Id("action-rotate")).await?.click().await?;
        c.wait().for_element(Locator::Id("confirm")).await?;
        c.find(Locator::Id("confirm")).await?.click().await?;
        c.wait().for_element(Locator::Id("new-secret")).await?;
        let secret = c.find(Locator::Id("new-secret")).await?.text().await?;
        assert!(secret.starts_with("whsec_"), "{secret}");
        std::fs::write(shots.join("console-rotated.png"), c.screenshot().await?).unwrap();
        // Back on the endpoints page it is gone; a second rotation asks to finish first.
        c.goto(&format!("{base}/console/endpoints?tenant=acme"))
            .await?;
        assert!(!c.source().await?.contains(&secret));
        c.find(Locator::Id("action-rotate")).await?.click().await?;
        c.wait().for_element(Locator::Id("in-progress")).await?;
        c.find(Locator::Id("confirm")).await?.click().await?;
        c.wait().for_element(Locator::Id("flash")).await?;
        assert!(c
            .find(Locator::Id("flash"))
            .await?
            .text()
            .await?
            .contains("rotation finished"));
        Ok(())
    }
    .await;
    // The same browser on a console mounted under a prefix (browser_console.rs).
    if result.is_ok() {
        crate::browser_console::the_operator_console(&c).await;
    }
    let _ = c.close().await;
    let _ = stop_tx.send(true);
    let _ = relay.await;
    let _ = server.await;
    drop(driver);
    result.expect("the browser session");
    assert!(
        receiver.count() > refused,
        "the receiver got the replayed delivery"
    );
    let last = receiver.requests().pop().unwrap();
    assert!(last
        .header("webhook-signature")
        .is_some_and(|s| s.starts_with("v1,")));
}
