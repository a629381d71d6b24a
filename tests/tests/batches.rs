//! POST /batches, GET /batches/{id}, GET /jobs/{itemId}: validation, views,
//! a full-size batch, outcomes of the fetch script, ownership.
//!
//! Runs on: both stores, because batches and items are store rows.

use std::time::Duration;

use serde_json::{json, Value};

use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{page_html, Target};

const DONE: Duration = Duration::from_secs(60);

fn job_ids(batch: &Value) -> Vec<String> {
    batch["jobs"]
        .as_array()
        .expect("jobs array")
        .iter()
        .map(|j| j["jobId"].as_str().expect("jobId").to_string())
        .collect()
}

/// The only job of a one-URL batch.
async fn single_item(server: &GridServer, body: &Value) -> String {
    let batch_id = server.submit_as(server.api_key(), body).await;
    let batch = server.batch(&batch_id).await;
    let ids = job_ids(&batch);
    assert_eq!(ids.len(), 1, "{batch}");
    ids[0].clone()
}

#[tokio::test]
async fn batch_of_1000_urls_reaches_done() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let urls: Vec<String> = (0..1000).map(|n| target.url(&format!("/page/{n}"))).collect();
    let r = server.post("/batches", &json!({"urls": urls, "script": "fetch"})).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.json["jobCount"], json!(1000), "{r}");
    let batch_id = r.json["batchId"].as_str().expect("batchId").to_string();

    let done = server.wait_batch_done(&batch_id, Duration::from_secs(300)).await;
    assert_eq!(done["batchId"], json!(batch_id));
    assert_eq!(done["total"], json!(1000));
    assert_eq!(
        done["counts"],
        json!({"waiting": 0, "active": 0, "completed": 1000, "failed": 0}),
        "{}",
        done["counts"]
    );
    let jobs = done["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1000);
    let ids = job_ids(&done);
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(ids, sorted, "jobs are not sorted by jobId, or repeat");
    let mut seen_urls: Vec<&str> = jobs.iter().map(|j| j["url"].as_str().unwrap()).collect();
    seen_urls.sort();
    let mut want: Vec<&str> = urls.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(seen_urls, want, "batch view urls differ from the submitted ones");
    assert!(jobs.iter().all(|j| j["state"] == "completed" && j.get("failedReason").is_none_or(Value::is_null)));
    for n in [0, 499, 999] {
        assert_eq!(target.hits(&format!("/page/{n}")), 1, "page {n} fetched other than once");
    }
    let depth = server.get("/grid/queue-depth").await;
    assert_eq!(depth.json, json!({"depth": 0}), "{depth}");
}

#[tokio::test]
async fn sdk_submits_waits_and_downloads() {
    use grid_core::catalog::ArtifactKind;
    use grid_core::wire::batch::NewBatch;

    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let client = server.client();
    let urls: Vec<String> = (0..5).map(|n| target.url(&format!("/page/{n}"))).collect();
    let created = client
        .submit_batch(&NewBatch { urls: urls.clone(), script: Some("fetch".into()), ..Default::default() })
        .await
        .unwrap_or_else(|e| server.fail(&format!("submit_batch: {e}")));
    assert_eq!(created.job_count, 5);
    let view = tokio::time::timeout(DONE, client.wait_batch(&created.batch_id, Duration::from_millis(100), |_| {}))
        .await
        .unwrap_or_else(|_| server.fail("wait_batch timed out"))
        .unwrap_or_else(|e| server.fail(&format!("wait_batch: {e}")));
    assert_eq!(view.counts.completed, 5, "{view:?}");
    let job = &view.jobs[0];
    let body = client
        .download_artifact(&job.job_id, ArtifactKind::Body)
        .await
        .unwrap_or_else(|e| server.fail(&format!("download_artifact: {e}")));
    let n = job.url.rsplit('/').next().unwrap();
    assert_eq!(String::from_utf8_lossy(&body), page_html(n));
}

#[tokio::test]
async fn batch_and_item_views_have_contract_fields() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let urls = vec![target.url("/page/1"), target.url("/page/2"), target.url("/page/3")];
    let batch_id = server.submit_fetch(&urls).await;

    let early = server.batch(&batch_id).await;
    assert_eq!(early["total"], json!(3), "{early}");
    for k in ["waiting", "active", "completed", "failed"] {
        assert!(early["counts"][k].is_u64(), "counts.{k}: {early}");
    }
    let done = server.wait_batch_done(&batch_id, DONE).await;
    assert_eq!(done["counts"]["completed"], json!(3), "{done}");
    for job in done["jobs"].as_array().unwrap() {
        let id = job["jobId"].as_str().unwrap();
        assert!(!id.starts_with("cj_"), "capture item id {id} starts with cj_");
        let item = server.item(id).await;
        assert_eq!(item["jobId"], json!(id), "{item}");
        assert_eq!(item["batchId"], json!(batch_id), "{item}");
        assert_eq!(item["url"], job["url"], "{item}");
        assert_eq!(item["state"], json!("completed"), "{item}");
        assert_eq!(item["attemptsMade"], json!(1), "{item}");
        assert_eq!(item["failedReason"], Value::Null, "{item}");
        let artifacts = item["artifacts"].as_object().unwrap_or_else(|| panic!("artifacts not an object: {item}"));
        let mut kinds: Vec<&str> = artifacts.keys().map(String::as_str).collect();
        kinds.sort();
        assert_eq!(kinds, ["body", "meta"], "fetch yields body and meta: {item}");
        assert!(artifacts.values().all(Value::is_string), "{item}");
    }
}

#[tokio::test]
async fn invalid_batch_bodies_are_400_with_detail() {
    let server = GridServer::start(ServerOptions::default());
    let ok_url = "http://127.0.0.1:9/page/1";
    let too_many: Vec<String> = (0..1001).map(|n| format!("http://127.0.0.1:9/page/{n}")).collect();
    let bodies = [
        json!({}),
        json!({"urls": []}),
        json!({"urls": too_many}),
        json!({"urls": ["not a url"]}),
        json!({"urls": ["/relative/path"]}),
        json!({"urls": "http://127.0.0.1:9/"}),
        json!({"urls": [ok_url], "script": "screenshot-everything"}),
        json!({"urls": [ok_url], "profileId": "desktop-browser-nl/v1"}),
        json!({"urls": [ok_url], "color": "blue"}),
        json!({"urls": [ok_url], "priority": 0}),
        json!({"urls": [ok_url], "priority": 1_000_001}),
        json!({"urls": [ok_url], "params": "timeoutMs=100"}),
    ];
    for body in &bodies {
        let r = server.post("/batches", body).await;
        assert_error(&r, 400, "invalid batch body");
        let detail = r.json["detail"].as_array().unwrap_or_else(|| panic!("no detail array for {body}: {r}"));
        assert!(!detail.is_empty(), "empty detail for {body}: {r}");
    }
    let acc = server.account_show(server.account_id());
    assert_eq!(acc["reservedMicros"], json!(0), "{acc}");
    let depth = server.get("/grid/queue-depth").await;
    assert_eq!(depth.json, json!({"depth": 0}), "{depth}");
}

#[tokio::test]
async fn valid_optional_fields_are_accepted() {
    let server = GridServer::start(ServerOptions::default());
    let url = "http://127.0.0.1:9/page/1";
    for body in [
        json!({"urls": [url], "script": "fetch", "params": {"timeoutMs": 1000}, "priority": 1}),
        json!({"urls": [url], "script": "fetch", "profileId": "native-headless-browser/v2", "priority": 1_000_000}),
        json!({"urls": [url], "script": "fetch", "profileId": "desktop-browser-nl/v2", "params": {}}),
    ] {
        let r = server.post("/batches", &body).await;
        assert_eq!(r.status, 201, "{body}: {r}");
        assert_eq!(r.json["jobCount"], json!(1), "{r}");
    }
}

#[tokio::test]
async fn unknown_batch_and_unknown_job_are_404() {
    let server = GridServer::start(ServerOptions::default());
    assert_error(&server.get("/batches/bt_01ARZ3NDEKTSV4RRFFQ69G5FAV").await, 404, "unknown batch");
    assert_error(&server.get("/jobs/it_01ARZ3NDEKTSV4RRFFQ69G5FAV").await, 404, "unknown job");
    assert_error(&server.post("/jobs/it_01ARZ3NDEKTSV4RRFFQ69G5FAV/retry", &json!({})).await, 404, "unknown job");
    assert_error(&server.get("/artifacts/it_01ARZ3NDEKTSV4RRFFQ69G5FAV/body").await, 404, "unknown job");
}

#[tokio::test]
async fn another_accounts_batch_and_items_are_404() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let batch_id = server.submit_fetch(&[target.url("/page/1")]).await;
    let done = server.wait_batch_done(&batch_id, DONE).await;
    let item_id = job_ids(&done)[0].clone();

    let (_other_account, other_key) = server.create_account("other", 1_000_000);
    let k = Some(other_key.as_str());
    assert_error(&server.get_as(k, &format!("/batches/{batch_id}")).await, 404, "unknown batch");
    assert_error(&server.get_as(k, &format!("/jobs/{item_id}")).await, 404, "unknown job");
    assert_error(&server.post_as(k, &format!("/jobs/{item_id}/retry"), None).await, 404, "unknown job");
    for kind in ["body", "meta"] {
        assert_error(&server.get_as(k, &format!("/artifacts/{item_id}/{kind}")).await, 404, "unknown job");
    }
    // And the other way round.
    let other_batch = server.submit_as(&other_key, &json!({"urls": [target.url("/page/2")], "script": "fetch"})).await;
    assert_error(&server.get(&format!("/batches/{other_batch}")).await, 404, "unknown batch");
    // The owner still sees its own.
    assert_eq!(server.get(&format!("/jobs/{item_id}")).await.status, 200);
}

#[tokio::test]
async fn non_2xx_http_statuses_complete_the_item_with_the_status_in_meta() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    for code in [404, 410, 400, 204] {
        let item_id =
            single_item(&server, &json!({"urls": [target.url(&format!("/status/{code}"))], "script": "fetch"})).await;
        let (item, _) = server.wait_item_final(&item_id, DONE).await;
        assert_eq!(item["state"], json!("completed"), "status {code}: {item}");
        assert_eq!(item["attemptsMade"], json!(1), "status {code} is not transient: {item}");
        let meta = server.download(&server.artifact_url(&item_id, "meta").await).await;
        assert_eq!(meta.status, 200, "{meta}");
        assert_ne!(meta.json["outcome"], json!("failure"), "{meta}");
        assert!(contains_number(&meta.json, code), "meta does not carry status {code}: {meta}");
    }
}

fn contains_number(v: &Value, n: u64) -> bool {
    match v {
        Value::Number(x) => x.as_u64() == Some(n),
        Value::Array(a) => a.iter().any(|x| contains_number(x, n)),
        Value::Object(o) => o.values().any(|x| contains_number(x, n)),
        _ => false,
    }
}

#[tokio::test]
async fn redirects_are_followed_and_the_final_body_published() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let url = target.url(&format!("/redirect?to={}", target.url("/page/42")));
    let item_id = single_item(&server, &json!({"urls": [url], "script": "fetch"})).await;
    let (item, _) = server.wait_item_final(&item_id, DONE).await;
    assert_eq!(item["state"], json!("completed"), "{item}");
    assert_eq!(target.hits("/page/42"), 1);
    let body = server.download(&server.artifact_url(&item_id, "body").await).await;
    assert_eq!(body.status, 200, "{body}");
    assert_eq!(body.text, page_html("42"));
}

#[tokio::test]
async fn unknown_param_fails_terminally_with_published_failure() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let item_id =
        single_item(&server, &json!({"urls": [target.url("/page/1")], "script": "fetch", "params": {"colour": "red"}}))
            .await;
    let (item, _) = server.wait_item_final(&item_id, DONE).await;
    assert_eq!(item["state"], json!("failed"), "{item}");
    assert_eq!(item["attemptsMade"], json!(1), "a bad param is not retried: {item}");
    let reason = item["failedReason"].as_str().unwrap_or_else(|| panic!("no failedReason: {item}"));
    assert!(reason.to_lowercase().contains("unknown param"), "{reason}");
    assert_eq!(target.hits("/page/1"), 0, "an item with bad params must not fetch");
    let meta = server.download(&server.artifact_url(&item_id, "meta").await).await;
    assert_eq!(meta.json["outcome"], json!("failure"), "{meta}");
    assert_error(
        &server.post(&format!("/jobs/{item_id}/retry"), &json!({})).await,
        409,
        "published terminal failures are immutable and cannot be retried",
    );
    // The batch view carries the reason too.
    let batch = server.batch(item["batchId"].as_str().unwrap()).await;
    assert_eq!(batch["counts"]["failed"], json!(1), "{batch}");
    assert!(batch["jobs"][0]["failedReason"].is_string(), "{batch}");
}

#[tokio::test]
async fn timeout_ms_out_of_range_fails_terminally() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    for timeout in [json!(99), json!(120_001), json!("1000"), json!(1.5)] {
        let item_id = single_item(
            &server,
            &json!({"urls": [target.url("/page/1")], "script": "fetch", "params": {"timeoutMs": timeout}}),
        )
        .await;
        let (item, _) = server.wait_item_final(&item_id, DONE).await;
        assert_eq!(item["state"], json!("failed"), "timeoutMs {timeout}: {item}");
        assert_error(
            &server.post(&format!("/jobs/{item_id}/retry"), &json!({})).await,
            409,
            "published terminal failures are immutable and cannot be retried",
        );
    }
    assert_eq!(target.hits("/page/1"), 0);
}

/// Browser scripts are accepted. Where the grid has no browser pool they fail
/// terminally (meta only, outcome failure, not retryable); where it has one
/// they complete with their script's file family.
#[tokio::test]
async fn browser_scripts_are_accepted_and_publish_their_family() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    for (script, family) in [
        ("capture", vec!["html", "meta", "screenshot"]),
        ("browser-fetch", vec!["body", "meta"]),
        ("render-fetch", vec!["html", "meta"]),
    ] {
        let item_id = single_item(&server, &json!({"urls": [target.url("/page/5")], "script": script})).await;
        let (item, _) = server.wait_item_final(&item_id, Duration::from_secs(120)).await;
        assert_eq!(item["script"], json!(script), "{item}");
        let mut kinds: Vec<&str> =
            item["artifacts"].as_object().expect("artifacts").keys().map(String::as_str).collect();
        kinds.sort();
        let meta = server.download(&server.artifact_url(&item_id, "meta").await).await;
        match item["state"].as_str() {
            Some("completed") => {
                assert_eq!(kinds, family, "{script}: {item}");
                assert_ne!(meta.json["outcome"], json!("failure"), "{script}: {meta}");
                assert_error(
                    &server.post(&format!("/jobs/{item_id}/retry"), &json!({})).await,
                    409,
                    "only failed jobs can be retried",
                );
            }
            _ => {
                assert_eq!(kinds, ["meta"], "{script}: a failed item publishes meta only: {item}");
                assert!(item["failedReason"].is_string(), "{script}: {item}");
                assert_eq!(meta.json["outcome"], json!("failure"), "{script}: {meta}");
                assert_error(
                    &server.post(&format!("/jobs/{item_id}/retry"), &json!({})).await,
                    409,
                    "published terminal failures are immutable and cannot be retried",
                );
            }
        }
    }
    // The default script is capture.
    let item_id = single_item(&server, &json!({"urls": [target.url("/page/6")]})).await;
    assert_eq!(server.item(&item_id).await["script"], json!("capture"));
}

#[tokio::test]
async fn private_destinations_are_refused_without_allow_flag() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions { allow_private_networks: false, ..Default::default() });
    let port = target.addr().port();
    for url in [target.url("/page/1"), format!("http://localhost:{port}/page/2")] {
        let item_id = single_item(&server, &json!({"urls": [url], "script": "fetch"})).await;
        let (item, _) = server.wait_item_final(&item_id, DONE).await;
        assert_eq!(item["state"], json!("failed"), "{url}: {item}");
        assert_eq!(item["attemptsMade"], json!(1), "a refused destination is not retried: {item}");
        let reason = item["failedReason"].as_str().unwrap_or_default().to_lowercase();
        assert!(reason.contains("refused"), "{url}: failedReason should say the destination is refused: {item}");
        let meta = server.download(&server.artifact_url(&item_id, "meta").await).await;
        assert_eq!(meta.json["outcome"], json!("failure"), "{meta}");
        assert_error(
            &server.post(&format!("/jobs/{item_id}/retry"), &json!({})).await,
            409,
            "published terminal failures are immutable and cannot be retried",
        );
    }
    assert_eq!(target.total_hits(), 0, "the guard let a request through");
}
