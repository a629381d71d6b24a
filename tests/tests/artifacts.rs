//! GET /artifacts/{itemId}/{kind} and the signed download URLs it hands out.
//!
//! Runs on: both stores, because where an artifact is kept depends on the store.

use std::time::Duration;

use serde_json::json;

use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{page_html, Target};

const DONE: Duration = Duration::from_secs(60);

async fn completed_fetch(server: &GridServer, url: String) -> String {
    let batch_id = server.submit_fetch(&[url]).await;
    let done = server.wait_batch_done(&batch_id, DONE).await;
    assert_eq!(done["counts"]["completed"], json!(1), "{done}");
    done["jobs"][0]["jobId"].as_str().unwrap().to_string()
}

/// Changes the first character of the signature: the query value whose
/// name mentions "sig", else the longest query value, else the longest path
/// segment. The first character, because the last one of unpadded base64
/// may carry unused bits.
fn tamper(signed: &str) -> String {
    let mut url = url::Url::parse(signed).expect("signed url parses");
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let flip = |s: &str| {
        let mut chars: Vec<char> = s.chars().collect();
        // A digit unlike the original even ignoring case: hex (and many
        // signature encodings) read `a` and `A` alike.
        chars[0] = if chars[0] == '0' { '1' } else { '0' };
        chars.into_iter().collect::<String>()
    };
    let sig_index = pairs
        .iter()
        .position(|(k, _)| k.to_lowercase().contains("sig"))
        .or_else(|| (0..pairs.len()).max_by_key(|&i| pairs[i].1.len()));
    if let Some(i) = sig_index.filter(|&i| !pairs[i].1.is_empty()) {
        let mut tampered = pairs.clone();
        tampered[i].1 = flip(&pairs[i].1);
        url.query_pairs_mut().clear().extend_pairs(tampered);
        return url.to_string();
    }
    let segments: Vec<String> = url.path_segments().expect("path").map(str::to_string).collect();
    let longest = (0..segments.len()).max_by_key(|&i| segments[i].len()).expect("a path segment");
    let mut tampered = segments.clone();
    tampered[longest] = flip(&segments[longest]);
    url.set_path(&tampered.join("/"));
    url.to_string()
}

#[test]
fn tamper_changes_the_signature() {
    // `abc` must not become `Abc`: hex signatures read both alike.
    assert_eq!(tamper("http://h/d/it_1/body?exp=9&sig=abc"), "http://h/d/it_1/body?exp=9&sig=0bc");
    assert_eq!(tamper("http://h/d/it_1/body?exp=9&sig=0bc"), "http://h/d/it_1/body?exp=9&sig=1bc");
    assert_eq!(tamper("http://h/d/it_1/body?e=9&token=Qxyzxyz"), "http://h/d/it_1/body?e=9&token=0xyzxyz");
    assert_eq!(tamper("http://h/d/Xsignaturepart/body"), "http://h/d/0signaturepart/body");
}

#[tokio::test]
async fn bad_kind_is_400_with_the_exact_body() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let item_id = completed_fetch(&server, target.url("/page/1")).await;
    for kind in ["gif", "BODY", "log", "screenshots"] {
        let r = server.get(&format!("/artifacts/{item_id}/{kind}")).await;
        assert_eq!(r.status, 400, "{kind}: {r}");
        assert_eq!(r.json, json!({"error": "kind must be screenshot|html|body|meta"}), "{kind}: {r}");
    }
}

#[tokio::test]
async fn absent_kinds_and_unfinished_items_are_404_artifact_not_present() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let expected = json!({
        "error": "artifact not present",
        "reason": "job has no complete published artifact family for this kind",
    });
    let item_id = completed_fetch(&server, target.url("/page/1")).await;
    for kind in ["screenshot", "html"] {
        let r = server.get(&format!("/artifacts/{item_id}/{kind}")).await;
        assert_error(&r, 404, "artifact not present");
        assert_eq!(r.json, expected, "{kind}: {r}");
    }

    let batch_id = server.submit_fetch(&[target.url("/slow?ms=4000")]).await;
    let slow_id = server.batch(&batch_id).await["jobs"][0]["jobId"].as_str().unwrap().to_string();
    for kind in ["body", "meta"] {
        let r = server.get(&format!("/artifacts/{slow_id}/{kind}")).await;
        assert_error(&r, 404, "artifact not present");
        assert_eq!(r.json, expected, "unfinished item, {kind}: {r}");
    }
    assert_error(&server.get("/artifacts/it_01ARZ3NDEKTSV4RRFFQ69G5FAV/meta").await, 404, "unknown job");
}

#[tokio::test]
async fn signed_urls_download_without_credential() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let item_id = completed_fetch(&server, target.url("/page/17")).await;

    let body_url = server.artifact_url(&item_id, "body").await;
    assert!(body_url.starts_with(&server.base_url()), "{body_url} is not under {}", server.base_url());
    let body = server.download(&body_url).await;
    assert_eq!(body.status, 200, "{body}");
    assert_eq!(body.text, page_html("17"));
    // Downloads repeat within the validity window.
    assert_eq!(server.download(&body_url).await.text, page_html("17"));

    let meta_url = server.artifact_url(&item_id, "meta").await;
    assert_ne!(meta_url, body_url);
    let meta = server.download(&meta_url).await;
    assert_eq!(meta.status, 200, "{meta}");
    assert!(meta.json.is_object(), "meta is not a JSON object: {meta}");
    assert_ne!(meta.json["outcome"], json!("failure"), "{meta}");

    // The item's storage names are not download URLs.
    let item = server.item(&item_id).await;
    for (_, name) in item["artifacts"].as_object().unwrap() {
        let name = name.as_str().unwrap();
        assert!(!name.starts_with("http"), "storage name looks like a URL: {name}");
        let r = server.get_as(None, &format!("/{}", name.trim_start_matches('/'))).await;
        assert_ne!(r.status, 200, "storage name {name} downloads: {r}");
    }
}

#[tokio::test]
async fn tampered_signature_is_404() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let item_id = completed_fetch(&server, target.url("/page/3")).await;
    let url = server.artifact_url(&item_id, "body").await;
    let tampered = tamper(&url);
    assert_ne!(tampered, url);
    let r = server.download(&tampered).await;
    assert_eq!(r.status, 404, "tampered {tampered}: {r}");
    assert!(r.json["error"].is_string(), "not a JSON error: {r}");
    assert!(!r.text.contains("page 3"), "tampered URL leaked the file: {r}");
    // Pointing a valid signature at another kind fails as well.
    let other_kind = url.replacen("/body", "/meta", 1);
    if other_kind != url {
        let r = server.download(&other_kind).await;
        assert_eq!(r.status, 404, "signature reused for another kind: {r}");
    }
    // A credential does not rescue a bad signature.
    let r = server.get(&tampered).await;
    assert_eq!(r.status, 404, "{r}");
}

#[tokio::test]
async fn failed_item_publishes_meta_only() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let batch_id = server
        .submit_as(server.api_key(), &json!({"urls": [target.url("/page/1")], "script": "fetch", "params": {"x": 1}}))
        .await;
    let done = server.wait_batch_done(&batch_id, DONE).await;
    let item_id = done["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let item = server.item(&item_id).await;
    assert_eq!(item["state"], json!("failed"), "{item}");
    let kinds: Vec<&String> = item["artifacts"].as_object().map(|o| o.keys().collect()).unwrap_or_default();
    assert_eq!(kinds, ["meta"], "a failed item publishes meta only: {item}");
    let meta = server.download(&server.artifact_url(&item_id, "meta").await).await;
    assert_eq!(meta.status, 200, "{meta}");
    assert_eq!(meta.json["outcome"], json!("failure"), "{meta}");
    let r = server.get(&format!("/artifacts/{item_id}/body")).await;
    assert_error(&r, 404, "artifact not present");
}

#[tokio::test]
async fn a_large_body_is_stored_as_a_checked_file_and_downloads_intact() {
    // Above the 512 KiB the server keeps inline in its database.
    const LEN: usize = 3 * 1024 * 1024 + 17;
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let id = completed_fetch(&server, target.url(&format!("/bytes/{LEN}"))).await;
    let item = server.item(&id).await;
    let body_name = item["artifacts"]["body"].as_str().unwrap().to_string();
    assert!(item["artifacts"]["meta"].as_str().unwrap().starts_with("db:"), "small meta stays inline: {item}");
    let on_postgres = server.database().is_some();
    if on_postgres {
        // Any node serves any file: every file is in the database.
        assert!(body_name.starts_with("db:"), "on PostgreSQL a large body is in the database too: {item}");
    } else {
        assert!(!body_name.starts_with("db:"), "a large body is a file: {item}");
        assert!(server.data_dir().join("artifacts").join(&body_name).is_file(), "{body_name} on disk");
    }
    let url = server.get(&format!("/artifacts/{id}/body")).await.json["url"].as_str().unwrap().to_string();
    let bytes = grid_tests::http::http_client().get(&url).send().await.unwrap().bytes().await.unwrap();
    assert!(
        bytes.as_ref() == grid_tests::target::pattern_bytes(LEN).as_slice(),
        "downloaded body differs ({} bytes)",
        bytes.len()
    );
    // A changed file fails its check instead of being served.
    if on_postgres {
        server.stored().overwrite_artifact(&id, "body", b"tampered");
    } else {
        std::fs::write(server.data_dir().join("artifacts").join(&body_name), b"tampered").unwrap();
    }
    let r = grid_tests::http::Resp::read(grid_tests::http::http_client().get(&url)).await.unwrap();
    assert_eq!(r.status, 500, "{r}");
    // The meta is kept in the body's row (schema step 20; on SQLite beside
    // a body on disk): it downloads whole, and a changed meta fails its
    // check as a file of its own row does.
    let meta_url = server.artifact_url(&id, "meta").await;
    let meta = server.download(&meta_url).await;
    assert_eq!(meta.status, 200, "{meta}");
    assert!(meta.json.is_object(), "{meta}");
    server.stored().overwrite_artifact(&id, "meta", b"tampered");
    let r = server.download(&meta_url).await;
    assert_eq!(r.status, 500, "{r}");
}

/// Downloads of a file kept on disk stream it: many at once hold a chunk
/// each, not a copy of the file each (before streaming, a 31 MB file
/// downloaded 40 times at once held 40 copies). The clients read the headers
/// only, so every body is in flight while the server's memory is read; then
/// each body is read whole and checked.
#[tokio::test]
async fn concurrent_downloads_of_a_large_file_stream_it_instead_of_holding_copies() {
    use sha2::{Digest, Sha256};
    const LEN: usize = 24 * 1024 * 1024 + 5;
    const DOWNLOADS: usize = 12;
    /// Far below one copy of the file per download (288 MiB here).
    const MOST_GROWTH: u64 = 64 * 1024 * 1024;
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let id = completed_fetch(&server, target.url(&format!("/bytes/{LEN}"))).await;
    let expected_sha = hex::encode(Sha256::digest(grid_tests::target::pattern_bytes(LEN)));
    let item = server.item(&id).await;
    // On disk on SQLite; in the database on PostgreSQL, read out in slices.
    let in_db = item["artifacts"]["body"].as_str().unwrap().starts_with("db:");
    assert_eq!(in_db, server.database().is_some(), "{item}");
    let url = server.artifact_url(&id, "body").await;

    let before = server.rss_bytes();
    let client = grid_tests::http::http_client();
    let responses = futures_util::future::join_all((0..DOWNLOADS).map(|_| client.get(&url).send())).await;
    let mut responses: Vec<reqwest::Response> =
        responses.into_iter().map(|r| r.unwrap_or_else(|e| server.fail(&format!("GET {url}: {e}")))).collect();
    let during = server.rss_bytes();
    assert!(
        during.saturating_sub(before) < MOST_GROWTH,
        "{DOWNLOADS} open downloads of a {LEN}-byte file grew the server from {before} to {during} bytes resident"
    );

    for r in &mut responses {
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.headers()["content-length"].to_str().unwrap(), LEN.to_string(), "{:?}", r.headers());
        let mut sha = Sha256::new();
        let mut read = 0;
        while let Some(chunk) = r.chunk().await.unwrap_or_else(|e| server.fail(&format!("reading {url}: {e}"))) {
            read += chunk.len();
            sha.update(&chunk);
        }
        assert_eq!(read, LEN);
        assert_eq!(hex::encode(sha.finalize()), expected_sha);
    }
}

/// Every download carries `Content-Security-Policy: sandbox`,
/// `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`;
/// html and body are attachments with a file name (docs/captures.md).
#[tokio::test]
async fn downloads_carry_protective_headers_and_html_and_body_are_attachments() {
    const LARGE: usize = 600 * 1024;
    let target = Target::start();
    let server =
        GridServer::start(ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() });
    let fetched = completed_fetch(&server, target.url("/page/5")).await;
    let large = completed_fetch(&server, target.url(&format!("/bytes/{LARGE}"))).await;
    let batch_id =
        server.submit_as(server.api_key(), &json!({"urls": [target.url("/page/6")], "script": "render-fetch"})).await;
    let done = server.wait_batch_done(&batch_id, DONE).await;
    assert_eq!(done["counts"]["completed"], json!(1), "{done}");
    let rendered = done["jobs"][0]["jobId"].as_str().unwrap().to_string();

    let cases = [
        (&fetched, "body", Some(format!("attachment; filename=\"{fetched}-body.html\""))),
        (&large, "body", Some(format!("attachment; filename=\"{large}-body.bin\""))),
        (&rendered, "html", Some(format!("attachment; filename=\"{rendered}.html\""))),
        (&fetched, "meta", None),
        (&rendered, "meta", None),
    ];
    for (item, kind, disposition) in cases {
        let r = server.download(&server.artifact_url(item, kind).await).await;
        assert_eq!(r.status, 200, "{kind} of {item}: {r}");
        assert_eq!(r.header("content-security-policy"), Some("sandbox"), "{kind} of {item}: {:?}", r.headers);
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{kind} of {item}: {:?}", r.headers);
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{kind} of {item}: {:?}", r.headers);
        assert_eq!(r.header("content-disposition"), disposition.as_deref(), "{kind} of {item}: {:?}", r.headers);
    }
}
