//! One NAS candidate asked of the C ABI over and over, for counting what a call costs in instructions: wall time
//! varies between runs by more than most changes to the query path, an instruction count under callgrind does
//! not (the same binary and models give the same count on every run). The counted calls are in `steady_calls`,
//! after three in `warm_up` that fill the layer cache, so that a count covers the steady calls alone:
//!
//!     cargo build --example nas_calls
//!     valgrind --tool=callgrind --toggle-collect='*steady_calls*' target/debug/examples/nas_calls zen5-ort 100
//!
//! divides by the calls (100) for the instructions per candidate; `callgrind_annotate` names where they go.

use perfmodel::ffi::{pm_estimate_layers, pm_estimator_close, PmEstimator, PmLayer, PmResult};

#[path = "../tests/common/nas.rs"]
mod nas;

/// The calls that fill the layer cache and the engine's per-shape caches, kept out of the count.
#[inline(never)]
fn warm_up(handle: *mut PmEstimator, layers: &[PmLayer], shape: &[i64]) -> Result<f64, i32> {
    estimates(handle, layers, shape, 3)
}

/// The counted calls.
#[inline(never)]
fn steady_calls(handle: *mut PmEstimator, layers: &[PmLayer], shape: &[i64], calls: usize) -> Result<f64, i32> {
    estimates(handle, layers, shape, calls)
}

/// `calls` estimates of `layers`; the sum of their latencies, so that none is optimised away.
#[inline(always)]
fn estimates(handle: *mut PmEstimator, layers: &[PmLayer], shape: &[i64], calls: usize) -> Result<f64, i32> {
    let mut sum = 0.0;
    for _ in 0..calls {
        let mut out = PmResult::default();
        // SAFETY: the handle is open, the slices outlive the call, `out` is a valid result to write.
        let code = unsafe {
            pm_estimate_layers(handle, layers.as_ptr(), layers.len(), shape.as_ptr(), shape.len(), 1, &mut out)
        };
        if code != 0 {
            return Err(code);
        }
        sum += out.latency_ms;
    }
    Ok(sum)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let device = args.next().unwrap_or_else(|| "local".to_string());
    let calls: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let models = concat!(env!("CARGO_MANIFEST_DIR"), "/models");
    let handle = match nas::open_estimator(models, &device) {
        Ok(handle) => handle,
        Err(code) => {
            eprintln!("opening device '{device}' failed with status {code}");
            std::process::exit(2);
        }
    };
    let residual = [1i64, 3];
    let layers = nas::nas_candidate(24, 3, &residual);
    let shape = [3i64, 32, 32];
    let result = warm_up(handle, &layers, &shape).and_then(|_| steady_calls(handle, &layers, &shape, calls));
    // SAFETY: the handle is open and not used after.
    unsafe { pm_estimator_close(handle) };
    match result {
        Ok(sum) => println!("{calls} calls on '{device}': mean latency {:.4} ms", sum / calls as f64),
        Err(code) => {
            eprintln!("estimating the candidate failed with status {code}");
            std::process::exit(2);
        }
    }
}
