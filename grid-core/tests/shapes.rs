//! Each request's JSON Schema (`grid_core::shapes`) against its wire type
//! (what the SDK sends) and its validator (what the server accepts).
//!
//! Driven by the schema: every property, `required` entry, default, bound,
//! enum, length, pattern and `additionalProperties` the schema states is
//! tried on the validator, so a field or bound changed on one side only
//! fails here without editing this file. A keyword this file does not know
//! how to check fails it too, rather than passing unchecked.
//!
//! Starting point of every probe: a body with every field present (the wire
//! type fully populated, optional fields included), which the validator must
//! accept. One change is made at one place, and the validator must accept
//! it, or refuse it with a problem naming that place.
//!
//! Rules between members (a batch's params by its script, `quality` only
//! with a lossy `format`, one screenshot region of three, cookie attributes
//! that need `secure`) are read by `evaluate`, a JSON Schema evaluator of the
//! keywords the schemas use: every probe takes the schema's verdict on the
//! whole body, so a change allowed at its place but refused by such a rule
//! must be refused by the validator too. Where members exclude one another,
//! the full body takes one branch and the other branches are shapes of their
//! own (`CaptureParams(...)`); `capture_regions_exclude_one_another` proves
//! two together are refused. What no keyword can state is listed, said in
//! the schema's words and refused by the validator in
//! `what_the_schema_cannot_say_it_says_in_words_and_the_validator_refuses`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use grid_core::catalog::{Profile, Script, PUBLIC_WEB_ONLY_V1};
use grid_core::error::ApiError;
use grid_core::shapes;
use grid_core::validate::quantity::{format_bytes, format_cpu_millis, parse_bytes, parse_cpu_millis};
use grid_core::validate::{batch, job, list, params, session};
use grid_core::wire::batch::NewBatch;
use grid_core::wire::job::{NetworkProfile, NewCapabilities, NewJob, NewResources, QuantityBounds};
use grid_core::wire::session::{NewSession, NewSessionContext, NewViewport};
use proptest::prelude::*;
use regex::Regex;
use serde_json::{json, Map, Value};

/// One request: its schema, a body with every field, and its validator
/// (`Ok` carries the validated request, printed, so defaults can be
/// compared; `Err` the problems).
struct Shape {
    name: &'static str,
    schema: Value,
    full: Value,
    validate: fn(&Value) -> Result<String, Vec<String>>,
    /// Properties of the root the full body leaves out because the branch
    /// it takes excludes them (one branch of each exclusive group; the other
    /// branches are shapes of their own).
    absent: &'static [&'static str],
}

fn shapes() -> Vec<Shape> {
    vec![
        Shape {
            name: "NewBatch",
            schema: shapes::new_batch(),
            full: full_batch(),
            validate: validate_batch,
            absent: &[],
        },
        Shape { name: "NewJob", schema: shapes::new_job(), full: full_job(), validate: validate_job, absent: &[] },
        Shape {
            name: "NewSession",
            schema: shapes::new_session(),
            full: full_session(),
            validate: validate_session,
            absent: &[],
        },
        Shape {
            name: "JobListQuery",
            schema: shapes::job_list_query(),
            // No wire type: the SDK sends these as query parameters
            // (grid-client's `list_jobs` test holds it to this schema).
            full: json!({"limit": 10, "cursor": "c", "phase": "RUNNING", "label": {"team": "data"}}),
            validate: validate_list,
            absent: &[],
        },
        Shape {
            name: "AccountQuery",
            schema: shapes::account_query(),
            // No wire type: query parameters of GET /account.
            full: json!({"limit": 10, "cursor": "c", "kind": "charge"}),
            validate: validate_account,
            absent: &[],
        },
        Shape {
            name: "BatchListQuery",
            schema: shapes::batch_list_query(),
            // No wire type: query parameters of GET /batches.
            full: json!({"limit": 10, "cursor": "c"}),
            validate: validate_batch_list,
            absent: &[],
        },
        // A batch's `params`, one schema per script (no wire type: a map),
        // each with every parameter the script takes.
        Shape {
            name: "FetchParams",
            schema: shapes::script_params(Script::Fetch),
            full: json!({"timeoutMs": 5000}),
            validate: |p| validate_params(Script::Fetch, p),
            absent: &[],
        },
        // `capture` takes one of three exclusive screenshot regions: this
        // body the clip, the two below the selector and the whole page;
        // `capture_regions_exclude_one_another` proves two are refused.
        Shape {
            name: "CaptureParams",
            schema: shapes::script_params(Script::Capture),
            full: full_capture_params(json!({"fullPage": false, "clip": {"x": 0, "y": 0, "width": 1, "height": 1}})),
            validate: |p| validate_params(Script::Capture, p),
            absent: &["selector"],
        },
        Shape {
            name: "CaptureParams(selector)",
            schema: shapes::script_params(Script::Capture),
            full: full_capture_params(json!({"fullPage": false, "selector": "#main"})),
            validate: |p| validate_params(Script::Capture, p),
            absent: &["clip"],
        },
        Shape {
            name: "CaptureParams(fullPage)",
            schema: shapes::script_params(Script::Capture),
            full: full_capture_params(json!({"fullPage": true})),
            validate: |p| validate_params(Script::Capture, p),
            absent: &["clip", "selector"],
        },
        Shape {
            name: "RenderFetchParams",
            schema: shapes::script_params(Script::RenderFetch),
            full: full_browser_params(
                json!({"allowedHosts": ["a.example"], "viewport": viewport(), "waitFor": wait_for()}),
            ),
            validate: |p| validate_params(Script::RenderFetch, p),
            absent: &[],
        },
        Shape {
            name: "BrowserFetchParams",
            schema: shapes::script_params(Script::BrowserFetch),
            full: full_browser_params(json!({"allowedHosts": ["*.a.example"]})),
            validate: |p| validate_params(Script::BrowserFetch, p),
            absent: &[],
        },
    ]
}

/// The browser scripts' common parameters, each given, with `extra`.
/// Values sit where moving any one to its bound keeps the rules that tie
/// several together (image pixels, waits within timeoutMs, bytes in all).
fn full_browser_params(extra: Value) -> Value {
    let mut p = json!({
        "timeoutMs": 60000,
        "waitUntil": "networkidle",
        "javascriptEnabled": false,
        "userAgent": "Mozilla/5.0 (grid test)",
        "headers": {"X-Team": "data"},
        "cookies": [{"name": "sid", "value": "v", "domain": "a.example", "path": "/", "secure": true, "httpOnly": true, "sameSite": "Lax"}],
        "blockResourceTypes": ["image"]
    });
    for (k, v) in extra.as_object().expect("extra parameters").clone() {
        p[k] = v;
    }
    p
}

fn viewport() -> Value {
    json!({"width": 100, "height": 100, "deviceScaleFactor": 1, "mobile": true})
}

fn wait_for() -> Value {
    json!({"selector": "#ready", "networkIdleMs": 200, "delayMs": 10})
}

/// `capture`'s parameters with one screenshot region (`region`).
fn full_capture_params(region: Value) -> Value {
    let mut p = full_browser_params(json!({
        "viewport": viewport(),
        "waitFor": wait_for(),
        "format": "jpeg",
        "quality": 50,
        "hideSelectors": [".banner"]
    }));
    for (k, v) in region.as_object().expect("region").clone() {
        p[k] = v;
    }
    p
}

/// As a worker reads an item's params: problems come back as one string,
/// each naming `params.<field>`; the walk names fields from the params
/// object itself.
fn validate_params(script: Script, p: &Value) -> Result<String, Vec<String>> {
    let p = p.as_object().expect("params are an object");
    let out = match script {
        Script::Fetch => params::fetch(p).map(|x| format!("{x:?}")),
        _ => params::browser(script, p).map(|x| format!("{x:?}")),
    };
    out.map_err(|e| problems(&e).into_iter().map(|d| d.strip_prefix("params.").unwrap_or(&d).to_string()).collect())
}

/// The problems of a params refusal, one per parameter (they are joined
/// with "; ", which a problem about a header value may itself contain).
fn problems(joined: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for part in joined.split("; ") {
        match out.last_mut() {
            Some(last) if !part.starts_with("params.") => {
                last.push_str("; ");
                last.push_str(part);
            }
            _ => out.push(part.to_string()),
        }
    }
    out
}

// Struct literals without `..Default::default()`: a field added to a wire
// type does not compile here until it is given a value, and then its schema
// property is checked like the others.

fn full_batch() -> Value {
    let params = json!({"timeoutMs": 5000}).as_object().cloned();
    serde_json::to_value(NewBatch {
        urls: vec!["https://a.example/x".into()],
        script: Some("render-fetch".into()),
        profile_id: Some(Profile::NativeHeadlessBrowser.as_str().into()),
        params,
        priority: Some(7),
        context: Some("ctx_01ABC".into()),
        proxy: Some(grid_core::wire::proxy::NewProxy {
            server: "http://proxy.example:3128".into(),
            username: Some("u".into()),
            password: Some("p".into()),
        }),
    })
    .unwrap()
}

/// Requests at their minimum and limits at their maximum, so either may be
/// moved anywhere within its bounds without passing the other.
fn full_job() -> Value {
    serde_json::to_value(NewJob {
        image: "registry.example/team/tool:1.0".into(),
        command: vec!["run".into()],
        args: Some(vec!["--fast".into()]),
        resources: NewResources {
            cpu: QuantityBounds::new(format_cpu_millis(job::MIN_CPU_MILLIS), format_cpu_millis(job::MAX_CPU_MILLIS)),
            memory: QuantityBounds::new(format_bytes(job::MIN_MEMORY_BYTES), format_bytes(job::MAX_MEMORY_BYTES)),
            ephemeral_storage: QuantityBounds::new(
                format_bytes(job::MIN_EPHEMERAL_STORAGE_BYTES),
                format_bytes(job::MAX_EPHEMERAL_STORAGE_BYTES),
            ),
        },
        running_deadline_seconds: 60,
        retries: Some(1),
        priority: Some(5),
        capabilities: NewCapabilities { network_profile: NetworkProfile::PublicHttps.as_str().into() },
        env: [("MY_VAR".to_string(), "x".to_string())].into(),
        labels: [("team".to_string(), "data".to_string())].into(),
        idempotency_key: "k-1".into(),
    })
    .unwrap()
}

/// The viewport's sides and scale sit where moving any one to its bound
/// stays within the pixel bound, and `mobile` is false (the desktop
/// profile, one of `profileId`'s members, takes no mobile viewport).
fn full_session() -> Value {
    serde_json::to_value(NewSession {
        profile_id: Some(Profile::NativeHeadlessBrowser.as_str().into()),
        ttl_minutes: Some(60),
        network: Some(PUBLIC_WEB_ONLY_V1.into()),
        viewport: Some(NewViewport { width: 390, height: 844, device_scale_factor: Some(1.5), mobile: Some(false) }),
        user_agent: Some("Agent/1.0 (grid test)".into()),
        locale: Some("fr-CA".into()),
        timezone: Some("America/Toronto".into()),
        take_over: Some(true),
        recording: Some(true),
        context: Some(NewSessionContext { id: "ctx_01ABC".into(), persist: Some(true) }),
        proxy: Some(grid_core::wire::proxy::NewProxy {
            server: "socks5://proxy.example:1080".into(),
            username: Some("u".into()),
            password: Some("p".into()),
        }),
    })
    .unwrap()
}

/// As a batch and then its items check it: the body at submission, its
/// params when each item runs (the schema describes a batch whose items can
/// run).
fn validate_batch(body: &Value) -> Result<String, Vec<String>> {
    match batch::validate(body) {
        Ok(b) => match params::check(b.script, &b.params) {
            Ok(()) => Ok(format!("{b:?}")),
            Err(e) => Err(problems(&e)),
        },
        Err(ApiError::InvalidBatchBody { detail }) => Err(detail),
        Err(e) => panic!("batch validator answered {e:?}"),
    }
}

fn validate_job(body: &Value) -> Result<String, Vec<String>> {
    match job::validate(body) {
        Ok(j) => Ok(format!("{j:?}")),
        Err(ApiError::InvalidJobRequest { detail }) => Err(detail),
        Err(e) => panic!("job validator answered {e:?}"),
    }
}

fn validate_session(body: &Value) -> Result<String, Vec<String>> {
    match session::validate(body) {
        Ok(s) => Ok(format!("{s:?}")),
        Err(ApiError::InvalidSessionBody { detail }) => Err(detail),
        Err(e) => panic!("session validator answered {e:?}"),
    }
}

/// As the `list_jobs` tool runs it: JSON to query pairs, then the query.
fn validate_list(args: &Value) -> Result<String, Vec<String>> {
    let args = args.as_object().expect("list arguments are an object");
    match list::query_pairs(args).and_then(|pairs| list::list_query(&pairs)) {
        Ok(q) => Ok(format!("{q:?}")),
        Err(ApiError::InvalidListQuery { detail }) => Err(detail),
        Err(e) => panic!("list validator answered {e:?}"),
    }
}

/// As the `list_batches` tool runs it: JSON to query pairs, then the query.
fn validate_batch_list(args: &Value) -> Result<String, Vec<String>> {
    let args = args.as_object().expect("batch list arguments are an object");
    match list::batch_list_query_pairs(args).and_then(|pairs| list::batch_list_query(&pairs)) {
        Ok(q) => Ok(format!("{q:?}")),
        Err(ApiError::InvalidListQuery { detail }) => Err(detail),
        Err(e) => panic!("batch list validator answered {e:?}"),
    }
}

fn validate_account(args: &Value) -> Result<String, Vec<String>> {
    let args = args.as_object().expect("account arguments are an object");
    match list::account_query_pairs(args).and_then(|pairs| list::account_query(&pairs)) {
        Ok(q) => Ok(format!("{q:?}")),
        Err(ApiError::InvalidListQuery { detail }) => Err(detail),
        Err(e) => panic!("account validator answered {e:?}"),
    }
}

// ---- places in a body ----

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

type Path = Vec<Step>;

fn child(path: &Path, step: Step) -> Path {
    let mut p = path.clone();
    p.push(step);
    p
}

fn key(path: &Path, k: &str) -> Path {
    child(path, Step::Key(k.to_string()))
}

/// The field name the validators use: `resources.cpu.limit`, `urls[0]`.
fn field(path: &Path) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn at<'a>(body: &'a Value, path: &Path) -> &'a Value {
    path.iter().fold(body, |v, step| match step {
        Step::Key(k) => &v[k.as_str()],
        Step::Index(i) => &v[*i],
    })
}

fn at_mut<'a>(body: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(body, |v, step| match step {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

fn set(body: &Value, path: &Path, value: Value) -> Value {
    let mut b = body.clone();
    *at_mut(&mut b, path) = value;
    b
}

fn remove(body: &Value, path: &Path) -> Value {
    let mut b = body.clone();
    let (Some(Step::Key(k)), parent) = (path.last(), &path[..path.len() - 1]) else {
        panic!("remove needs a member path, got {path:?}");
    };
    at_mut(&mut b, parent).as_object_mut().expect("parent is an object").remove(k);
    b
}

// ---- verdicts ----

/// What the schema says of a whole body, by [`evaluate`]; `None` when it
/// cannot tell (a `format` only a parser can check).
struct Probe<'a> {
    shape: &'a Shape,
}

impl Probe<'_> {
    fn verdict(&self, body: &Value) -> Option<bool> {
        evaluate(&self.shape.schema, body)
    }

    /// The walk expects the schema to accept `body` (the change is within
    /// the rules at its place). The schema's verdict on the whole body
    /// decides: a rule elsewhere may refuse it (a parameter another one
    /// depends on), and then the validator must refuse it too. Returns the
    /// validated request when accepted.
    fn accepts(&self, body: &Value, why: &str) -> Option<String> {
        match self.verdict(body) {
            Some(false) => {
                self.refused_somewhere(body, why);
                None
            }
            _ => Some(self.validated(body, why)),
        }
    }

    /// The walk expects the schema to refuse `body` because of `path`: the
    /// schema must say so, and the validator refuse it naming `path`.
    fn refuses(&self, body: &Value, path: &Path, why: &str) {
        assert_eq!(
            self.verdict(body),
            Some(false),
            "{}: {why}: the walk expects the schema to refuse this, but it does not: {body}",
            self.shape.name
        );
        let name = field(path);
        match (self.shape.validate)(body) {
            Ok(_) => panic!("{}: {why}: the schema refuses it but the validator accepted it", self.shape.name),
            Err(detail) => assert!(
                detail.iter().any(|d| names(d, &name)),
                "{}: {why}: refused, but no problem names {name}: {detail:?}",
                self.shape.name
            ),
        }
    }

    fn validated(&self, body: &Value, why: &str) -> String {
        match (self.shape.validate)(body) {
            Ok(out) => out,
            Err(detail) => {
                panic!("{}: {why}: the schema allows it but the validator refused {detail:?}: {body}", self.shape.name)
            }
        }
    }

    fn refused_somewhere(&self, body: &Value, why: &str) {
        if let Ok(out) = (self.shape.validate)(body) {
            panic!("{}: {why}: the schema refuses it but the validator accepted it as {out}: {body}", self.shape.name)
        }
    }

    fn agrees(&self, body: &Value, path: &Path, schema_accepts: bool, why: &str) {
        if schema_accepts {
            self.accepts(body, why);
        } else {
            self.refuses(body, path, why);
        }
    }
}

// ---- the schema's own verdict ----

/// JSON Schema 2020-12 over the keywords the request schemas use: whether
/// `value` is valid against `schema`. `Some(true)` or `Some(false)` when
/// certain, `None` when only a `format` this test cannot parse is left to
/// decide. A keyword it does not know fails the test.
fn evaluate(schema: &Value, value: &Value) -> Option<bool> {
    let s = match schema {
        Value::Bool(b) => return Some(*b),
        Value::Object(s) => s,
        other => panic!("schema {other} is neither an object nor a boolean"),
    };
    let mut sure = true;
    // One keyword's verdict: false ends the evaluation, None is remembered.
    macro_rules! keyword {
        ($v:expr) => {
            match $v {
                Some(false) => return Some(false),
                None => sure = false,
                Some(true) => {}
            }
        };
    }
    for (k, v) in s {
        match k.as_str() {
            "type" => {
                let types: Vec<&str> = match v {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
                    other => panic!("type {other}"),
                };
                keyword!(Some(types.iter().any(|t| is_type(value, t))));
            }
            "enum" => keyword!(Some(v.as_array().unwrap().iter().any(|m| same(m, value)))),
            "const" => keyword!(Some(same(v, value))),
            "minimum" => keyword!(Some(value.as_f64().is_none_or(|n| n >= v.as_f64().unwrap()))),
            "maximum" => keyword!(Some(value.as_f64().is_none_or(|n| n <= v.as_f64().unwrap()))),
            "minLength" => {
                keyword!(Some(value.as_str().is_none_or(|t| t.chars().count() as u64 >= v.as_u64().unwrap())))
            }
            "maxLength" => {
                keyword!(Some(value.as_str().is_none_or(|t| t.chars().count() as u64 <= v.as_u64().unwrap())))
            }
            "pattern" => keyword!(Some(value.as_str().is_none_or(|t| regex(v.as_str().unwrap()).is_match(t)))),
            "format" => match (v.as_str().unwrap(), value.as_str()) {
                (_, None) => {}
                (f @ ("cpu-quantity" | "byte-quantity"), Some(t)) => {
                    let bound = |key: &str| quantity_value(f, s[key].as_str().unwrap()).unwrap();
                    keyword!(Some(
                        quantity_value(f, t).is_ok_and(|n| (bound("x-minimum")..=bound("x-maximum")).contains(&n))
                    ))
                }
                // A parser's question: the patterns beside them say what a
                // pattern can.
                ("uri" | "ipv6-literal", Some(_)) => sure = false,
                (other, _) => panic!("format {other} is not checked by this test"),
            },
            "minItems" => keyword!(Some(value.as_array().is_none_or(|a| a.len() as u64 >= v.as_u64().unwrap()))),
            "maxItems" => keyword!(Some(value.as_array().is_none_or(|a| a.len() as u64 <= v.as_u64().unwrap()))),
            "uniqueItems" => {
                if let (Some(true), Some(items)) = (v.as_bool(), value.as_array()) {
                    let distinct = items.iter().enumerate().all(|(i, a)| items[..i].iter().all(|b| !same(a, b)));
                    keyword!(Some(distinct));
                }
            }
            "items" => {
                for item in value.as_array().into_iter().flatten() {
                    keyword!(evaluate(v, item));
                }
            }
            "minProperties" => keyword!(Some(value.as_object().is_none_or(|o| o.len() as u64 >= v.as_u64().unwrap()))),
            "maxProperties" => keyword!(Some(value.as_object().is_none_or(|o| o.len() as u64 <= v.as_u64().unwrap()))),
            "required" => {
                if let Some(o) = value.as_object() {
                    keyword!(Some(v.as_array().unwrap().iter().all(|r| o.contains_key(r.as_str().unwrap()))));
                }
            }
            "properties" => {
                for (name, member) in value.as_object().into_iter().flatten() {
                    if let Some(sub) = v.get(name) {
                        keyword!(evaluate(sub, member));
                    }
                }
            }
            "additionalProperties" => {
                let props = s.get("properties").and_then(Value::as_object);
                for (name, member) in value.as_object().into_iter().flatten() {
                    if !props.is_some_and(|p| p.contains_key(name)) {
                        keyword!(evaluate(v, member));
                    }
                }
            }
            "propertyNames" => {
                for name in value.as_object().into_iter().flatten().map(|(k, _)| k) {
                    keyword!(evaluate(v, &json!(name)));
                }
            }
            "dependentSchemas" => {
                if let Some(o) = value.as_object() {
                    for (name, sub) in v.as_object().unwrap() {
                        if o.contains_key(name) {
                            keyword!(evaluate(sub, value));
                        }
                    }
                }
            }
            "allOf" => {
                for sub in v.as_array().unwrap() {
                    keyword!(evaluate(sub, value));
                }
            }
            "anyOf" => {
                let each: Vec<Option<bool>> = v.as_array().unwrap().iter().map(|sub| evaluate(sub, value)).collect();
                keyword!(if each.contains(&Some(true)) {
                    Some(true)
                } else if each.iter().all(|e| *e == Some(false)) {
                    Some(false)
                } else {
                    None
                });
            }
            "oneOf" => {
                let each: Vec<Option<bool>> = v.as_array().unwrap().iter().map(|sub| evaluate(sub, value)).collect();
                let fits = each.iter().filter(|e| **e == Some(true)).count();
                keyword!(if each.contains(&None) { None } else { Some(fits == 1) });
            }
            "not" => keyword!(evaluate(v, value).map(|b| !b)),
            "if" => {
                let branch = match evaluate(v, value) {
                    Some(true) => s.get("then"),
                    Some(false) => s.get("else"),
                    None => panic!("an if that cannot be decided: {v}"),
                };
                if let Some(b) = branch {
                    keyword!(evaluate(b, value));
                }
            }
            // Annotations, and keywords read with another.
            "then" | "else" | "x-minimum" | "x-maximum" | "default" | "description" | "title" => {}
            other => panic!("keyword {other} is not checked by this test; teach evaluate"),
        }
    }
    sure.then_some(true)
}

fn is_type(value: &Value, t: &str) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        // JSON Schema: a number with a zero fractional part is an integer.
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        other => panic!("type {other}"),
    }
}

/// JSON Schema's equality: numbers by value (1 equals 1.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
        }
        _ => a == b,
    }
}

/// A problem is about `field` when it starts with it, followed by the end of
/// the name (`urls: ...`) or a step into it (`urls[3]: ...`, `env.X: ...`).
fn names(problem: &str, field: &str) -> bool {
    problem.strip_prefix(field).is_some_and(|rest| rest.starts_with([':', '.', '[']))
}

// ---- the schema side ----

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "items",
    "minItems",
    "maxItems",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "x-minimum",
    "x-maximum",
    "default",
    "description",
    "anyOf",
    "uniqueItems",
    "title",
    // Rules between members, which only `evaluate` reads: every probe asks
    // it for the schema's verdict on the whole body.
    "dependentSchemas",
    "allOf",
];

/// A pattern compiled once per thread (the probes ask for the same few
/// thousands of times).
fn regex(pattern: &str) -> Regex {
    thread_local! {
        static COMPILED: std::cell::RefCell<std::collections::HashMap<String, Regex>> = Default::default();
    }
    COMPILED.with(|c| {
        c.borrow_mut()
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(pattern).unwrap_or_else(|e| panic!("pattern {pattern:?}: {e}")))
            .clone()
    })
}

fn quantity_value(format: &str, s: &str) -> Result<u64, String> {
    match format {
        "cpu-quantity" => parse_cpu_millis(s),
        "byte-quantity" => parse_bytes(s),
        other => panic!("format {other} is not a quantity"),
    }
}

fn quantity_string(format: &str, n: u64) -> String {
    match format {
        "cpu-quantity" => format_cpu_millis(n),
        "byte-quantity" => format_bytes(n),
        other => panic!("format {other} is not a quantity"),
    }
}

/// Where a string goes: a value at `path`, or a member name of the object
/// at `path` (its `propertyNames`).
#[derive(Clone, Debug)]
enum Site {
    Value { path: Path, node: Value },
    Name { path: Path, node: Value },
}

/// Walks one schema node against the full body's value at `path`, probing
/// every keyword, and collects the places where strings are checked.
fn walk(probe: &Probe, node: &Value, path: &Path, sites: &mut Vec<Site>) {
    let shape = probe.shape;
    let full = &shape.full;
    let n = node.as_object().unwrap_or_else(|| panic!("{}: schema of {path:?} is not an object", shape.name));
    for k in n.keys() {
        assert!(KEYWORDS.contains(&k.as_str()), "{}: keyword {k} at {path:?} is not checked by this test", shape.name);
    }
    let here = at(full, path);
    let f = field(path);
    assert!(!here.is_null(), "{}: the full body has nothing at {f}", shape.name);
    let ty = n.get("type").and_then(Value::as_str);

    if !path.is_empty() {
        let wrong: &[Value] = match ty {
            Some("string") => &[json!(7), json!(true), Value::Null],
            Some("integer") => &[json!("7"), json!(1.5), Value::Null],
            Some("array") => &[json!("x"), json!({}), Value::Null],
            Some("object") => &[json!([]), json!("x"), Value::Null],
            Some("boolean") => &[json!("true"), json!(1), Value::Null],
            Some("number") => &[json!("7"), json!(true), Value::Null],
            other => panic!("{}: type {other:?} at {f}", shape.name),
        };
        for w in wrong {
            probe.refuses(&set(full, path, w.clone()), path, &format!("{f} = {w} (not {})", ty.unwrap()));
        }
    }

    if let Some(members) = n.get("enum") {
        for m in members.as_array().unwrap() {
            probe.accepts(&set(full, path, m.clone()), &format!("{f} = {m} (a member of its enum)"));
        }
        probe.refuses(&set(full, path, json!("not-a-member")), path, &format!("{f} outside its enum"));
    }

    for (bound, step) in [("minimum", -1i64), ("maximum", 1)] {
        match (n.get(bound), ty) {
            (Some(b), Some("integer")) => {
                let b = b.as_i64().unwrap();
                probe.accepts(&set(full, path, json!(b)), &format!("{f} = its {bound} {b}"));
                probe.accepts(&set(full, path, json!(b as f64)), &format!("{f} = its {bound} written {:?}", b as f64));
                probe.refuses(
                    &set(full, path, json!(b + step)),
                    path,
                    &format!("{f} = {} beyond its {bound}", b + step),
                );
            }
            (Some(b), Some("number")) => {
                let b = b.as_f64().unwrap();
                let beyond = b + step as f64 / 1000.0;
                probe.accepts(&set(full, path, json!(b)), &format!("{f} = its {bound} {b}"));
                probe.refuses(&set(full, path, json!(beyond)), path, &format!("{f} = {beyond} beyond its {bound}"));
            }
            (Some(_), other) => panic!("{}: {bound} on type {other:?} at {f}", shape.name),
            (None, _) => {}
        }
    }

    if let Some(format) = n.get("format").and_then(Value::as_str).filter(|f| f.ends_with("-quantity")) {
        let min = quantity_value(format, n["x-minimum"].as_str().unwrap()).unwrap();
        let max = quantity_value(format, n["x-maximum"].as_str().unwrap()).unwrap();
        for (q, ok) in [(min, true), (max, true), (min - 1, false), (max + 1, false)] {
            let s = quantity_string(format, q);
            probe.agrees(&set(full, path, json!(s)), path, ok, &format!("{f} = {s:?} (bounds {min}..={max})"));
        }
    }

    if ty == Some("string") {
        let c = here.as_str().unwrap().chars().next().unwrap();
        if let Some(min) = n.get("minLength").and_then(Value::as_u64) {
            let min = min as usize;
            probe.accepts(&set(full, path, json!(c.to_string().repeat(min))), &format!("{f} of minLength {min}"));
            if min > 0 {
                let short = c.to_string().repeat(min - 1);
                probe.refuses(&set(full, path, json!(short)), path, &format!("{f} shorter than minLength {min}"));
            }
        }
        if let Some(max) = n.get("maxLength").and_then(Value::as_u64) {
            let max = max as usize;
            probe.accepts(&set(full, path, json!(c.to_string().repeat(max))), &format!("{f} of maxLength {max}"));
            if n.get("pattern").is_none() {
                // Lengths count characters, as JSON Schema does, not bytes.
                let wide = "é".repeat(max);
                probe.accepts(&set(full, path, json!(wide)), &format!("{f} of maxLength {max} two-byte characters"));
            }
            let long = c.to_string().repeat(max + 1);
            probe.refuses(&set(full, path, json!(long)), path, &format!("{f} longer than maxLength {max}"));
        }
        if n.contains_key("pattern") || n.contains_key("anyOf") {
            sites.push(Site::Value { path: path.clone(), node: node.clone() });
        }
    }

    if ty == Some("array") {
        let item = here.as_array().unwrap().first().expect("the full body's arrays hold an item").clone();
        let many = |count: u64| Value::Array(vec![item.clone(); count as usize]);
        if let Some(min) = n.get("minItems").and_then(Value::as_u64) {
            probe.accepts(&set(full, path, many(min)), &format!("{f} with minItems {min}"));
            if min > 0 {
                probe.refuses(&set(full, path, many(min - 1)), path, &format!("{f} below minItems {min}"));
            }
        }
        if let Some(max) = n.get("maxItems").and_then(Value::as_u64) {
            probe.accepts(&set(full, path, many(max)), &format!("{f} with maxItems {max}"));
            probe.refuses(&set(full, path, many(max + 1)), path, &format!("{f} above maxItems {max}"));
        }
        if n.get("uniqueItems") == Some(&json!(true)) {
            probe.refuses(&set(full, path, many(2)), path, &format!("{f} with an item twice (uniqueItems)"));
        }
        if let Some(items) = n.get("items") {
            walk(probe, items, &child(path, Step::Index(0)), sites);
        }
    }

    if ty == Some("object") || path.is_empty() {
        object(probe, n, path, sites);
    }
}

fn object(probe: &Probe, n: &Map<String, Value>, path: &Path, sites: &mut Vec<Site>) {
    let shape = probe.shape;
    let full = &shape.full;
    let here = at(full, path).as_object().expect("an object in the full body");
    let f = field(path);

    if let Some(props) = n.get("properties").and_then(Value::as_object) {
        // (a) The schema's properties are the wire type's fields, and the
        // members the validator knows (a member only it knows would be
        // accepted without the schema saying so).
        let schema_names: BTreeSet<&str> = props.keys().map(String::as_str).collect();
        // Left out of the full body: those its branch excludes, each of
        // which the schema and the validator refuse beside it.
        let absent: &[&str] = if path.is_empty() { shape.absent } else { &[] };
        for a in absent {
            let p = key(path, a);
            let with = set(full, &p, example(&props[*a]));
            assert_eq!(
                probe.verdict(&with),
                Some(false),
                "{}: {a} is not excluded by the full body's branch",
                shape.name
            );
            probe.refused_somewhere(&with, &format!("{a} beside the full body's branch"));
        }
        let wire_names: BTreeSet<&str> = here.keys().map(String::as_str).chain(absent.iter().copied()).collect();
        assert_eq!(schema_names, wire_names, "{}: properties of {f:?} against the wire type's fields", shape.name);
        let known: BTreeSet<&str> = validator_fields(shape.name, path).iter().copied().collect();
        assert_eq!(schema_names, known, "{}: properties of {f:?} against the validator's members", shape.name);
        let required: BTreeSet<&str> =
            n["required"].as_array().expect("required is listed").iter().map(|r| r.as_str().unwrap()).collect();
        for r in &required {
            assert!(props.contains_key(*r), "{}: required {r} is not a property of {f:?}", shape.name);
        }
        for (k, sub) in props.iter().filter(|(k, _)| !absent.contains(&k.as_str())) {
            let p = key(path, k);
            let without = remove(full, &p);
            if required.contains(k.as_str()) {
                assert!(sub.get("default").is_none(), "{}: required {k} has a default", shape.name);
                probe.refuses(&without, &p, &format!("{} left out (required)", field(&p)));
            } else {
                let left_out = probe.accepts(&without, &format!("{} left out (optional)", field(&p)));
                if let Some(d) = sub.get("default") {
                    let spelled = probe.accepts(&set(full, &p, d.clone()), &format!("{} = its default", field(&p)));
                    // (Another member may need it not to be its default,
                    // such as quality a lossy format: then both are refused.)
                    assert_eq!(left_out, spelled, "{}: {} left out is not its default {d}", shape.name, field(&p));
                }
            }
            walk(probe, sub, &p, sites);
        }
    }

    let unknown = key(path, "unexpectedField");
    match n.get("additionalProperties") {
        Some(Value::Bool(false)) => {
            probe.refuses(&set(full, &unknown, json!("x")), &unknown, &format!("an unknown member of {f:?}"))
        }
        Some(Value::Bool(true)) | None => {
            probe.accepts(&set(full, &unknown, json!("x")), &format!("any member of {f:?} (no additionalProperties)"));
        }
        Some(members) => {
            let (k, _) = here.iter().next().expect("the full body's maps hold a member");
            walk(probe, members, &key(path, k), sites);
        }
    }

    if let Some(names) = n.get("propertyNames") {
        sites.push(Site::Name { path: path.clone(), node: names.clone() });
    }

    let (k0, v0) = here.iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap_or_default();
    // A map takes new members; a closed object only fewer of its own.
    let closed = n.get("additionalProperties") == Some(&json!(false));
    let map = |count: u64| -> Value {
        if closed {
            here.iter().take(count as usize).map(|(k, v)| (k.clone(), v.clone())).collect::<Map<_, _>>().into()
        } else {
            (0..count).map(|i| (format!("{k0}{i}"), v0.clone())).collect::<Map<_, _>>().into()
        }
    };
    assert!(!closed || n.get("maxProperties").is_none(), "{}: maxProperties on a closed object at {f}", shape.name);
    if let Some(min) = n.get("minProperties").and_then(Value::as_u64) {
        probe.accepts(&set(full, path, map(min)), &format!("{f} with minProperties {min}"));
        if min > 0 {
            probe.refuses(&set(full, path, map(min - 1)), path, &format!("{f} below minProperties {min}"));
        }
    }
    if let Some(max) = n.get("maxProperties").and_then(Value::as_u64) {
        probe.accepts(&set(full, path, map(max)), &format!("{f} with maxProperties {max}"));
        probe.refuses(&set(full, path, map(max + 1)), path, &format!("{f} above maxProperties {max}"));
    }
}

/// The members the validator lets an object at `path` have.
fn validator_fields(shape: &str, path: &Path) -> &'static [&'static str] {
    let keys: Vec<&str> = path
        .iter()
        .map(|s| match s {
            Step::Key(k) => k.as_str(),
            Step::Index(_) => "[]",
        })
        .collect();
    match (shape, keys.as_slice()) {
        ("NewBatch", []) => batch::FIELDS,
        ("NewBatch", ["proxy"]) => grid_core::validate::proxy::FIELDS,
        ("NewJob", []) => job::FIELDS,
        ("NewJob", ["resources"]) => job::RESOURCES_FIELDS,
        ("NewJob", ["resources", _]) => job::BOUNDS_FIELDS,
        ("NewJob", ["capabilities"]) => job::CAPABILITIES_FIELDS,
        ("NewSession", []) => session::FIELDS,
        ("NewSession", ["viewport"]) => session::VIEWPORT_FIELDS,
        ("NewSession", ["context"]) => session::CONTEXT_FIELDS,
        ("NewSession", ["proxy"]) => grid_core::validate::proxy::FIELDS,
        ("JobListQuery", []) => list::PARAMETERS,
        ("AccountQuery", []) => list::ACCOUNT_PARAMETERS,
        ("BatchListQuery", []) => list::BATCH_PARAMETERS,
        (params_shape, rest) if params_shape.ends_with("Params") || params_shape.contains("Params(") => {
            let script = match params_shape.split('(').next().unwrap_or_default() {
                "FetchParams" => Script::Fetch,
                "CaptureParams" => Script::Capture,
                "RenderFetchParams" => Script::RenderFetch,
                "BrowserFetchParams" => Script::BrowserFetch,
                other => panic!("which script has the shape {other}?"),
            };
            match rest {
                [] => params::names(script).leak(),
                ["viewport"] => params::VIEWPORT_FIELDS,
                ["clip"] => params::CLIP_FIELDS,
                ["waitFor"] => params::WAIT_FOR_FIELDS,
                ["cookies", "[]"] => params::COOKIE_FIELDS,
                _ => panic!("{shape}: which validator list holds the members of {path:?}? Add it here"),
            }
        }
        _ => panic!("{shape}: which validator list holds the members of {path:?}? Add it here"),
    }
}

/// Puts `s` at a site and compares the validator with the schema's verdict
/// on the whole body (a string may be fine at its place and still break a
/// rule between members, such as a `__Host-` cookie name with a domain).
fn try_string(probe: &Probe, site: &Site, s: &str) {
    let full = &probe.shape.full;
    let (body, path, node, what) = match site {
        Site::Value { path, node } => (set(full, path, json!(s)), path, node, "value"),
        Site::Name { path, node } => {
            let first = at(full, path).as_object().unwrap().values().next().unwrap().clone();
            (set(full, path, json!({ s: first })), path, node, "member name")
        }
    };
    let why = format!("{what} {s:?} at {}", field(path));
    match (probe.verdict(&body), evaluate(node, &json!(s))) {
        (None, _) => {}
        (Some(true), _) => {
            probe.validated(&body, &why);
        }
        (Some(false), Some(false)) => probe.refuses(&body, path, &why),
        (Some(false), _) => probe.refused_somewhere(&body, &why),
    }
}

/// A value the schema `node` describes, for a member the full body leaves
/// out.
fn example(node: &Value) -> Value {
    match node["type"].as_str() {
        Some("boolean") => json!(true),
        Some("string") => json!("#x"),
        Some("object") => {
            let required = node["required"].as_array().cloned().unwrap_or_default();
            required
                .iter()
                .map(|r| (r.as_str().unwrap().to_string(), example(&node["properties"][r.as_str().unwrap()])))
                .collect::<Map<_, _>>()
                .into()
        }
        Some("number") | Some("integer") => node["minimum"].clone(),
        other => panic!("no example of type {other:?}"),
    }
}

/// Strings tried at every site: near each rule's edges (env names and
/// reserved ones, labels, quantities in every spelling the grammar has,
/// URLs) and a few that are nothing in particular.
#[rustfmt::skip]
fn corpus() -> Vec<String> {
    let mut c: Vec<String> = [
        "", " ", "a", "A", "_", "0", "1", "-", ".", "é", "a b", "a\u{0}b", "\u{0}", "\t", "x\n",
        // names and labels
        "MY_VAR", "_X", "V2", "1ABC", "my_var", "A-B", "AWS", "AWS_REGION", "MY_AWS_X", "AZURE_X", "GRID",
        "GRID_TOKEN", "GRIDX", "COMPUTE_X", "GOOGLE_X", "HOME", "HOME_DIR", "HOSTNAME", "PATH", "PATHS",
        "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "team", "Team", "a.b", "a-b", "a_b", "-a", "a-",
        "a.", ".a", "v1.2", "a..b",
        // quantities
        "250m", "249m", "0.25", ".25", "0.249", "1.", "1.0", "1.0m", "250.0m", "250.m", ".5m", "0.5m", "1m", "m",
        "8", "8.", "8.0", "8000m", "8001m", "8.001", "1e3", "+1", "-1", "-250m", "1 ", " 1", "0x10", "1,5",
        "256Mi", "255Mi", "256Mi ", "268435456", "268435455", "1Gi", "1.Gi", ".5Gi", "1.5Gi", "16Gi", "17Gi",
        "32Gi", "33Gi", "1G", "1GB", "1gi", "1Ki", "1K", "1k", "1Ei", "16Ei", "1Zi", "Gi", "0.5", "00000256Mi",
        // URLs
        // allowedHosts entries
        "[::1]", "[1:2]", "[zz]", "[]", "*.a.example", "*.", "*.*.a", "*a.example", "a.example:80", "127.0.0.1",
        "http://a.example/", "https://a.example/x?y#z", "HTTPS://A.EXAMPLE", "Http://a.example",
        "http:a.example", "http://", "http:///a.example", "ftp://a.example/", "a.example", "//a.example/x",
        " http://a.example/", "http://a.example/ ", "\thttp://a.example/", "mailto:x@a.example",
        "javascript:alert(1)", "file:///etc/passwd", "HTTP:", "http:0", "http:\\\\a.example", "http:?x", "http:#",
        "http://@a", "http://:80/",
        // selectors, user agents, header and cookie names and values, paths
        "#main", ".a > b", "\u{a0}", "\u{3000}", "a\u{3000}", "\u{85}", "\u{7f}", "a\u{9f}", "\u{feff}", "Mozilla/5.0",
        "X-Ok", "x-ok", "Bad Name", "TE", "tE", "te", "Te-X", "Cookie", "COOKIE", "cookie2", "User-Agent",
        "user-agent", "Proxy-Authorization", "proxy-x", "PROXY-", "proxy", "Keep-Alive", "__Host-a", "__Secure-a",
        "__host-a", "a;b", "a=b", "/", "/a", "/a;b", "a/", "\"quoted\"", "{}", "~",
        // cookie domains
        ".a.example", "..a", "A.EXAMPLE", ".", "a.example.",
    ]
    .map(String::from)
    .into();
    for name in params::REFUSED_HEADERS {
        c.push(name.to_string());
        c.push(name.to_ascii_uppercase());
        c.push(format!("{name}x"));
    }
    for n in [61, 62, 63, 64] {
        c.push("a".repeat(n));
        c.push(format!("a{}a", "-".repeat(n - 2)));
    }
    c.push(format!("A{}", "_".repeat(200)));
    c
}

/// Every shape walked (all its probes run) with its string sites.
fn walked() -> Vec<(Shape, Vec<Site>)> {
    shapes()
        .into_iter()
        .map(|shape| {
            let mut sites = vec![];
            walk(&Probe { shape: &shape }, &shape.schema.clone(), &Path::new(), &mut sites);
            (shape, sites)
        })
        .collect()
}

/// [`walked`] once per test binary, for the property test's many cases.
fn sites() -> &'static [(Shape, Vec<Site>)] {
    static SITES: OnceLock<Vec<(Shape, Vec<Site>)>> = OnceLock::new();
    SITES.get_or_init(walked)
}

#[test]
fn full_bodies_are_accepted() {
    for shape in shapes() {
        Probe { shape: &shape }.accepts(&shape.full, "the full body");
    }
}

#[test]
fn every_field_bound_enum_and_default_agrees() {
    let walked = walked();
    // The walk is not vacuous: it reached today's string rules (URLs,
    // command and args items, six quantities, env names and values, label
    // keys and values of a job and of the list filter).
    let sites: usize = walked.iter().map(|(_, s)| s.len()).sum();
    assert!(sites >= 15, "{:#?}", walked.iter().map(|(_, s)| s).collect::<Vec<_>>());
}

#[test]
fn patterns_agree_on_the_corpus() {
    for (shape, sites) in sites() {
        let probe = Probe { shape };
        for site in sites {
            for s in corpus() {
                try_string(&probe, site, &s);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Strings made of the characters the rules care about.
    #[test]
    fn patterns_agree_on_any_string(
        s in "[A-Za-z0-9_.:/ mkKMGi\\-]{0,12}|[a-z0-9._-]{60,66}|[0-9.]{0,6}[mkMGi]{0,2}|[ \u{a0}\u{3000}\u{85}\t#.a;=\\[\\]*:_-]{0,5}"
    ) {
        for (shape, sites) in sites() {
            let probe = Probe { shape };
            for site in sites {
                try_string(&probe, site, &s);
            }
        }
    }
}

/// The params of a batch depend on its script: one branch per script,
/// keyed by `script` (absent means the default script), whose `params` is
/// that script's schema (each walked against its validator above).
#[test]
fn params_depend_on_the_script() {
    let b = shapes::new_batch();
    for composition in ["oneOf", "anyOf", "allOf", "if"] {
        assert!(b.get(composition).is_none(), "no {composition} at the top level (model APIs refuse it)");
    }
    let branches = b["dependentSchemas"]["params"]["oneOf"].as_array().expect("a oneOf of branches").clone();
    assert_eq!(branches.len(), Script::ALL.len());
    for (script, branch) in Script::ALL.into_iter().zip(&branches) {
        assert_eq!(branch["properties"]["script"], json!({"const": script.as_str()}));
        assert_eq!(branch["properties"]["params"], shapes::script_params(script));
        let names: BTreeSet<String> =
            branch["properties"]["params"]["properties"].as_object().unwrap().keys().cloned().collect();
        let takes: BTreeSet<String> = params::names(script).iter().map(|n| n.to_string()).collect();
        assert_eq!(names, takes, "{}", script.as_str());
    }
    // Whole bodies: a parameter is judged by the script's branch, the
    // default script's when none is named, and the validator agrees.
    let shape = Shape { name: "NewBatch", schema: b, full: full_batch(), validate: validate_batch, absent: &[] };
    let probe = Probe { shape: &shape };
    let body = |script: Option<&str>, params: Value| {
        let mut body = json!({"urls": ["https://a.example/"], "params": params});
        if let Some(s) = script {
            body["script"] = json!(s);
        }
        body
    };
    for (script, params, ok) in [
        (None, json!({"fullPage": true, "format": "webp"}), true),
        (Some("capture"), json!({"selector": "#a", "quality": 1, "format": "jpeg"}), true),
        (Some("fetch"), json!({"timeoutMs": 100}), true),
        (Some("fetch"), json!({"timeoutMs": 99}), false),
        (Some("render-fetch"), json!({"timeoutMs": 100}), false),
        (Some("render-fetch"), json!({"allowedHosts": ["a.example"], "viewport": {"width": 100, "height": 100}}), true),
        (Some("fetch"), json!({"fullPage": true}), false),
        (None, json!({"allowedHosts": ["a.example"]}), false),
        (Some("browser-fetch"), json!({"waitFor": {"delayMs": 5}}), false),
        (Some("render-fetch"), json!({"format": "png"}), false),
    ] {
        let why = format!("script {script:?} with params {params}");
        let body = body(script, params);
        // (A URL's `format: uri` leaves an accepted body's verdict open.)
        let verdict = probe.verdict(&body);
        assert!(if ok { verdict != Some(false) } else { verdict == Some(false) }, "{why}: {verdict:?}");
        if ok {
            probe.validated(&body, &why);
        } else {
            probe.refused_somewhere(&body, &why);
        }
    }
}

/// `fullPage: true`, `clip` and `selector` exclude one another, in the
/// schema and in the validator; `fullPage: false` names no region.
#[test]
fn capture_regions_exclude_one_another() {
    let schema = shapes::script_params(Script::Capture);
    let regions = [
        ("fullPage", json!(true)),
        ("clip", json!({"x": 0, "y": 0, "width": 10, "height": 10})),
        ("selector", json!("#main")),
    ];
    for (i, (a, va)) in regions.iter().enumerate() {
        let one = json!({ *a: va });
        assert_eq!(evaluate(&schema, &one), Some(true), "{one}");
        validate_params(Script::Capture, &one).unwrap_or_else(|e| panic!("{one}: {e:?}"));
        for (b, vb) in &regions[i + 1..] {
            let two = json!({ *a: va, *b: vb });
            assert_eq!(evaluate(&schema, &two), Some(false), "{two}");
            let problems = validate_params(Script::Capture, &two).expect_err(&two.to_string());
            assert!(
                problems.iter().any(|p| p.contains("cannot be combined with") && (names(p, a) || names(p, b))),
                "{two}: {problems:?}"
            );
        }
        if *a != "fullPage" {
            let with_false = json!({ *a: va, "fullPage": false });
            assert_eq!(evaluate(&schema, &with_false), Some(true), "{with_false}");
            validate_params(Script::Capture, &with_false).unwrap_or_else(|e| panic!("{with_false}: {e:?}"));
        }
    }
    let all = json!({"fullPage": true, "clip": regions[1].1, "selector": "#main"});
    assert_eq!(evaluate(&schema, &all), Some(false));
    assert!(validate_params(Script::Capture, &all).is_err());
}

/// The rules no JSON Schema keyword can state, each in the schema's words
/// (the description where it applies) and refused by the validator though
/// the schema admits the value: the list is what the schema leaves out.
#[test]
fn what_the_schema_cannot_say_it_says_in_words_and_the_validator_refuses() {
    let capture = shapes::script_params(Script::Capture);
    let headers: Map<String, Value> = (0..5).map(|i| (format!("X-{i}"), json!("v".repeat(4000)))).collect();
    let cookies: Vec<Value> = (0..5).map(|i| json!({"name": format!("c{i}"), "value": "v".repeat(4000)})).collect();
    let cases = [
        ("viewport", json!({"viewport": {"width": 4096, "height": 4096, "deviceScaleFactor": 2}}), "image pixels"),
        ("clip", json!({"clip": {"x": 0, "y": 0, "width": 16384, "height": 16384}}), "image pixels"),
        ("waitFor", json!({"timeoutMs": 5000, "waitFor": {"delayMs": 5000}}), "less than timeoutMs"),
        ("waitFor", json!({"timeoutMs": 1000, "waitFor": {"networkIdleMs": 1000}}), "less than timeoutMs"),
        ("headers", json!({"headers": headers}), "bytes"),
        ("headers", json!({"headers": {"X-A": "1", "x-a": "2"}}), "no name twice"),
        ("cookies", json!({"cookies": cookies}), "bytes"),
    ];
    for (parameter, params, words) in cases {
        assert_eq!(evaluate(&capture, &params), Some(true), "{params}");
        let problems = validate_params(Script::Capture, &params).expect_err(&params.to_string());
        assert!(problems.iter().any(|p| names(p, parameter)), "{params}: {problems:?}");
        let description = capture["properties"][parameter]["description"].as_str().unwrap_or_default();
        assert!(description.contains(words), "{parameter}'s description does not say {words:?}: {description}");
    }
    // A cookie's domain against the item's URL: only the item knows it.
    let params = json!({"cookies": [{"name": "a", "value": "1", "domain": "a.example"}]});
    assert_eq!(evaluate(&capture, &params), Some(true));
    let p = params.as_object().unwrap();
    assert!(params::check_item(Script::Capture, p, "https://b.example/").is_err());
    assert!(params::check_item(Script::Capture, p, "https://www.a.example/").is_ok());
    let domain = capture["properties"]["cookies"]["items"]["properties"]["domain"]["description"].as_str().unwrap();
    assert!(domain.contains("the item URL's host or a parent domain"), "{domain}");
}

/// A session's mobile viewport needs a profile that takes one (the default
/// is a desktop browser), in the schema and in the validator; its pixels
/// (a product of three members) are bounded in words only.
#[test]
fn a_sessions_mobile_viewport_needs_a_mobile_profile_and_its_pixels_are_bounded_in_words() {
    let schema = shapes::new_session();
    for composition in ["oneOf", "anyOf", "allOf", "if"] {
        assert!(schema.get(composition).is_none(), "no {composition} at the top level (model APIs refuse it)");
    }
    let viewport = |mobile: bool| json!({"width": 390, "height": 844, "mobile": mobile});
    let desktop = Profile::DesktopBrowserNl.as_str();
    let native = Profile::NativeHeadlessBrowser.as_str();
    for (body, ok) in [
        (json!({"viewport": viewport(true)}), false),
        (json!({"viewport": viewport(true), "profileId": desktop}), false),
        (json!({"viewport": viewport(true), "profileId": native}), true),
        (json!({"viewport": viewport(false)}), true),
        (json!({"viewport": viewport(false), "profileId": desktop}), true),
        (json!({"viewport": {"width": 390, "height": 844}}), true),
    ] {
        assert_eq!(evaluate(&schema, &body), Some(ok), "{body}");
        match session::validate(&body) {
            Ok(_) => assert!(ok, "the validator accepted {body}"),
            Err(ApiError::InvalidSessionBody { detail }) => {
                assert!(!ok, "the validator refused {body}: {detail:?}");
                assert!(detail.iter().any(|p| names(p, "viewport.mobile")), "{body}: {detail:?}");
            }
            Err(e) => panic!("{body}: {e:?}"),
        }
    }
    let big = json!({"viewport": {"width": 4096, "height": 4096, "deviceScaleFactor": 2}});
    assert_eq!(evaluate(&schema, &big), Some(true));
    let Err(ApiError::InvalidSessionBody { detail }) = session::validate(&big) else { panic!("{big} accepted") };
    assert!(detail.iter().any(|p| names(p, "viewport")), "{detail:?}");
    let words = schema["properties"]["viewport"]["description"].as_str().unwrap_or_default();
    assert!(words.contains("width x height x deviceScaleFactor² at most"), "{words}");
}

/// The evaluator itself, on what the schemas lean on.
#[test]
fn the_evaluator_reads_json_schema() {
    let s = json!({"type": "integer", "minimum": 1});
    assert_eq!(evaluate(&s, &json!(1.0)), Some(true), "1.0 is an integer");
    assert_eq!(evaluate(&s, &json!(1.5)), Some(false));
    assert_eq!(evaluate(&s, &json!(0)), Some(false));
    let s = json!({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]});
    assert_eq!(evaluate(&s, &json!({"a": 1})), Some(true));
    assert_eq!(evaluate(&s, &json!({"a": 1, "b": 1})), Some(false), "both branches: not one of");
    let s = json!({"dependentSchemas": {"q": {"required": ["f"]}}});
    assert_eq!(evaluate(&s, &json!({"q": 1})), Some(false));
    assert_eq!(evaluate(&s, &json!({})), Some(true));
    let s = json!({"if": {"properties": {"x": {"const": 1}}, "required": ["x"]}, "then": {"required": ["y"]}});
    assert_eq!(evaluate(&s, &json!({"x": 1})), Some(false));
    assert_eq!(evaluate(&s, &json!({"x": 2})), Some(true));
    let s = json!({"uniqueItems": true});
    assert_eq!(evaluate(&s, &json!([1, 1.0])), Some(false), "1 and 1.0 are equal");
    assert_eq!(evaluate(&json!({"type": "string", "format": "uri"}), &json!("x")), None);
    assert_eq!(evaluate(&json!({"type": "string", "format": "uri"}), &json!(1)), Some(false));
}

/// What the MCP tool schemas and an API description publish: the shapes are
/// closed objects, and the bounds the contract states are the ones shown.
#[test]
fn contract_bounds_are_published() {
    let b = shapes::new_batch();
    assert_eq!(
        (b["properties"]["urls"]["minItems"].clone(), b["properties"]["urls"]["maxItems"].clone()),
        (json!(1), json!(1000))
    );
    // The contract's four, then the grid's own `pdf`.
    assert_eq!(b["properties"]["script"]["enum"], json!(["capture", "fetch", "browser-fetch", "render-fetch", "pdf"]));
    let j = shapes::new_job();
    assert_eq!(j["properties"]["resources"]["properties"]["cpu"]["properties"]["limit"]["x-maximum"], "8");
    assert_eq!(j["properties"]["resources"]["properties"]["memory"]["properties"]["request"]["x-minimum"], "256Mi");
    assert_eq!(
        j["properties"]["resources"]["properties"]["ephemeralStorage"]["properties"]["limit"]["x-maximum"],
        "32Gi"
    );
    assert_eq!(j["properties"]["runningDeadlineSeconds"]["maximum"], 21_600);
    let s = shapes::new_session();
    assert_eq!(
        (s["properties"]["ttlMinutes"]["maximum"].clone(), s["properties"]["ttlMinutes"]["default"].clone()),
        (json!(240), json!(30))
    );
    for schema in [b, j, s, shapes::job_list_query(), shapes::batch_list_query(), shapes::account_query()] {
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
    }
}
