//! The live view of a session (`{cdpUrl}/view`, docs/sessions.md): a page a
//! person opens in any browser that shows the session's page as it is now.
//! Here the person's browser is a second session's headless Chromium; its
//! screenshots are decoded and their pixels checked against the colour the
//! watched page shows, before and after it changes.
//!
//! Runs on: one store, because its subject is the live view's page.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use grid_tests::cdp::Cdp;
use grid_tests::http::{http_client, Resp};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_running, release};
use grid_tests::target::Target;
use grid_tests::wait::{wait_for, Within};

/// The RGB of the pixel at the centre of a PNG screenshot.
fn centre_pixel(png_bytes: &[u8]) -> [u8; 3] {
    let img = image::load_from_memory_with_format(png_bytes, image::ImageFormat::Png).expect("a PNG").to_rgb8();
    let p = img.get_pixel(img.width() / 2, img.height() / 2);
    [p[0], p[1], p[2]]
}

fn near(pixel: [u8; 3], want: [u8; 3]) -> bool {
    pixel.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 40)
}

/// Screenshots the viewer until its centre shows `want` (the screencast is
/// JPEG, so colours are compared with a tolerance).
async fn wait_for_colour(viewer: &mut Cdp, session: &str, want: [u8; 3]) -> [u8; 3] {
    // The probe's future borrows the connection, so it is lent through a
    // lock; a screenshot every 200 ms, as each is a PNG of the whole view.
    let viewer = tokio::sync::Mutex::new(viewer);
    let within = Within::new(Duration::from_secs(30)).every(Duration::from_millis(200));
    wait_for(&format!("the live view showing {want:?}"), within, || async {
        let mut viewer = viewer.lock().await;
        let shot = viewer.call("Page.captureScreenshot", json!({"format": "png"}), Some(session)).await;
        let pixel = match shot {
            Ok(s) => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(s["data"].as_str().unwrap_or_default())
                    .expect("base64 screenshot");
                centre_pixel(&data)
            }
            Err(e) => panic!("screenshot of the viewer: {e}"),
        };
        if near(pixel, want) {
            return Ok(pixel);
        }
        let status = viewer.evaluate(session, "document.getElementById('status').textContent").await;
        Err(format!("{pixel:?} (view status: {status:?})"))
    })
    .await
}

#[tokio::test]
async fn the_view_page_shows_the_sessions_page_live() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "2".into()],
        ..ServerOptions::default()
    });
    // The watched session shows a red page.
    let (watched, mut lessee) = lease_running(&server, json!({})).await;
    let (page_id, page) = lessee.open_page(&target.url("/color/ff0000")).await.expect("red page");

    // Discovery points a DevTools frontend at the grid's view, never elsewhere.
    let list = Resp::read(http_client().get(format!("{}/json/list", watched.cdp_url))).await.expect("json/list");
    let entry: Vec<&Value> =
        list.json.as_array().map(|a| a.iter().filter(|t| t["id"] == json!(page_id)).collect()).unwrap_or_default();
    assert_eq!(entry.len(), 1, "{list}");
    let view_url = format!("{}/view?target={page_id}", watched.cdp_url);
    assert_eq!(entry[0]["devtoolsFrontendUrl"], json!(view_url), "{list}");

    // The page itself: HTML that carries the token in its address, so it is
    // neither cached, nor framed, nor sent on as a referrer.
    let view = Resp::read(http_client().get(&view_url)).await.expect("view");
    assert_eq!(view.status, 200, "{view}");
    assert!(view.header("content-type").is_some_and(|c| c.starts_with("text/html")), "{view}");
    assert_eq!(view.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(view.header("cache-control"), Some("no-store"));
    assert!(view.header("content-security-policy").is_some_and(|c| c.contains("frame-ancestors 'none'")), "{view}");
    let (id, token) = (watched.id.clone(), watched.cdp_url.rsplit('/').next().unwrap_or_default().to_string());
    let forged = view_url.replace(&token, &"0".repeat(token.len()));
    let refused = Resp::read(http_client().get(&forged)).await.expect("forged view");
    assert_eq!(refused.status, 404, "a wrong token sees nothing: {refused}");

    // The CLI gives the same address (the page the view watches by default:
    // the session's page that is not blank).
    let cli = server.cli(&["session", "view", &watched.cdp_url]);
    assert!(cli.success(), "{cli:?}");
    assert_eq!(cli.stdout.trim(), format!("{}/view", watched.cdp_url));

    // A person's browser (another session's Chromium) opens the view.
    let (viewer_lease, mut viewer) = lease_running(&server, json!({})).await;
    let (_, viewing) = viewer.open_page(&view_url).await.expect("view page");
    wait_for_colour(&mut viewer, &viewing, [255, 0, 0]).await;

    // The watched page changes; the view follows.
    lessee
        .call("Page.navigate", json!({"url": target.url("/color/0000ff")}), Some(&page))
        .await
        .expect("navigate to blue");
    wait_for_colour(&mut viewer, &viewing, [0, 0, 255]).await;

    release(&server, &id).await;
    release(&server, &viewer_lease.id).await;
}

/// A lease that asked for take-over: the view offers it, and once a person
/// takes over, a click on the picture is a click on the session's page; a
/// click before that sends nothing. A lease without it gets a view that
/// only watches.
#[tokio::test]
async fn in_take_over_mode_a_click_in_the_view_clicks_the_page() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "2".into()],
        ..ServerOptions::default()
    });
    let (watched, mut lessee) = lease_running(&server, json!({"takeOver": true})).await;
    let (_, page) = lessee.open_page(&target.url("/color/ff0000")).await.expect("red page");
    let count = "window.clicks = 0; document.addEventListener('click', () => { window.clicks += 1; }); 1";
    lessee.evaluate(&page, count).await.expect("a click counter");

    let (viewer_lease, mut viewer) = lease_running(&server, json!({})).await;
    let view_url = watched.answer["liveViewUrl"].as_str().expect("liveViewUrl").to_string();
    let (_, viewing) = viewer.open_page(&view_url).await.expect("view page");
    wait_for_colour(&mut viewer, &viewing, [255, 0, 0]).await;
    let offered = viewer.evaluate(&viewing, "!document.getElementById('takeover').hidden").await.expect("button");
    assert_eq!(offered, json!(true), "the view offers take-over");

    let centre = "(() => { const r = document.getElementById('frame').getBoundingClientRect(); \
                  return [r.left + r.width / 2, r.top + r.height / 2]; })()";
    let at = viewer.evaluate(&viewing, centre).await.expect("the picture's centre");
    let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    let click = |kind: &'static str| json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1});
    // Before taking over: a click on the picture reaches nothing.
    for kind in ["mousePressed", "mouseReleased"] {
        viewer.call("Input.dispatchMouseEvent", click(kind), Some(&viewing)).await.expect("a click in the view");
    }
    viewer.evaluate(&viewing, "document.getElementById('takeover').click(); 1").await.expect("take over");
    for kind in ["mousePressed", "mouseReleased"] {
        viewer.call("Input.dispatchMouseEvent", click(kind), Some(&viewing)).await.expect("a click in the view");
    }
    {
        let lessee = tokio::sync::Mutex::new(&mut lessee);
        wait_for("the page counting the click", Duration::from_secs(20), || async {
            let clicks = lessee.lock().await.evaluate(&page, "window.clicks").await.expect("the counter");
            match clicks {
                c if c == json!(1) => Ok(()),
                c if c == json!(0) => Err("0 clicks".to_string()),
                c => panic!("the page counted {c} clicks, not 1"),
            }
        })
        .await;
    }
    // Only the click after taking over reached the page (both travelled in order).
    assert_eq!(lessee.evaluate(&page, "window.clicks").await.unwrap(), json!(1));

    // A lease without takeOver: its view only watches.
    let own_view = viewer_lease.answer["liveViewUrl"].as_str().unwrap().to_string();
    let html = Resp::read(http_client().get(&own_view)).await.expect("view");
    assert!(html.text.contains("data-take-over=\"false\""), "{}", html.text);
    let offered = Resp::read(http_client().get(&view_url)).await.expect("view");
    assert!(offered.text.contains("data-take-over=\"true\""));
    release(&server, &watched.id).await;
    release(&server, &viewer_lease.id).await;
}
