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
        match self.iso_bytes() {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => self.chrono_iso(),
        }
    }

    fn chrono_iso(self) -> String {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    /// `to_iso` of an instant in the years 0 to 9999 (every instant the grid
    /// makes), written without allocating: records carry many timestamps
    /// and are rendered on every read. `None` for other years, which chrono
    /// renders.
    fn iso_bytes(self) -> Option<[u8; ISO_LEN]> {
        let (days, in_day) = (self.0.div_euclid(MILLIS_PER_DAY), self.0.rem_euclid(MILLIS_PER_DAY));
        let (year, month, day) = civil_from_days(days);
        if !(0..=9999).contains(&year) {
            return None;
        }
        let mut b = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut n: i64| {
            for i in (at..at + width).rev() {
                b[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, in_day / 3_600_000);
        put(14, 2, in_day / 60_000 % 60);
        put(17, 2, in_day / 1_000 % 60);
        put(20, 3, in_day % 1_000);
        Some(b)
    }

    pub fn parse_iso(s: &str) -> Option<Millis> {
        Millis::parse_canonical(s)
            .or_else(|| DateTime::parse_from_rfc3339(s).ok().map(|d| Millis(d.with_timezone(&Utc).timestamp_millis())))
    }

    /// `parse_iso` of exactly the form `to_iso` writes (what the grid
    /// reads back), without chrono; `None` for anything else.
    fn parse_canonical(s: &str) -> Option<Millis> {
        let b: &[u8; ISO_LEN] = s.as_bytes().try_into().ok()?;
        for (i, c) in b.iter().enumerate() {
            let ok = match i {
                4 | 7 => *c == b'-',
                10 => *c == b'T',
                13 | 16 => *c == b':',
                19 => *c == b'.',
                23 => *c == b'Z',
                _ => c.is_ascii_digit(),
            };
            if !ok {
                return None;
            }
        }
        let num = |at: usize, width: usize| b[at..at + width].iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0'));
        let (year, month, day) = (num(0, 4), num(5, 2), num(8, 2));
        let (hour, minute, second, milli) = (num(11, 2), num(14, 2), num(17, 2), num(20, 3));
        // A leap second, or a date that does not exist: chrono decides.
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some(Millis(days * MILLIS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1_000 + milli))
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

/// Length of `to_iso`'s form for years 0 to 9999.
const ISO_LEN: usize = 24;

/// Year, month and day of a day counted from 1970-01-01 (the proleptic
/// Gregorian calendar; H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// The day counted from 1970-01-01 of a date (`civil_from_days` inverted).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Serialize for Millis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.iso_bytes() {
            Some(b) => s.serialize_str(std::str::from_utf8(&b).map_err(serde::ser::Error::custom)?),
            None => s.serialize_str(&self.chrono_iso()),
        }
    }
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor, so a timestamp is parsed where it lies in the input
        // rather than copied into a String first.
        struct Iso;
        impl serde::de::Visitor<'_> for Iso {
            type Value = Millis;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an ISO 8601 timestamp")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Millis, E> {
                Millis::parse_iso(s).ok_or_else(|| E::custom("not an ISO 8601 timestamp"))
            }
        }
        d.deserialize_str(Iso)
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

    proptest::proptest! {
        /// The allocation-free rendering and parsing agree with chrono's
        /// everywhere, years beyond 0..=9999 (chrono's alone) included.
        #[test]
        fn iso_agrees_with_chrono(ms in -80_000_000_000_000i64..300_000_000_000_000i64) {
            let t = Millis(ms);
            let ours = t.to_iso();
            proptest::prop_assert_eq!(&ours, &t.chrono_iso());
            let chrono = DateTime::parse_from_rfc3339(&ours).ok().map(|d| Millis(d.timestamp_millis()));
            proptest::prop_assert_eq!(Millis::parse_iso(&ours), chrono);
            proptest::prop_assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{ours}\""));
            // Years past 9999 are written with a sign RFC 3339 does not
            // read, by chrono's parser as by ours.
            proptest::prop_assert_eq!(serde_json::from_str::<Millis>(&format!("\"{ours}\"")).ok(), chrono);
        }
    }

    #[test]
    fn the_calendar_edges_render_and_parse_as_chrono_does() {
        for s in [
            "0000-01-01T00:00:00.000Z",
            "0000-02-29T23:59:59.999Z",
            "1900-02-28T12:00:00.000Z",
            "1969-12-31T23:59:59.999Z",
            "1970-01-01T00:00:00.000Z",
            "2000-02-29T00:00:00.001Z",
            "2024-12-31T23:59:59.999Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            let t = Millis::parse_iso(s).unwrap();
            assert_eq!(t.to_iso(), s);
            assert_eq!(Some(t), DateTime::parse_from_rfc3339(s).ok().map(|d| Millis(d.timestamp_millis())), "{s}");
        }
        // Not the canonical form, or no such date: chrono's answer.
        for s in [
            "2026-11-18T11:06:40Z",
            "2026-11-18T11:06:40.123+02:00",
            "2026-11-18t11:06:40.123z",
            "2026-02-29T00:00:00.000Z",
            "1900-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-11-18T24:00:00.000Z",
            "2016-12-31T23:59:60.000Z",
            "not a time",
        ] {
            let chrono = DateTime::parse_from_rfc3339(s).ok().map(|d| Millis(d.timestamp_millis()));
            assert_eq!(Millis::parse_iso(s), chrono, "{s}");
        }
        // Just outside 0..=9999: chrono writes them (with a sign).
        for t in [Millis(253_402_300_800_000), Millis(-62_167_219_200_001)] {
            assert_eq!(t.to_iso(), t.chrono_iso());
            assert!(t.to_iso().starts_with(['+', '-']), "{}", t.to_iso());
        }
        assert!(serde_json::from_str::<Millis>("\"yesterday\"").is_err());
        assert!(serde_json::from_str::<Millis>("12").is_err());
    }

    #[test]
    fn midnight_is_next_day_boundary() {
        let t = Millis(MILLIS_PER_DAY * 3 + 5);
        assert_eq!(t.next_utc_midnight(), Millis(MILLIS_PER_DAY * 4));
        assert_eq!(Millis(MILLIS_PER_DAY * 4).next_utc_midnight(), Millis(MILLIS_PER_DAY * 5));
    }
}
