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

use std::collections::BTreeSet;
use std::sync::OnceLock;

use grid_core::catalog::{Profile, PUBLIC_WEB_ONLY_V1};
use grid_core::error::ApiError;
use grid_core::shapes;
use grid_core::validate::quantity::{format_bytes, format_cpu_millis, parse_bytes, parse_cpu_millis};
use grid_core::validate::{batch, job, list, session};
use grid_core::wire::batch::NewBatch;
use grid_core::wire::job::{NetworkProfile, NewCapabilities, NewJob, NewResources, QuantityBounds};
use grid_core::wire::session::{NewSession, NewViewport};
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
}

fn shapes() -> Vec<Shape> {
    vec![
        Shape { name: "NewBatch", schema: shapes::new_batch(), full: full_batch(), validate: validate_batch },
        Shape { name: "NewJob", schema: shapes::new_job(), full: full_job(), validate: validate_job },
        Shape { name: "NewSession", schema: shapes::new_session(), full: full_session(), validate: validate_session },
        Shape {
            name: "JobListQuery",
            schema: shapes::job_list_query(),
            // No wire type: the SDK sends these as query parameters
            // (grid-client's `list_jobs` test holds it to this schema).
            full: json!({"limit": 10, "cursor": "c", "phase": "RUNNING", "label": {"team": "data"}}),
            validate: validate_list,
        },
        Shape {
            name: "AccountQuery",
            schema: shapes::account_query(),
            // No wire type: query parameters of GET /account.
            full: json!({"limit": 10, "cursor": "c", "kind": "charge"}),
            validate: validate_account,
        },
    ]
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
    })
    .unwrap()
}

fn validate_batch(body: &Value) -> Result<String, Vec<String>> {
    match batch::validate(body) {
        Ok(b) => Ok(format!("{b:?}")),
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

struct Probe<'a> {
    shape: &'a Shape,
}

impl Probe<'_> {
    fn accepts(&self, body: &Value, why: &str) -> String {
        match (self.shape.validate)(body) {
            Ok(out) => out,
            Err(detail) => {
                panic!("{}: {why}: the schema allows it but the validator refused {detail:?}", self.shape.name)
            }
        }
    }

    fn refuses(&self, body: &Value, path: &Path, why: &str) {
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

    fn agrees(&self, body: &Value, path: &Path, schema_accepts: bool, why: &str) {
        if schema_accepts {
            self.accepts(body, why);
        } else {
            self.refuses(body, path, why);
        }
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
    // Checked by `params_depend_on_the_script`.
    "dependentSchemas",
];

fn regex(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("pattern {pattern:?}: {e}"))
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

/// What the schema says of a string: `Some(accepted)`, or `None` when it
/// cannot tell (`format: uri`: the pattern only checks the scheme).
fn schema_says(node: &Value, s: &str) -> Option<bool> {
    let mut sure = true;
    for (k, v) in node.as_object().expect("schema node is an object") {
        let ok = match k.as_str() {
            "type" => v == "string",
            "pattern" => regex(v.as_str().unwrap()).is_match(s),
            "minLength" => s.chars().count() as u64 >= v.as_u64().unwrap(),
            "maxLength" => s.chars().count() as u64 <= v.as_u64().unwrap(),
            "enum" => v.as_array().unwrap().contains(&json!(s)),
            "not" => match schema_says(v, s) {
                Some(inner) => !inner,
                None => {
                    sure = false;
                    true
                }
            },
            "anyOf" => {
                let each: Vec<Option<bool>> = v.as_array().unwrap().iter().map(|n| schema_says(n, s)).collect();
                if each.contains(&Some(true)) {
                    true
                } else if each.iter().all(|e| *e == Some(false)) {
                    false
                } else {
                    sure = false;
                    true
                }
            }
            // `uri`: the pattern only checks the scheme; `ipv6-literal`: the
            // pattern admits more than an address.
            "format" if v == "uri" || v == "ipv6-literal" || v == "iana-time-zone" => {
                sure = false;
                true
            }
            "format" => {
                let (min, max) = (node["x-minimum"].as_str().unwrap(), node["x-maximum"].as_str().unwrap());
                let f = v.as_str().unwrap();
                let (min, max) = (quantity_value(f, min).unwrap(), quantity_value(f, max).unwrap());
                quantity_value(f, s).is_ok_and(|n| (min..=max).contains(&n))
            }
            "x-minimum" | "x-maximum" | "default" | "description" => true,
            other => panic!("keyword {other} is not checked by this test; teach schema_says"),
        };
        if !ok {
            return Some(false);
        }
    }
    sure.then_some(true)
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
            Some("number") => &[json!("7"), json!(true), Value::Null],
            Some("array") => &[json!("x"), json!({}), Value::Null],
            Some("object") => &[json!([]), json!("x"), Value::Null],
            Some("boolean") => &[json!("true"), json!(1), Value::Null],
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

    for (bound, step) in [("minimum", -0.01f64), ("maximum", 0.01)] {
        match n.get(bound) {
            Some(b) if ty == Some("number") => {
                let b = b.as_f64().unwrap();
                probe.accepts(&set(full, path, json!(b)), &format!("{f} = its {bound} {b}"));
                probe.refuses(
                    &set(full, path, json!(b + step)),
                    path,
                    &format!("{f} = {} beyond its {bound}", b + step),
                );
            }
            _ => {}
        }
    }
    for (bound, step) in [("minimum", -1i64), ("maximum", 1)] {
        if let Some(b) = n.get(bound).filter(|_| ty != Some("number")) {
            let b = b.as_i64().unwrap();
            probe.accepts(&set(full, path, json!(b)), &format!("{f} = its {bound} {b}"));
            probe.accepts(&set(full, path, json!(b as f64)), &format!("{f} = its {bound} written {:?}", b as f64));
            probe.refuses(&set(full, path, json!(b + step)), path, &format!("{f} = {} beyond its {bound}", b + step));
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
        let wire_names: BTreeSet<&str> = here.keys().map(String::as_str).collect();
        assert_eq!(schema_names, wire_names, "{}: properties of {f:?} against the wire type's fields", shape.name);
        let known: BTreeSet<&str> = validator_fields(shape.name, path).iter().copied().collect();
        assert_eq!(schema_names, known, "{}: properties of {f:?} against the validator's members", shape.name);
        let required: BTreeSet<&str> =
            n["required"].as_array().expect("required is listed").iter().map(|r| r.as_str().unwrap()).collect();
        for r in &required {
            assert!(props.contains_key(*r), "{}: required {r} is not a property of {f:?}", shape.name);
        }
        for (k, sub) in props {
            let p = key(path, k);
            let without = remove(full, &p);
            if required.contains(k.as_str()) {
                assert!(sub.get("default").is_none(), "{}: required {k} has a default", shape.name);
                probe.refuses(&without, &p, &format!("{} left out (required)", field(&p)));
            } else {
                let left_out = probe.accepts(&without, &format!("{} left out (optional)", field(&p)));
                if let Some(d) = sub.get("default") {
                    let spelled = probe.accepts(&set(full, &p, d.clone()), &format!("{} = its default", field(&p)));
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
    let map =
        |count: u64| -> Value { (0..count).map(|i| (format!("{k0}{i}"), v0.clone())).collect::<Map<_, _>>().into() };
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
        ("NewJob", []) => job::FIELDS,
        ("NewJob", ["resources"]) => job::RESOURCES_FIELDS,
        ("NewJob", ["resources", _]) => job::BOUNDS_FIELDS,
        ("NewJob", ["capabilities"]) => job::CAPABILITIES_FIELDS,
        ("NewSession", []) => session::FIELDS,
        ("NewSession", ["viewport"]) => session::VIEWPORT_FIELDS,
        ("JobListQuery", []) => list::PARAMETERS,
        ("AccountQuery", []) => list::ACCOUNT_PARAMETERS,
        _ => panic!("{shape}: which validator list holds the members of {path:?}? Add it here"),
    }
}

/// Puts `s` at a site and compares the validator with the schema.
fn try_string(probe: &Probe, site: &Site, s: &str) {
    let full = &probe.shape.full;
    let (body, path, node, what) = match site {
        Site::Value { path, node } => (set(full, path, json!(s)), path, node, "value"),
        Site::Name { path, node } => {
            let first = at(full, path).as_object().unwrap().values().next().unwrap().clone();
            (set(full, path, json!({ s: first })), path, node, "member name")
        }
    };
    if let Some(ok) = schema_says(node, s) {
        probe.agrees(&body, path, ok, &format!("{what} {s:?} at {}", field(path)));
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
        "javascript:alert(1)", "file:///etc/passwd",
    ]
    .map(String::from)
    .into();
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
    fn patterns_agree_on_any_string(s in "[A-Za-z0-9_.:/ mkKMGi\\-]{0,12}|[a-z0-9._-]{60,66}|[0-9.]{0,6}[mkMGi]{0,2}") {
        for (shape, sites) in sites() {
            let probe = Probe { shape };
            for site in sites {
                try_string(&probe, site, &s);
            }
        }
    }
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
    assert_eq!(b["properties"]["script"]["enum"], json!(["capture", "fetch", "browser-fetch", "render-fetch"]));
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
    for schema in [b, j, s, shapes::job_list_query(), shapes::account_query()] {
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
    }
}
