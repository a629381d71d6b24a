//! Kubernetes-style quantity strings, as POST /jobs `resources` carries them.
//!
//! Grammar accepted (a strict subset of Kubernetes' own):
//!
//! ```text
//! quantity := number suffix
//! number   := digits | digits "." digits? | "." digits      (no sign, no exponent)
//! cpu      suffix := "" (cores) | "m" (millicores)
//! bytes    suffix := "" | "k" | "M" | "G" | "T" | "P" | "E"          (powers of 1000)
//!                  | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"         (powers of 1024)
//! ```
//!
//! Values are computed exactly (integer arithmetic on the decimal digits) and
//! must land on a whole unit: a CPU quantity finer than 1m (`0.0005`) or a
//! byte quantity with a fractional byte (`0.5`) is refused rather than
//! rounded. Signs, exponents (`1e9`), whitespace and values beyond `u64` are
//! refused.

/// The grammar's CPU quantities as a regular expression (for the request's
/// JSON Schema; exactness and bounds are checked on the parsed value).
pub const CPU_QUANTITY_PATTERN: &str = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)m?$";
/// The grammar's byte quantities as a regular expression.
pub const BYTE_QUANTITY_PATTERN: &str = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$";

/// Parses a CPU quantity (`"250m"`, `"0.5"`, `"1"`, `"8"`) into millicores.
pub fn parse_cpu_millis(s: &str) -> Result<u64, String> {
    let (number, multiplier) = match s.strip_suffix('m') {
        Some(n) => (n, 1),
        None => (s, 1_000),
    };
    exact(s, number, multiplier, "millicore")
}

/// Parses a memory or storage quantity (`"256Mi"`, `"1G"`, `"1073741824"`,
/// `"1.5Gi"`) into bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    const SUFFIXES: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (number, multiplier) =
        SUFFIXES.iter().find_map(|(suffix, m)| s.strip_suffix(suffix).map(|n| (n, *m))).unwrap_or((s, 1));
    exact(s, number, multiplier, "byte")
}

/// Millicores as the shortest quantity string: whole cores without suffix
/// (`"2"`), anything else in millicores (`"250m"`).
pub fn format_cpu_millis(millis: u64) -> String {
    match (millis / 1_000, millis % 1_000) {
        (cores, 0) => format!("{cores}"),
        _ => format!("{millis}m"),
    }
}

/// Bytes with the largest binary suffix that divides them exactly (`"256Mi"`,
/// `"16Gi"`), or a plain number of bytes.
pub fn format_bytes(bytes: u64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    if bytes != 0 {
        for (suffix, shift) in SUFFIXES {
            if bytes.trailing_zeros() >= shift {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
    }
    format!("{bytes}")
}

/// `number × multiplier`, exactly, as a whole count of units.
fn exact(whole: &str, number: &str, multiplier: u128, unit: &str) -> Result<u64, String> {
    let malformed = || format!("\"{whole}\" is not a quantity");
    let Some((int_part, frac_part)) = split_number(number) else {
        return Err(match number.strip_prefix('-').and_then(split_number) {
            Some(_) => format!("\"{whole}\" is negative; quantities must be positive"),
            None => malformed(),
        });
    };
    // Trailing fractional zeros change nothing and would only cost range.
    let frac_part = frac_part.trim_end_matches('0');
    let too_large = || format!("\"{whole}\" is too large");
    // mantissa / 10^frac_len × multiplier, kept as an exact fraction.
    let mut mantissa: u128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa.checked_mul(10).and_then(|m| m.checked_add(u128::from(b - b'0'))).ok_or_else(too_large)?;
    }
    let frac_len = u32::try_from(frac_part.len()).map_err(|_| malformed())?;
    let numerator = mantissa.checked_mul(multiplier).ok_or_else(too_large)?;
    let value = match 10u128.checked_pow(frac_len) {
        Some(denominator) => {
            if numerator % denominator != 0 {
                return Err(format!("\"{whole}\" is not a whole number of {unit}s"));
            }
            numerator / denominator
        }
        // More fractional digits than u128 can scale: only exact if zero.
        None if numerator == 0 => 0,
        None => return Err(format!("\"{whole}\" is not a whole number of {unit}s")),
    };
    u64::try_from(value).map_err(|_| too_large())
}

/// The integer and fractional digits of `digits[.digits]`, at least one
/// digit in all; `None` for anything else.
fn split_number(number: &str) -> Option<(&str, &str)> {
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    (int_part.len() + frac_part.len() > 0 && digits(int_part) && digits(frac_part)).then_some((int_part, frac_part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_examples() {
        assert_eq!(parse_cpu_millis("250m"), Ok(250));
        assert_eq!(parse_cpu_millis("0.5"), Ok(500));
        assert_eq!(parse_cpu_millis(".5"), Ok(500));
        assert_eq!(parse_cpu_millis("1"), Ok(1_000));
        assert_eq!(parse_cpu_millis("1."), Ok(1_000));
        assert_eq!(parse_cpu_millis("8"), Ok(8_000));
        assert_eq!(parse_cpu_millis("0.25"), Ok(250));
        assert_eq!(parse_cpu_millis("1.250"), Ok(1_250));
        assert_eq!(parse_cpu_millis("8000m"), Ok(8_000));
        assert_eq!(parse_cpu_millis("0"), Ok(0));
    }

    #[test]
    fn byte_examples() {
        assert_eq!(parse_bytes("256Mi"), Ok(256 << 20));
        assert_eq!(parse_bytes("16Gi"), Ok(16 << 30));
        assert_eq!(parse_bytes("1G"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("512M"), Ok(512_000_000));
        assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
        assert_eq!(parse_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_bytes("2k"), Ok(2_000));
        assert_eq!(parse_bytes("1Ki"), Ok(1_024));
        assert_eq!(parse_bytes("1Ti"), Ok(1 << 40));
        assert_eq!(parse_bytes("15Ei"), Ok(15 << 60));
        assert_eq!(parse_bytes("0.5Ki"), Ok(512));
    }

    #[test]
    fn malformed_quantities_are_refused() {
        for s in ["", "m", ".", ".m", "1.2.3", "abc", "1 ", " 1", "1e3", "+1", "1x", "1mm", "0x10", "1,5", "１"] {
            assert_eq!(parse_cpu_millis(s), Err(format!("\"{s}\" is not a quantity")), "cpu {s:?}");
        }
        for s in ["", "Gi", "1gi", "1GB", "1Gib", "1 Gi", "1e9", "1m", "1K", "1.2.3Mi", "-", "i"] {
            assert_eq!(parse_bytes(s), Err(format!("\"{s}\" is not a quantity")), "bytes {s:?}");
        }
    }

    #[test]
    fn negative_quantities_are_refused() {
        assert_eq!(parse_cpu_millis("-1"), Err("\"-1\" is negative; quantities must be positive".to_string()));
        assert_eq!(parse_cpu_millis("-250m"), Err("\"-250m\" is negative; quantities must be positive".to_string()));
        assert_eq!(parse_bytes("-1Gi"), Err("\"-1Gi\" is negative; quantities must be positive".to_string()));
    }

    #[test]
    fn inexact_quantities_are_refused() {
        assert_eq!(parse_cpu_millis("0.0005"), Err("\"0.0005\" is not a whole number of millicores".to_string()));
        assert_eq!(parse_cpu_millis("0.5m"), Err("\"0.5m\" is not a whole number of millicores".to_string()));
        assert_eq!(parse_bytes("0.5"), Err("\"0.5\" is not a whole number of bytes".to_string()));
        assert_eq!(parse_bytes("1.0000000001Ki"), Err("\"1.0000000001Ki\" is not a whole number of bytes".to_string()));
        // Trailing zeros are exact however many there are.
        assert_eq!(parse_bytes(&format!("1.{}Gi", "0".repeat(60))), Ok(1 << 30));
    }

    #[test]
    fn overflow_is_refused() {
        assert_eq!(parse_bytes("16Ei"), Err("\"16Ei\" is too large".to_string()));
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_bytes("18446744073709551616"), Err("\"18446744073709551616\" is too large".to_string()));
        let huge = "9".repeat(60);
        assert_eq!(parse_cpu_millis(&huge), Err(format!("\"{huge}\" is too large")));
        assert_eq!(parse_cpu_millis("18446744073709552"), Err("\"18446744073709552\" is too large".to_string()));
    }

    #[test]
    fn formatting_examples() {
        assert_eq!(format_cpu_millis(250), "250m");
        assert_eq!(format_cpu_millis(8_000), "8");
        assert_eq!(format_cpu_millis(0), "0");
        assert_eq!(format_bytes(256 << 20), "256Mi");
        assert_eq!(format_bytes(16 << 30), "16Gi");
        assert_eq!(format_bytes(3 << 29), "1536Mi");
        assert_eq!(format_bytes(1_000_000_000), "1000000000");
        assert_eq!(format_bytes(0), "0");
    }

    proptest! {
        #[test]
        fn cpu_format_round_trips(m in any::<u64>()) {
            prop_assert_eq!(parse_cpu_millis(&format_cpu_millis(m)), Ok(m));
        }

        #[test]
        fn bytes_format_round_trips(b in any::<u64>()) {
            prop_assert_eq!(parse_bytes(&format_bytes(b)), Ok(b));
        }

        /// Decimal cores and millicores agree: "x.yyy" == "xyyym".
        #[test]
        fn cores_and_millicores_agree(m in 0u64..10_000_000) {
            let cores = format!("{}.{:03}", m / 1_000, m % 1_000);
            prop_assert_eq!(parse_cpu_millis(&cores), Ok(m));
            prop_assert_eq!(parse_cpu_millis(&format!("{m}m")), Ok(m));
        }

        #[test]
        fn parsing_is_monotone(a in 0u64..1_000_000, b in 0u64..1_000_000, suffix in prop::sample::select(vec!["", "k", "Ki", "M", "Mi", "G", "Gi"])) {
            let pa = parse_bytes(&format!("{a}{suffix}")).unwrap();
            let pb = parse_bytes(&format!("{b}{suffix}")).unwrap();
            prop_assert_eq!(a.cmp(&b), pa.cmp(&pb));
            let ca = parse_cpu_millis(&format!("{a}m")).unwrap();
            let cb = parse_cpu_millis(&format!("{b}m")).unwrap();
            prop_assert_eq!(a.cmp(&b), ca.cmp(&cb));
        }

        /// Halves of a binary unit are exact one step down.
        #[test]
        fn half_units_are_exact(n in 0u64..1_000_000) {
            prop_assert_eq!(parse_bytes(&format!("{n}.5Gi")), Ok((n << 30) + (1 << 29)));
        }

        /// No input string panics; anything accepted formats back to itself's value.
        #[test]
        fn arbitrary_strings_never_panic(s in "[0-9.mkKMGTPEi -]{0,24}") {
            if let Ok(b) = parse_bytes(&s) {
                prop_assert_eq!(parse_bytes(&format_bytes(b)), Ok(b));
            }
            if let Ok(m) = parse_cpu_millis(&s) {
                prop_assert_eq!(parse_cpu_millis(&format_cpu_millis(m)), Ok(m));
            }
        }
    }
}
