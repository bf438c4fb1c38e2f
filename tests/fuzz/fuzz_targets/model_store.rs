//! A model file and a manifest, as opening a device's store reads them (the SHA-256 in the manifest is checked
//! first in real use; here the bytes go straight to the decoders), then a prediction from whatever decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfmodel::metric::Metric;
use perfmodel::train::store::{Manifest, ModelFile};
use perfmodel::LayerType;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else { return };
    if selector % 2 == 0 {
        let layer_type = LayerType::ALL[selector as usize / 2 % LayerType::ALL.len()];
        let path = Path::new("models/fuzz/layer/latency.bin");
        if let Ok(file) = ModelFile::decode(path, bytes, layer_type, Metric::Latency) {
            let width = layer_type.feature_names().len();
            for x in [vec![0.0; width], vec![1e6; width], vec![f64::NAN; width], vec![-1.0; width]] {
                let _ = file.predictor.predict(&x);
            }
        }
    } else {
        let _ = serde_json::from_slice::<Manifest>(bytes);
    }
});
