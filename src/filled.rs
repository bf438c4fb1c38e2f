//! Vectors of one value, made without asking the allocator for zeroed memory.
//!
//! `vec![0; n]`, `vec![false; n]` and `vec![None; n]` (for payloads whose `None` is all zero bits, such as
//! `Option<usize>`) call `alloc_zeroed`, which the C library answers with `calloc`; glibc's `calloc` (2.36 at
//! least) takes no block from its per-thread cache and ends in its slow path, and the blocks those vectors free
//! then overflow that cache, so their `free` takes the slow path too. An estimate makes a few dozen such
//! per-layer vectors; in a NAS loop's calls ([docs/budgets.md](../docs/budgets.md), `examples/nas_calls.rs`
//! under callgrind) they cost a few hundred instructions each, where an ordinary allocation and a fill cost a
//! few dozen. Used on the per-estimate paths; elsewhere `vec!` is as good.

/// `n` copies of `value`, from an ordinary allocation.
pub(crate) fn filled<T: Clone>(value: T, n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, value);
    v
}
