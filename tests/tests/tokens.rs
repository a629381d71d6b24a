//! Sign-in tokens: JWTs made here with Ed25519 keys the test generates, and
//! a JWKS served on 127.0.0.1 that the test can rotate.
//!
//! Runs on: both stores, because tokens are store rows.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use grid_tests::http::{assert_error, http_client, Resp};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::wait::{wait_for, Within};

struct Key {
    kid: String,
    signing: ed25519_dalek::SigningKey,
}

impl Key {
    fn new(kid: &str, seed: u8) -> Key {
        Key { kid: kid.into(), signing: ed25519_dalek::SigningKey::from_bytes(&[seed; 32]) }
    }

    fn jwk(&self) -> Value {
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.signing.verifying_key().as_bytes());
        json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid, "alg": "EdDSA", "use": "sig"})
    }

    fn sign(&self, claims: &Value) -> String {
        let der = self.signing.to_pkcs8_der().expect("pkcs8");
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_der(der.as_bytes())).expect("sign")
    }
}

/// Serves `/jwks.json` from a document the test can change.
struct Jwks {
    port: u16,
    doc: Arc<Mutex<Value>>,
}

impl Jwks {
    async fn start(keys: &[&Key]) -> Jwks {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let doc = Arc::new(Mutex::new(json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()})));
        let served = doc.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else { return };
                let body = served.lock().unwrap().to_string();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(body.as_bytes()).await;
                });
            }
        });
        Jwks { port, doc }
    }

    fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}/issuer", self.port)
    }

    fn publish(&self, keys: &[&Key]) {
        *self.doc.lock().unwrap() = json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()});
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn claims(iss: &str, aud: &str, sub: &str, scope: &str, exp_in: i64) -> Value {
    json!({"iss": iss, "aud": aud, "sub": sub, "scope": scope, "exp": unix_now() + exp_in, "iat": unix_now()})
}

fn start(jwks: &Jwks) -> GridServer {
    GridServer::start(ServerOptions {
        auth_url: Some(jwks.issuer()),
        extra_args: vec!["--jwks-url".into(), format!("http://127.0.0.1:{}/jwks.json", jwks.port)],
        ..Default::default()
    })
}

async fn get_with_token(server: &GridServer, path: &str, token: &str) -> Resp {
    Resp::read(http_client().get(format!("{}{path}", server.base_url())).bearer_auth(token)).await.unwrap()
}

fn link(server: &GridServer, iss: &str, sub: &str, account: &str) {
    server.admin(&["identity", "link", "--issuer", iss, "--subject", sub, "--account", account]);
}

#[tokio::test]
async fn a_valid_token_acts_for_its_linked_account() {
    let key = Key::new("k1", 7);
    let jwks = Jwks::start(&[&key]).await;
    let server = start(&jwks);
    link(&server, &jwks.issuer(), "alice", server.account_id());
    let token = key.sign(&claims(&jwks.issuer(), &server.base_url(), "alice", "openid grid.invoke", 600));
    let r = get_with_token(&server, "/grid", &token).await;
    assert_eq!(r.status, 200, "{r}");
    // The token's account owns what it creates.
    let created = Resp::read(
        http_client()
            .post(format!("{}/batches", server.base_url()))
            .bearer_auth(&token)
            .json(&json!({"urls": ["http://127.0.0.1:9/x"], "script": "fetch"})),
    )
    .await
    .unwrap();
    assert_eq!(created.status, 201, "{created}");
    let seen = server.get(&format!("/batches/{}", created.json["batchId"].as_str().unwrap())).await;
    assert_eq!(seen.status, 200, "the key of the same account sees the batch: {seen}");
}

#[tokio::test]
async fn every_bad_token_is_refused_with_401() {
    let key = Key::new("k1", 7);
    let stranger = Key::new("k1", 9); // same kid, other key: bad signature
    let jwks = Jwks::start(&[&key]).await;
    let server = start(&jwks);
    link(&server, &jwks.issuer(), "alice", server.account_id());
    let (iss, aud) = (jwks.issuer(), server.base_url());
    let cases = [
        ("wrong audience", key.sign(&claims(&iss, "http://elsewhere.example", "alice", "grid.invoke", 600))),
        ("mcp audience on the API", key.sign(&claims(&iss, &format!("{aud}/mcp"), "alice", "grid.invoke", 600))),
        ("expired", key.sign(&claims(&iss, &aud, "alice", "grid.invoke", -3600))),
        ("wrong issuer", key.sign(&claims("http://127.0.0.1:1/other", &aud, "alice", "grid.invoke", 600))),
        ("missing scope", key.sign(&claims(&iss, &aud, "alice", "openid email", 600))),
        ("bad signature", stranger.sign(&claims(&iss, &aud, "alice", "grid.invoke", 600))),
        ("not a JWT", "abc.def.ghi".to_string()),
    ];
    for (what, token) in cases {
        let r = get_with_token(&server, "/grid", &token).await;
        assert_eq!((r.status, r.error()), (401, "unauthorized"), "{what}: {r}");
    }
}

#[tokio::test]
async fn an_unknown_key_id_refreshes_the_jwks() {
    let old = Key::new("old", 7);
    let new = Key::new("new", 8);
    let jwks = Jwks::start(&[&old]).await;
    let server = start(&jwks);
    link(&server, &jwks.issuer(), "alice", server.account_id());
    let token = new.sign(&claims(&jwks.issuer(), &server.base_url(), "alice", "grid.invoke", 600));
    let r = get_with_token(&server, "/grid", &token).await;
    assert_eq!((r.status, r.error()), (401, "unauthorized"), "unknown kid: {r}");
    jwks.publish(&[&old, &new]);
    // The server fetches the keys again when a token names a kid it does not
    // know (at most every 2 s).
    let within = Within::new(Duration::from_secs(15)).every(Duration::from_millis(500));
    wait_for("the rotated key accepted", within, || async {
        let r = get_with_token(&server, "/grid", &token).await;
        match r.status {
            200 => Ok(()),
            _ => Err(r.to_string()),
        }
    })
    .await;
}

#[tokio::test]
async fn a_valid_token_without_an_account_or_of_a_suspended_one_is_forbidden() {
    let key = Key::new("k1", 7);
    let jwks = Jwks::start(&[&key]).await;
    let server = start(&jwks);
    let token = key.sign(&claims(&jwks.issuer(), &server.base_url(), "nobody", "grid.invoke", 600));
    assert_error(&get_with_token(&server, "/grid", &token).await, 403, "forbidden");

    let (acc, _) = server.create_account("team", 1_000_000);
    link(&server, &jwks.issuer(), "bob", &acc);
    let bob = key.sign(&claims(&jwks.issuer(), &server.base_url(), "bob", "grid.invoke", 600));
    assert_eq!(get_with_token(&server, "/grid", &bob).await.status, 200);
    server.admin(&["account", "suspend", "--account", &acc]);
    assert_error(&get_with_token(&server, "/grid", &bob).await, 403, "forbidden");
}

#[tokio::test]
async fn mcp_takes_tokens_for_its_own_audience_only() {
    let key = Key::new("k1", 7);
    let jwks = Jwks::start(&[&key]).await;
    let server = start(&jwks);
    link(&server, &jwks.issuer(), "alice", server.account_id());
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let post = |token: String| {
        http_client()
            .post(format!("{}/mcp", server.base_url()))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(ping)
    };
    let mcp = key.sign(&claims(&jwks.issuer(), &format!("{}/mcp", server.base_url()), "alice", "grid.invoke", 600));
    let r = Resp::read(post(mcp)).await.unwrap();
    assert_eq!((r.status, r.json["result"].clone()), (200, json!({})), "{r}");
    let api = key.sign(&claims(&jwks.issuer(), &server.base_url(), "alice", "grid.invoke", 600));
    let r = Resp::read(post(api)).await.unwrap();
    assert_eq!(r.status, 401, "{r}");
    assert!(r.header("www-authenticate").is_some_and(|h| h.contains("resource_metadata=")), "{r}");
}

#[tokio::test]
async fn an_internal_key_of_a_suspended_account_reads_but_is_refused_billable_calls() {
    let server = GridServer::start(ServerOptions::default());
    let (acc, customer_key) = server.create_account("customer", 1_000_000);
    let internal = server.admin(&["key", "create", "--account", &acc, "--internal"]);
    let internal_key = internal["apiKey"].as_str().unwrap().to_string();
    server.admin(&["account", "suspend", "--account", &acc]);
    let body = json!({"urls": ["http://127.0.0.1:9/x"], "script": "fetch"});
    assert_error(&server.post_as(Some(&internal_key), "/batches", Some(&body)).await, 403, "account_suspended");
    assert_eq!(server.get_as(Some(&internal_key), "/grid").await.status, 200);
    // The customer's own key is refused earlier.
    assert_error(&server.get_as(Some(&customer_key), "/grid").await, 401, "unauthorized");
    assert_eq!(server.account_show(&acc)["reservedMicros"], 0, "nothing queued");
}
