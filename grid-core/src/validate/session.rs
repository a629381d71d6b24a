//! POST /sessions bodies. The body may be `{}`; `null` is not accepted for
//! any field (leave the field out instead).

use serde_json::{Map, Value};

use super::batch::profile;
use super::{int_in_range, json_type, Problems};
use crate::catalog::PUBLIC_WEB_ONLY_V1;
use crate::error::ApiError;
use crate::wire::session::SessionSubmission;

pub const MIN_TTL_MINUTES: i64 = 1;
pub const MAX_TTL_MINUTES: i64 = 240;
pub const DEFAULT_TTL_MINUTES: u32 = 30;
/// The members a body may have.
pub const FIELDS: &[&str] = &["profileId", "ttlMinutes", "network"];

pub fn validate(body: &Value) -> Result<SessionSubmission, ApiError> {
    let mut p = Problems::default();
    let Some(obj) = p.object(body) else {
        return Err(ApiError::InvalidSessionBody { detail: p.into_vec() });
    };
    p.unknown_fields(obj, FIELDS);
    let profile = profile(&mut p, obj, "profileId");
    let ttl = int_in_range(&mut p, obj, "ttlMinutes", MIN_TTL_MINUTES, MAX_TTL_MINUTES);
    let network = network(&mut p, obj);
    match (profile, network) {
        (Some(profile), Some(network_policy)) if p.is_empty() => Ok(SessionSubmission {
            profile,
            ttl_minutes: ttl.map_or(DEFAULT_TTL_MINUTES, |n| n as u32),
            network_policy,
        }),
        _ => Err(ApiError::InvalidSessionBody { detail: p.into_vec() }),
    }
}

/// `Some(None)` when absent, `Some(Some(policy))` when known, `None` on a problem.
fn network(p: &mut Problems, obj: &Map<String, Value>) -> Option<Option<String>> {
    match obj.get("network") {
        None => Some(None),
        Some(Value::String(s)) if s == PUBLIC_WEB_ONLY_V1 => Some(Some(s.clone())),
        Some(Value::String(s)) => {
            p.push("network", format!("unknown network policy \"{s}\"; the only policy is {PUBLIC_WEB_ONLY_V1}"));
            None
        }
        Some(v) => {
            p.push("network", format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Profile;
    use serde_json::json;

    fn detail(body: Value) -> Vec<String> {
        match validate(&body) {
            Err(ApiError::InvalidSessionBody { detail }) => detail,
            other => panic!("expected invalid session body, got {other:?}"),
        }
    }

    #[test]
    fn empty_body_takes_defaults() {
        assert_eq!(
            validate(&json!({})).unwrap(),
            SessionSubmission { profile: Profile::DesktopBrowserNl, ttl_minutes: 30, network_policy: None }
        );
    }

    #[test]
    fn full_body_is_read() {
        let s = validate(
            &json!({"profileId": "native-headless-browser/v2", "ttlMinutes": 240, "network": "public-web-only/v1"}),
        )
        .unwrap();
        assert_eq!(s.profile, Profile::NativeHeadlessBrowser);
        assert_eq!(s.ttl_minutes, 240);
        assert_eq!(s.network_policy.as_deref(), Some("public-web-only/v1"));
        assert_eq!(validate(&json!({"ttlMinutes": 1})).unwrap().ttl_minutes, 1);
    }

    #[test]
    fn every_problem_is_listed() {
        assert_eq!(
            detail(json!({"profileId": "chrome", "ttlMinutes": 241, "network": "open/v1", "region": "eu"})),
            vec![
                "region: unknown field",
                "profileId: unknown profile \"chrome\"; one of desktop-browser-nl/v2, native-headless-browser/v2",
                "ttlMinutes: must be between 1 and 240, got 241",
                "network: unknown network policy \"open/v1\"; the only policy is public-web-only/v1",
            ]
        );
    }

    #[test]
    fn ttl_bounds_and_types() {
        assert_eq!(detail(json!({"ttlMinutes": 0})), vec!["ttlMinutes: must be between 1 and 240, got 0"]);
        assert_eq!(
            detail(json!({"ttlMinutes": "30"})),
            vec!["ttlMinutes: must be a whole number between 1 and 240, got a string"]
        );
        assert_eq!(
            detail(json!({"ttlMinutes": 1.5})),
            vec!["ttlMinutes: must be a whole number between 1 and 240, got a number"]
        );
        assert_eq!(detail(json!({"network": null})), vec!["network: must be a string, got null"]);
        assert_eq!(detail(json!([])), vec!["body: must be a JSON object, got an array"]);
    }
}
