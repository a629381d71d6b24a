//! The arithmetic of the append-only credit ledger.
//!
//! Every balance is a fold over entries: `credit` adds to what the account
//! may spend, `reserve` holds part of it for submitted work, `charge` turns
//! held credit into spent credit, `release` returns held credit unused.
//! Charges and releases always consume an earlier reservation.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::time::Millis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    Credit,
    Reserve,
    Charge,
    Release,
}

impl EntryKind {
    pub const ALL: [EntryKind; 4] = [EntryKind::Credit, EntryKind::Reserve, EntryKind::Charge, EntryKind::Release];

    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Credit => "credit",
            EntryKind::Reserve => "reserve",
            EntryKind::Charge => "charge",
            EntryKind::Release => "release",
        }
    }

    pub fn parse(s: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// An account's position, all in micro-euros.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Balance {
    /// Credit granted minus credit charged: what is left after charges.
    pub credit_micros: i64,
    /// Credit held by reservations not yet charged or released.
    pub reserved_micros: i64,
}

impl Balance {
    pub fn apply(&mut self, kind: EntryKind, amount: i64) {
        match kind {
            EntryKind::Credit => self.credit_micros += amount,
            EntryKind::Reserve => self.reserved_micros += amount,
            EntryKind::Charge => {
                self.reserved_micros -= amount;
                self.credit_micros -= amount;
            }
            EntryKind::Release => self.reserved_micros -= amount,
        }
    }

    pub fn fold<I: IntoIterator<Item = (EntryKind, i64)>>(entries: I) -> Balance {
        let mut b = Balance::default();
        for (k, a) in entries {
            b.apply(k, a);
        }
        b
    }

    /// What a new reservation may take.
    pub fn available_micros(&self) -> i64 {
        self.credit_micros - self.reserved_micros
    }

    /// Refuses a reservation the account cannot cover.
    pub fn check_reservation(&self, required_micros: i64) -> Result<(), ApiError> {
        let available = self.available_micros();
        if required_micros > available {
            return Err(ApiError::InsufficientCredit { required_micros, available_micros: available.max(0) });
        }
        Ok(())
    }
}

/// A key's spending since 00:00 UTC: what its reservations of today hold or
/// were charged, i.e. reserved today minus what was released of those.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DailyUse {
    pub used_micros: i64,
}

impl DailyUse {
    /// Refuses a reservation that would take the key past its daily cap.
    pub fn check(&self, cap_micros: Option<i64>, required_micros: i64, now: Millis) -> Result<(), ApiError> {
        match cap_micros {
            Some(cap) if self.used_micros + required_micros > cap => Err(ApiError::DailyCapExceeded {
                cap_micros: cap,
                used_micros: self.used_micros,
                required_micros,
                resets_at: now.next_utc_midnight().to_iso(),
            }),
            _ => Ok(()),
        }
    }
}

/// Splits a finished reservation into what is charged and what is released:
/// the charge never exceeds what was held.
pub fn settle(reserved_micros: i64, used_micros: i64) -> (i64, i64) {
    let charge = used_micros.clamp(0, reserved_micros.max(0));
    (charge, reserved_micros.max(0) - charge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reservation_then_charge_then_release() {
        let b = Balance::fold([
            (EntryKind::Credit, 10_000),
            (EntryKind::Reserve, 1_200),
            (EntryKind::Charge, 120),
            (EntryKind::Release, 120),
        ]);
        assert_eq!(b, Balance { credit_micros: 9_880, reserved_micros: 960 });
        assert_eq!(b.available_micros(), 8_920);
    }

    #[test]
    fn insufficient_credit_reports_both_amounts() {
        let b = Balance { credit_micros: 1_000, reserved_micros: 900 };
        assert_eq!(
            b.check_reservation(120),
            Err(ApiError::InsufficientCredit { required_micros: 120, available_micros: 100 })
        );
        assert_eq!(b.check_reservation(100), Ok(()));
    }

    #[test]
    fn daily_cap_counts_used_plus_required() {
        let now = Millis(1_795_000_000_000);
        let used = DailyUse { used_micros: 900 };
        assert_eq!(used.check(None, 10_000, now), Ok(()));
        assert_eq!(used.check(Some(1_000), 100, now), Ok(()));
        match used.check(Some(1_000), 101, now) {
            Err(ApiError::DailyCapExceeded { cap_micros, used_micros, required_micros, resets_at }) => {
                assert_eq!((cap_micros, used_micros, required_micros), (1_000, 900, 101));
                assert_eq!(resets_at, "2026-11-19T00:00:00.000Z");
            }
            other => panic!("expected daily cap refusal, got {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn settle_conserves_the_reservation(reserved in 0i64..1_000_000_000, used in -10i64..2_000_000_000) {
            let (charge, release) = settle(reserved, used);
            prop_assert_eq!(charge + release, reserved);
            prop_assert!(charge >= 0 && release >= 0);
            prop_assert!(charge <= reserved);
        }

        /// Reserving only what is available and settling every reservation
        /// leaves nothing held and never spends more than was granted.
        #[test]
        fn balances_stay_consistent(credit in 0i64..10_000_000, work in proptest::collection::vec((1i64..100_000, 0i64..150_000), 0..40)) {
            let mut b = Balance::fold([(EntryKind::Credit, credit)]);
            let mut open = vec![];
            for (reserve, used) in work {
                if b.check_reservation(reserve).is_ok() {
                    b.apply(EntryKind::Reserve, reserve);
                    open.push((reserve, used));
                }
                prop_assert!(b.available_micros() >= 0);
            }
            for (reserve, used) in open {
                let (charge, release) = settle(reserve, used);
                b.apply(EntryKind::Charge, charge);
                b.apply(EntryKind::Release, release);
            }
            prop_assert_eq!(b.reserved_micros, 0);
            prop_assert!(b.credit_micros >= 0 && b.credit_micros <= credit);
        }
    }
}
