//! The client against a scripted HTTP/1.1 server on a local port: what goes
//! on the wire, and how answers come back.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::*;

/// One request as the server saw it: head lines lower-cased, body as text.
#[derive(Debug)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A canned answer: status, extra headers, body.
type Answer = (u16, Vec<(&'static str, &'static str)>, String);

/// Serves `answers` in order, one connection each (`connection: close`), and
/// reports every request it read. Returns the base URL. An answer with
/// status 0 closes the connection without answering.
async fn serve(answers: Vec<Answer>) -> (String, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for (status, headers, body) in answers {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let head_end = loop {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i;
                }
                assert!(n > 0, "connection closed before the head ended");
            };
            let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
            let mut lines = head.split("\r\n");
            let request_line = lines.next().unwrap().to_string();
            let seen_headers: Vec<(String, String)> = lines
                .map(|l| {
                    let (n, v) = l.split_once(':').unwrap();
                    (n.trim().to_ascii_lowercase(), v.trim().to_string())
                })
                .collect();
            let length: usize =
                seen_headers.iter().find(|(n, _)| n == "content-length").map(|(_, v)| v.parse().unwrap()).unwrap_or(0);
            let mut request_body = buf[head_end + 4..].to_vec();
            while request_body.len() < length {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.unwrap();
                request_body.extend_from_slice(&chunk[..n]);
            }
            let request_body = String::from_utf8(request_body).unwrap();
            tx.send(Seen { request_line, headers: seen_headers, body: request_body }).unwrap();
            if status == 0 {
                drop(socket);
                continue;
            }
            let mut answer = format!("HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
            for (n, v) in headers {
                answer.push_str(&format!("{n}: {v}\r\n"));
            }
            answer.push_str("\r\n");
            answer.push_str(&body);
            socket.write_all(answer.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        }
    });
    (base, rx)
}

fn json_answer(status: u16, body: serde_json::Value) -> Answer {
    (status, vec![("content-type", "application/json")], body.to_string())
}

#[tokio::test]
async fn api_key_goes_only_where_the_contract_wants_it() {
    let (base, mut seen) = serve(vec![
        json_answer(200, json!({"status": "ok"})),
        json_answer(200, json!({"queue": {"wait": 1, "prioritized": 2, "delayed": 3}, "workers": 0, "sessions": 1, "maxSessions": 4})),
    ])
    .await;
    let client = GridClient::new(&base, "k-123").unwrap();

    assert_eq!(client.health().await.unwrap().status, "ok");
    let health = seen.recv().await.unwrap();
    assert_eq!(health.request_line, "GET /healthz HTTP/1.1");
    assert_eq!(health.header("x-api-key"), None);

    let grid = client.grid_status().await.unwrap();
    assert_eq!((grid.queue.prioritized, grid.max_sessions), (2, 4));
    let grid = seen.recv().await.unwrap();
    assert_eq!(grid.request_line, "GET /grid HTTP/1.1");
    assert_eq!(grid.header("x-api-key"), Some("k-123"));
    assert_eq!(grid.header("accept"), Some("application/json"));
    assert_eq!(grid.header("authorization"), None);
}

#[tokio::test]
async fn bearer_token_is_an_authorization_header() {
    let (base, mut seen) = serve(vec![json_answer(200, json!({"depth": 7}))]).await;
    let client = GridClient::with_bearer_token(&base, "tok").unwrap();
    assert_eq!(client.queue_depth().await.unwrap().depth, 7);
    let request = seen.recv().await.unwrap();
    assert_eq!(request.request_line, "GET /grid/queue-depth HTTP/1.1");
    assert_eq!(request.header("authorization"), Some("Bearer tok"));
    assert_eq!(request.header("x-api-key"), None);
}

#[tokio::test]
async fn submit_sends_the_batch_as_json() {
    let (base, mut seen) = serve(vec![json_answer(201, json!({"batchId": "b1", "jobCount": 2}))]).await;
    let client = GridClient::new(&base, "k").unwrap();
    let batch = NewBatch {
        urls: vec!["https://a.example/".into(), "https://b.example/".into()],
        script: Some("fetch".into()),
        ..NewBatch::default()
    };
    let created = client.submit_batch(&batch).await.unwrap();
    assert_eq!(created, BatchCreated { batch_id: "b1".into(), job_count: 2 });
    let request = seen.recv().await.unwrap();
    assert_eq!(request.request_line, "POST /batches HTTP/1.1");
    assert_eq!(request.header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(body, json!({"urls": ["https://a.example/", "https://b.example/"], "script": "fetch"}));
}

#[tokio::test]
async fn a_keyed_submission_is_resent_with_the_same_key_until_answered() {
    let created = json!({"batchId": "b1", "jobCount": 1});
    let (base, mut seen) = serve(vec![
        (0, vec![], String::new()),
        (503, vec![("retry-after", "0")], json!({"error": "accounting_unavailable"}).to_string()),
        (201, vec![("content-type", "application/json"), ("idempotent-replayed", "true")], created.to_string()),
    ])
    .await;
    let client = GridClient::new(&base, "k").unwrap();
    let batch = NewBatch { urls: vec!["https://a.example/".into()], ..NewBatch::default() };
    let reply = client.send_raw_resending(&endpoint::submit_batch(&batch).with_idempotency_key("key-1")).await.unwrap();
    assert_eq!(reply.status, 201);
    assert!(reply.replayed());
    assert_eq!(reply.decode::<BatchCreated>().unwrap().batch_id, "b1");
    for _ in 0..3 {
        let request = seen.recv().await.unwrap();
        assert_eq!(request.request_line, "POST /batches HTTP/1.1");
        assert_eq!(request.header("idempotency-key"), Some("key-1"));
        assert_eq!(request.body, r#"{"urls":["https://a.example/"]}"#);
    }
}

#[tokio::test]
async fn a_submission_without_key_is_sent_once_and_carries_no_key() {
    let (base, mut seen) = serve(vec![
        (0, vec![], String::new()),
        json_answer(201, json!({"sessionId": "s1", "cdpUrl": "http://h/cdp/s1/t", "expiresAt": "2030-01-01T00:00:00.000Z", "profileId": "desktop-browser-nl/v2", "attestation": null, "networkPolicy": null, "networkAttestation": null})),
    ])
    .await;
    let client = GridClient::new(&base, "k").unwrap();
    let e = client.send_raw_resending(&sessions::lease_session(&NewSession::default())).await.unwrap_err();
    assert!(matches!(e, ClientError::Transport(_)), "{e:?}");
    assert_eq!(seen.recv().await.unwrap().header("idempotency-key"), None);
    // The keyed helper sends its key; a first answer is not a replay.
    let lease = client.lease_session_with_key(&NewSession::default(), "key-2").await.unwrap();
    assert_eq!(lease.session_id, "s1");
    assert_eq!(seen.recv().await.unwrap().header("idempotency-key"), Some("key-2"));
}

#[tokio::test]
async fn a_key_a_header_cannot_carry_is_refused_before_sending() {
    let client = GridClient::new("http://127.0.0.1:9", "k").unwrap();
    let e = client.submit_batch_with_key(&NewBatch::default(), "bad\nkey").await.unwrap_err();
    assert!(matches!(e, ClientError::InvalidInput(_)), "{e:?}");
}

#[tokio::test]
async fn retry_posts_an_empty_body_to_the_encoded_path() {
    let (base, mut seen) = serve(vec![json_answer(200, json!({"jobId": "a/b", "state": "waiting"}))]).await;
    let client = GridClient::new(&base, "k").unwrap();
    let retried = client.retry_item("a/b").await.unwrap();
    assert_eq!(retried.state, grid_core::item::ItemState::Waiting);
    let request = seen.recv().await.unwrap();
    assert_eq!(request.request_line, "POST /jobs/a%2Fb/retry HTTP/1.1");
    assert_eq!(request.header("content-length"), Some("0"));
}

#[tokio::test]
async fn refusals_become_api_errors_with_retry_after() {
    let (base, _seen) = serve(vec![
        json_answer(404, json!({"error": "unknown batch"})),
        (503, vec![("retry-after", "7")], json!({"error": "accounting_unavailable"}).to_string()),
    ])
    .await;
    let client = GridClient::new(&base, "k").unwrap();
    let e = client.batch("nope").await.unwrap_err();
    assert!(e.is_not_found());
    assert_eq!(e.error_code(), Some("unknown batch"));
    let e = client.batch("nope").await.unwrap_err();
    assert_eq!((e.status(), e.retry_after()), (Some(503), Some(Duration::from_secs(7))));
    assert!(e.is_retryable());
}

#[tokio::test]
async fn an_unexpected_shape_is_a_decode_error() {
    let (base, _seen) = serve(vec![json_answer(200, json!({"depth": "many"}))]).await;
    let client = GridClient::new(&base, "k").unwrap();
    let e = client.queue_depth().await.unwrap_err();
    assert!(matches!(&e, ClientError::Decode { endpoint, .. } if endpoint == "GET /grid/queue-depth"), "{e:?}");
}

#[tokio::test]
async fn raw_reply_keeps_the_bytes() {
    let text = r#"{"depth":3,"extra":true}"#;
    let (base, _seen) = serve(vec![(200, vec![], text.to_string())]).await;
    let client = GridClient::new(&base, "k").unwrap();
    let reply = client.send_raw(&endpoint::queue_depth()).await.unwrap();
    assert_eq!(&reply.body[..], text.as_bytes());
    assert_eq!(reply.decode::<QueueDepth>().unwrap().depth, 3);
}

#[tokio::test]
async fn download_sends_no_credential() {
    let (base, mut seen) = serve(vec![
        (200, vec![("content-type", "image/png")], "PNGDATA".to_string()),
        json_answer(404, json!({"error": "download link invalid or expired"})),
    ])
    .await;
    let client = GridClient::new(&base, "k").unwrap();
    let url = format!("{base}/files/x?sig=abc");
    assert_eq!(&client.download(&url).await.unwrap()[..], b"PNGDATA");
    let request = seen.recv().await.unwrap();
    assert_eq!(request.request_line, "GET /files/x?sig=abc HTTP/1.1");
    assert_eq!(request.header("x-api-key"), None);
    assert_eq!(request.header("authorization"), None);
    let e = client.download(&url).await.unwrap_err();
    assert_eq!(e.to_string(), "404 download link invalid or expired");
}

#[tokio::test]
async fn wait_batch_polls_until_done_through_a_hiccup() {
    let view = |waiting: u32, completed: u32, failed: u32| {
        json_answer(
            200,
            json!({"batchId": "b", "counts": {"waiting": waiting, "active": 0, "completed": completed, "failed": failed}, "total": 2, "jobs": []}),
        )
    };
    let (base, _seen) = serve(vec![
        view(2, 0, 0),
        json_answer(503, json!({"error": "accounting_unavailable"})),
        view(1, 1, 0),
        view(0, 1, 1),
    ])
    .await;
    let client = GridClient::new(&base, "k").unwrap();
    let mut progress = Vec::new();
    let done = client
        .wait_batch("b", Duration::from_millis(1), |v| progress.push(v.counts.completed + v.counts.failed))
        .await
        .unwrap();
    assert!(done.is_done());
    assert_eq!(progress, vec![0, 1, 2]);
}

#[test]
fn bad_base_urls_are_refused() {
    for base in ["not a url", "ftp://h/", "http://h/?q=1", "mailto:x@y"] {
        let e = GridClient::anonymous(base).unwrap_err();
        assert!(matches!(e, ClientError::InvalidInput(_)), "{base}: {e:?}");
    }
    let e = GridClient::new("http://h", "bad\nkey").unwrap_err();
    assert!(matches!(e, ClientError::InvalidInput(_)));
}

#[test]
fn debug_output_hides_secrets() {
    let client = GridClient::new("http://h", "secret-key").unwrap();
    assert!(!format!("{client:?}").contains("secret-key"));
    let config = ClientConfig::new("http://h", Credential::BearerToken("secret-token".into()));
    assert!(!format!("{config:?}").contains("secret-token"));
}

/// A CA certificate (public part only) for the trust settings below.
const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBkzCCATmgAwIBAgIULMVeLDUFaOG18iWOA6iKGCZXE6owCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTZ3JpZC1jbGllbnQgdGVzdCBDQTAgFw0yNjExMjMxMjM2MTda
GA8yMTI2MTAzMDEyMzYxN1owHjEcMBoGA1UEAwwTZ3JpZC1jbGllbnQgdGVzdCBD
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABCW+pRnBTjJloYCn14pBZsgxR4u1
5HaUBc1CBgiYbqLS5ri3fuy7n0tmQwBkskMfmQE4X3oZhxOwQzVaqUeUPaqjUzBR
MB0GA1UdDgQWBBRiXmlAWXkV83zjytpks+yLprbtgzAfBgNVHSMEGDAWgBRiXmlA
WXkV83zjytpks+yLprbtgzAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gA
MEUCIQCCkAa9NZYwwKYCdKHvoWH2NRoErnI5PAtBGKj4yRHFWQIgKW01q0Cfsjrs
SBnjDECnAIz7Mpwh6peIYks8TCTMB7w=
-----END CERTIFICATE-----
";

#[test]
fn an_extra_ca_must_be_a_readable_pem_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let config = |file: &str| ClientConfig::new("https://h", Credential::None).with_ca_cert(dir.path().join(file));
    std::fs::write(dir.path().join("ca.pem"), TEST_CA_PEM).unwrap();
    std::fs::write(dir.path().join("empty.pem"), "").unwrap();
    assert!(GridClient::from_config(config("ca.pem")).is_ok());
    for (file, why) in [("missing.pem", "cannot read it"), ("empty.pem", "no certificate")] {
        match GridClient::from_config(config(file)) {
            Err(ClientError::InvalidInput(msg)) => {
                assert!(msg.contains(file) && msg.contains(why), "{file}: {msg}")
            }
            other => panic!("{file}: expected InvalidInput, got {other:?}"),
        }
    }
}
