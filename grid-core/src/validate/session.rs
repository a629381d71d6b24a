//! POST /sessions bodies. The body may be `{}`; `null` is not accepted for
//! any field (leave the field out instead). `viewport`, `userAgent`,
//! `locale` and `timezone` override the profile's where the profile allows
//! it: every profile takes all four, except that `desktop-browser-nl/v2`
//! (a desktop browser) takes no mobile viewport.

use serde_json::{Map, Value};

use super::batch::profile;
use super::{int_in_range, json_type, params, whole_number, Problems};
use crate::catalog::{Profile, PUBLIC_WEB_ONLY_V1};
use crate::error::ApiError;
use crate::time_zones;
use crate::wire::session::{SessionContext, SessionOverrides, SessionSubmission, Viewport};

pub const MIN_TTL_MINUTES: i64 = 1;
pub const MAX_TTL_MINUTES: i64 = 240;
pub const DEFAULT_TTL_MINUTES: u32 = 30;
/// The members a body may have.
pub const FIELDS: &[&str] = &[
    "profileId",
    "ttlMinutes",
    "network",
    "viewport",
    "userAgent",
    "locale",
    "timezone",
    "takeOver",
    "recording",
    "context",
    "proxy",
];
/// The members of `context`.
pub const CONTEXT_FIELDS: &[&str] = &["id", "persist"];
/// `context.id`: a context id as POST /contexts makes them (`ctx_` and a
/// ULID); anything else names no context.
pub const CONTEXT_ID_PATTERN: &str = "^ctx_[0-9A-Za-z]{1,64}$";
/// The members of `viewport`.
pub const VIEWPORT_FIELDS: &[&str] = params::VIEWPORT_FIELDS;
/// Bounds of `viewport`: a capture's `viewport` has the same.
pub const MIN_VIEWPORT_SIZE: u64 = params::MIN_VIEWPORT_SIZE;
pub const MAX_VIEWPORT_SIZE: u64 = params::MAX_VIEWPORT_SIZE;
pub const MIN_DEVICE_SCALE_FACTOR: f64 = params::MIN_DEVICE_SCALE_FACTOR;
pub const MAX_DEVICE_SCALE_FACTOR: f64 = params::MAX_DEVICE_SCALE_FACTOR;
pub const DEFAULT_DEVICE_SCALE_FACTOR: f64 = 1.0;
/// Device pixels of the viewport (width x height x deviceScaleFactor²).
pub const MAX_VIEWPORT_PIXELS: f64 = params::MAX_SCREENSHOT_PIXELS;
pub const MAX_USER_AGENT_CHARS: usize = params::MAX_USER_AGENT_CHARS;
/// `userAgent`: printable ASCII, not only spaces.
pub const USER_AGENT_PATTERN: &str = "^[ -~]*[!-~][ -~]*$";
/// `locale`: a BCP 47 tag of a language (2 or 3 lower-case letters), an
/// optional script (4 letters, the first upper-case) and an optional region
/// (2 upper-case letters or 3 digits), as Chromium's `--lang` takes it.
pub const LOCALE_PATTERN: &str = "^[a-z]{2,3}(-[A-Z][a-z]{3})?(-([A-Z]{2}|[0-9]{3}))?$";

pub fn validate(body: &Value) -> Result<SessionSubmission, ApiError> {
    let mut p = Problems::default();
    let Some(obj) = p.object(body) else {
        return Err(ApiError::InvalidSessionBody { detail: p.into_vec() });
    };
    p.unknown_fields(obj, FIELDS);
    let profile = profile(&mut p, obj, "profileId", &Profile::LEASABLE);
    let ttl = int_in_range(&mut p, obj, "ttlMinutes", MIN_TTL_MINUTES, MAX_TTL_MINUTES);
    let network = network(&mut p, obj);
    let overrides = SessionOverrides {
        viewport: obj.get("viewport").and_then(|v| viewport(&mut p, v, profile)),
        user_agent: obj.get("userAgent").and_then(|v| user_agent(&mut p, v)),
        locale: obj.get("locale").and_then(|v| locale(&mut p, v)),
        timezone: obj.get("timezone").and_then(|v| timezone(&mut p, v)),
    };
    let take_over = boolean(&mut p, obj, "takeOver");
    let recording = boolean(&mut p, obj, "recording");
    let context = obj.get("context").and_then(|v| context(&mut p, v));
    let proxy = obj.get("proxy").and_then(|v| super::proxy::validate(&mut p, "proxy", v));
    match (profile, network) {
        (Some(profile), Some(network_policy)) if p.is_empty() => Ok(SessionSubmission {
            profile,
            ttl_minutes: ttl.map_or(DEFAULT_TTL_MINUTES, |n| n as u32),
            network_policy,
            overrides,
            take_over,
            recording,
            context,
            proxy,
        }),
        _ => Err(ApiError::InvalidSessionBody { detail: p.into_vec() }),
    }
}

/// A boolean member, false when absent.
fn boolean(p: &mut Problems, obj: &Map<String, Value>, field: &str) -> bool {
    match obj.get(field) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            p.push(field, format!("must be a boolean, got {}", json_type(v)));
            false
        }
    }
}

/// Whether `id` has the form of a context id (`CONTEXT_ID_PATTERN`).
pub fn is_context_id(id: &str) -> bool {
    id.strip_prefix(crate::ids::CONTEXT)
        .is_some_and(|rest| (1..=64).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// `context`: `{id, persist}`, `persist` false when left out.
fn context(p: &mut Problems, v: &Value) -> Option<SessionContext> {
    let Some(obj) = v.as_object() else {
        p.push("context", format!("must be an object {{id, persist}}, got {}", json_type(v)));
        return None;
    };
    let before = p.len();
    for k in obj.keys().filter(|k| !CONTEXT_FIELDS.contains(&k.as_str())) {
        p.push(&format!("context.{k}"), "unknown field");
    }
    let id = match obj.get("id") {
        None => {
            p.push("context.id", "is required: a context id from POST /contexts");
            None
        }
        Some(Value::String(id)) if is_context_id(id) => Some(id.clone()),
        Some(Value::String(_)) => {
            p.push("context.id", "must be a context id from POST /contexts (ctx_ and letters or digits)");
            None
        }
        Some(v) => {
            p.push("context.id", format!("must be a string, got {}", json_type(v)));
            None
        }
    };
    let persist = match obj.get("persist") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            p.push("context.persist", format!("must be a boolean, got {}", json_type(v)));
            false
        }
    };
    let id = id?;
    (p.len() == before).then_some(SessionContext { id, persist })
}

/// `viewport`; `profile` is `None` when `profileId` itself was refused.
fn viewport(p: &mut Problems, v: &Value, profile: Option<Profile>) -> Option<Viewport> {
    let Some(obj) = v.as_object() else {
        p.push(
            "viewport",
            format!("must be an object {{width, height, deviceScaleFactor, mobile}}, got {}", json_type(v)),
        );
        return None;
    };
    let before = p.len();
    for k in obj.keys().filter(|k| !VIEWPORT_FIELDS.contains(&k.as_str())) {
        p.push(&format!("viewport.{k}"), "unknown field");
    }
    let (min, max) = (MIN_VIEWPORT_SIZE as i64, MAX_VIEWPORT_SIZE as i64);
    let mut size = |field: &str| {
        let name = format!("viewport.{field}");
        match obj.get(field).map(|v| (v, whole_number(v))) {
            None => p.push(&name, format!("is required: a whole number from {min} to {max}")),
            Some((_, Some(n))) if (min..=max).contains(&n) => return Some(n as u32),
            Some((_, Some(n))) => p.push(&name, format!("must be between {min} and {max}, got {n}")),
            Some((v, None)) => {
                p.push(&name, format!("must be a whole number between {min} and {max}, got {}", json_type(v)))
            }
        }
        None
    };
    let (width, height) = (size("width"), size("height"));
    let (lo, hi) = (MIN_DEVICE_SCALE_FACTOR, MAX_DEVICE_SCALE_FACTOR);
    let device_scale_factor = match obj.get("deviceScaleFactor") {
        None => Some(DEFAULT_DEVICE_SCALE_FACTOR),
        Some(n) => match n.as_f64() {
            Some(f) if (lo..=hi).contains(&f) => Some(f),
            Some(f) => {
                p.push("viewport.deviceScaleFactor", format!("must be between {lo} and {hi}, got {f}"));
                None
            }
            None => {
                p.push(
                    "viewport.deviceScaleFactor",
                    format!("must be a number between {lo} and {hi}, got {}", json_type(n)),
                );
                None
            }
        },
    };
    let mobile = match obj.get("mobile") {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            p.push("viewport.mobile", format!("must be a boolean, got {}", json_type(v)));
            None
        }
    };
    if mobile == Some(true) && profile == Some(Profile::DesktopBrowserNl) {
        p.push(
            "viewport.mobile",
            format!(
                "{} is a desktop browser and takes no mobile viewport; lease {} for one",
                Profile::DesktopBrowserNl.as_str(),
                Profile::NativeHeadlessBrowser.as_str()
            ),
        );
    }
    let (width, height, device_scale_factor, mobile) = (width?, height?, device_scale_factor?, mobile?);
    let pixels = f64::from(width) * f64::from(height) * device_scale_factor * device_scale_factor;
    if pixels > MAX_VIEWPORT_PIXELS {
        p.push(
            "viewport",
            format!(
                "{width} x {height} at scale {device_scale_factor} is {pixels} device pixels, more than {MAX_VIEWPORT_PIXELS}"
            ),
        );
    }
    (p.len() == before).then_some(Viewport { width, height, device_scale_factor, mobile })
}

fn user_agent(p: &mut Problems, v: &Value) -> Option<String> {
    let Some(s) = v.as_str() else {
        p.push("userAgent", format!("must be a string, got {}", json_type(v)));
        return None;
    };
    let printable = s.bytes().all(|b| (b' '..=b'~').contains(&b));
    if s.is_empty() || s.len() > MAX_USER_AGENT_CHARS || !printable || s.bytes().all(|b| b == b' ') {
        p.push(
            "userAgent",
            format!(
                "must be 1 to {MAX_USER_AGENT_CHARS} printable ASCII characters (no line breaks or control \
                 characters, not only spaces), got {} characters",
                s.chars().count()
            ),
        );
        return None;
    }
    Some(s.to_string())
}

/// Whether `s` matches [`LOCALE_PATTERN`].
pub fn is_locale(s: &str) -> bool {
    let mut parts = s.split('-');
    let language = parts.next().unwrap_or("");
    if !(2..=3).contains(&language.len()) || !language.bytes().all(|b| b.is_ascii_lowercase()) {
        return false;
    }
    let is_script = |t: &str| {
        let b = t.as_bytes();
        b.len() == 4 && b[0].is_ascii_uppercase() && b[1..].iter().all(u8::is_ascii_lowercase)
    };
    let is_region = |t: &str| {
        (t.len() == 2 && t.bytes().all(|b| b.is_ascii_uppercase()))
            || (t.len() == 3 && t.bytes().all(|b| b.is_ascii_digit()))
    };
    let rest: Vec<&str> = parts.collect();
    match rest.as_slice() {
        [] => true,
        [one] => is_script(one) || is_region(one),
        [script, region] => is_script(script) && is_region(region),
        _ => false,
    }
}

fn locale(p: &mut Problems, v: &Value) -> Option<String> {
    match v.as_str() {
        Some(s) if is_locale(s) => Some(s.to_string()),
        Some(s) => {
            p.push(
                "locale",
                format!(
                    "must be a language tag such as nl-NL, fr-CA or zh-Hant-TW (language, optional Script, \
                     optional REGION), got \"{}\"",
                    s.escape_debug()
                ),
            );
            None
        }
        None => {
            p.push("locale", format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

fn timezone(p: &mut Problems, v: &Value) -> Option<String> {
    match v.as_str() {
        Some(s) if time_zones::is_known(s) => Some(s.to_string()),
        Some(s) => {
            p.push(
                "timezone",
                format!(
                    "unknown time zone \"{}\": an IANA name as Chromium knows it, such as Europe/Amsterdam or UTC \
                     (the list: Intl.supportedValuesOf('timeZone'))",
                    s.escape_debug()
                ),
            );
            None
        }
        None => {
            p.push("timezone", format!("must be a string, got {}", json_type(v)));
            None
        }
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
    fn a_context_is_an_id_and_whether_to_persist() {
        let s = validate(&json!({"context": {"id": "ctx_01ABC", "persist": true}})).unwrap();
        assert_eq!(s.context, Some(SessionContext { id: "ctx_01ABC".into(), persist: true }));
        let s = validate(&json!({"context": {"id": "ctx_01ABC"}})).unwrap();
        assert_eq!(s.context, Some(SessionContext { id: "ctx_01ABC".into(), persist: false }));
        assert_eq!(validate(&json!({})).unwrap().context, None);
        assert_eq!(detail(json!({"context": "ctx_1"})), ["context: must be an object {id, persist}, got a string"]);
        assert_eq!(
            detail(json!({"context": {"persist": 1, "x": 1}})),
            [
                "context.x: unknown field",
                "context.id: is required: a context id from POST /contexts",
                "context.persist: must be a boolean, got a number"
            ]
        );
        assert_eq!(
            detail(json!({"context": {"id": "ses_1"}})),
            ["context.id: must be a context id from POST /contexts (ctx_ and letters or digits)"]
        );
        assert!(!is_context_id("ctx_"));
        assert!(!is_context_id(&format!("ctx_{}", "a".repeat(65))));
        assert!(is_context_id(&format!("ctx_{}", "a".repeat(64))));
    }

    #[test]
    fn empty_body_takes_defaults() {
        assert_eq!(
            validate(&json!({})).unwrap(),
            SessionSubmission {
                profile: Profile::DesktopBrowserNl,
                ttl_minutes: 30,
                network_policy: None,
                overrides: SessionOverrides::default(),
                take_over: false,
                recording: false,
                context: None,
                proxy: None,
            }
        );
        assert!(validate(&json!({"recording": true})).unwrap().recording);
        assert_eq!(detail(json!({"recording": "yes"})), ["recording: must be a boolean, got a string"]);
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

    #[test]
    fn the_capture_only_profile_is_not_leased() {
        assert_eq!(
            detail(json!({"profileId": "native-headless-browser/v3"})),
            vec!["profileId: profile for capture items only \"native-headless-browser/v3\"; one of desktop-browser-nl/v2, native-headless-browser/v2"]
        );
    }

    #[test]
    fn overrides_are_read_with_their_defaults() {
        let s = validate(&json!({
            "profileId": "native-headless-browser/v2",
            "viewport": {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": true},
            "userAgent": "Agent/1 (test)", "locale": "fr-CA", "timezone": "America/Toronto"
        }))
        .unwrap();
        assert_eq!(
            s.overrides,
            SessionOverrides {
                viewport: Some(Viewport { width: 390, height: 844, device_scale_factor: 3.0, mobile: true }),
                user_agent: Some("Agent/1 (test)".into()),
                locale: Some("fr-CA".into()),
                timezone: Some("America/Toronto".into()),
            }
        );
        let v = validate(&json!({"viewport": {"width": 1280, "height": 720}})).unwrap().overrides.viewport.unwrap();
        assert_eq!(v, Viewport { width: 1280, height: 720, device_scale_factor: 1.0, mobile: false });
        assert!(validate(&json!({})).unwrap().overrides.is_empty());
    }

    #[test]
    fn override_problems_name_their_field() {
        assert_eq!(
            detail(json!({"viewport": {"width": 99, "height": "720", "deviceScaleFactor": 5, "mobile": 1, "x": 1}})),
            vec![
                "viewport.x: unknown field",
                "viewport.width: must be between 100 and 4096, got 99",
                "viewport.height: must be a whole number between 100 and 4096, got a string",
                "viewport.deviceScaleFactor: must be between 0.5 and 4, got 5",
                "viewport.mobile: must be a boolean, got a number",
            ]
        );
        assert_eq!(
            detail(json!({"viewport": {"width": 100}})),
            vec!["viewport.height: is required: a whole number from 100 to 4096"]
        );
        assert_eq!(
            detail(json!({"viewport": [1, 2]})),
            vec!["viewport: must be an object {width, height, deviceScaleFactor, mobile}, got an array"]
        );
        let huge = detail(json!({"viewport": {"width": 4096, "height": 4096, "deviceScaleFactor": 2}}));
        assert!(huge[0].starts_with("viewport: 4096 x 4096 at scale 2 is 67108864 device pixels"), "{huge:?}");
        let mobile = detail(json!({"viewport": {"width": 390, "height": 844, "mobile": true}}));
        assert!(mobile[0].starts_with("viewport.mobile: desktop-browser-nl/v2 is a desktop browser"), "{mobile:?}");
        for ua in [json!(""), json!("   "), json!("a\r\nX-Evil: 1"), json!("é"), json!("x".repeat(513)), json!(7)] {
            let d = detail(json!({"userAgent": ua}));
            assert!(d.len() == 1 && d[0].starts_with("userAgent: must be"), "{ua}: {d:?}");
        }
        for tz in ["Mars/Olympus", "europe/amsterdam", "Asia/Kolkata", ""] {
            let d = detail(json!({"timezone": tz}));
            assert!(d.len() == 1 && d[0].starts_with(&format!("timezone: unknown time zone \"{tz}\"")), "{d:?}");
        }
        assert_eq!(detail(json!({"timezone": 1})), vec!["timezone: must be a string, got a number"]);
        let d = detail(json!({"locale": "en_US"}));
        assert!(d.len() == 1 && d[0].starts_with("locale: must be a language tag"), "{d:?}");
    }

    #[test]
    fn locales_are_language_script_region() {
        for ok in ["nl", "nl-NL", "fr-CA", "zh-Hant", "zh-Hant-TW", "es-419", "haw-US"] {
            assert!(is_locale(ok), "{ok}");
        }
        for bad in ["", "n", "NL", "nl-nl", "nl_NL", "nl-NL-x", "zh-hant-TW", "es-41", "abcd", "nl-", "-NL", "nl-NL "] {
            assert!(!is_locale(bad), "{bad}");
        }
    }
}
