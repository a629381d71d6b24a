//! What a machine's transition asks of its driver, split by when it
//! happens: `in_tx`, written in the transaction that stores the transition,
//! and `after_commit`, carried out once it committed. Each machine (`item`,
//! `job`, `session`) names its two kinds of effect and its `Effects` is this
//! type over them; its driver has one exhaustive executor per half.

/// The effects of one transition, each half in the order asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effects<T, O> {
    pub in_tx: Vec<T>,
    pub after_commit: Vec<O>,
}

impl<T, O> Default for Effects<T, O> {
    fn default() -> Self {
        Effects { in_tx: Vec::new(), after_commit: Vec::new() }
    }
}

impl<T, O> Effects<T, O> {
    /// Effects written in the transaction only.
    pub fn only_in_tx(in_tx: Vec<T>) -> Self {
        Effects { in_tx, after_commit: Vec::new() }
    }

    /// Effects after the commit only.
    pub fn only_after_commit(after_commit: Vec<O>) -> Self {
        Effects { in_tx: Vec::new(), after_commit }
    }
}
