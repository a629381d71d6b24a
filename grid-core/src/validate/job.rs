//! Filled in by the core validation work.
