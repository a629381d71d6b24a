//! Contract prices and reservation formulas, in integer micro-euros, each
//! rounded once.

use crate::catalog::Script;

/// What POST /batches reserves: the script's price for every item.
pub fn batch_reservation_micros(script: Script, items: usize) -> i64 {
    script.price_micros() * items as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_reserves_price_per_item() {
        assert_eq!(batch_reservation_micros(Script::Fetch, 1_000), 120_000);
        assert_eq!(batch_reservation_micros(Script::Capture, 3), 3_000);
    }
}
