//! net.json text, as `perfmodel inspect` and `estimate` read it: parse, validate, then estimate.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use perfmodel::Network;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(net) = Network::from_json_str(text, "fuzz.json") {
        let _ = common::estimator().estimate(&net);
    }
});
