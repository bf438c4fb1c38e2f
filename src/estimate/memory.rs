//! Peak memory of a whole inference, from a liveness walk over the network's DAG.
//!
//! Summing per-layer memory (or taking the paper's "two largest layers" / "2 × mean" rules) ignores that a
//! residual or branching network keeps tensors alive across many layers, and that views (flatten, reshape) and
//! operations the engine fuses into their producer allocate nothing. The model here:
//!
//! - Every tensor is f32 ([`BYTES_PER_ELEMENT`] bytes per element) and holds the whole batch.
//! - The network input is alive for the whole inference: the caller owns it and still holds it when the run
//!   ends (tract's `run` takes a shared handle; the bench keeps its input, as any caller that reuses or logs it).
//!   On yolo-tiny (416×416 input, 2 MiB) freeing it after the first conv put the estimate 4% low.
//! - A layer that executes allocates its output at its own step; the tensor stays alive until the last layer that
//!   reads it, directly or through aliases. Outputs nobody reads are network outputs and stay alive to the end.
//! - A layer that does not execute (free views, layers fused into their producer) allocates nothing: its output
//!   *is* its input tensor (an alias), and reading the alias keeps that tensor alive.
//! - The weights of every executing layer are resident for the whole inference: a deployed engine loads all
//!   constants with the model (tract does), not layer by layer. So are the tables a layer's plan builds
//!   ([`crate::engine::packing::tract_plan_bytes`]: a lazy im2col's offsets, 0.1 MiB for a 112×112 output):
//!   measured alone they are part of the layer's memory, in a network they outlive its step. Counted only at
//!   their own step, ShuffleNet's peak, 20 layers later, came out 0.1 MiB (1%) low. So is the engine's plan
//!   structure per layer ([`super::structure`], when the device's calibration measured it).
//! - While layer `i` executes, memory in use = everything resident (weights, tables, structure) + all live
//!   tensors (its inputs and its output among
//!   them) + its workspace (scratch the engine needs beyond inputs, output and weights, e.g. im2col buffers,
//!   from the memory predictor).
//! - An element-wise layer (activation, batch norm, add, multiply) writes its output into an input tensor of the
//!   same size whose last reader it is, as tract does for uniquely owned inputs: it allocates nothing, and that
//!   buffer lives on as its output. The network input is never overwritten (the caller owns it).
//! - A layer lowered to a matrix product over an explicit packed copy of its input (tract's `pack_a` of a 1×1
//!   convolution, `Im2col` of a grouped one), whose workspace is at least its input's size, holds that copy. When it is the last reader of that
//!   input (and the input is not the network's), tract frees the input once it is packed, before the product
//!   writes the output: the step holds max(input, output) + packed copy, not input + output + copy. Without
//!   this, Xception's 1×1 convolutions on 128×147×147 tensors were predicted 10 MiB (8%) too high.
//! - A concat that only 1×1 convolutions read is never built: tract computes each convolution one concatenated
//!   part at a time ([`crate::engine::rules::Tract`]). It allocates nothing, every part stays alive until the
//!   last of those convolutions has run ([`Step::keeps_inputs`]), and each convolution's workspace is the largest
//!   of its parts'. Counted as built, with the whole convolution's workspace, SqueezeNet's peak came out 6.7%
//!   (0.7 MiB) high.
//! - Peak memory is the maximum over the executing steps; [`in_use_bytes`] gives every step's, so a report can
//!   name the layer at the peak.
//! - An engine that takes tensors from an arena (ONNX Runtime) holds the arena's regions, not the live tensors:
//!   [`arena_in_use_bytes`] replays the same walk's allocations through [`super::arena`], with the buffers its
//!   allocation planner hands dead tensors' buffers on to later tensors of their shape.

use crate::filled::filled;
use crate::network::{Source, Sources};

/// Every tensor is f32.
pub const BYTES_PER_ELEMENT: u64 = 4;

/// One layer as the liveness walk sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Bytes of the layer's output tensor (whole batch).
    pub output_bytes: u64,
    /// Scratch bytes the layer holds only while it runs.
    pub workspace_bytes: u64,
    /// False for layers that do not run (views, fused): their output aliases their first input.
    pub executes: bool,
    /// An element-wise layer that may compute in place into an input it is the last reader of.
    pub in_place: bool,
    /// A layer the engine lowers to a matrix product that first packs its input into a new buffer (1×1 and
    /// grouped convolutions in tract): see [`peak_bytes`] on when that frees the input before the output is
    /// written.
    pub packs_input: bool,
    /// A layer that does not execute but whose output is all of its inputs side by side (a concat the engine
    /// never materialises, its readers taking the parts one by one): reading it keeps every input alive.
    pub keeps_inputs: bool,
    /// A layer whose kernel adds its result into its first source (a residual add it computes): it writes there
    /// when it is that tensor's last reader (ONNX Runtime's convolution with a `Sum` input), and only there.
    pub adds_into_first: bool,
}

/// Tensor 0 is the network input, tensor 1 + i the output of layer i.
fn tensor_of(s: &Source) -> usize {
    match *s {
        Source::Input => 0,
        Source::Layer(j) => 1 + j,
    }
}

/// Peak bytes in use over the executing steps. `sources[i]` are the inputs of layer `i` (as in
/// [`crate::network::Analysis::sources`]), `steps[i]` its sizes, `input_bytes` the network input's size and
/// `weight_bytes` what is resident besides the input (the weights and plan tables of all executing layers and
/// the engine's structure).
pub fn peak_bytes(sources: &[Sources], steps: &[Step], input_bytes: u64, weight_bytes: u64) -> u64 {
    in_use_bytes(sources, steps, input_bytes, weight_bytes).into_iter().flatten().max().unwrap_or(weight_bytes)
}

/// Bytes in use while each layer runs (weights, live tensors and its workspace), `None` for layers that do not
/// execute; the peak is their maximum. Arguments as for [`peak_bytes`].
pub fn in_use_bytes(sources: &[Sources], steps: &[Step], input_bytes: u64, weight_bytes: u64) -> Vec<Option<u64>> {
    let n = steps.len();
    let Liveness { storage, last_use } = liveness(sources, steps, input_bytes);
    let bytes_of = |t: usize| if t == 0 { input_bytes } else { steps[t - 1].output_bytes };
    // Sweep: allocate at the producing step, free after the last use.
    let mut allocated_at = filled(0u64, n);
    let mut freed_after = filled(0u64, n);
    if n > 0 {
        allocated_at[0] += input_bytes;
        freed_after[n - 1] += input_bytes;
    }
    for i in 0..n {
        if steps[i].executes && storage[1 + i] == 1 + i {
            allocated_at[i] += steps[i].output_bytes;
            freed_after[last_use[1 + i]] += steps[i].output_bytes;
        }
    }
    let mut live = 0u64;
    let mut in_use = Vec::with_capacity(n);
    for i in 0..n {
        live += allocated_at[i];
        in_use.push(steps[i].executes.then(|| {
            let mut held = live.saturating_add(steps[i].workspace_bytes);
            if let Some(input) = input_freed_after_packing(sources, steps, &storage, &last_use, i, bytes_of) {
                held = held.saturating_sub(input.min(steps[i].output_bytes));
            }
            weight_bytes.saturating_add(held)
        }));
        live -= freed_after[i];
    }
    in_use
}

/// Bytes in use after each layer runs when the engine takes tensors from an arena ([`super::arena`]: ONNX
/// Runtime's), `None` for layers that do not execute: what is resident (`weight_bytes` and the caller's input,
/// which the engine reads in place) and the arena's regions so far. At each executing step the layer's output
/// is allocated (unless it overwrites an input), then its scratch, which is freed as it ends, then every
/// tensor whose last reader it was. `arena_bytes[i]` is what layer `i` takes from the arena: its output as the
/// engine lays it out and its kernel's scratch (not the memory model's workspace, which measured alone is the
/// arena's first region as much as the layer's own need). Other arguments as for [`peak_bytes`].
///
/// With `reuse_shapes` (per layer, the shape the engine's planner knows its output by), the engine plans
/// buffers ahead as ONNX Runtime's allocation planner does: a tensor whose last reader has run goes on a list
/// of free buffers (the latest first) instead of back to the arena, and an output of the same shape as one on
/// the list takes that buffer; only a buffer no later output takes goes back to the arena, after its last
/// reader. Held for a later tensor of its shape, a dead buffer is not there for the tensors of other shapes in
/// between: on one BERT encoder that made ONNX Runtime's arena add an 8 MiB region to the 1, 2 and 4 MiB ones.
pub fn arena_in_use_bytes(
    sources: &[Sources],
    steps: &[Step],
    input_bytes: u64,
    weight_bytes: u64,
    arena_bytes: &[(u64, u64)],
    reuse_shapes: Option<&[crate::layer::Shape]>,
    config: super::arena::ArenaConfig,
) -> Vec<Option<u64>> {
    let n = steps.len();
    let Liveness { storage, last_use } = liveness(sources, steps, input_bytes);
    let mut dying = Vec::with_capacity(n);
    dying.extend((1..=n).filter(|&t| steps[t - 1].executes && storage[t] == t).map(|t| (last_use[t], t)));
    let dies_after = crate::network::Groups::from_pairs(n, &dying);
    // The plan: which buffer each stored tensor lands in (allocation ids: tensor t's own buffer is t, the
    // workspace of step i is n + 1 + i), as a list of arena events in order.
    enum Event {
        Alloc(usize, u64),
        Free(usize),
        /// A free that did not happen: a later output took the buffer.
        Kept,
        /// Step i has run: the arena's reservation now is step i's.
        Ran(usize),
    }
    let mut events: Vec<Event> = Vec::with_capacity(4 * n);
    let mut buffer: Vec<usize> = (0..=n).collect();
    // At most every buffer at once; sized up front, as it is filled one buffer at a time.
    let mut free_list: Vec<usize> = if reuse_shapes.is_some() { Vec::with_capacity(n + 1) } else { Vec::new() };
    // For a buffer on the free list, the event that gives it back to the arena unless a later output takes it.
    let mut pending_free: Vec<Option<usize>> = vec![None; n + 1];
    for i in 0..n {
        if steps[i].executes {
            let (output, scratch) = arena_bytes.get(i).copied().unwrap_or((steps[i].output_bytes, 0));
            if storage[1 + i] == 1 + i && output > 0 {
                let shape = |t: usize| reuse_shapes.and_then(|s| s.get(t - 1));
                let taken = shape(1 + i).and_then(|own| {
                    free_list
                        .iter()
                        .position(|&b| shape(b) == Some(own) && arena_bytes_of(arena_bytes, steps, b) == output)
                });
                match taken {
                    Some(k) => {
                        let b = free_list.remove(k);
                        buffer[1 + i] = b;
                        if let Some(e) = pending_free[b].take() {
                            events[e] = Event::Kept;
                        }
                    }
                    None => events.push(Event::Alloc(1 + i, output)),
                }
            }
            if scratch > 0 {
                events.push(Event::Alloc(n + 1 + i, scratch));
                events.push(Event::Free(n + 1 + i));
            }
        }
        events.push(Event::Ran(i));
        for &t in dies_after.get(i) {
            let b = buffer[t];
            pending_free[b] = Some(events.len());
            events.push(Event::Free(b));
            if reuse_shapes.is_some() {
                free_list.insert(0, b);
            }
        }
    }
    let mut arena = super::arena::Arena::new(config);
    let resident = weight_bytes.saturating_add(input_bytes);
    let mut in_use = filled(None, n);
    for event in events {
        match event {
            Event::Alloc(id, bytes) => arena.alloc(id, bytes),
            Event::Free(id) => arena.free(id),
            Event::Ran(i) if steps[i].executes => in_use[i] = Some(resident.saturating_add(arena.reserved_bytes())),
            Event::Ran(_) | Event::Kept => {}
        }
    }
    in_use
}

/// What tensor `t`'s own buffer took from the arena (its layer's output as the engine lays it out).
fn arena_bytes_of(arena_bytes: &[(u64, u64)], steps: &[Step], t: usize) -> u64 {
    arena_bytes.get(t - 1).map_or(steps[t - 1].output_bytes, |b| b.0)
}

/// Which buffer really holds each tensor and the step after which it is last needed.
struct Liveness {
    /// `storage[t]`: the tensor whose buffer holds tensor t (itself, an input a layer that does not run
    /// aliases, or an input an in-place layer overwrote).
    storage: Vec<usize>,
    /// Step after which each stored tensor is last needed.
    last_use: Vec<usize>,
}

fn liveness(sources: &[Sources], steps: &[Step], input_bytes: u64) -> Liveness {
    let n = steps.len();
    // Tensor 0 is the network input, tensor 1 + i the output of layer i. `storage[t]` is the tensor that really
    // holds tensor t's data (itself unless t is the output of a layer that does not execute).
    let mut storage: Vec<usize> = (0..=n).collect();
    for i in 0..n {
        if !steps[i].executes {
            if let Some(first) = sources[i].first() {
                storage[1 + i] = storage[tensor_of(first)];
            }
        }
    }
    let bytes_of = |t: usize| if t == 0 { input_bytes } else { steps[t - 1].output_bytes };
    // Step after which each stored tensor is last needed (through views too).
    let mut last_use = last_uses(sources, &storage, n);
    // A part of an unmaterialised concat lives as long as the concat's readers need it; later layers first, so
    // a chain of them passes the need on.
    for i in (0..n).rev() {
        if !steps[i].executes && steps[i].keeps_inputs {
            let needed = last_use[storage[1 + i]];
            for s in &sources[i] {
                let t = storage[tensor_of(s)];
                last_use[t] = last_use[t].max(needed);
            }
        }
    }
    // In-place steps, in order: the output joins the buffer it overwrites, which then lives as long as the
    // output's readers need it (so a chain conv → relu → add can keep reusing one buffer).
    let find = |storage: &[usize], mut t: usize| {
        while storage[t] != t {
            t = storage[t];
        }
        t
    };
    for i in 0..n {
        if !(steps[i].executes && (steps[i].in_place || steps[i].adds_into_first)) {
            continue;
        }
        let candidates =
            if steps[i].adds_into_first { &sources[i][..sources[i].len().min(1)] } else { &sources[i][..] };
        let target = candidates
            .iter()
            .map(|s| find(&storage, tensor_of(s)))
            .find(|&r| r != 0 && last_use[r] == i && bytes_of(r) == steps[i].output_bytes);
        if let Some(r) = target {
            let output = 1 + i;
            storage[output] = r;
            last_use[r] = last_use[r].max(last_use[output]);
        }
    }
    for t in 0..=n {
        storage[t] = find(&storage, t);
    }
    Liveness { storage, last_use }
}

/// Bytes of the input a packing step `i` frees before writing its output (see the module docs), if it does.
fn input_freed_after_packing(
    sources: &[Sources],
    steps: &[Step],
    storage: &[usize],
    last_use: &[usize],
    i: usize,
    bytes_of: impl Fn(usize) -> u64,
) -> Option<u64> {
    let step = &steps[i];
    if !step.packs_input || storage[1 + i] != 1 + i {
        return None;
    }
    let input = storage[tensor_of(sources[i].first()?)];
    let bytes = bytes_of(input);
    (input != 0 && last_use[input] == i && step.workspace_bytes >= bytes).then_some(bytes)
}

/// Step after which each stored tensor (index into `storage`'s targets) is last needed; tensors nobody reads are
/// network outputs and live to the end. Consumers come after producers, so one pass in order.
fn last_uses(sources: &[Sources], storage: &[usize], n: usize) -> Vec<usize> {
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
    last_use
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(output_bytes: u64, workspace_bytes: u64) -> Step {
        Step {
            output_bytes,
            workspace_bytes,
            executes: true,
            in_place: false,
            packs_input: false,
            keeps_inputs: false,
            adds_into_first: false,
        }
    }

    #[test]
    fn an_arena_holds_its_regions_not_the_live_tensors() {
        // input -> a (3 MiB) -> b (3 MiB) -> c (1 MiB). a takes a whole 4-MiB region (less than twice a, it is
        // not split); b, alive with a, a second one (the next region is 4 MiB too: the first was sized up for
        // a); c, after a is freed, fits a's region. 8 MiB of regions and their tables (1/32), from b on, beside 5
        // resident bytes and the input.
        const MIB: u64 = 1 << 20;
        let sources = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(1)],
        ];
        let steps = [run(3 * MIB, 0), run(3 * MIB, 0), run(MIB, 0)];
        let config = crate::estimate::arena::ArenaConfig::ONNXRUNTIME;
        let sizes: Vec<(u64, u64)> = steps.iter().map(|s| (s.output_bytes, 0)).collect();
        let in_use = arena_in_use_bytes(&sources, &steps, 7, 5, &sizes, None, config);
        let regions = |mib: u64| 12 + mib * MIB + mib * MIB / 32;
        assert_eq!(in_use, [Some(regions(4)), Some(regions(8)), Some(regions(8))]);
        // The live tensors alone peak at 6 MiB.
        assert_eq!(peak_bytes(&sources, &steps, 7, 5), 12 + 6 * MIB);
    }

    #[test]
    fn a_planner_holds_a_dead_buffer_for_a_later_tensor_of_its_shape() {
        // A chain input -> a -> b -> c -> d of 2 MiB tensors. a takes a 2 MiB region (a request larger than the
        // 1 MiB first region sizes it up), b a second 2 MiB one; the next region would be 4 MiB.
        const MIB: u64 = 1 << 20;
        let config = crate::estimate::arena::ArenaConfig::ONNXRUNTIME;
        let sources: Vec<Sources> = (0..4)
            .map(
                |i| if i == 0 { smallvec::smallvec![Source::Input] } else { smallvec::smallvec![Source::Layer(i - 1)] },
            )
            .collect();
        let steps = [run(2 * MIB, 0); 4];
        let sizes = [(2 * MIB, 0); 4];
        let regions = |mib: u64| 12 + mib * MIB + mib * MIB / 32;
        // Shapes A, B, A, B: c takes a's buffer and d b's, with the planner (held for them) or without (freed
        // chunks of the same size): 4 MiB either way.
        let shapes: [crate::layer::Shape; 4] = [[1, 2], [2, 1], [1, 2], [2, 1]].map(|s| s.as_slice().into());
        let planned = arena_in_use_bytes(&sources, &steps, 7, 5, &sizes, Some(&shapes), config);
        let free = arena_in_use_bytes(&sources, &steps, 7, 5, &sizes, None, config);
        assert_eq!(planned, vec![Some(regions(2)), Some(regions(4)), Some(regions(4)), Some(regions(4))]);
        assert_eq!(free, planned);
        // Shapes A, B, C, A: a's buffer dies after b and is held for d, so c of another shape cannot take it
        // and gets a new 4 MiB region; without the planner c takes a's freed chunk.
        let shapes: [crate::layer::Shape; 4] = [&[1, 2][..], &[2, 1], &[4], &[1, 2]].map(Into::into);
        let planned = arena_in_use_bytes(&sources, &steps, 7, 5, &sizes, Some(&shapes), config);
        let free = arena_in_use_bytes(&sources, &steps, 7, 5, &sizes, None, config);
        assert_eq!(free[2], Some(regions(4)), "c in a's freed chunk");
        assert_eq!(planned[2], Some(regions(8)), "c in a new region, a's buffer held for d");
        assert_eq!(planned[3], Some(regions(8)), "d in a's buffer");
    }

    #[test]
    fn a_convolution_computing_an_add_writes_into_the_other_input_when_it_is_its_last_reader() {
        // input -> s (3 MiB, the shortcut) -> c (3 MiB, adding s). Without the sum written into s, a second
        // 4-MiB region holds c; with it, c takes s's buffer. Only the first source is overwritten: c's own input
        // t (the same size, dying there too) is not.
        const MIB: u64 = 1 << 20;
        let config = crate::estimate::arena::ArenaConfig::ONNXRUNTIME;
        let sources = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(0), Source::Layer(1)],
        ];
        let adding = Step { adds_into_first: true, ..run(3 * MIB, 0) };
        let sizes = [(3 * MIB, 0), (3 * MIB, 0), (3 * MIB, 0)];
        let regions = |mib: u64| 12 + mib * MIB + mib * MIB / 32;
        let in_use =
            arena_in_use_bytes(&sources, &[run(3 * MIB, 0), run(3 * MIB, 0), adding], 7, 5, &sizes, None, config);
        assert_eq!(in_use[2], Some(regions(8)), "s and t live, c in s");
        let in_use = arena_in_use_bytes(
            &sources,
            &[run(3 * MIB, 0), run(3 * MIB, 0), run(3 * MIB, 0)],
            7,
            5,
            &sizes,
            None,
            config,
        );
        assert_eq!(in_use[2], Some(regions(16)), "s, t and c apart");
        // s still read later: c writes a buffer of its own.
        let later =
            vec![sources[0].clone(), sources[1].clone(), sources[2].clone(), smallvec::smallvec![Source::Layer(0)]];
        let steps = [run(3 * MIB, 0), run(3 * MIB, 0), adding, run(MIB, 0)];
        let in_use = arena_in_use_bytes(
            &later,
            &steps,
            7,
            5,
            &[(3 * MIB, 0), (3 * MIB, 0), (3 * MIB, 0), (MIB, 0)],
            None,
            config,
        );
        assert_eq!(in_use[2], Some(regions(16)));
    }

    #[test]
    fn the_parts_of_an_unmaterialised_concat_live_until_its_readers_run() {
        // input 8 -> a(10), input -> b(20), concat(a, b) never built, conv(concat) -> 5 with 3 of workspace:
        // the conv reads a and b, so both are alive at its step: 8 + 10 + 20 + 5 + 3.
        let sources = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0), Source::Layer(1)],
            smallvec::smallvec![Source::Layer(2)],
        ];
        let concat = Step { executes: false, keeps_inputs: true, ..run(30, 0) };
        let steps = [run(10, 0), run(20, 0), concat, run(5, 3)];
        assert_eq!(in_use_bytes(&sources, &steps, 8, 0), vec![Some(18), Some(38), None, Some(46)]);
        // As a plain view of its first input, b would be gone by then.
        let view = Step { keeps_inputs: false, ..concat };
        assert_eq!(peak_bytes(&sources, &[run(10, 0), run(20, 0), view, run(5, 3)], 8, 0), 38);
    }

    #[test]
    fn chain_keeps_only_neighbours_alive() {
        // input 10 -> a(20) -> b(5): step a holds 10 + 20 (+1 workspace), step b holds 20 + 5 and the input,
        // which its caller owns; 7 of weights.
        let sources = vec![smallvec::smallvec![Source::Input], smallvec::smallvec![Source::Layer(0)]];
        let steps = [run(20, 1), run(5, 0)];
        assert_eq!(peak_bytes(&sources, &steps, 10, 7), 35 + 7);
        // a -> b -> c(1): a is freed after b, so c holds the input, b and c only.
        let chain3 = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(1)],
        ];
        assert_eq!(peak_bytes(&chain3, &[run(20, 0), run(5, 0), run(1, 0)], 10, 0), 35);
        assert_eq!(peak_bytes(&chain3, &[run(2, 0), run(5, 0), run(30, 0)], 10, 0), 45);
    }

    #[test]
    fn element_wise_layers_reuse_the_buffers_they_are_the_last_reader_of() {
        // input 8 -> a(16) -> relu r(16) -> b(16) -> add(r, b)(16): relu overwrites a, the add overwrites r's
        // buffer (still a's), so one 16-byte buffer serves a, r and the sum.
        let sources = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(1)],
            smallvec::smallvec![Source::Layer(1), Source::Layer(2)],
        ];
        let in_place = |output_bytes| Step {
            output_bytes,
            workspace_bytes: 0,
            executes: true,
            in_place: true,
            packs_input: false,
            keeps_inputs: false,
            adds_into_first: false,
        };
        let steps = [run(16, 0), in_place(16), run(16, 0), in_place(16)];
        // The input (8) lives throughout. a: 8 + 16; r: 8 + 16 (in a); b: 8 + 16 + 16; add: 8 + 16 + 16 (in a).
        assert_eq!(peak_bytes(&sources, &steps, 8, 0), 40);
        let copying = [run(16, 0), run(16, 0), run(16, 0), run(16, 0)];
        // a: 24; r: 8 + a + r = 40; b: 8 + r + b = 40; add: 8 + r + b + sum = 56.
        assert_eq!(peak_bytes(&sources, &copying, 8, 0), 56);
        // Never into the network input, which the caller owns: relu straight on the input allocates.
        let on_input = vec![smallvec::smallvec![Source::Input]];
        assert_eq!(peak_bytes(&on_input, &[in_place(8)], 8, 0), 16);
    }

    #[test]
    fn residual_branch_stays_alive_and_views_alias() {
        // input 8 -> a(16) -> flatten (view of a) -> b(4) -> add(a-view, b)(16)
        let sources = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(1)],
            smallvec::smallvec![Source::Layer(1), Source::Layer(2)],
        ];
        let view = Step {
            output_bytes: 16,
            workspace_bytes: 0,
            executes: false,
            in_place: false,
            packs_input: false,
            keeps_inputs: false,
            adds_into_first: false,
        };
        let steps = [run(16, 0), view, run(4, 100), run(16, 0)];
        // a: 8 + 16 = 24; b: 8 + 16 (a, alive through the view until add) + 4 + 100 = 128;
        // add: 8 + 16 + 4 + 16 = 44.
        assert_eq!(peak_bytes(&sources, &steps, 8, 0), 128);
    }

    #[test]
    fn a_packing_layer_frees_the_input_it_is_the_last_reader_of_before_writing_its_output() {
        // input 8 -> a(100) -> conv c(60, packed copy 120) -> d(4).
        let sources = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(1)],
        ];
        let packing = |output_bytes, workspace_bytes| Step {
            output_bytes,
            workspace_bytes,
            executes: true,
            in_place: false,
            packs_input: true,
            keeps_inputs: false,
            adds_into_first: false,
        };
        // c: input 8 + max(a 100, c 60) + copy 120 = 228 (not 8 + 100 + 60 + 120 = 288).
        assert_eq!(peak_bytes(&sources, &[run(100, 0), packing(60, 120), run(4, 0)], 8, 0), 228);
        // A small workspace is no packed copy of the input (a lazy im2col): everything is held.
        assert_eq!(peak_bytes(&sources, &[run(100, 0), packing(60, 50), run(4, 0)], 8, 0), 218);
        // The input is still needed later (a residual): nothing is freed early.
        let residual = vec![
            smallvec::smallvec![Source::Input],
            smallvec::smallvec![Source::Layer(0)],
            smallvec::smallvec![Source::Layer(0), Source::Layer(1)],
        ];
        assert_eq!(peak_bytes(&residual, &[run(100, 0), packing(60, 120), run(4, 0)], 8, 0), 288);
        // Never the network input, which its caller holds.
        let first = vec![smallvec::smallvec![Source::Input]];
        assert_eq!(peak_bytes(&first, &[packing(60, 120)], 100, 0), 280);
    }
}
