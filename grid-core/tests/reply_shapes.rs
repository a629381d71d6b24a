//! Each answer's JSON Schema (`grid_core::reply_shapes`) against its wire
//! type: a value with every field set (struct literals, no `..Default`, so a
//! field added to a type does not compile here until it is given a value)
//! must fit the schema, every field it writes must be a property of the
//! schema, and every property of the schema must be written.

use std::collections::BTreeMap;

use grid_core::catalog::{Profile, Script};
use grid_core::item::ItemState;
use grid_core::job::Funding;
use grid_core::ledger::EntryKind;
use grid_core::reply_shapes as replies;
use grid_core::session::SessionStatus;
use grid_core::time::Millis;
use grid_core::wire::account::{AccountStatement, AccountView, DailyCapUse, LedgerLine};
use grid_core::wire::batch::{BatchCounts, BatchCreated, BatchJob, BatchJobState, BatchList, BatchSummary, BatchView};
use grid_core::wire::grid::{GridStatus, Health, ProtectedResource, QueueCounts, QueueDepth, SCOPES_SUPPORTED};
use grid_core::wire::item::{ArtifactUrl, CaptureItem, ItemRetried};
use grid_core::wire::job::{JobPhase, Termination, TerminationReason};
use grid_core::wire::job_record::{AttemptRecord, Executor, JobArtifact, JobArtifacts, JobList, JobRecord, LogsInfo};
use grid_core::wire::session::{
    Attestation, AttestedContext, ContextCreated, ContextView, NetworkAttestation, NetworkProbe, RefusedDownload,
    SessionDownload, SessionDownloads, SessionLease, SessionOverrides, SessionRecording, SessionView, Viewport, Window,
};
use serde::Serialize;
use serde_json::{json, Value};

const T: Millis = Millis(1_767_225_600_000);

/// Holds `value` to `schema` at `path`: types, enums, required members, and
/// no member the schema does not describe.
fn fits(schema: &Value, value: &Value, path: &str) {
    let s = schema.as_object().unwrap_or_else(|| panic!("{path}: schema is not an object"));
    for k in s.keys() {
        assert!(
            [
                "type",
                "properties",
                "required",
                "items",
                "enum",
                "format",
                "minimum",
                "description",
                "additionalProperties",
                "propertyNames"
            ]
            .contains(&k.as_str()),
            "{path}: keyword {k} is not checked by this test"
        );
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
            other => panic!("{path}: type {other}"),
        };
        let ok = types.iter().any(|t| match *t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            other => panic!("{path}: type {other}"),
        });
        assert!(ok, "{path}: {value} is not of type {t}");
    }
    if let Some(members) = s.get("enum") {
        assert!(members.as_array().unwrap().contains(value), "{path}: {value} is not in {members}");
    }
    if let (Some(min), Some(n)) = (s.get("minimum"), value.as_i64()) {
        assert!(n >= min.as_i64().unwrap(), "{path}: {n} below {min}");
    }
    if s.get("format") == Some(&json!("date-time")) {
        if let Some(t) = value.as_str() {
            assert!(Millis::parse_iso(t).is_some(), "{path}: {t} is not a date-time");
        }
    }
    if let Value::Object(members) = value {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for r in required {
                assert!(members.contains_key(r.as_str().unwrap()), "{path}: required {r} missing from {value}");
            }
        }
        for (k, v) in members {
            if let Some(names) = s.get("propertyNames") {
                fits(names, &json!(k), &format!("{path} member name {k}"));
            }
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(sub), _) => fits(sub, v, &format!("{path}.{k}")),
                (None, Some(extra)) if extra.is_object() => fits(extra, v, &format!("{path}.{k}")),
                _ => panic!("{path}: the value writes {k}, which the schema does not describe"),
            }
        }
        // Every described property is written by the full value.
        for k in props.map(|p| p.keys().collect::<Vec<_>>()).unwrap_or_default() {
            assert!(members.contains_key(k), "{path}: the schema describes {k}, which the full value does not write");
        }
    }
    if let (Value::Array(items), Some(item)) = (value, s.get("items")) {
        assert!(!items.is_empty(), "{path}: the full value's arrays hold an item");
        for (i, v) in items.iter().enumerate() {
            fits(item, v, &format!("{path}[{i}]"));
        }
    }
}

fn check<T: Serialize>(name: &str, schema: Value, value: T) {
    let v = serde_json::to_value(value).unwrap();
    fits(&schema, &v, name);
}

fn attestation() -> Attestation {
    Attestation {
        profile_id: Profile::DEFAULT.as_str().into(),
        product: "Chrome/140".into(),
        version: "140.0".into(),
        protocol_version: "1.3".into(),
        user_agent: "Mozilla/5.0".into(),
        image_digest: "sha256:ab".into(),
        mode: "headful".into(),
        locale: "nl-NL".into(),
        time_zone: "Europe/Amsterdam".into(),
        window: Window { width: 1280, height: 800, device_scale_factor: 1.0, mobile: false },
        overrides: Some(SessionOverrides {
            viewport: Some(Viewport { width: 1280, height: 800, device_scale_factor: 1.0, mobile: false }),
            user_agent: Some("Agent/1".into()),
            locale: Some("fr-CA".into()),
            timezone: Some("America/Toronto".into()),
        }),
        context: Some(AttestedContext { context_id: "ctx_1".into(), state_sha256: "sha256:ab".into(), persist: true }),
        launch_manifest_hash: "cd".into(),
        upstream_proxy: Some("proxy.example:1080".into()),
        attested_at: T,
    }
}

fn network_attestation() -> NetworkAttestation {
    NetworkAttestation {
        policy: "public-web-only/v1".into(),
        enforced_by: "grid-egress-proxy".into(),
        probes: vec![NetworkProbe {
            url: "http://169.254.169.254/".into(),
            outcome: "refused".into(),
            browser_result: "net::ERR".into(),
            proxy_decision: "deny".into(),
        }],
        attested_at: T,
    }
}

fn session_downloads() -> SessionDownloads {
    SessionDownloads {
        downloads: vec![SessionDownload {
            name: "report.csv".into(),
            size_bytes: 12,
            created_at: T,
            url: "http://127.0.0.1/downloads/sessions/ses_1/report.csv?expires=1&sig=ab".into(),
            suggested_name: Some("report.csv".into()),
            recording: false,
        }],
        total_bytes: 12,
        limit_bytes: 100,
        refused: vec![RefusedDownload { name: "big.iso".into(), reason: "cancelled".into(), at: T }],
        kept_until: Some(T),
    }
}

fn job_artifact() -> JobArtifact {
    JobArtifact {
        artifact_id: "ja_1".into(),
        kind: "log".into(),
        byte_length: 10,
        content_type: "text/plain".into(),
        created_at: T,
        attempt: 1,
        truncated: false,
    }
}

fn job_record() -> JobRecord {
    let executor = Some(Executor {
        engine: "docker".into(),
        container_name: "grid-cj_1-1".into(),
        container_id: Some("c1".into()),
    });
    let logs = LogsInfo {
        available: true,
        artifact_id: Some("ja_1".into()),
        byte_length: Some(10),
        content_type: Some("text/plain".into()),
    };
    let termination = Some(Termination::new(TerminationReason::WorkloadFailed, Some(1)));
    let stamps: BTreeMap<JobPhase, Millis> = [(JobPhase::Accepted, T), (JobPhase::Failed, T)].into();
    JobRecord {
        job_id: "cj_1".into(),
        attempt: 1,
        image_digest: "sha256:ab".into(),
        phase: JobPhase::Failed,
        phase_timestamps: stamps.clone(),
        executor: executor.clone(),
        attempts: vec![AttemptRecord {
            attempt: 1,
            phase: JobPhase::Failed,
            phase_timestamps: stamps,
            funding: Funding::Reservation,
            started_at: Some(T),
            ended_at: Some(T),
            termination: termination.clone(),
            executor,
            logs: logs.clone(),
            logs_truncated: false,
        }],
        termination,
        logs_truncated: false,
        logs,
        artifacts: vec![job_artifact()],
        labels: [("team".to_string(), "data".to_string())].into(),
        priority: 0,
        retries: 1,
        running_deadline_seconds: 60,
        cancel_requested: false,
        created_at: T,
    }
}

#[test]
fn every_answer_fits_its_schema_field_for_field() {
    check(
        "GridStatus",
        replies::grid_status(),
        GridStatus {
            queue: QueueCounts { wait: 1, prioritized: 2, delayed: 3 },
            workers: 1,
            sessions: 0,
            max_sessions: 4,
            nodes: 1,
        },
    );
    check("QueueDepth", replies::queue_depth(), QueueDepth { depth: 3 });
    check("Health", replies::health(), Health { status: "ok".into() });
    check(
        "ProtectedResource",
        replies::protected_resource(),
        ProtectedResource {
            resource: "https://grid.example/mcp".into(),
            authorization_servers: vec!["https://auth.example".into()],
            scopes_supported: SCOPES_SUPPORTED.map(String::from).to_vec(),
            bearer_methods_supported: vec!["header".into()],
        },
    );
    check(
        "AccountStatement",
        replies::account_statement(),
        AccountStatement {
            account: AccountView {
                account_id: "acc_1".into(),
                name: "n".into(),
                credit_micros: 10,
                reserved_micros: 2,
                available_micros: 8,
                suspended: false,
            },
            daily_cap: Some(DailyCapUse { cap_micros: Some(5), used_micros: 1, resets_at: T }),
            ledger: vec![LedgerLine {
                kind: EntryKind::Charge,
                amount_micros: -1,
                subject: Some("it_1".into()),
                key_id: Some("key_1".into()),
                created_at: T,
            }],
            next_cursor: Some("c".into()),
        },
    );
    check("BatchCreated", replies::batch_created(), BatchCreated { batch_id: "bt_1".into(), job_count: 2 });
    check(
        "BatchList",
        replies::batch_list(),
        BatchList {
            batches: vec![BatchSummary {
                batch_id: "bt_1".into(),
                created_at: Millis(1_700_000_000_000),
                script: "fetch".into(),
                profile_id: "desktop-browser-nl/v2".into(),
                counts: BatchCounts { waiting: 1, active: 0, completed: 2, failed: 0 },
                total: 3,
            }],
            next_cursor: Some("c".into()),
        },
    );
    check(
        "BatchView",
        replies::batch_view(),
        BatchView {
            batch_id: "bt_1".into(),
            counts: BatchCounts { waiting: 0, active: 0, completed: 0, failed: 1 },
            total: 1,
            jobs: vec![BatchJob {
                job_id: "it_1".into(),
                url: "http://a.example/".into(),
                state: BatchJobState::Failed,
                failed_reason: Some("timeout".into()),
            }],
        },
    );
    check(
        "CaptureItem",
        replies::capture_item(),
        CaptureItem {
            job_id: "it_1".into(),
            batch_id: "bt_1".into(),
            url: "http://a.example/".into(),
            state: ItemState::Completed,
            attempts_made: 1,
            failed_reason: Some("x".into()),
            artifacts: [("screenshot".to_string(), "db:it_1/screenshot".to_string())].into(),
            script: Script::Capture.as_str().into(),
            profile_id: Profile::DEFAULT.as_str().into(),
        },
    );
    check("ItemRetried", replies::item_retried(), ItemRetried { job_id: "it_1".into(), state: ItemState::Waiting });
    check("ArtifactUrl", replies::artifact_url(), ArtifactUrl { url: "http://127.0.0.1/downloads/it_1/html".into() });
    check("JobRecord", replies::job_record(), job_record());
    check("JobList", replies::job_list(), JobList { jobs: vec![job_record()], next_cursor: Some("c".into()) });
    check("JobArtifacts", replies::job_artifacts(), JobArtifacts { artifacts: vec![job_artifact()] });
    check(
        "SessionLease",
        replies::session_lease(),
        SessionLease {
            session_id: "ses_1".into(),
            cdp_url: "http://127.0.0.1/cdp/ses_1/t".into(),
            live_view_url: "http://127.0.0.1/cdp/ses_1/t/view".into(),
            expires_at: T,
            profile_id: Profile::DEFAULT.as_str().into(),
            attestation: Some(attestation()),
            network_policy: Some("public-web-only/v1".into()),
            network_attestation: Some(network_attestation()),
        },
    );
    check(
        "SessionList",
        replies::session_list(),
        vec![SessionView {
            session_id: "ses_1".into(),
            status: SessionStatus::Pending,
            created_at: T,
            expires_at: T,
            profile_id: Profile::DEFAULT.as_str().into(),
            attestation: Some(attestation()),
            network_policy: None,
            network_attestation: Some(network_attestation()),
        }],
    );
    check("SessionDownloads", replies::session_downloads(), session_downloads());
    check("ContextCreated", replies::context_created(), ContextCreated { context_id: "ctx_1".into() });
    check(
        "ContextList",
        replies::context_list(),
        vec![ContextView {
            context_id: "ctx_1".into(),
            size_bytes: 10,
            created_at: T,
            last_used_at: Some(T),
            saved_at: Some(T),
            session_id: Some("ses_1".into()),
            last_save_refused: Some("over the bound".into()),
        }],
    );
    check(
        "SessionRecording",
        replies::session_recording(),
        SessionRecording {
            url: "http://127.0.0.1/recordings/ses_1?expires=1&sig=ab".into(),
            expires_at: T,
            name: "recording.html".into(),
            size_bytes: 4096,
            frames: 12,
            duration_ms: 3000,
            truncated: false,
            kept_until: Some(T),
        },
    );
    check(
        "SessionView",
        replies::session_view(),
        SessionView {
            session_id: "ses_1".into(),
            status: SessionStatus::Running,
            created_at: T,
            expires_at: T,
            profile_id: Profile::DEFAULT.as_str().into(),
            attestation: Some(attestation()),
            network_policy: Some("public-web-only/v1".into()),
            network_attestation: Some(network_attestation()),
        },
    );
}

/// What a record has before it is filled in (nulls, a pending session, a
/// job that has not run) fits too.
#[test]
fn answers_with_nothing_yet_fit() {
    let lease = SessionLease {
        session_id: "ses_1".into(),
        cdp_url: "http://127.0.0.1/cdp/ses_1/t".into(),
        live_view_url: "http://127.0.0.1/cdp/ses_1/t/view".into(),
        expires_at: T,
        profile_id: Profile::DEFAULT.as_str().into(),
        attestation: None,
        network_policy: None,
        network_attestation: None,
    };
    let v = serde_json::to_value(lease).unwrap();
    // Only the null-valued branch is exercised; `fits` insists on every
    // property being written, which a lease with nulls does.
    fits(&replies::session_lease(), &v, "SessionLease with nulls");
    let mut record = job_record();
    record.executor = None;
    record.termination = None;
    record.attempts[0].started_at = None;
    let v = serde_json::to_value(record).unwrap();
    fits(&replies::job_record(), &v, "JobRecord not yet run");
    let live = SessionDownloads { kept_until: None, ..session_downloads() };
    fits(&replies::session_downloads(), &serde_json::to_value(live).unwrap(), "SessionDownloads of a live session");
}

/// A schema walker that accepts everything proves nothing: it refuses an
/// undescribed field, a wrong type and a missing required member.
#[test]
fn the_check_refuses_what_does_not_fit() {
    let schema = replies::batch_created();
    for bad in [
        json!({"batchId": "bt_1", "jobCount": 2, "extra": 1}),
        json!({"batchId": 7, "jobCount": 2}),
        json!({"batchId": "bt_1"}),
        json!({"batchId": "bt_1", "jobCount": -1}),
    ] {
        let refused = std::panic::catch_unwind(|| fits(&schema, &bad, "probe")).is_err();
        assert!(refused, "{bad} passed");
    }
}
