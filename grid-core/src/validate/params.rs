//! Script parameters, checked when each item runs (not at submission): a bad
//! parameter fails its item with a published failure record.

use serde_json::{Map, Value};

use super::json_type;
use crate::catalog::Script;

pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const MIN_TIMEOUT_MS: u64 = 100;
pub const MAX_TIMEOUT_MS: u64 = 120_000;

/// Parameters of the `fetch` script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchParams {
    /// Whole-request budget: connect, redirects, headers and body.
    pub timeout_ms: u64,
}

pub fn fetch(params: &Map<String, Value>) -> Result<FetchParams, String> {
    let mut problems = vec![];
    let mut timeout_ms = DEFAULT_TIMEOUT_MS;
    for (k, v) in params {
        match k.as_str() {
            "timeoutMs" => match v.as_u64() {
                Some(n) if (MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&n) => timeout_ms = n,
                _ => problems.push(format!(
                    "params.timeoutMs: must be a whole number from {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}, got {}",
                    if v.is_number() { v.to_string() } else { json_type(v).to_string() }
                )),
            },
            "allowedHosts" => problems.push(format!(
                "params.allowedHosts: not a parameter of {}; only browser-fetch and render-fetch take it",
                Script::Fetch.as_str()
            )),
            other => problems.push(format!("params.{other}: unknown parameter of fetch")),
        }
    }
    if problems.is_empty() {
        Ok(FetchParams { timeout_ms })
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn defaults_and_bounds() {
        assert_eq!(fetch(&Map::new()), Ok(FetchParams { timeout_ms: 30_000 }));
        assert_eq!(fetch(&map(json!({"timeoutMs": 100}))), Ok(FetchParams { timeout_ms: 100 }));
        assert!(fetch(&map(json!({"timeoutMs": 99}))).unwrap_err().starts_with("params.timeoutMs"));
        assert!(fetch(&map(json!({"timeoutMs": "5"}))).unwrap_err().contains("a string"));
    }

    #[test]
    fn unknown_and_misplaced_params_are_named() {
        let e = fetch(&map(json!({"allowedHosts": ["a"], "bogus": 1}))).unwrap_err();
        assert!(e.contains("params.allowedHosts: not a parameter of fetch"), "{e}");
        assert!(e.contains("params.bogus: unknown parameter of fetch"), "{e}");
    }
}
