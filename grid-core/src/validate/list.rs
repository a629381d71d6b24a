//! GET /jobs, GET /batches, GET /jobs/{jobId}/logs and GET /account query strings, already
//! split into decoded pairs by the server, and the same parameters given as
//! JSON (the `list_jobs` and `get_account` tools' arguments).

use serde_json::{Map, Value};

use super::{json_type, whole_number};
use crate::error::ApiError;
use crate::ledger::EntryKind;
use crate::validate::job::valid_label;
use crate::wire::job::JobPhase;

pub const DEFAULT_LIMIT: usize = 50;
pub const MIN_LIMIT: usize = 1;
pub const MAX_LIMIT: usize = 100;
/// The parameters GET /jobs takes (`label` stands for `label.<key>`).
pub const PARAMETERS: &[&str] = &["limit", "cursor", "phase", "label"];
/// `label.<key>` filters one call may carry.
pub const MAX_LABEL_FILTERS: usize = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    pub cursor: Option<String>,
    pub phase: Option<JobPhase>,
    pub label: Option<(String, String)>,
}

/// `limit` of a list: a whole number within the list bounds.
fn parse_limit(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (MIN_LIMIT..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!("limit: must be a whole number from {MIN_LIMIT} to {MAX_LIMIT}, got \"{v}\"")),
    }
}

pub fn list_query(pairs: &[(String, String)]) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery { limit: DEFAULT_LIMIT, cursor: None, phase: None, label: None };
    let mut problems = vec![];
    let mut seen = std::collections::BTreeSet::new();
    for (k, v) in pairs {
        let field = if k.starts_with("label.") { "label" } else { k.as_str() };
        if !seen.insert(field.to_string()) {
            problems.push(if field == "label" {
                "label: only one label filter per call".to_string()
            } else {
                format!("{k}: given more than once")
            });
            continue;
        }
        match k.as_str() {
            "limit" => match parse_limit(v) {
                Ok(n) => q.limit = n,
                Err(problem) => problems.push(problem),
            },
            "cursor" => q.cursor = Some(v.clone()),
            "phase" => match JobPhase::parse(v) {
                Some(p) => q.phase = Some(p),
                None => problems.push(format!(
                    "phase: unknown phase \"{v}\"; one of {}",
                    JobPhase::ALL.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                )),
            },
            _ => match k.strip_prefix("label.") {
                Some(key) if valid_label(key) && (v.is_empty() || valid_label(v)) => {
                    q.label = Some((key.to_string(), v.clone()))
                }
                Some(key) => problems.push(format!("label.{key}: not a valid lower-case label key and value")),
                None => problems.push(format!("{k}: unknown query parameter")),
            },
        }
    }
    if problems.is_empty() {
        Ok(q)
    } else {
        Err(ApiError::InvalidListQuery { detail: problems })
    }
}

/// GET /jobs parameters given as a JSON object (`{"limit": 10, "phase":
/// "RUNNING", "label": {"team": "data"}}`) as the query pairs [`list_query`]
/// reads. Values of the wrong JSON type and unknown members are refused
/// here, naming the member, so the object is held to the same shape as its
/// JSON Schema (`shapes::job_list_query`); the values are `list_query`'s.
pub fn query_pairs(args: &Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs = vec![];
    let mut problems = vec![];
    for (k, v) in args {
        match (k.as_str(), v) {
            (k, _) if !PARAMETERS.contains(&k) => {
                problems.push(format!("{k}: unknown parameter; one of {}", PARAMETERS.join(", ")))
            }
            ("limit", v) => match whole_number(v) {
                Some(n) => pairs.push((k.clone(), n.to_string())),
                None => problems.push(format!(
                    "limit: must be a whole number from {MIN_LIMIT} to {MAX_LIMIT}, got {}",
                    json_type(v)
                )),
            },
            ("cursor" | "phase", Value::String(s)) => pairs.push((k.clone(), s.clone())),
            ("cursor" | "phase", v) => problems.push(format!("{k}: must be a string, got {}", json_type(v))),
            ("label", Value::Object(labels)) => {
                for (key, value) in labels {
                    match value {
                        Value::String(s) => pairs.push((format!("label.{key}"), s.clone())),
                        v => problems.push(format!("label.{key}: must be a string, got {}", json_type(v))),
                    }
                }
            }
            (_, v) => problems.push(format!("label: must be an object {{key: value}}, got {}", json_type(v))),
        }
    }
    if problems.is_empty() {
        Ok(pairs)
    } else {
        Err(ApiError::InvalidListQuery { detail: problems })
    }
}

/// Parameters of GET /account.
pub const ACCOUNT_PARAMETERS: &[&str] = &["limit", "cursor", "kind"];

/// `get_account` arguments as GET /account query pairs (checked again by
/// `account_query`): a wrong JSON type is refused by name here.
pub fn account_query_pairs(args: &Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    string_query_pairs(args, ACCOUNT_PARAMETERS)
}

/// `list_batches` arguments as GET /batches query pairs (checked again by
/// `batch_list_query`).
pub fn batch_list_query_pairs(args: &Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    string_query_pairs(args, BATCH_PARAMETERS)
}

/// Arguments of a list whose parameters are `limit` (a whole number) and
/// strings, among `allowed`, as query pairs; a wrong JSON type or an unknown
/// member is refused by name.
fn string_query_pairs(args: &Map<String, Value>, allowed: &[&str]) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs = vec![];
    let mut problems = vec![];
    for (k, v) in args {
        match (k.as_str(), v) {
            (k, _) if !allowed.contains(&k) => {
                problems.push(format!("{k}: unknown parameter; one of {}", allowed.join(", ")))
            }
            ("limit", v) => match whole_number(v) {
                Some(n) => pairs.push((k.clone(), n.to_string())),
                None => problems.push(format!(
                    "limit: must be a whole number from {MIN_LIMIT} to {MAX_LIMIT}, got {}",
                    json_type(v)
                )),
            },
            (_, Value::String(s)) => pairs.push((k.clone(), s.clone())),
            (_, v) => problems.push(format!("{k}: must be a string, got {}", json_type(v))),
        }
    }
    if problems.is_empty() {
        Ok(pairs)
    } else {
        Err(ApiError::InvalidListQuery { detail: problems })
    }
}

/// `attempt` of GET /jobs/{jobId}/logs: a positive whole number, alone.
pub fn log_query(pairs: &[(String, String)]) -> Result<Option<u32>, ApiError> {
    let mut attempt = None;
    let mut problems = vec![];
    for (k, v) in pairs {
        match k.as_str() {
            "attempt" if attempt.is_none() => match v.parse::<u32>() {
                Ok(n) if n >= 1 => attempt = Some(n),
                _ => problems.push(format!("attempt: must be a positive whole number, got \"{v}\"")),
            },
            "attempt" => problems.push("attempt: given more than once".to_string()),
            other => problems.push(format!("{other}: unknown query parameter; only attempt is accepted")),
        }
    }
    if problems.is_empty() {
        Ok(attempt)
    } else {
        Err(ApiError::InvalidLogQuery { detail: problems })
    }
}

/// The query of GET /jobs/{jobId}/logs as HTTP takes it: `attempt` as in
/// `log_query`, and `follow` (`true` or `false`, at most once): stream the
/// attempt's output as it is written (docs/jobs.md). A query without
/// `follow` is `log_query`'s, answered the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogQuery {
    pub attempt: Option<u32>,
    pub follow: bool,
}

pub fn log_follow_query(pairs: &[(String, String)]) -> Result<LogQuery, ApiError> {
    let (follows, rest): (Vec<_>, Vec<_>) = pairs.iter().cloned().partition(|(k, _)| k == "follow");
    let mut problems = vec![];
    let follow = match follows.as_slice() {
        [] => false,
        [(_, v)] if v == "true" => true,
        [(_, v)] if v == "false" => false,
        [(_, v)] => {
            problems.push(format!("follow: must be true or false, got \"{v}\""));
            false
        }
        _ => {
            problems.push("follow: given more than once".to_string());
            false
        }
    };
    match log_query(&rest) {
        Ok(attempt) if problems.is_empty() => Ok(LogQuery { attempt, follow }),
        Ok(_) => Err(ApiError::InvalidLogQuery { detail: problems }),
        Err(ApiError::InvalidLogQuery { detail }) => {
            problems.extend(detail);
            Err(ApiError::InvalidLogQuery { detail: problems })
        }
        Err(e) => Err(e),
    }
}

/// GET /account: a page of the caller's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountQuery {
    pub limit: usize,
    pub cursor: Option<String>,
    /// Only entries of this kind.
    pub kind: Option<EntryKind>,
}

pub fn account_query(pairs: &[(String, String)]) -> Result<AccountQuery, ApiError> {
    let mut kind = None;
    let (limit, cursor) = paged_query(pairs, |k, v, problems| match k {
        "kind" => match EntryKind::parse(v) {
            Some(k) => kind = Some(k),
            None => problems.push(format!(
                "kind: unknown ledger kind \"{v}\"; one of {}",
                EntryKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
            )),
        },
        _ => problems.push(format!("{k}: unknown query parameter")),
    })?;
    Ok(AccountQuery { limit, cursor, kind })
}

/// A paged list's query: each name at most once, `limit` and `cursor` as
/// every page reads them, and any other name through `other`, which notes
/// a problem for a name or value it does not take. Every problem is
/// named, in the query's order.
fn paged_query(
    pairs: &[(String, String)],
    mut other: impl FnMut(&str, &str, &mut Vec<String>),
) -> Result<(usize, Option<String>), ApiError> {
    let (mut limit, mut cursor) = (DEFAULT_LIMIT, None);
    let mut problems = vec![];
    let mut seen = std::collections::BTreeSet::new();
    for (k, v) in pairs {
        if !seen.insert(k.as_str()) {
            problems.push(format!("{k}: given more than once"));
            continue;
        }
        match k.as_str() {
            "limit" => match parse_limit(v) {
                Ok(n) => limit = n,
                Err(problem) => problems.push(problem),
            },
            "cursor" => cursor = Some(v.clone()),
            name => other(name, v, &mut problems),
        }
    }
    if problems.is_empty() {
        Ok((limit, cursor))
    } else {
        Err(ApiError::InvalidListQuery { detail: problems })
    }
}

/// GET /batches: a page of the caller's batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchListQuery {
    pub limit: usize,
    pub cursor: Option<String>,
}

/// Parameters of GET /batches.
pub const BATCH_PARAMETERS: &[&str] = &["limit", "cursor"];

pub fn batch_list_query(pairs: &[(String, String)]) -> Result<BatchListQuery, ApiError> {
    let (limit, cursor) = paged_query(pairs, |k, _, problems| {
        problems.push(format!("{k}: unknown query parameter; one of {}", BATCH_PARAMETERS.join(", ")))
    })?;
    Ok(BatchListQuery { limit, cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    fn refused(v: &[(&str, &str)]) -> Vec<String> {
        match list_query(&pairs(v)) {
            Err(ApiError::InvalidListQuery { detail }) => detail,
            other => panic!("expected INVALID_LIST_QUERY, got {other:?}"),
        }
    }

    #[test]
    fn defaults_and_filters() {
        assert_eq!(list_query(&[]).unwrap(), ListQuery { limit: 50, cursor: None, phase: None, label: None });
        let q = list_query(&pairs(&[("limit", "100"), ("phase", "RUNNING"), ("label.team", "x")])).unwrap();
        assert_eq!((q.limit, q.phase, q.label), (100, Some(JobPhase::Running), Some(("team".into(), "x".into()))));
    }

    #[test]
    fn every_refusal_names_its_parameter() {
        assert!(refused(&[("limit", "0")])[0].starts_with("limit:"));
        assert!(refused(&[("limit", "101")])[0].starts_with("limit:"));
        assert!(refused(&[("phase", "running")])[0].starts_with("phase:"));
        assert!(refused(&[("label.a", "x"), ("label.b", "y")])[0].starts_with("label:"));
        assert!(refused(&[("label.A", "x")])[0].starts_with("label.A:"));
        assert!(refused(&[("sort", "asc")])[0].starts_with("sort:"));
    }

    fn args(v: serde_json::Value) -> Result<Vec<(String, String)>, Vec<String>> {
        match query_pairs(v.as_object().unwrap()) {
            Ok(q) => Ok(q),
            Err(ApiError::InvalidListQuery { detail }) => Err(detail),
            Err(e) => panic!("expected INVALID_LIST_QUERY, got {e:?}"),
        }
    }

    #[test]
    fn json_arguments_become_the_query() {
        let q = args(serde_json::json!({"limit": 5.0, "cursor": "c", "phase": "RUNNING", "label": {"team": "x"}}));
        assert_eq!(q.unwrap(), pairs(&[("cursor", "c"), ("label.team", "x"), ("limit", "5"), ("phase", "RUNNING")]));
        assert_eq!(args(serde_json::json!({"label": {}})).unwrap(), vec![]);
    }

    #[test]
    fn json_arguments_of_the_wrong_type_are_refused_by_name() {
        let d = args(serde_json::json!({
            "limit": "5", "cursor": 7, "phase": null, "label": {"team": 1}, "label.team": "x"
        }))
        .unwrap_err();
        assert_eq!(
            d,
            vec![
                "cursor: must be a string, got a number",
                "label.team: must be a string, got a number",
                "label.team: unknown parameter; one of limit, cursor, phase, label",
                "limit: must be a whole number from 1 to 100, got a string",
                "phase: must be a string, got null",
            ]
        );
        assert_eq!(
            args(serde_json::json!({"label": "team=x"})).unwrap_err(),
            vec!["label: must be an object {key: value}, got a string"]
        );
    }

    #[test]
    fn account_query_pages_and_filters_by_kind() {
        assert_eq!(account_query(&[]).unwrap(), AccountQuery { limit: 50, cursor: None, kind: None });
        let q = account_query(&pairs(&[("limit", "1"), ("kind", "charge"), ("cursor", "c")])).unwrap();
        assert_eq!(q, AccountQuery { limit: 1, cursor: Some("c".into()), kind: Some(EntryKind::Charge) });
        for (bad, field) in
            [(("limit", "0"), "limit:"), (("kind", "charges"), "kind:"), (("phase", "RUNNING"), "phase:")]
        {
            match account_query(&pairs(&[bad])) {
                Err(ApiError::InvalidListQuery { detail }) => assert!(detail[0].starts_with(field), "{detail:?}"),
                other => panic!("expected INVALID_LIST_QUERY, got {other:?}"),
            }
        }
    }

    #[test]
    fn batch_list_query_takes_limit_and_cursor_only() {
        assert_eq!(batch_list_query(&[]).unwrap(), BatchListQuery { limit: 50, cursor: None });
        let q = batch_list_query(&pairs(&[("limit", "3"), ("cursor", "c")])).unwrap();
        assert_eq!(q, BatchListQuery { limit: 3, cursor: Some("c".into()) });
        for (bad, field) in [(("limit", "101"), "limit:"), (("phase", "RUNNING"), "phase:")] {
            match batch_list_query(&pairs(&[bad])) {
                Err(ApiError::InvalidListQuery { detail }) => assert!(detail[0].starts_with(field), "{detail:?}"),
                other => panic!("expected INVALID_LIST_QUERY, got {other:?}"),
            }
        }
    }

    #[test]
    fn log_attempt_must_be_positive_and_alone() {
        assert_eq!(log_query(&[]).unwrap(), None);
        assert_eq!(log_query(&pairs(&[("attempt", "2")])).unwrap(), Some(2));
        for bad in [&[("attempt", "0")][..], &[("attempt", "x")], &[("attempt", "-1")], &[("tail", "5")]] {
            assert!(matches!(log_query(&pairs(bad)), Err(ApiError::InvalidLogQuery { .. })), "{bad:?}");
        }
    }

    #[test]
    fn follow_is_true_or_false_once_beside_attempt() {
        assert_eq!(log_follow_query(&[]).unwrap(), LogQuery { attempt: None, follow: false });
        assert_eq!(
            log_follow_query(&pairs(&[("follow", "true"), ("attempt", "2")])).unwrap(),
            LogQuery { attempt: Some(2), follow: true }
        );
        assert_eq!(
            log_follow_query(&pairs(&[("follow", "false")])).unwrap(),
            LogQuery { attempt: None, follow: false }
        );
        for bad in
            [&[("follow", "1")][..], &[("follow", "true"), ("follow", "true")], &[("follow", "true"), ("tail", "5")]]
        {
            assert!(matches!(log_follow_query(&pairs(bad)), Err(ApiError::InvalidLogQuery { .. })), "{bad:?}");
        }
    }
}
