//! What the targets share: the estimator over the shipped models, opened once per process.

use perfmodel::estimate::Estimator;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The shipped models of `$PERFMODEL_FUZZ_DEVICE` (default `xeon480-ort`, the smallest store), so that a fuzzed
/// network goes through everything `perfmodel estimate` does after parsing: shape inference, features, every
/// predictor, the engine's rules, the liveness walk.
pub fn estimator() -> &'static Estimator {
    static ESTIMATOR: OnceLock<Estimator> = OnceLock::new();
    ESTIMATOR.get_or_init(|| {
        // As the binary does: an engine panic perfmodel catches and reports as an error is not a crash (the
        // fuzzer's own hook, which aborts, still sees every other panic).
        perfmodel::error::quiet_engine_panics();
        let models = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let device = std::env::var("PERFMODEL_FUZZ_DEVICE").unwrap_or_else(|_| "xeon480-ort".to_string());
        Estimator::open(&models, &device).expect("the shipped models open")
    })
}
