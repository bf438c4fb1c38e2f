//! Peak memory of a whole inference, from a liveness walk over the network's DAG.
//!
//! Summing per-layer memory (or taking the paper's "two largest layers" / "2 × mean" rules) ignores that a
//! residual or branching network keeps tensors alive across many layers, and that views (flatten, reshape) and
//! operations the engine fuses into their producer allocate nothing. The model here:
//!
//! - Every tensor is f32 ([`BYTES_PER_ELEMENT`] bytes per element) and holds the whole batch.
//! - The network input is alive from the first step until its last consumer.
//! - A layer that executes allocates its output at its own step; the tensor stays alive until the last layer that
//!   reads it, directly or through aliases. Outputs nobody reads are network outputs and stay alive to the end.
//! - A layer that does not execute (free views, layers fused into their producer) allocates nothing: its output
//!   *is* its input tensor (an alias), and reading the alias keeps that tensor alive.
//! - The weights of every executing layer are resident for the whole inference: a deployed engine loads all
//!   constants with the model (tract does), not layer by layer.
//! - While layer `i` executes, memory in use = all weights + all live tensors (its inputs and its output among
//!   them) + its workspace (scratch the engine needs beyond inputs, output and weights, e.g. im2col buffers,
//!   from the memory predictor).
//! - Peak memory is the maximum over the executing steps.

use crate::network::Source;

/// Every tensor is f32.
pub const BYTES_PER_ELEMENT: u64 = 4;

/// Bytes per MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// One layer as the liveness walk sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Bytes of the layer's output tensor (whole batch).
    pub output_bytes: u64,
    /// Scratch bytes the layer holds only while it runs.
    pub workspace_bytes: u64,
    /// False for layers that do not run (views, fused): their output aliases their first input.
    pub executes: bool,
}

/// Peak bytes in use over the executing steps. `sources[i]` are the inputs of layer `i` (as in
/// [`crate::network::Analysis::sources`]), `steps[i]` its sizes, `input_bytes` the network input's size and
/// `weight_bytes` the weights of all executing layers.
pub fn peak_bytes(sources: &[Vec<Source>], steps: &[Step], input_bytes: u64, weight_bytes: u64) -> u64 {
    let n = steps.len();
    // Tensor 0 is the network input, tensor 1 + i the output of layer i. `storage[t]` is the tensor that really
    // holds tensor t's data (itself unless t is the output of a layer that does not execute).
    let mut storage: Vec<usize> = (0..=n).collect();
    let tensor_of = |s: &Source| match *s {
        Source::Input => 0,
        Source::Layer(j) => 1 + j,
    };
    for i in 0..n {
        if !steps[i].executes {
            if let Some(first) = sources[i].first() {
                storage[1 + i] = storage[tensor_of(first)];
            }
        }
    }
    // Step at which each stored tensor is last needed; consumers are later than producers, so one pass in order.
    let mut last_use: Vec<usize> = vec![0; n + 1];
    let mut consumed = vec![false; n + 1];
    for t in 1..=n {
        last_use[storage[t]] = last_use[storage[t]].max(t - 1);
    }
    for (i, srcs) in sources.iter().enumerate() {
        for s in srcs {
            let t = tensor_of(s);
            consumed[t] = true;
            last_use[storage[t]] = last_use[storage[t]].max(i);
        }
    }
    for t in 1..=n {
        if !consumed[t] {
            last_use[storage[t]] = n.saturating_sub(1);
        }
    }
    // Sweep: allocate at the producing step, free after the last use.
    let mut allocated_at = vec![0u64; n];
    let mut freed_after = vec![0u64; n];
    if n > 0 {
        allocated_at[0] += input_bytes;
        freed_after[last_use[0]] += input_bytes;
    }
    for i in 0..n {
        if steps[i].executes {
            allocated_at[i] += steps[i].output_bytes;
            freed_after[last_use[1 + i]] += steps[i].output_bytes;
        }
    }
    let mut live = 0u64;
    let mut peak = 0u64;
    for i in 0..n {
        live += allocated_at[i];
        if steps[i].executes {
            peak = peak.max(live.saturating_add(steps[i].workspace_bytes));
        }
        live -= freed_after[i];
    }
    weight_bytes.saturating_add(peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(output_bytes: u64, workspace_bytes: u64) -> Step {
        Step { output_bytes, workspace_bytes, executes: true }
    }

    #[test]
    fn chain_keeps_only_neighbours_alive() {
        // input 10 -> a(20) -> b(5): step a holds 10 + 20 (+1 workspace), step b holds 20 + 5; 7 of weights.
        let sources = vec![vec![Source::Input], vec![Source::Layer(0)]];
        let steps = [run(20, 1), run(5, 0)];
        assert_eq!(peak_bytes(&sources, &steps, 10, 7), 31 + 7);
    }

    #[test]
    fn residual_branch_stays_alive_and_views_alias() {
        // input 8 -> a(16) -> flatten (view of a) -> b(4) -> add(a-view, b)(16)
        let sources = vec![
            vec![Source::Input],
            vec![Source::Layer(0)],
            vec![Source::Layer(1)],
            vec![Source::Layer(1), Source::Layer(2)],
        ];
        let view = Step { output_bytes: 16, workspace_bytes: 0, executes: false };
        let steps = [run(16, 0), view, run(4, 100), run(16, 0)];
        // a: 8 + 16 = 24; b: 16 (a, alive through the view until add) + 4 + 100 = 120; add: 16 + 4 + 16 = 36.
        assert_eq!(peak_bytes(&sources, &steps, 8, 0), 120);
    }
}
