//! Validation of request bodies. Each validator reads the raw JSON (so it can
//! refuse unknown fields and report every problem at once) and returns either
//! the typed request with defaults applied or a list of problems, each naming
//! its field first (`urls[3]: ...`).

pub mod batch;
pub mod job;
pub mod list;
pub mod params;
pub mod quantity;
pub mod session;

use serde_json::{Map, Value};

/// Collects problems; each starts with the field it is about.
#[derive(Debug, Default)]
pub struct Problems(Vec<String>);

impl Problems {
    pub fn push(&mut self, field: &str, msg: impl std::fmt::Display) {
        self.0.push(format!("{field}: {msg}"));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_vec(self) -> Vec<String> {
        self.0
    }

    /// The body as an object, or a problem saying it is not one.
    pub fn object<'a>(&mut self, body: &'a Value) -> Option<&'a Map<String, Value>> {
        match body {
            Value::Object(m) => Some(m),
            other => {
                self.0.push(format!("body: must be a JSON object, got {}", json_type(other)));
                None
            }
        }
    }

    /// Adds a problem for every field not in `allowed`.
    pub fn unknown_fields(&mut self, obj: &Map<String, Value>, allowed: &[&str]) {
        for k in obj.keys() {
            if !allowed.contains(&k.as_str()) {
                self.push(k, "unknown field");
            }
        }
    }
}

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An integer field within `[min, max]`; `None` when absent.
pub fn int_in_range(p: &mut Problems, obj: &Map<String, Value>, field: &str, min: i64, max: i64) -> Option<i64> {
    let v = obj.get(field)?;
    match v.as_i64() {
        Some(n) if (min..=max).contains(&n) => Some(n),
        Some(n) => {
            p.push(field, format!("must be between {min} and {max}, got {n}"));
            None
        }
        None => {
            p.push(field, format!("must be a whole number between {min} and {max}, got {}", json_type(v)));
            None
        }
    }
}
