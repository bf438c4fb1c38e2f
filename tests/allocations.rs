//! Heap allocations per NAS candidate through the C ABI, counted exactly: a NAS loop asks `pm_estimate_layers`
//! thousands of times a second, and on the AMD hosts a third of a candidate's time was the C library's `malloc`
//! and `free` (docs/budgets.md). Time is a benchmark's business; the number of allocations is not: it is the
//! same on every machine and every run, so a test can hold it.
//!
//! This file is its own test binary, so it installs its own counting allocator; it counts on the calling thread
//! only (libtest runs other tests' threads beside it).

use perfmodel::ffi::{pm_estimate_layers, pm_estimator_close, PmEstimator, PmLayer, PmResult};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    COUNT.with(Cell::get)
}

#[path = "common/nas.rs"]
mod nas;
use nas::nas_candidate;

/// `nas_candidate` with `extra` more layers before its pooling head: 3x3 convolutions, depthwise ones and 1x1
/// convolutions of other widths in turn (a layer the cache holds per configuration).
fn longer_candidate(extra: usize, residual_inputs: &[i64; 2]) -> Vec<PmLayer> {
    let mut layers = nas_candidate(24, 3, residual_inputs);
    let (conv, depthwise) = (layers[8], layers[2]);
    for k in 0..extra {
        let layer = match k % 3 {
            0 => conv,
            1 => depthwise,
            _ => PmLayer { kernel: [1, 1], units: 8 + k as i64, ..conv },
        };
        layers.insert(9 + k, layer);
    }
    layers
}

/// Allocations of one candidate whose layers the estimator has seen (the layer cache answers them, as it answers
/// most of a NAS loop's layers), on a shipped device.
fn per_candidate(device: &str, extra_layers: usize) -> usize {
    let handle = open(device);
    let residual = [1i64, 3];
    let shape = [3i64, 32, 32];
    let layers = longer_candidate(extra_layers, &residual);
    let run = || {
        let out = estimate(handle, &layers, &shape).expect("the candidate estimates");
        assert!(out.latency_ms > 0.0 && out.peak_memory_mib > 0.0);
    };
    // The first calls fill the layer cache and the engine's per-shape caches.
    run();
    run();
    let counts: Vec<usize> = (0..3).map(|_| allocations(run)).collect();
    unsafe { pm_estimator_close(handle) };
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "the same candidate allocated {counts:?} times");
    counts[0]
}

/// `pm_estimate_layers` on `layers`: the result, or the status code.
fn estimate(handle: *mut PmEstimator, layers: &[PmLayer], shape: &[i64]) -> Result<PmResult, i32> {
    let mut out = PmResult::default();
    let code =
        unsafe { pm_estimate_layers(handle, layers.as_ptr(), layers.len(), shape.as_ptr(), shape.len(), 1, &mut out) };
    if code == 0 {
        Ok(out)
    } else {
        Err(code)
    }
}

/// A shipped device's estimator through the C ABI.
fn open(device: &str) -> *mut PmEstimator {
    let models = concat!(env!("CARGO_MANIFEST_DIR"), "/models");
    nas::open_estimator(models, device).unwrap_or_else(|code| panic!("open the shipped device '{device}': {code}"))
}

#[test]
fn a_nas_candidate_allocates_a_bounded_number_of_times_whatever_its_layers() {
    // The counts measured when the test was written, plus 2: a toolchain or dependency update that changes how
    // vectors and maps grow may need them measured again (`cargo test --test allocations -- --nocapture`).
    for (device, ceiling) in [("zen4", 37), ("zen4-ort", 60)] {
        let n = per_candidate(device, 0);
        let longer = per_candidate(device, 40);
        eprintln!("{device}: {n} allocations per 11-layer candidate, {longer} per 51-layer one");
        assert!(n <= ceiling, "{device}: {n} allocations per candidate, more than {ceiling}");
        // The cached path allocates per network, not per layer (a few vectors grow past their first capacity).
        assert!(longer <= n + 8, "{device}: {n} allocations with 11 layers, {longer} with 51");
    }
}

/// The network a thread's calls refill keeps nothing of an earlier candidate: a long one, then one that fails
/// half-way (an input index from the future) after refilling layers with other inputs, then a short one give
/// the short one's answer as a fresh thread computes it.
#[test]
fn a_refilled_network_answers_as_a_fresh_one() {
    let handle = open("zen4-ort") as usize;
    let shape = [3i64, 32, 32];
    let short = |residual: &[i64; 2]| {
        let mut layers = nas_candidate(16, 5, residual);
        layers.truncate(5);
        layers
    };
    let fresh = std::thread::spawn(move || {
        let residual = [0i64, 3];
        estimate(handle as *mut PmEstimator, &short(&residual), &shape).unwrap()
    })
    .join()
    .unwrap();
    let long_residual = [1i64, 3];
    estimate(handle as *mut PmEstimator, &longer_candidate(20, &long_residual), &shape).unwrap();
    let bad_residual = [1i64, 9];
    let mut bad = nas_candidate(24, 3, &bad_residual);
    bad.truncate(8);
    // Its depthwise layer reads the network's input, where the short candidate's reads the layer before.
    let network_input = [-1i64];
    bad[2].inputs = network_input.as_ptr();
    bad[2].n_inputs = 1;
    assert!(estimate(handle as *mut PmEstimator, &bad, &shape).is_err(), "input 9 of layer 4 is refused");
    let residual = [0i64, 3];
    let again = estimate(handle as *mut PmEstimator, &short(&residual), &shape).unwrap();
    assert_eq!(
        (again.latency_ms.to_bits(), again.peak_memory_mib.to_bits(), again.layers),
        (fresh.latency_ms.to_bits(), fresh.peak_memory_mib.to_bits(), fresh.layers)
    );
    unsafe { pm_estimator_close(handle as *mut PmEstimator) };
}
