//! Validation of request bodies. Each validator reads the raw JSON (so it can
//! refuse unknown fields and report every problem at once) and returns either
//! the typed request with defaults applied or a list of problems, each naming
//! its field first (`urls[3]: ...`).

pub mod batch;
pub mod job;
pub mod list;
pub mod members;
pub mod one_call;
pub mod params;
pub mod proxy;
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

    /// How many problems so far.
    pub fn len(&self) -> usize {
        self.0.len()
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
    match whole_number(v) {
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

/// A JSON number that is a whole number, as JSON Schema's `integer` reads
/// it: `5.0` is the integer 5 (some encoders write every number with a
/// fraction), `5.5` is not one.
pub fn whole_number(v: &Value) -> Option<i64> {
    // Beyond 2^53 a float no longer says which integer it meant.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() <= EXACT).map(|f| f as i64))
}
