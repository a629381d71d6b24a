//! Instants as integer milliseconds since the Unix epoch, rendered on the wire
//! as ISO 8601 UTC with milliseconds (`2026-11-21T04:27:52.123Z`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since the Unix epoch, UTC. The driver reads the clock; the
/// domain only compares and adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Millis(pub i64);

pub const MILLIS_PER_DAY: i64 = 86_400_000;

impl Millis {
    pub fn plus_ms(self, ms: i64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// ISO 8601 UTC with milliseconds, as every timestamp in the contract.
    pub fn to_iso(self) -> String {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    pub fn parse_iso(s: &str) -> Option<Millis> {
        DateTime::parse_from_rfc3339(s).ok().map(|d| Millis(d.with_timezone(&Utc).timestamp_millis()))
    }

    /// The UTC day this instant falls in, as days since the epoch.
    pub fn utc_day(self) -> i64 {
        self.0.div_euclid(MILLIS_PER_DAY)
    }

    /// The next 00:00 UTC strictly after this instant.
    pub fn next_utc_midnight(self) -> Millis {
        Millis((self.utc_day() + 1) * MILLIS_PER_DAY)
    }
}

impl Serialize for Millis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_iso())
    }
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Millis::parse_iso(&s).ok_or_else(|| serde::de::Error::custom("not an ISO 8601 timestamp"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_has_milliseconds_and_z() {
        assert_eq!(Millis(0).to_iso(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Millis(1_795_000_000_123).to_iso(), "2026-11-18T11:06:40.123Z");
    }

    #[test]
    fn iso_round_trips() {
        let t = Millis(1_795_000_000_123);
        assert_eq!(Millis::parse_iso(&t.to_iso()), Some(t));
    }

    #[test]
    fn midnight_is_next_day_boundary() {
        let t = Millis(MILLIS_PER_DAY * 3 + 5);
        assert_eq!(t.next_utc_midnight(), Millis(MILLIS_PER_DAY * 4));
        assert_eq!(Millis(MILLIS_PER_DAY * 4).next_utc_midnight(), Millis(MILLIS_PER_DAY * 5));
    }
}
