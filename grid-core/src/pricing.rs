//! Contract prices and reservation formulas, in integer micro-euros, each
//! rounded once.
//!
//! **Rounding rule:** every amount is computed as an exact rational number of
//! micro-euros in integer arithmetic (`u128`, no floating point) and rounded
//! once, half up, to a whole micro-euro. Reservations and charges use the same
//! rule, so a charge for the full reserved duration equals the reservation.
//! Charges are additionally capped at the reservation they consume.
//! Results beyond `i64::MAX` (far outside the contract's bounds) saturate.

use crate::catalog::Script;

/// Analytical job rate per vCPU-hour: 0.04 €.
pub const JOB_MICROS_PER_VCPU_HOUR: u128 = 40_000;
/// Analytical job rate per GiB-hour of memory: 0.0064 €.
pub const JOB_MICROS_PER_GIB_HOUR: u128 = 6_400;
/// Browser session rate per hour: 0.07 €.
pub const SESSION_MICROS_PER_HOUR: u128 = 70_000;

const MILLICORES_PER_VCPU: u128 = 1_000;
const BYTES_PER_GIB: u128 = 1 << 30;
const MILLIS_PER_HOUR: u128 = 3_600_000;

/// What POST /batches reserves: the script's price for every item.
pub fn batch_reservation_micros(script: Script, items: usize) -> i64 {
    script.price_micros() * items as i64
}

/// What POST /jobs (and an analytical retry) reserves: one attempt's longest
/// cost, `(vCPU × 0.04 € + GiB × 0.0064 €) per hour × runningDeadlineSeconds`
/// on the requested CPU (millicores) and memory (bytes).
pub fn job_attempt_reservation_micros(
    cpu_millis_requested: u64,
    memory_bytes_requested: u64,
    running_deadline_seconds: u32,
) -> i64 {
    job_micros(cpu_millis_requested, memory_bytes_requested, u128::from(running_deadline_seconds) * 1_000)
}

/// What one finished attempt is charged: the same rate for the time from
/// container start to finish (`run_millis`, negative counts as 0), capped at
/// `runningDeadlineSeconds` and at the attempt's reservation, rounded once.
/// Whether the attempt is charged at all is the termination reason's call
/// (`TerminationReason::is_charged`), not this function's.
pub fn job_attempt_charge_micros(
    cpu_millis_requested: u64,
    memory_bytes_requested: u64,
    run_millis: i64,
    running_deadline_seconds: u32,
    reserved_micros: i64,
) -> i64 {
    let deadline_ms = u128::from(running_deadline_seconds) * 1_000;
    let run_ms = u128::try_from(run_millis.max(0)).unwrap_or(0).min(deadline_ms);
    job_micros(cpu_millis_requested, memory_bytes_requested, run_ms).min(reserved_micros.max(0))
}

/// What POST /sessions reserves: the whole lifetime at 0.07 € per hour.
pub fn session_reservation_micros(ttl_minutes: u32) -> i64 {
    round_half_up(SESSION_MICROS_PER_HOUR * u128::from(ttl_minutes) * 60_000, MILLIS_PER_HOUR)
}

/// What a session is charged for `ready_millis` of ready time (the caller
/// caps that at `expiresAt`), rounded once and capped at the reservation.
pub fn session_charge_micros(ready_millis: i64, reserved_micros: i64) -> i64 {
    let ready_ms = u128::try_from(ready_millis.max(0)).unwrap_or(0);
    round_half_up(SESSION_MICROS_PER_HOUR.saturating_mul(ready_ms), MILLIS_PER_HOUR).min(reserved_micros.max(0))
}

/// `(cpu × 40_000 / 1000 + mem × 6_400 / 2^30) µ€/h × ms / 3_600_000`, over
/// one common denominator so the value stays exact until the final rounding.
fn job_micros(cpu_millis: u64, memory_bytes: u64, millis: u128) -> i64 {
    // µ€ per hour, scaled by MILLICORES_PER_VCPU × BYTES_PER_GIB.
    let rate = (u128::from(cpu_millis) * JOB_MICROS_PER_VCPU_HOUR * BYTES_PER_GIB)
        .saturating_add(u128::from(memory_bytes) * JOB_MICROS_PER_GIB_HOUR * MILLICORES_PER_VCPU);
    round_half_up(rate.saturating_mul(millis), MILLICORES_PER_VCPU * BYTES_PER_GIB * MILLIS_PER_HOUR)
}

/// `numerator / denominator` rounded half up, saturated into `i64`.
fn round_half_up(numerator: u128, denominator: u128) -> i64 {
    let q = numerator / denominator;
    let q = if (numerator % denominator) * 2 >= denominator { q + 1 } else { q };
    i64::try_from(q).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MI: u64 = 1 << 20;
    const GI: u64 = 1 << 30;

    #[test]
    fn batch_reserves_price_per_item() {
        assert_eq!(batch_reservation_micros(Script::Fetch, 1_000), 120_000);
        assert_eq!(batch_reservation_micros(Script::Capture, 3), 3_000);
    }

    #[test]
    fn job_reservation_exact_values() {
        // 0.5 × 40_000 + 0.25 × 6_400 = 21_600 µ€/h; one minute of it is 360 µ€.
        assert_eq!(job_attempt_reservation_micros(500, 256 * MI, 60), 360);
        // 1 vCPU + 1 GiB for one hour: 40_000 + 6_400.
        assert_eq!(job_attempt_reservation_micros(1_000, GI, 3_600), 46_400);
        // The largest job: 8 vCPU + 16 GiB for 6 h = (320_000 + 102_400) × 6.
        assert_eq!(job_attempt_reservation_micros(8_000, 16 * GI, 21_600), 2_534_400);
        // The smallest job: 250m + 256Mi for 1 s = (10_000 + 1_600) / 3_600 = 3.22 → 3.
        assert_eq!(job_attempt_reservation_micros(250, 256 * MI, 1), 3);
        assert_eq!(job_attempt_reservation_micros(0, 0, 21_600), 0);
    }

    #[test]
    fn rounding_is_half_up_once() {
        // 250m alone: 10_000 µ€/h; 18 s → 50 µ€ exactly; 1 s → 2.78 → 3.
        assert_eq!(job_attempt_reservation_micros(250, 0, 18), 50);
        // 0.5 µ€ exactly rounds up: 250m for 180 ms = 10_000 × 0.18 / 3_600 = 0.5.
        assert_eq!(job_attempt_charge_micros(250, 0, 180, 1, i64::MAX), 1);
        // 0.4999… rounds down: 250m for 179 ms.
        assert_eq!(job_attempt_charge_micros(250, 0, 179, 1, i64::MAX), 0);
        // CPU and memory are summed before the one rounding: 250m + 256Mi
        // for 156 ms is 0.4333… + 0.0693… = 0.5026… → 1, where rounding each
        // part first would give 0 + 0. 155 ms is 0.4994… → 0.
        assert_eq!(job_attempt_charge_micros(250, 256 * MI, 155, 1, i64::MAX), 0);
        assert_eq!(job_attempt_charge_micros(250, 256 * MI, 156, 1, i64::MAX), 1);
    }

    #[test]
    fn job_charge_caps_at_deadline_and_reservation() {
        let reserved = job_attempt_reservation_micros(500, 256 * MI, 60);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, 30_000, 60, reserved), 180);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, 60_000, 60, reserved), 360);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, 61_500, 60, reserved), 360);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, 60_000, 60, 100), 100);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, -5, 60, reserved), 0);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, 0, 60, reserved), 0);
        assert_eq!(job_attempt_charge_micros(500, 256 * MI, 10_000, 60, -1), 0);
    }

    #[test]
    fn session_exact_values() {
        assert_eq!(session_reservation_micros(30), 35_000);
        assert_eq!(session_reservation_micros(60), 70_000);
        assert_eq!(session_reservation_micros(240), 280_000);
        // One minute is 1_166.67 µ€ → 1_167.
        assert_eq!(session_reservation_micros(1), 1_167);
        assert_eq!(session_reservation_micros(0), 0);
        let r = session_reservation_micros(30);
        assert_eq!(session_charge_micros(0, r), 0);
        assert_eq!(session_charge_micros(60_000, r), 1_167);
        assert_eq!(session_charge_micros(30 * 60_000, r), r);
        assert_eq!(session_charge_micros(31 * 60_000, r), r);
        // 0.07 €/h is 19.44 µ€/s; 1 s → 19; 1 ms → 0.019 → 0; 26 ms → 0.5055… → 1.
        assert_eq!(session_charge_micros(1_000, r), 19);
        assert_eq!(session_charge_micros(1, r), 0);
        assert_eq!(session_charge_micros(26, r), 1);
        assert_eq!(session_charge_micros(-1, r), 0);
        assert_eq!(session_charge_micros(i64::MAX, r), r);
    }

    proptest! {
        #[test]
        fn job_reservation_is_monotone(
            cpu in 250u64..=8_000, mem in (256 * MI)..=(16 * GI), secs in 1u32..=21_600,
            dc in 0u64..1_000, dm in 0u64..GI, ds in 0u32..1_000,
        ) {
            let base = job_attempt_reservation_micros(cpu, mem, secs);
            prop_assert!(base >= 0);
            prop_assert!(job_attempt_reservation_micros(cpu + dc, mem, secs) >= base);
            prop_assert!(job_attempt_reservation_micros(cpu, mem + dm, secs) >= base);
            prop_assert!(job_attempt_reservation_micros(cpu, mem, secs + ds) >= base);
        }

        #[test]
        fn job_charge_is_monotone_and_within_reservation(
            cpu in 250u64..=8_000, mem in (256 * MI)..=(16 * GI), secs in 1u32..=21_600,
            run in -1_000i64..30_000_000, dr in 0i64..1_000_000,
        ) {
            let reserved = job_attempt_reservation_micros(cpu, mem, secs);
            let charge = job_attempt_charge_micros(cpu, mem, run, secs, reserved);
            prop_assert!(0 <= charge && charge <= reserved);
            prop_assert!(job_attempt_charge_micros(cpu, mem, run + dr, secs, reserved) >= charge);
            prop_assert!(job_attempt_charge_micros(cpu + 1, mem, run, secs, reserved) >= charge);
            prop_assert!(job_attempt_charge_micros(cpu, mem + 1, run, secs, reserved) >= charge);
            // Running the whole deadline costs exactly the reservation.
            prop_assert_eq!(job_attempt_charge_micros(cpu, mem, i64::from(secs) * 1_000, secs, reserved), reserved);
        }

        #[test]
        fn session_charge_is_monotone_and_within_reservation(ttl in 1u32..=240, ready in -1_000i64..20_000_000, dr in 0i64..1_000_000) {
            let reserved = session_reservation_micros(ttl);
            let charge = session_charge_micros(ready, reserved);
            prop_assert!(0 <= charge && charge <= reserved);
            prop_assert!(session_charge_micros(ready + dr, reserved) >= charge);
            prop_assert!(session_reservation_micros(ttl + 1) >= reserved);
            prop_assert_eq!(session_charge_micros(i64::from(ttl) * 60_000, reserved), reserved);
        }

        /// No overflow anywhere in the input space: results saturate, never wrap.
        #[test]
        fn extreme_inputs_do_not_overflow(cpu in any::<u64>(), mem in any::<u64>(), secs in any::<u32>(), run in any::<i64>()) {
            let r = job_attempt_reservation_micros(cpu, mem, secs);
            prop_assert!(r >= 0);
            let c = job_attempt_charge_micros(cpu, mem, run, secs, r);
            prop_assert!(0 <= c && c <= r);
        }
    }
}
