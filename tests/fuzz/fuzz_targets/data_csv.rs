//! A device's data CSV, as `train`, `collect` (resuming) and `data merge` read it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let _ = perfmodel::data::parse_samples(Path::new("data/fuzz/conv2d.csv"), data);
});
