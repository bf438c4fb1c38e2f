//! ONNX bytes, as `perfmodel import-onnx` reads them: decode the protobuf, map every node, then estimate.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use perfmodel::onnx::import_proto;
use tract_onnx::prelude::*;

fuzz_target!(|data: &[u8]| {
    // Loads the models and installs the binary's panic hook before the first import.
    let _ = common::estimator();
    let Ok(proto) = tract_onnx::onnx().proto_model_for_read(&mut &data[..]) else { return };
    for allow_unsupported in [false, true] {
        if let Ok(net) = import_proto(&proto, "fuzz.onnx", "fuzz", allow_unsupported) {
            let _ = common::estimator().estimate(&net);
        }
    }
});
