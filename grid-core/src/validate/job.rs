//! POST /jobs bodies.
//!
//! Rules the contract leaves open, decided here:
//!
//! - **env names** match `^[A-Z_][A-Z0-9_]*$` (upper-case letters, digits and
//!   underscores, not starting with a digit: `MY_VAR`, `_X`, `V2`). Reserved:
//!   names starting `AWS_`, `AZURE_`, `GRID_`, `COMPUTE_` or `GOOGLE_`, and
//!   the names HOME, HOSTNAME, PATH, KUBERNETES_SERVICE_HOST,
//!   KUBERNETES_SERVICE_PORT. Values are strings, possibly empty.
//! - **labels**: keys match `^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$` (1 to 63
//!   characters, lower-case alphanumerics at both ends). Values are strings
//!   that are either empty or match the same rule.
//! - **NUL characters** are refused in `command`, `args` and env values: a
//!   process cannot receive them.
//! - **image** is parsed with Docker's reference grammar ([`parse_image_ref`]);
//!   whether the repository is admitted on the registry and has a
//!   linux/amd64 image is the server's check (400 INVALID_IMAGE).
//! - **capabilities** other than `networkProfile` are unknown fields (400);
//!   a known network profile the grid does not offer is the server's 422
//!   CAPABILITY_NOT_AVAILABLE.
//! - **Quantities** follow `validate::quantity`; bounds are checked on the
//!   parsed values, so `"1000m"` and `"1"` are the same CPU.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::quantity::{format_bytes, format_cpu_millis, parse_bytes, parse_cpu_millis};
use super::{int_in_range, json_type, Problems};
use crate::error::ApiError;
use crate::wire::job::{Bounds, JobSubmission, NetworkProfile, Resources};

/// The members a body may have.
pub const FIELDS: &[&str] = &[
    "image",
    "command",
    "args",
    "resources",
    "runningDeadlineSeconds",
    "retries",
    "priority",
    "capabilities",
    "env",
    "labels",
    "idempotencyKey",
];
/// The members of `resources`, of each of its `{request, limit}` and of
/// `capabilities`.
pub const RESOURCES_FIELDS: &[&str] = &["cpu", "memory", "ephemeralStorage"];
pub const BOUNDS_FIELDS: &[&str] = &["request", "limit"];
pub const CAPABILITIES_FIELDS: &[&str] = &["networkProfile"];

pub const MIN_COMMAND: usize = 1;
pub const MAX_COMMAND: usize = 128;
pub const MAX_ARGS: usize = 128;
pub const MIN_CPU_MILLIS: u64 = 250;
pub const MAX_CPU_MILLIS: u64 = 8_000;
pub const MIN_MEMORY_BYTES: u64 = 256 << 20;
pub const MAX_MEMORY_BYTES: u64 = 16 << 30;
pub const MIN_EPHEMERAL_STORAGE_BYTES: u64 = 256 << 20;
pub const MAX_EPHEMERAL_STORAGE_BYTES: u64 = 32 << 30;
pub const MIN_RUNNING_DEADLINE_SECONDS: i64 = 1;
pub const MAX_RUNNING_DEADLINE_SECONDS: i64 = 21_600;
pub const MIN_RETRIES: i64 = 0;
pub const MAX_RETRIES: i64 = 3;
pub const MIN_PRIORITY: i64 = 0;
pub const MAX_PRIORITY: i64 = 10;
pub const MAX_ENV: usize = 100;
pub const MAX_LABELS: usize = 20;
pub const MAX_LABEL_CHARS: usize = 63;
pub const MIN_IDEMPOTENCY_KEY_CHARS: usize = 1;
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 128;
pub const RESERVED_ENV_PREFIXES: [&str; 5] = ["AWS_", "AZURE_", "GRID_", "COMPUTE_", "GOOGLE_"];
pub const RESERVED_ENV_NAMES: [&str; 5] =
    ["HOME", "HOSTNAME", "PATH", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"];
/// [`valid_env_name`] as a regular expression, for the request's JSON Schema.
pub const ENV_NAME_PATTERN: &str = "^[A-Z_][A-Z0-9_]*$";
/// [`valid_label`] as a regular expression (its `{0,61}` is
/// [`MAX_LABEL_CHARS`] less the two end characters).
pub const LABEL_PATTERN: &str = "^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$";

pub fn validate(body: &Value) -> Result<JobSubmission, ApiError> {
    let mut p = Problems::default();
    let Some(obj) = p.object(body) else {
        return Err(ApiError::InvalidJobRequest { detail: p.into_vec() });
    };
    p.unknown_fields(obj, FIELDS);
    let image = image(&mut p, obj);
    let command = strings(&mut p, obj, "command", Some(MAX_COMMAND));
    let args = strings(&mut p, obj, "args", None);
    let resources = resources(&mut p, obj);
    if !obj.contains_key("runningDeadlineSeconds") {
        p.push(
            "runningDeadlineSeconds",
            format!("is required: {MIN_RUNNING_DEADLINE_SECONDS} to {MAX_RUNNING_DEADLINE_SECONDS} seconds"),
        );
    }
    let deadline =
        int_in_range(&mut p, obj, "runningDeadlineSeconds", MIN_RUNNING_DEADLINE_SECONDS, MAX_RUNNING_DEADLINE_SECONDS);
    let retries = int_in_range(&mut p, obj, "retries", MIN_RETRIES, MAX_RETRIES).unwrap_or(0);
    let priority = int_in_range(&mut p, obj, "priority", MIN_PRIORITY, MAX_PRIORITY).unwrap_or(0);
    let network_profile = capabilities(&mut p, obj);
    let env = env(&mut p, obj);
    let labels = labels(&mut p, obj);
    let idempotency_key = idempotency_key(&mut p, obj);
    match (image, command, args, resources, deadline, network_profile, env, labels, idempotency_key) {
        (
            Some((image, image_ref)),
            Some(command),
            Some(args),
            Some(resources),
            Some(deadline),
            Some(network_profile),
            Some(env),
            Some(labels),
            Some(idempotency_key),
        ) if p.is_empty() => Ok(JobSubmission {
            image,
            image_ref,
            command,
            args,
            resources,
            running_deadline_seconds: deadline as u32,
            retries: retries as u32,
            priority: priority as u32,
            network_profile,
            env,
            labels,
            idempotency_key,
        }),
        _ => Err(ApiError::InvalidJobRequest { detail: p.into_vec() }),
    }
}

/// The validated request as one canonical JSON string (object keys sorted at
/// every level, no whitespace, defaults applied, quantities as integers
/// millicores/bytes). Two bodies that validate to the same submission give
/// the same string whatever their key order, so an idempotent resend is
/// recognised even when it spells `"1"` as `"1000m"` or leaves out
/// `retries: 0`. The server hashes this string.
pub fn canonical_body_hash_input(sub: &JobSubmission) -> String {
    let bounds = |b: Bounds| json!({"request": b.request, "limit": b.limit});
    let v = json!({
        "image": sub.image,
        "command": sub.command,
        "args": sub.args,
        "resources": {
            "cpu": bounds(sub.resources.cpu_millis),
            "memory": bounds(sub.resources.memory_bytes),
            "ephemeralStorage": bounds(sub.resources.ephemeral_storage_bytes),
        },
        "runningDeadlineSeconds": sub.running_deadline_seconds,
        "retries": sub.retries,
        "priority": sub.priority,
        "capabilities": {"networkProfile": sub.network_profile.as_str()},
        "env": sub.env,
        "labels": sub.labels,
        "idempotencyKey": sub.idempotency_key,
    });
    crate::idempotency::canonical_json(&v)
}

/// An image reference taken apart (Docker's reference grammar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// `host[:port]` when the first path component names one (it contains a
    /// `.` or `:`, or is `localhost`); `None` means the grid's own registry.
    pub registry: Option<String>,
    /// The repository path within the registry (`team/tool`).
    pub repository: String,
    /// The tag; `latest` when neither tag nor digest was given.
    pub tag: Option<String>,
    /// `sha256:<64 hex>` when the reference is pinned.
    pub digest: Option<String>,
}

impl ImageRef {
    /// `registry/repository`, or the repository alone.
    pub fn name(&self) -> String {
        match &self.registry {
            Some(r) => format!("{r}/{}", self.repository),
            None => self.repository.clone(),
        }
    }
}

/// Longest `registry/repository` Docker accepts.
const MAX_IMAGE_NAME: usize = 255;

/// Parses `[registry/]repository[:tag][@sha256:<digest>]`.
pub fn parse_image_ref(s: &str) -> Result<ImageRef, String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("\"{}\" must not contain whitespace or control characters", s.escape_debug()));
    }
    let (rest, digest) = match s.split_once('@') {
        Some((rest, d)) => {
            let hex = d.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(format!("digest \"{d}\" must be sha256: followed by 64 lower-case hex digits"));
            }
            (rest, Some(d.to_string()))
        }
        None => (s, None),
    };
    let (name, tag) = match rest.rfind(':') {
        Some(i) if !rest[i + 1..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    if let Some(t) = tag {
        if !valid_tag(t) {
            return Err(format!(
                "tag \"{t}\" must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
            ));
        }
    }
    if name.len() > MAX_IMAGE_NAME {
        return Err(format!("name is longer than {MAX_IMAGE_NAME} characters"));
    }
    let (registry, repository) = match name.split_once('/') {
        Some((first, path)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            if !valid_registry(first) {
                return Err(format!("registry \"{first}\" must be a host name with an optional :port"));
            }
            (Some(first.to_string()), path)
        }
        _ => (None, name),
    };
    if repository.is_empty() {
        return Err("repository is missing".into());
    }
    if let Some(bad) = repository.split('/').find(|c| !valid_path_component(c)) {
        return Err(format!(
            "repository path component \"{bad}\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'"
        ));
    }
    let tag = match (tag, &digest) {
        (None, None) => Some("latest".to_string()),
        (t, _) => t.map(str::to_string),
    };
    Ok(ImageRef { registry, repository: repository.to_string(), tag, digest })
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
fn valid_tag(t: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    (1..=128).contains(&t.len())
        && t.bytes().next().is_some_and(ok)
        && t.bytes().all(|b| ok(b) || b == b'.' || b == b'-')
}

/// `host[:port]`: dot-separated labels of letters, digits and inner hyphens.
fn valid_registry(r: &str) -> bool {
    let (host, port) = match r.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    host.split('.').all(label_ok)
        && port.is_none_or(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut separator = String::new();
    for &b in bytes {
        if alnum(b) {
            let ok = separator.is_empty()
                || separator == "."
                || separator == "_"
                || separator == "__"
                || separator.bytes().all(|s| s == b'-');
            if !ok {
                return false;
            }
            separator.clear();
        } else if matches!(b, b'.' | b'_' | b'-') {
            separator.push(b as char);
        } else {
            return false;
        }
    }
    true
}

/// The field name of a map member: `env.MY_VAR`, or `env["odd key"]` when
/// the key would not read plainly.
fn member(map: &str, key: &str) -> String {
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')) {
        format!("{map}.{key}")
    } else {
        format!("{map}[{key:?}]")
    }
}

/// Adds a problem for every member of a nested object not in `allowed`.
fn unknown_members(p: &mut Problems, obj: &Map<String, Value>, path: &str, allowed: &[&str]) {
    for k in obj.keys() {
        if !allowed.contains(&k.as_str()) {
            p.push(&member(path, k), "unknown field");
        }
    }
}

/// A required member that must be an object.
fn object<'a>(
    p: &mut Problems,
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
    hint: &str,
) -> Option<&'a Map<String, Value>> {
    match obj.get(key) {
        None => {
            p.push(path, format!("is required: {hint}"));
            None
        }
        Some(Value::Object(m)) => Some(m),
        Some(v) => {
            p.push(path, format!("must be an object, got {}", json_type(v)));
            None
        }
    }
}

fn image(p: &mut Problems, obj: &Map<String, Value>) -> Option<(String, ImageRef)> {
    match obj.get("image") {
        None => {
            p.push("image", "is required: an image reference such as registry.example/team/tool:1.0");
            None
        }
        Some(Value::String(s)) => match parse_image_ref(s) {
            Ok(r) => Some((s.clone(), r)),
            Err(msg) => {
                p.push("image", msg);
                None
            }
        },
        Some(v) => {
            p.push("image", format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

/// `command` (required, 1 to `max`) or `args` (optional, default `[]`).
fn strings(
    p: &mut Problems,
    obj: &Map<String, Value>,
    field: &str,
    required_max: Option<usize>,
) -> Option<Vec<String>> {
    let (min, max) = match required_max {
        Some(max) => (MIN_COMMAND, max),
        None => (0, MAX_ARGS),
    };
    let list = match obj.get(field) {
        None if min == 0 => return Some(vec![]),
        None => {
            p.push(field, format!("is required: {min} to {max} strings"));
            return None;
        }
        Some(Value::Array(a)) => a,
        Some(v) => {
            p.push(field, format!("must be an array of strings, got {}", json_type(v)));
            return None;
        }
    };
    let mut ok = true;
    if list.len() < min {
        p.push(field, format!("must hold at least {min} string"));
        ok = false;
    }
    if list.len() > max {
        p.push(field, format!("must hold at most {max} strings, got {}", list.len()));
        ok = false;
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        match v {
            Value::String(s) if s.contains('\0') => {
                p.push(&format!("{field}[{i}]"), "must not contain a NUL character");
                ok = false;
            }
            Value::String(s) => out.push(s.clone()),
            other => {
                p.push(&format!("{field}[{i}]"), format!("must be a string, got {}", json_type(other)));
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn resources(p: &mut Problems, obj: &Map<String, Value>) -> Option<Resources> {
    let hint = "an object with cpu, memory and ephemeralStorage, each {request, limit}";
    let r = object(p, obj, "resources", "resources", hint)?;
    unknown_members(p, r, "resources", RESOURCES_FIELDS);
    let cpu = Quantity { parse: parse_cpu_millis, format: format_cpu_millis, min: MIN_CPU_MILLIS, max: MAX_CPU_MILLIS };
    let memory = Quantity { parse: parse_bytes, format: format_bytes, min: MIN_MEMORY_BYTES, max: MAX_MEMORY_BYTES };
    let storage = Quantity {
        parse: parse_bytes,
        format: format_bytes,
        min: MIN_EPHEMERAL_STORAGE_BYTES,
        max: MAX_EPHEMERAL_STORAGE_BYTES,
    };
    let cpu = bounds(p, r, "cpu", cpu);
    let memory = bounds(p, r, "memory", memory);
    let storage = bounds(p, r, "ephemeralStorage", storage);
    Some(Resources { cpu_millis: cpu?, memory_bytes: memory?, ephemeral_storage_bytes: storage? })
}

/// How one resource's quantities are read and bounded.
#[derive(Clone, Copy)]
struct Quantity {
    parse: fn(&str) -> Result<u64, String>,
    format: fn(u64) -> String,
    min: u64,
    max: u64,
}

fn bounds(p: &mut Problems, resources: &Map<String, Value>, key: &str, q: Quantity) -> Option<Bounds> {
    let path = format!("resources.{key}");
    let (min, max) = ((q.format)(q.min), (q.format)(q.max));
    let range = format!("{min} to {max}");
    let o = object(p, resources, key, &path, &format!("{{request, limit}}, quantities from {range}"))?;
    unknown_members(p, o, &path, BOUNDS_FIELDS);
    let mut one = |which: &str| -> Option<(u64, &str)> {
        let field = format!("{path}.{which}");
        match o.get(which) {
            None => {
                p.push(&field, format!("is required: a quantity from {range}"));
                None
            }
            Some(Value::String(s)) => match (q.parse)(s) {
                Ok(n) if (q.min..=q.max).contains(&n) => Some((n, s.as_str())),
                Ok(_) => {
                    p.push(&field, format!("must be between {min} and {max}, got \"{s}\""));
                    None
                }
                Err(msg) => {
                    p.push(&field, msg);
                    None
                }
            },
            Some(v) => {
                p.push(
                    &field,
                    format!("must be a quantity string such as \"{}\", got {}", (q.format)(q.min), json_type(v)),
                );
                None
            }
        }
    };
    let request = one("request");
    let limit = one("limit");
    let ((request, request_str), (limit, limit_str)) = (request?, limit?);
    if request > limit {
        p.push(&path, format!("request \"{request_str}\" is more than limit \"{limit_str}\""));
        return None;
    }
    Some(Bounds { request, limit })
}

fn capabilities(p: &mut Problems, obj: &Map<String, Value>) -> Option<NetworkProfile> {
    let c = object(p, obj, "capabilities", "capabilities", "{\"networkProfile\": \"none\" or \"public-https\"}")?;
    unknown_members(p, c, "capabilities", CAPABILITIES_FIELDS);
    let field = "capabilities.networkProfile";
    match c.get("networkProfile") {
        None => {
            p.push(field, "is required: \"none\" or \"public-https\"");
            None
        }
        Some(Value::String(s)) => NetworkProfile::parse(s).or_else(|| {
            p.push(field, format!("unknown network profile \"{s}\"; one of none, public-https"));
            None
        }),
        Some(v) => {
            p.push(field, format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

/// `^[A-Z_][A-Z0-9_]*$`
pub fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// Why an env name is reserved, if it is.
pub fn reserved_env_name(name: &str) -> Option<String> {
    if let Some(prefix) = RESERVED_ENV_PREFIXES.iter().find(|pre| name.starts_with(**pre)) {
        return Some(format!("names starting {prefix} are reserved"));
    }
    RESERVED_ENV_NAMES.contains(&name).then(|| format!("{name} is reserved"))
}

fn env(p: &mut Problems, obj: &Map<String, Value>) -> Option<BTreeMap<String, String>> {
    let e = object(p, obj, "env", "env", "an object of string variables (may be {})")?;
    let mut ok = true;
    if e.len() > MAX_ENV {
        p.push("env", format!("must hold at most {MAX_ENV} variables, got {}", e.len()));
        ok = false;
    }
    let mut out = BTreeMap::new();
    for (name, value) in e {
        let field = member("env", name);
        if !valid_env_name(name) {
            p.push(&field, "name must match ^[A-Z_][A-Z0-9_]*$, like MY_VAR");
            ok = false;
        } else if let Some(why) = reserved_env_name(name) {
            p.push(&field, why);
            ok = false;
        }
        match value {
            Value::String(s) if s.contains('\0') => {
                p.push(&field, "must not contain a NUL character");
                ok = false;
            }
            Value::String(s) => {
                out.insert(name.clone(), s.clone());
            }
            other => {
                p.push(&field, format!("must be a string, got {}", json_type(other)));
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// `^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`: 1 to 63 characters.
pub fn valid_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=MAX_LABEL_CHARS).contains(&b.len())
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || matches!(c, b'.' | b'_' | b'-'))
}

const LABEL_RULE: &str =
    "1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit";

fn labels(p: &mut Problems, obj: &Map<String, Value>) -> Option<BTreeMap<String, String>> {
    let l = object(p, obj, "labels", "labels", "an object of lower-case string pairs (may be {})")?;
    let mut ok = true;
    if l.len() > MAX_LABELS {
        p.push("labels", format!("must hold at most {MAX_LABELS} labels, got {}", l.len()));
        ok = false;
    }
    let mut out = BTreeMap::new();
    for (key, value) in l {
        let field = member("labels", key);
        if !valid_label(key) {
            p.push(&field, format!("key must be {LABEL_RULE}"));
            ok = false;
        }
        match value {
            Value::String(s) if s.is_empty() || valid_label(s) => {
                out.insert(key.clone(), s.clone());
            }
            Value::String(_) => {
                p.push(&field, format!("value must be empty or {LABEL_RULE}"));
                ok = false;
            }
            other => {
                p.push(&field, format!("must be a string, got {}", json_type(other)));
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn idempotency_key(p: &mut Problems, obj: &Map<String, Value>) -> Option<String> {
    let field = "idempotencyKey";
    match obj.get(field) {
        None => {
            p.push(
                field,
                format!("is required: {MIN_IDEMPOTENCY_KEY_CHARS} to {MAX_IDEMPOTENCY_KEY_CHARS} characters"),
            );
            None
        }
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if (MIN_IDEMPOTENCY_KEY_CHARS..=MAX_IDEMPOTENCY_KEY_CHARS).contains(&n) {
                Some(s.clone())
            } else {
                p.push(
                    field,
                    format!("must be {MIN_IDEMPOTENCY_KEY_CHARS} to {MAX_IDEMPOTENCY_KEY_CHARS} characters, got {n}"),
                );
                None
            }
        }
        Some(v) => {
            p.push(field, format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn minimal() -> Value {
        json!({
            "image": "registry.example/team/tool:1.0",
            "command": ["python", "-c", "print(1)"],
            "resources": {
                "cpu": {"request": "250m", "limit": "1"},
                "memory": {"request": "256Mi", "limit": "1Gi"},
                "ephemeralStorage": {"request": "256Mi", "limit": "2Gi"},
            },
            "runningDeadlineSeconds": 60,
            "capabilities": {"networkProfile": "none"},
            "env": {},
            "labels": {},
            "idempotencyKey": "k-1",
        })
    }

    fn with(edit: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let mut v = minimal();
        edit(v.as_object_mut().unwrap());
        v
    }

    fn detail(body: Value) -> Vec<String> {
        match validate(&body) {
            Err(ApiError::InvalidJobRequest { detail }) => detail,
            other => panic!("expected INVALID_JOB_REQUEST, got {other:?}"),
        }
    }

    fn set_resource(kind: &str, request: &str, limit: &str) -> Value {
        with(|m| m["resources"][kind] = json!({"request": request, "limit": limit}))
    }

    #[test]
    fn minimal_body_gets_defaults() {
        let s = validate(&minimal()).unwrap();
        assert_eq!(s.image, "registry.example/team/tool:1.0");
        assert_eq!(s.image_ref.registry.as_deref(), Some("registry.example"));
        assert_eq!(s.command, ["python", "-c", "print(1)"]);
        assert!(s.args.is_empty());
        assert_eq!(s.resources.cpu_millis, Bounds { request: 250, limit: 1_000 });
        assert_eq!(s.resources.memory_bytes, Bounds { request: 256 << 20, limit: 1 << 30 });
        assert_eq!(s.resources.ephemeral_storage_bytes, Bounds { request: 256 << 20, limit: 2 << 30 });
        assert_eq!((s.running_deadline_seconds, s.retries, s.priority), (60, 0, 0));
        assert_eq!(s.network_profile, NetworkProfile::None);
        assert_eq!(s.idempotency_key, "k-1");
    }

    #[test]
    fn full_body_is_read() {
        let s = validate(&with(|m| {
            m.insert("args".into(), json!(["a", ""]));
            m.insert("retries".into(), json!(3));
            m.insert("priority".into(), json!(10));
            m.insert("capabilities".into(), json!({"networkProfile": "public-https"}));
            m.insert("env".into(), json!({"MY_VAR": "x", "_UNDER": "", "V2": "y", "GRID": "not a prefix"}));
            m.insert("labels".into(), json!({"team": "data", "tier": "", "a.b_c-d": "v1.2"}));
        }))
        .unwrap();
        assert_eq!(s.args, ["a", ""]);
        assert_eq!((s.retries, s.priority), (3, 10));
        assert_eq!(s.network_profile, NetworkProfile::PublicHttps);
        assert_eq!(s.env.len(), 4);
        assert_eq!(s.labels["tier"], "");
    }

    #[test]
    fn every_missing_field_is_listed() {
        assert_eq!(
            detail(json!({})),
            vec![
                "image: is required: an image reference such as registry.example/team/tool:1.0",
                "command: is required: 1 to 128 strings",
                "resources: is required: an object with cpu, memory and ephemeralStorage, each {request, limit}",
                "runningDeadlineSeconds: is required: 1 to 21600 seconds",
                "capabilities: is required: {\"networkProfile\": \"none\" or \"public-https\"}",
                "env: is required: an object of string variables (may be {})",
                "labels: is required: an object of lower-case string pairs (may be {})",
                "idempotencyKey: is required: 1 to 128 characters",
            ]
        );
        assert_eq!(detail(json!("x")), vec!["body: must be a JSON object, got a string"]);
    }

    #[test]
    fn nested_required_members() {
        let d = detail(with(|m| {
            m["resources"] = json!({"cpu": {"request": "1"}});
            m["capabilities"] = json!({});
        }));
        assert_eq!(
            d,
            vec![
                "resources.cpu.limit: is required: a quantity from 250m to 8",
                "resources.memory: is required: {request, limit}, quantities from 256Mi to 16Gi",
                "resources.ephemeralStorage: is required: {request, limit}, quantities from 256Mi to 32Gi",
                "capabilities.networkProfile: is required: \"none\" or \"public-https\"",
            ]
        );
    }

    #[test]
    fn unknown_fields_are_refused_at_every_level() {
        let d = detail(with(|m| {
            m.insert("nodeSelector".into(), json!({}));
            m["resources"]["gpu"] = json!({"request": "1", "limit": "1"});
            m["resources"]["cpu"]["max"] = json!("2");
            m["capabilities"]["privileged"] = json!(true);
        }));
        assert_eq!(
            d,
            vec![
                "nodeSelector: unknown field",
                "resources.gpu: unknown field",
                "resources.cpu.max: unknown field",
                "capabilities.privileged: unknown field",
            ]
        );
    }

    #[test]
    fn command_and_args_bounds() {
        assert_eq!(detail(with(|m| m["command"] = json!([]))), vec!["command: must hold at least 1 string"]);
        let many: Vec<String> = (0..129).map(|i| i.to_string()).collect();
        assert_eq!(
            detail(with(|m| m["command"] = json!(many))),
            vec!["command: must hold at most 128 strings, got 129"]
        );
        assert_eq!(validate(&with(|m| m["command"] = json!(many[..128]))).unwrap().command.len(), 128);
        assert_eq!(
            detail(with(|m| m["command"] = json!("ls"))),
            vec!["command: must be an array of strings, got a string"]
        );
        assert_eq!(
            detail(with(|m| m["command"] = json!(["ls", 1]))),
            vec!["command[1]: must be a string, got a number"]
        );
        assert_eq!(
            detail(with(|m| m["command"] = json!(["a\u{0}b"]))),
            vec!["command[0]: must not contain a NUL character"]
        );
        let args = |v: Value| {
            with(|m| {
                m.insert("args".into(), v);
            })
        };
        assert_eq!(detail(args(json!(many))), vec!["args: must hold at most 128 strings, got 129"]);
        assert_eq!(validate(&args(json!(many[..128]))).unwrap().args.len(), 128);
        assert_eq!(detail(args(json!(null))), vec!["args: must be an array of strings, got null"]);
    }

    #[test]
    fn cpu_bounds() {
        assert!(validate(&set_resource("cpu", "250m", "250m")).is_ok());
        assert!(validate(&set_resource("cpu", "0.25", "8")).is_ok());
        assert!(validate(&set_resource("cpu", "8000m", "8")).is_ok());
        assert_eq!(
            detail(set_resource("cpu", "249m", "8001m")),
            vec![
                "resources.cpu.request: must be between 250m and 8, got \"249m\"",
                "resources.cpu.limit: must be between 250m and 8, got \"8001m\"",
            ]
        );
        assert_eq!(
            detail(set_resource("cpu", "2", "1")),
            vec!["resources.cpu: request \"2\" is more than limit \"1\""]
        );
        assert_eq!(
            detail(set_resource("cpu", "-1", "1")),
            vec!["resources.cpu.request: \"-1\" is negative; quantities must be positive"]
        );
        assert_eq!(
            detail(set_resource("cpu", "1 core", "1")),
            vec!["resources.cpu.request: \"1 core\" is not a quantity"]
        );
        assert_eq!(
            detail(with(|m| m["resources"]["cpu"]["limit"] = json!(1))),
            vec!["resources.cpu.limit: must be a quantity string such as \"250m\", got a number"]
        );
    }

    #[test]
    fn memory_and_storage_bounds() {
        assert!(validate(&set_resource("memory", "256Mi", "16Gi")).is_ok());
        assert!(validate(&set_resource("memory", "268435456", "17179869184")).is_ok());
        assert_eq!(
            detail(set_resource("memory", "255Mi", "17Gi")),
            vec![
                "resources.memory.request: must be between 256Mi and 16Gi, got \"255Mi\"",
                "resources.memory.limit: must be between 256Mi and 16Gi, got \"17Gi\"",
            ]
        );
        // 1G is less than 1Gi: request 1Gi over limit 1G is refused.
        assert_eq!(
            detail(set_resource("memory", "1Gi", "1G")),
            vec!["resources.memory: request \"1Gi\" is more than limit \"1G\""]
        );
        assert!(validate(&set_resource("ephemeralStorage", "256Mi", "32Gi")).is_ok());
        assert_eq!(
            detail(set_resource("ephemeralStorage", "256M", "33Gi")),
            vec![
                "resources.ephemeralStorage.request: must be between 256Mi and 32Gi, got \"256M\"",
                "resources.ephemeralStorage.limit: must be between 256Mi and 32Gi, got \"33Gi\"",
            ]
        );
    }

    #[test]
    fn integer_bounds() {
        let set = |k: &str, v: Value| {
            with(|m| {
                m.insert(k.into(), v);
            })
        };
        assert_eq!(validate(&set("runningDeadlineSeconds", json!(1))).unwrap().running_deadline_seconds, 1);
        assert_eq!(validate(&set("runningDeadlineSeconds", json!(21_600))).unwrap().running_deadline_seconds, 21_600);
        assert_eq!(
            detail(set("runningDeadlineSeconds", json!(0))),
            vec!["runningDeadlineSeconds: must be between 1 and 21600, got 0"]
        );
        assert_eq!(
            detail(set("runningDeadlineSeconds", json!(21_601))),
            vec!["runningDeadlineSeconds: must be between 1 and 21600, got 21601"]
        );
        assert_eq!(detail(set("runningDeadlineSeconds", json!("60"))).len(), 1);
        assert_eq!(detail(set("retries", json!(4))), vec!["retries: must be between 0 and 3, got 4"]);
        assert_eq!(detail(set("retries", json!(-1))), vec!["retries: must be between 0 and 3, got -1"]);
        assert_eq!(detail(set("priority", json!(11))), vec!["priority: must be between 0 and 10, got 11"]);
        assert_eq!(detail(set("priority", json!(1.5))).len(), 1);
    }

    #[test]
    fn capabilities_rules() {
        assert_eq!(
            detail(with(|m| m["capabilities"] = json!({"networkProfile": "host"}))),
            vec!["capabilities.networkProfile: unknown network profile \"host\"; one of none, public-https"]
        );
        assert_eq!(
            detail(with(|m| m["capabilities"] = json!([]))),
            vec!["capabilities: must be an object, got an array"]
        );
    }

    #[test]
    fn env_rules() {
        let d = detail(with(|m| {
            m["env"] = json!({
                "my_var": "x", "1ABC": "x", "A-B": "x", "": "x",
                "AWS_REGION": "x", "AZURE_X": "x", "GRID_TOKEN": "x", "COMPUTE_X": "x", "GOOGLE_X": "x",
                "HOME": "x", "HOSTNAME": "x", "PATH": "x", "KUBERNETES_SERVICE_HOST": "x", "KUBERNETES_SERVICE_PORT": "x",
                "NUM": 1, "NUL": "a\u{0}",
            })
        }));
        assert_eq!(
            d,
            vec![
                "env[\"\"]: name must match ^[A-Z_][A-Z0-9_]*$, like MY_VAR",
                "env.1ABC: name must match ^[A-Z_][A-Z0-9_]*$, like MY_VAR",
                "env.A-B: name must match ^[A-Z_][A-Z0-9_]*$, like MY_VAR",
                "env.AWS_REGION: names starting AWS_ are reserved",
                "env.AZURE_X: names starting AZURE_ are reserved",
                "env.COMPUTE_X: names starting COMPUTE_ are reserved",
                "env.GOOGLE_X: names starting GOOGLE_ are reserved",
                "env.GRID_TOKEN: names starting GRID_ are reserved",
                "env.HOME: HOME is reserved",
                "env.HOSTNAME: HOSTNAME is reserved",
                "env.KUBERNETES_SERVICE_HOST: KUBERNETES_SERVICE_HOST is reserved",
                "env.KUBERNETES_SERVICE_PORT: KUBERNETES_SERVICE_PORT is reserved",
                "env.NUL: must not contain a NUL character",
                "env.NUM: must be a string, got a number",
                "env.PATH: PATH is reserved",
                "env.my_var: name must match ^[A-Z_][A-Z0-9_]*$, like MY_VAR",
            ]
        );
        // Not reserved: the bare prefix word, and names merely containing it.
        assert!(
            validate(&with(|m| m["env"] = json!({"AWS": "x", "MY_AWS_X": "x", "PATHS": "x", "HOME_DIR": "x"}))).is_ok()
        );
    }

    #[test]
    fn env_count_limit() {
        let vars = |n: usize| -> Map<String, Value> { (0..n).map(|i| (format!("V{i}"), json!("x"))).collect() };
        assert_eq!(validate(&with(|m| m["env"] = Value::Object(vars(100)))).unwrap().env.len(), 100);
        assert_eq!(
            detail(with(|m| m["env"] = Value::Object(vars(101)))),
            vec!["env: must hold at most 100 variables, got 101"]
        );
    }

    #[test]
    fn label_rules() {
        let long = "a".repeat(63);
        assert!(validate(&with(|m| m["labels"] = json!({long.clone(): long.clone()}))).is_ok());
        let too_long = "a".repeat(64);
        let d = detail(with(|m| {
            m["labels"] = json!({"Team": "x", "ok": "Data", "-x": "y", too_long.clone(): "v", "num": 3, "e": "x-"})
        }));
        assert_eq!(
            d,
            vec![
                "labels.-x: key must be 1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit",
                "labels.Team: key must be 1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit",
                &format!("labels.{too_long}: key must be 1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit"),
                "labels.e: value must be empty or 1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit",
                "labels.num: must be a string, got a number",
                "labels.ok: value must be empty or 1 to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit",
            ]
        );
        let labels = |n: usize| -> Map<String, Value> { (0..n).map(|i| (format!("l{i}"), json!("v"))).collect() };
        assert_eq!(validate(&with(|m| m["labels"] = Value::Object(labels(20)))).unwrap().labels.len(), 20);
        assert_eq!(
            detail(with(|m| m["labels"] = Value::Object(labels(21)))),
            vec!["labels: must hold at most 20 labels, got 21"]
        );
    }

    #[test]
    fn idempotency_key_bounds() {
        assert_eq!(
            detail(with(|m| m["idempotencyKey"] = json!(""))),
            vec!["idempotencyKey: must be 1 to 128 characters, got 0"]
        );
        let k128 = "é".repeat(128);
        assert_eq!(
            validate(&with(|m| m["idempotencyKey"] = json!(k128))).unwrap().idempotency_key.chars().count(),
            128
        );
        assert_eq!(
            detail(with(|m| m["idempotencyKey"] = json!("x".repeat(129)))),
            vec!["idempotencyKey: must be 1 to 128 characters, got 129"]
        );
        assert_eq!(
            detail(with(|m| m["idempotencyKey"] = json!(5))),
            vec!["idempotencyKey: must be a string, got a number"]
        );
    }

    #[test]
    fn image_problems_are_reported() {
        assert_eq!(detail(with(|m| m["image"] = json!(""))), vec!["image: must not be empty"]);
        assert_eq!(detail(with(|m| m["image"] = json!(["x"]))), vec!["image: must be a string, got an array"]);
        assert_eq!(
            detail(with(|m| m["image"] = json!("Registry.example/Team/Tool"))),
            vec!["image: repository path component \"Team\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'"]
        );
    }

    #[test]
    fn image_refs_parse() {
        let r = parse_image_ref("registry.example:5000/team/tool:1.0").unwrap();
        assert_eq!(r.registry.as_deref(), Some("registry.example:5000"));
        assert_eq!(r.repository, "team/tool");
        assert_eq!((r.tag.as_deref(), r.digest.as_deref()), (Some("1.0"), None));
        assert_eq!(r.name(), "registry.example:5000/team/tool");

        let digest = format!("sha256:{}", "ab".repeat(32));
        let r = parse_image_ref(&format!("localhost/tool@{digest}")).unwrap();
        assert_eq!((r.registry.as_deref(), r.repository.as_str()), (Some("localhost"), "tool"));
        assert_eq!((r.tag.as_deref(), r.digest.as_deref()), (None, Some(digest.as_str())));

        let r = parse_image_ref(&format!("team/tool:v2@{digest}")).unwrap();
        assert_eq!((r.registry, r.tag.as_deref()), (None, Some("v2")));

        let r = parse_image_ref("alpine").unwrap();
        assert_eq!((r.registry, r.repository.as_str(), r.tag.as_deref()), (None, "alpine", Some("latest")));

        let r = parse_image_ref("localhost:5000/a__b.c-d--e/x_y").unwrap();
        assert_eq!(r.repository, "a__b.c-d--e/x_y");
    }

    #[test]
    fn bad_image_refs_are_refused() {
        let cases = [
            ("tool:", "tag \"\" must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"),
            ("tool:-x", "tag \"-x\" must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"),
            ("tool@sha256:abc", "digest \"sha256:abc\" must be sha256: followed by 64 lower-case hex digits"),
            ("tool@md5:abc", "digest \"md5:abc\" must be sha256: followed by 64 lower-case hex digits"),
            ("registry.example/", "repository is missing"),
            (":1.0", "repository is missing"),
            ("a b", "\"a b\" must not contain whitespace or control characters"),
            ("te..am/tool", "registry \"te..am\" must be a host name with an optional :port"),
            ("reg_istry.example/x", "registry \"reg_istry.example\" must be a host name with an optional :port"),
            ("registry.example:99999x/x", "registry \"registry.example:99999x\" must be a host name with an optional :port"),
            ("team//tool", "repository path component \"\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'"),
            ("team/to..ol", "repository path component \"to..ol\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'"),
            ("team_/tool", "repository path component \"team_\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'"),
            ("a___b", "repository path component \"a___b\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'"),
        ];
        for (s, want) in cases {
            assert_eq!(parse_image_ref(s), Err(want.to_string()), "{s}");
        }
        assert_eq!(parse_image_ref(&"a".repeat(256)), Err("name is longer than 255 characters".to_string()));
    }

    #[test]
    fn canonical_body_ignores_key_order_and_spelling_of_defaults() {
        let a = validate(&minimal()).unwrap();
        // Same body, keys reversed, defaults spelled out, quantities respelled.
        let mut reordered = Map::new();
        let m = minimal();
        for (k, v) in m.as_object().unwrap().iter().rev() {
            reordered.insert(k.clone(), v.clone());
        }
        reordered.insert("retries".into(), json!(0));
        reordered.insert("priority".into(), json!(0));
        reordered.insert("args".into(), json!([]));
        reordered["resources"]["cpu"] = json!({"limit": "1000m", "request": "0.25"});
        let b = validate(&Value::Object(reordered)).unwrap();
        assert_eq!(canonical_body_hash_input(&a), canonical_body_hash_input(&b));

        let c = validate(&with(|m| m["command"] = json!(["python", "-c", "print(2)"]))).unwrap();
        assert_ne!(canonical_body_hash_input(&a), canonical_body_hash_input(&c));
        let d = validate(&with(|m| m["env"] = json!({"A": "1"}))).unwrap();
        assert_ne!(canonical_body_hash_input(&a), canonical_body_hash_input(&d));
    }

    #[test]
    fn canonical_body_is_sorted_compact_json() {
        let s = canonical_body_hash_input(&validate(&minimal()).unwrap());
        assert_eq!(
            s,
            concat!(
                r#"{"args":[],"capabilities":{"networkProfile":"none"},"command":["python","-c","print(1)"],"#,
                r#""env":{},"idempotencyKey":"k-1","image":"registry.example/team/tool:1.0","labels":{},"priority":0,"#,
                r#""resources":{"cpu":{"limit":1000,"request":250},"ephemeralStorage":{"limit":2147483648,"request":268435456},"#,
                r#""memory":{"limit":1073741824,"request":268435456}},"retries":0,"runningDeadlineSeconds":60}"#
            )
        );
        let back: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back["resources"]["cpu"]["request"], 250);
    }

    proptest! {
        /// Env names: the hand-written matcher agrees with the documented rule.
        #[test]
        fn env_name_rule(name in "[A-Za-z0-9_-]{0,12}") {
            let expected = !name.is_empty()
                && name.chars().next().is_some_and(|c| c.is_ascii_uppercase() || c == '_')
                && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            prop_assert_eq!(valid_env_name(&name), expected);
        }

        #[test]
        fn label_rule(s in "[a-zA-Z0-9._-]{0,70}") {
            let first_last = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            let expected = (1..=63).contains(&s.len())
                && first_last(s.chars().next())
                && first_last(s.chars().last())
                && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-_".contains(c));
            prop_assert_eq!(valid_label(&s), expected);
        }

        /// Any body whatever never panics the validator, and anything it
        /// accepts has request <= limit within bounds.
        #[test]
        fn validator_total(cpu_r in "[0-9]{1,4}m?", cpu_l in "[0-9]{1,4}m?", mem in "[0-9]{1,5}(Mi|Gi|M|G)?", deadline in -5i64..30_000) {
            let body = with(|m| {
                m["resources"]["cpu"] = json!({"request": cpu_r, "limit": cpu_l});
                m["resources"]["memory"] = json!({"request": mem, "limit": "16Gi"});
                m["runningDeadlineSeconds"] = json!(deadline);
            });
            if let Ok(s) = validate(&body) {
                let r = s.resources;
                prop_assert!(r.cpu_millis.request <= r.cpu_millis.limit);
                prop_assert!((MIN_CPU_MILLIS..=MAX_CPU_MILLIS).contains(&r.cpu_millis.request));
                prop_assert!((MIN_MEMORY_BYTES..=MAX_MEMORY_BYTES).contains(&r.memory_bytes.request));
                prop_assert!((1..=21_600).contains(&s.running_deadline_seconds));
            }
        }
    }
}
