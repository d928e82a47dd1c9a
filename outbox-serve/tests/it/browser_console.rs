//! The console an operator would choose, in the browser session of `browser.rs`: mounted
//! under `--base-path /outbox` (every link stays under it), the activity chart with the
//! counts of attempts seeded through a real dispatcher, an endpoint's charts, a delivery
//! page with hostile headers and bodies shown escaped (no script runs), bulk replay (dry
//! run, confirmation, the deliveries replayed) and the audit log recording it. With
//! `OUTBOX_CONSOLE_SCREENSHOTS=docs/console` each page is saved as `<page>.png` there.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client, Locator};
use outboxkit_core::{
    AttemptDetail, AttemptOutcome, AttemptRecord, AttemptTiming, ClaimRequest, Clock, Completion,
    DeliveryStatus, DeliveryStoreExt, NewMessage, SystemClock, Verdict,
};
use outboxkit_serve::{BasePath, ServeConfig};
use outboxkit_testing::WebhookReceiver;

use crate::common::{config, App};

type R = Result<(), fantoccini::error::CmdError>;

/// Where screenshots go, when asked for (relative to the workspace root).
fn shots() -> Option<PathBuf> {
    let dir = std::env::var_os("OUTBOX_CONSOLE_SCREENSHOTS")?;
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

pub(crate) async fn shot(c: &Client, name: &str) -> R {
    if let Some(dir) = shots() {
        std::fs::write(dir.join(format!("{name}.png")), c.screenshot().await?).unwrap();
    }
    Ok(())
}

/// Every URL the page links to, posts to or loads is under `/outbox/` (or an anchor).
async fn under_prefix(c: &Client) -> R {
    let v = c
        .execute(
            "return Array.from(document.querySelectorAll('[href],[action],[src]'))\
             .map(e => e.getAttribute('href') || e.getAttribute('action') || e.getAttribute('src'));",
            vec![],
        )
        .await?;
    let urls: Vec<String> = serde_json::from_value(v).unwrap();
    assert!(!urls.is_empty());
    for u in &urls {
        assert!(
            u.starts_with("/outbox/") || u.starts_with('#'),
            "{u} is outside the prefix on {}",
            c.current_url().await?
        );
    }
    assert!(c.current_url().await?.path().starts_with("/outbox/console"));
    Ok(())
}

async fn text(c: &Client, css: &str) -> Result<String, fantoccini::error::CmdError> {
    c.wait().for_element(Locator::Css(css)).await?.text().await
}

const EVIL_REQUEST: &str = "<script>document.title='pwned'</script>";
const EVIL_HEADER: &str = "<img src=x onerror=\"window.pwned=1\">";
const EVIL_BODY: &str = "</pre><script>window.pwned=2</script>";
const EVIL_PAYLOAD: &str = "<svg onload=window.pwned=3>";

/// One delivery completed by hand with a hostile attempt in full (what a receiver could
/// answer, and headers as a transport would record them).
async fn seed_hostile(app: &App) {
    app.store
        .enqueue(
            NewMessage::new("evil.topic", serde_json::json!({ "html": EVIL_PAYLOAD }))
                .tenant(app.tenant.as_str()),
        )
        .await
        .unwrap();
    let got = app
        .store
        .claim(&ClaimRequest::new(10, Duration::from_secs(30)).webhooks(6))
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "only the hostile delivery is due");
    let now = SystemClock.now();
    let mut detail = AttemptDetail {
        request_headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-evil".into(), EVIL_REQUEST.into()),
        ],
        response_headers: vec![("x-reply".into(), EVIL_HEADER.into())],
        timing: AttemptTiming {
            connect: Some(Duration::from_millis(1)),
            first_byte: Some(Duration::from_millis(3)),
            total: Duration::from_millis(4),
        },
        remote_addr: Some("127.0.0.1:9".into()),
        ..AttemptDetail::default()
    };
    detail.set_response_body(EVIL_BODY.as_bytes(), 1024);
    let record = AttemptRecord {
        started_at: now,
        finished_at: now.saturating_add(Duration::from_millis(4)),
        outcome: AttemptOutcome::Succeeded,
        status_code: Some(200),
        excerpt: Some(EVIL_BODY.into()),
        detail: Some(Box::new(detail)),
    };
    app.store
        .complete(
            &got[0].lease,
            &Completion {
                verdict: Verdict::Succeeded,
                attempt: Some(record),
            },
        )
        .await
        .unwrap();
}

/// The console under `/outbox`, in the browser `c`.
pub(crate) async fn the_operator_console(c: &Client) {
    let app = App::sqlite_with(ServeConfig {
        base_path: BasePath::new("/outbox").unwrap(),
        ..config()
    })
    .await;
    // Known attempts: 3 deliveries refused twice (3 failed, then 3 dead), 2 that succeed,
    // and one hostile success written by hand.
    let receiver = WebhookReceiver::start().await.unwrap();
    receiver.refuse(503);
    let endpoint = app
        .endpoint(&receiver.url_for("/hooks/orders?key=secret"))
        .await;
    app.enqueue("order.created", 3).await;
    app.dispatch_until(DeliveryStatus::Dead, 3).await;
    receiver.heal();
    app.enqueue("invoice.paid", 2).await;
    app.dispatch_until(DeliveryStatus::Succeeded, 2).await;
    seed_hostile(&app).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(outboxkit_serve::serve(
        listener,
        app.router.clone(),
        async move {
            let _ = stop_rx.changed().await;
        },
    ));
    let base = format!("http://{addr}/outbox");
    let result: R = async {
        // The login page, under the prefix.
        c.goto(&format!("{base}/console")).await?;
        assert_eq!(c.current_url().await?.path(), "/outbox/console/login");
        under_prefix(c).await?;
        shot(c, "login").await?;
        c.find(Locator::Id("token"))
            .await?
            .send_keys(&app.writer)
            .await?;
        c.find(Locator::Id("login")).await?.click().await?;

        // The overview: the chart counts every attempt seeded.
        let totals = text(c, "#activity-totals").await?;
        assert_eq!(totals, "3 succeeded, 3 failed, 3 dead");
        let label = c
            .find(Locator::Id("activity-svg"))
            .await?
            .attr("aria-label")
            .await?
            .unwrap_or_default();
        assert!(label.ends_with("3 succeeded, 3 failed, 3 dead"), "{label}");
        assert!(!c
            .find_all(Locator::Css("#activity-svg rect"))
            .await?
            .is_empty());
        under_prefix(c).await?;
        // The refresh script loaded under the CSP: it can be paused.
        c.find(Locator::Id("refresh-toggle")).await?.click().await?;
        assert_eq!(text(c, "#refresh-toggle").await?, "Resume refresh");
        shot(c, "overview").await?;
        c.find(Locator::Id("range-24")).await?.click().await?;
        c.wait().for_element(Locator::Css("#range-24.here")).await?;
        assert_eq!(
            text(c, "#activity-totals").await?,
            "3 succeeded, 3 failed, 3 dead"
        );

        // The endpoints by name and URL (no query string), and one endpoint's charts.
        c.find(Locator::LinkText("Endpoints"))
            .await?
            .click()
            .await?;
        let row = text(c, "table tbody tr").await?;
        assert!(
            row.contains("receiver") && row.contains("/hooks/orders?…"),
            "{row}"
        );
        assert!(!c.source().await?.contains("key=secret"));
        under_prefix(c).await?;
        shot(c, "endpoints").await?;
        c.find(Locator::Css("a.endpoint-name"))
            .await?
            .click()
            .await?;
        assert_eq!(
            text(c, "#endpoint-activity-totals").await?,
            "3 succeeded, 3 failed, 3 dead"
        );
        assert!(text(c, "#endpoint-success-summary")
            .await?
            .starts_with("33% of 9 attempts succeeded"));
        assert!(c
            .current_url()
            .await?
            .path()
            .ends_with(&endpoint.to_string()));
        under_prefix(c).await?;
        shot(c, "endpoint").await?;

        // The delivery list: endpoint names, relative times with the exact time on hover.
        c.find(Locator::LinkText("Deliveries"))
            .await?
            .click()
            .await?;
        let t = c.wait().for_element(Locator::Css("td time")).await?;
        assert!(t.attr("title").await?.unwrap_or_default().ends_with(" UTC"));
        assert!(text(c, "table tbody").await?.contains("receiver"));
        under_prefix(c).await?;
        shot(c, "deliveries").await?;

        // The hostile delivery: everything shown as text, nothing run.
        c.goto(&format!(
            "{base}/console/deliveries?tenant=acme&topic=evil.topic"
        ))
        .await?;
        c.wait()
            .for_element(Locator::Css("a.delivery"))
            .await?
            .click()
            .await?;
        let req = text(c, "#attempt-1-request-headers").await?;
        assert!(req.contains(EVIL_REQUEST), "{req}");
        assert!(text(c, "#attempt-1-response-headers")
            .await?
            .contains(EVIL_HEADER));
        assert_eq!(text(c, "#attempt-1-body").await?, EVIL_BODY);
        assert!(text(c, "#payload").await?.contains(EVIL_PAYLOAD));
        assert_eq!(c.title().await?, "Delivery · outbox");
        let pwned = c.execute("return typeof window.pwned;", vec![]).await?;
        assert_eq!(pwned, serde_json::json!("undefined"));
        under_prefix(c).await?;
        shot(c, "delivery").await?;

        // Bulk replay: a dry run counts the dead deliveries of the endpoint, the
        // confirmation replays them.
        c.find(Locator::LinkText("Bulk replay"))
            .await?
            .click()
            .await?;
        c.wait()
            .for_element(Locator::Id("bulk-endpoint"))
            .await?
            .select_by_value(&endpoint.to_string())
            .await?;
        c.find(Locator::Id("dry-run")).await?.click().await?;
        assert_eq!(text(c, "#bulk-count").await?, "3");
        assert_eq!(c.find_all(Locator::Css("#bulk-matched li")).await?.len(), 3);
        under_prefix(c).await?;
        shot(c, "bulk-dry-run").await?;
        c.find(Locator::Id("confirm-bulk")).await?.click().await?;
        assert_eq!(text(c, "#flash").await?, "3 replayed, 0 skipped of 3");

        // The audit log has it: who, what, on what.
        c.find(Locator::LinkText("Audit log"))
            .await?
            .click()
            .await?;
        let audit = text(c, "#audit").await?;
        assert!(audit.contains("delivery.bulk_replay"), "{audit}");
        assert!(audit.contains("3 replayed, 0 skipped of 3"), "{audit}");
        assert!(audit.contains(&format!("endpoint={endpoint}")), "{audit}");
        under_prefix(c).await?;
        shot(c, "audit").await?;

        c.find(Locator::LinkText("Event types"))
            .await?
            .click()
            .await?;
        c.wait().for_element(Locator::Css("h1")).await?;
        under_prefix(c).await?;
        shot(c, "event-types").await?;
        Ok(())
    }
    .await;
    let _ = stop_tx.send(true);
    let _ = server.await;
    result.expect("the console under /outbox");
    // The replayed deliveries go out and succeed: 2 + 1 + the 3 replayed.
    app.dispatch_until(DeliveryStatus::Succeeded, 6).await;
    let f = outboxkit_core::DeliveryFilter {
        status: Some(DeliveryStatus::Dead),
        ..Default::default()
    };
    let dead = app
        .store
        .list_deliveries(&app.tenant, &f, outboxkit_core::PageRequest::first(10))
        .await
        .unwrap();
    assert!(dead.items.is_empty(), "every dead delivery was replayed");
}
