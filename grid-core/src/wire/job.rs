//! Analytical jobs (POST/GET /jobs, cancel, retry, artifacts, logs): the
//! submission body, its validated form, and the vocabularies a job record
//! uses (phase, termination class and reason). The record itself is defined
//! with the jobs endpoints.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::validate::job::ImageRef;

/// What a client sends to POST /jobs. Optional fields left out take the
/// contract's defaults (`args: []`, `retries: 0`, `priority: 0`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewJob {
    pub image: String,
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    pub resources: NewResources,
    pub running_deadline_seconds: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    pub capabilities: NewCapabilities,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub idempotency_key: String,
}

/// `resources` of POST /jobs: Kubernetes-style quantity strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewResources {
    pub cpu: QuantityBounds,
    pub memory: QuantityBounds,
    pub ephemeral_storage: QuantityBounds,
}

/// `{request, limit}` as quantity strings (`"250m"`, `"1Gi"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantityBounds {
    pub request: String,
    pub limit: String,
}

impl QuantityBounds {
    pub fn new(request: impl Into<String>, limit: impl Into<String>) -> QuantityBounds {
        QuantityBounds { request: request.into(), limit: limit.into() }
    }
}

/// `capabilities` of POST /jobs, as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewCapabilities {
    pub network_profile: String,
}

impl Default for NewCapabilities {
    fn default() -> Self {
        NewCapabilities { network_profile: NetworkProfile::None.as_str().to_string() }
    }
}

/// A job body that passed validation: defaults applied, quantities parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSubmission {
    /// The image reference exactly as sent.
    pub image: String,
    /// The same reference, taken apart. Whether its repository is admitted
    /// and it exists for linux/amd64 is the server's check (INVALID_IMAGE).
    pub image_ref: ImageRef,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub resources: Resources,
    pub running_deadline_seconds: u32,
    pub retries: u32,
    pub priority: u32,
    pub network_profile: NetworkProfile,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub idempotency_key: String,
}

/// Parsed resource bounds: CPU in millicores, memory and storage in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: Bounds,
    pub memory_bytes: Bounds,
    pub ephemeral_storage_bytes: Bounds,
}

/// A request and a limit, `request <= limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub request: u64,
    pub limit: u64,
}

/// `capabilities.networkProfile`: what the container may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkProfile {
    /// No network at all.
    None,
    /// Outbound HTTPS to the public internet only.
    PublicHttps,
}

impl NetworkProfile {
    pub const ALL: [NetworkProfile; 2] = [NetworkProfile::None, NetworkProfile::PublicHttps];

    pub fn as_str(self) -> &'static str {
        match self {
            NetworkProfile::None => "none",
            NetworkProfile::PublicHttps => "public-https",
        }
    }

    pub fn parse(s: &str) -> Option<NetworkProfile> {
        NetworkProfile::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// An analytical job's phase (and an attempt's). Declared in lifecycle order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobPhase {
    Accepted,
    Queued,
    Provisioning,
    Running,
    Publishing,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
}

impl JobPhase {
    pub const ALL: [JobPhase; 9] = [
        JobPhase::Accepted,
        JobPhase::Queued,
        JobPhase::Provisioning,
        JobPhase::Running,
        JobPhase::Publishing,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::TimedOut,
        JobPhase::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Accepted => "ACCEPTED",
            JobPhase::Queued => "QUEUED",
            JobPhase::Provisioning => "PROVISIONING",
            JobPhase::Running => "RUNNING",
            JobPhase::Publishing => "PUBLISHING",
            JobPhase::Succeeded => "SUCCEEDED",
            JobPhase::Failed => "FAILED",
            JobPhase::TimedOut => "TIMED_OUT",
            JobPhase::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<JobPhase> {
        JobPhase::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// SUCCEEDED, FAILED, TIMED_OUT or CANCELLED.
    pub fn is_finished(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed | JobPhase::TimedOut | JobPhase::Cancelled)
    }
}

/// Who ended an attempt: the workload itself, a cancel request, or the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TerminationClass {
    Workload,
    Cancelled,
    Platform,
}

impl TerminationClass {
    pub fn as_str(self) -> &'static str {
        match self {
            TerminationClass::Workload => "workload",
            TerminationClass::Cancelled => "cancelled",
            TerminationClass::Platform => "platform",
        }
    }
}

/// Why an attempt ended. The six reasons the contract names, the grid's own
/// platform reasons, and any other string read back from storage.
///
/// Classes: WORKLOAD_SUCCEEDED, WORKLOAD_FAILED, PLATFORM_OOM (the container
/// exceeded its *own* memory limit) and RUNNING_DEADLINE_EXCEEDED are
/// `workload`; CANCELLED is `cancelled`; every other reason is `platform`.
/// An attempt is charged exactly when its class is not `platform`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TerminationReason {
    WorkloadSucceeded,
    WorkloadFailed,
    PlatformOom,
    RunningDeadlineExceeded,
    Cancelled,
    /// The machine ran short of resources; replayed while `retries` allow.
    PlatformEvicted,
    /// The container could not be created or started (image pull, runtime).
    PlatformStartFailed,
    /// The container vanished for another grid-side cause (the runtime or
    /// the grid restarted and lost it). Final, not replayed.
    PlatformLost,
    /// A reason this build does not know; always platform-side and free.
    Other(String),
}

impl TerminationReason {
    pub fn as_str(&self) -> &str {
        match self {
            TerminationReason::WorkloadSucceeded => "WORKLOAD_SUCCEEDED",
            TerminationReason::WorkloadFailed => "WORKLOAD_FAILED",
            TerminationReason::PlatformOom => "PLATFORM_OOM",
            TerminationReason::RunningDeadlineExceeded => "RUNNING_DEADLINE_EXCEEDED",
            TerminationReason::Cancelled => "CANCELLED",
            TerminationReason::PlatformEvicted => "PLATFORM_EVICTED",
            TerminationReason::PlatformStartFailed => "PLATFORM_START_FAILED",
            TerminationReason::PlatformLost => "PLATFORM_LOST",
            TerminationReason::Other(s) => s,
        }
    }

    /// Never fails: an unknown name is kept as `Other`.
    pub fn parse(s: &str) -> TerminationReason {
        use TerminationReason::*;
        [
            WorkloadSucceeded,
            WorkloadFailed,
            PlatformOom,
            RunningDeadlineExceeded,
            Cancelled,
            PlatformEvicted,
            PlatformStartFailed,
            PlatformLost,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .unwrap_or_else(|| Other(s.to_string()))
    }

    pub fn class(&self) -> TerminationClass {
        use TerminationReason::*;
        match self {
            WorkloadSucceeded | WorkloadFailed | PlatformOom | RunningDeadlineExceeded => TerminationClass::Workload,
            Cancelled => TerminationClass::Cancelled,
            PlatformEvicted | PlatformStartFailed | PlatformLost | Other(_) => TerminationClass::Platform,
        }
    }

    /// Whether the attempt's run time is charged: only for the five reasons
    /// the contract's Metering table names.
    pub fn is_charged(&self) -> bool {
        use TerminationReason::*;
        matches!(self, WorkloadSucceeded | WorkloadFailed | PlatformOom | RunningDeadlineExceeded | Cancelled)
    }

    /// The phase a job ends in when its last attempt ends for this reason.
    pub fn final_phase(&self) -> JobPhase {
        match self {
            TerminationReason::WorkloadSucceeded => JobPhase::Succeeded,
            TerminationReason::RunningDeadlineExceeded => JobPhase::TimedOut,
            TerminationReason::Cancelled => JobPhase::Cancelled,
            _ => JobPhase::Failed,
        }
    }
}

impl Serialize for TerminationReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TerminationReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(TerminationReason::parse(&String::deserialize(d)?))
    }
}

/// `termination` of a finished attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Termination {
    pub class: TerminationClass,
    /// The container's exit code; null when no container exited (the attempt
    /// ended before its container started, or the container was lost).
    pub exit_code: Option<i32>,
    pub reason: TerminationReason,
}

impl Termination {
    /// The class always follows from the reason.
    pub fn new(reason: TerminationReason, exit_code: Option<i32>) -> Termination {
        Termination { class: reason.class(), exit_code, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn phase_names_round_trip() {
        for p in JobPhase::ALL {
            assert_eq!(JobPhase::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
        }
        assert_eq!(serde_json::to_value(JobPhase::TimedOut).unwrap(), json!("TIMED_OUT"));
        assert_eq!(JobPhase::parse("queued"), None);
        let finished: Vec<_> = JobPhase::ALL.into_iter().filter(|p| p.is_finished()).collect();
        assert_eq!(finished, [JobPhase::Succeeded, JobPhase::Failed, JobPhase::TimedOut, JobPhase::Cancelled]);
    }

    #[test]
    fn charged_exactly_for_the_five_metering_reasons() {
        use TerminationReason::*;
        let charged = [WorkloadSucceeded, WorkloadFailed, PlatformOom, RunningDeadlineExceeded, Cancelled];
        for r in &charged {
            assert!(r.is_charged(), "{r:?}");
            assert_ne!(r.class(), TerminationClass::Platform);
        }
        for r in [PlatformEvicted, PlatformStartFailed, PlatformLost, Other("PLATFORM_NODE_GONE".into())] {
            assert!(!r.is_charged(), "{r:?}");
            assert_eq!(r.class(), TerminationClass::Platform);
        }
        assert_eq!(Cancelled.class(), TerminationClass::Cancelled);
        assert_eq!(PlatformOom.class(), TerminationClass::Workload);
    }

    #[test]
    fn reasons_round_trip_and_unknown_ones_survive() {
        for s in ["WORKLOAD_SUCCEEDED", "PLATFORM_OOM", "PLATFORM_EVICTED", "PLATFORM_START_FAILED", "SOMETHING_NEW"] {
            assert_eq!(TerminationReason::parse(s).as_str(), s);
        }
        assert_eq!(TerminationReason::parse("SOMETHING_NEW"), TerminationReason::Other("SOMETHING_NEW".into()));
        let t = Termination::new(TerminationReason::WorkloadFailed, Some(2));
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"class": "workload", "exitCode": 2, "reason": "WORKLOAD_FAILED"})
        );
        let back: Termination =
            serde_json::from_value(json!({"class": "platform", "exitCode": null, "reason": "PLATFORM_EVICTED"}))
                .unwrap();
        assert_eq!(back, Termination::new(TerminationReason::PlatformEvicted, None));
    }

    #[test]
    fn final_phase_per_reason() {
        assert_eq!(TerminationReason::WorkloadSucceeded.final_phase(), JobPhase::Succeeded);
        assert_eq!(TerminationReason::RunningDeadlineExceeded.final_phase(), JobPhase::TimedOut);
        assert_eq!(TerminationReason::Cancelled.final_phase(), JobPhase::Cancelled);
        assert_eq!(TerminationReason::PlatformOom.final_phase(), JobPhase::Failed);
        assert_eq!(TerminationReason::PlatformEvicted.final_phase(), JobPhase::Failed);
    }

    #[test]
    fn new_job_skips_absent_optionals() {
        let job = NewJob {
            image: "registry.example/team/tool:1.0".into(),
            command: vec!["run".into()],
            resources: NewResources {
                cpu: QuantityBounds::new("250m", "1"),
                memory: QuantityBounds::new("256Mi", "1Gi"),
                ephemeral_storage: QuantityBounds::new("256Mi", "1Gi"),
            },
            running_deadline_seconds: 60,
            idempotency_key: "k1".into(),
            ..NewJob::default()
        };
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(
            v,
            json!({
                "image": "registry.example/team/tool:1.0",
                "command": ["run"],
                "resources": {
                    "cpu": {"request": "250m", "limit": "1"},
                    "memory": {"request": "256Mi", "limit": "1Gi"},
                    "ephemeralStorage": {"request": "256Mi", "limit": "1Gi"},
                },
                "runningDeadlineSeconds": 60,
                "capabilities": {"networkProfile": "none"},
                "env": {},
                "labels": {},
                "idempotencyKey": "k1",
            })
        );
        let back: NewJob = serde_json::from_value(v).unwrap();
        assert_eq!(back, job);
    }

    #[test]
    fn network_profiles() {
        for p in NetworkProfile::ALL {
            assert_eq!(NetworkProfile::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
        }
        assert_eq!(NetworkProfile::parse("public"), None);
    }
}
