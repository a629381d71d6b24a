//! GET /jobs, GET /jobs/{jobId}/logs and GET /account query strings, already
//! split into decoded pairs by the server.

use crate::error::ApiError;
use crate::ledger::EntryKind;
use crate::validate::job::valid_label;
use crate::wire::job::JobPhase;

pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    pub cursor: Option<String>,
    pub phase: Option<JobPhase>,
    pub label: Option<(String, String)>,
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
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => q.limit = n,
                _ => problems.push(format!("limit: must be a whole number from 1 to {MAX_LIMIT}, got \"{v}\"")),
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

/// GET /account: a page of the caller's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountQuery {
    pub limit: usize,
    pub cursor: Option<String>,
    /// Only entries of this kind.
    pub kind: Option<EntryKind>,
}

pub fn account_query(pairs: &[(String, String)]) -> Result<AccountQuery, ApiError> {
    let mut q = AccountQuery { limit: DEFAULT_LIMIT, cursor: None, kind: None };
    let mut problems = vec![];
    let mut seen = std::collections::BTreeSet::new();
    for (k, v) in pairs {
        if !seen.insert(k.as_str()) {
            problems.push(format!("{k}: given more than once"));
            continue;
        }
        match k.as_str() {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => q.limit = n,
                _ => problems.push(format!("limit: must be a whole number from 1 to {MAX_LIMIT}, got \"{v}\"")),
            },
            "cursor" => q.cursor = Some(v.clone()),
            "kind" => match EntryKind::parse(v) {
                Some(kind) => q.kind = Some(kind),
                None => problems.push(format!(
                    "kind: unknown ledger kind \"{v}\"; one of {}",
                    EntryKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
                )),
            },
            _ => problems.push(format!("{k}: unknown query parameter")),
        }
    }
    if problems.is_empty() {
        Ok(q)
    } else {
        Err(ApiError::InvalidListQuery { detail: problems })
    }
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
    fn log_attempt_must_be_positive_and_alone() {
        assert_eq!(log_query(&[]).unwrap(), None);
        assert_eq!(log_query(&pairs(&[("attempt", "2")])).unwrap(), Some(2));
        for bad in [&[("attempt", "0")][..], &[("attempt", "x")], &[("attempt", "-1")], &[("tail", "5")]] {
            assert!(matches!(log_query(&pairs(bad)), Err(ApiError::InvalidLogQuery { .. })), "{bad:?}");
        }
    }
}
