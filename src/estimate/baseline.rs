//! The baselines the paper compares learned models with, so their value is visible side by side.
//!
//! - [`Roofline`] (Paleo, Qi et al. 2017): a layer takes the time to do its arithmetic at the device's peak rate
//!   plus the time to move its tensors at the device's memory bandwidth. Needs only two numbers per device, but
//!   ignores everything that makes real kernels slower than peak.
//! - [`Templates`]: the nearest measured sample of the same layer type, no interpolation.

use crate::data::{self, Sample};
use crate::error::{Error, Result};
use crate::estimate::memory::BYTES_PER_ELEMENT;
use crate::layer::{LayerCost, LayerType};
use crate::metric::Metric;
use crate::train::model::{Knn, Standardizer};
use crate::units::MIB;
use std::collections::BTreeMap;
use std::path::Path;

/// A device's peak arithmetic rate and memory bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    pub peak_gflops: f64,
    pub memory_bandwidth_gbs: f64,
}

impl Roofline {
    /// Paleo's layer time: FLOPs / peak FLOP/s + bytes moved (inputs, weights, output; f32) / bandwidth.
    pub fn latency_ms(&self, cost: &LayerCost) -> f64 {
        let bytes = (cost.input_elems + cost.weight_elems + cost.output_elems) * BYTES_PER_ELEMENT;
        1e3 * (cost.flops as f64 / (self.peak_gflops * 1e9) + bytes as f64 / (self.memory_bandwidth_gbs * 1e9))
    }
}

/// One measured sample as the template method answers with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The sample's [`crate::LayerConfig::key`].
    pub key: String,
    pub latency_ms: f64,
    pub power_w: Option<f64>,
    /// Measured memory beyond the sample's own inputs, output and weights (MiB): its workspace, which carries over
    /// to a similar layer where the tensor sizes do not.
    pub workspace_mib: Option<f64>,
}

#[derive(Debug, Clone)]
struct TypeTemplates {
    /// A 1-nearest-neighbour model whose target is the index of the sample in `samples`.
    nearest: Knn,
    samples: Vec<Measured>,
}

/// The template method (the paper's "nearest measured layer"): a layer takes the metrics of the measured sample of
/// the same type closest to it in standardised feature space, without interpolation. It shows how far pure
/// look-up gets compared with a regressor that generalises between samples.
#[derive(Debug, Clone)]
pub struct Templates {
    by_type: BTreeMap<LayerType, TypeTemplates>,
}

impl Templates {
    /// The measurements of `device` under `data_dir`.
    pub fn load(data_dir: &Path, device: &str) -> Result<Templates> {
        let templates = Templates::from_samples(&data::read_device(data_dir, device)?);
        if templates.by_type.is_empty() {
            return Err(Error::Device {
                device: device.to_string(),
                message: format!("no successful measurements in {}", data_dir.join(device).display()),
            });
        }
        Ok(templates)
    }

    /// Samples without a latency (failed) are left out.
    pub fn from_samples(samples: &BTreeMap<LayerType, Vec<Sample>>) -> Templates {
        let mut by_type = BTreeMap::new();
        for (&layer_type, rows) in samples {
            let usable: Vec<&Sample> = rows.iter().filter(|s| s.metric(Metric::Latency).is_some()).collect();
            if usable.is_empty() {
                continue;
            }
            let features: Vec<Vec<f64>> = usable.iter().map(|s| s.features.clone()).collect();
            let standardizer = Standardizer::fit(&features);
            let columns: Vec<usize> =
                (0..standardizer.mean.len()).filter(|&c| features.iter().any(|row| row[c] != features[0][c])).collect();
            let points = features
                .iter()
                .flat_map(|row| {
                    columns.iter().map(|&c| ((row[c] - standardizer.mean[c]) / standardizer.scale[c]) as f32)
                })
                .collect();
            let nearest = Knn {
                k: 1,
                distance_weighted: false,
                columns: columns.iter().map(|&c| c as u16).collect(),
                mean: columns.iter().map(|&c| standardizer.mean[c]).collect(),
                scale: columns.iter().map(|&c| standardizer.scale[c]).collect(),
                points,
                targets: (0..usable.len()).map(|i| i as f64).collect(),
                by_feature: Default::default(),
            };
            let samples = usable
                .iter()
                .map(|s| Measured {
                    key: s.key.clone(),
                    latency_ms: s.metric(Metric::Latency).unwrap_or_default(),
                    power_w: s.metric(Metric::Power),
                    workspace_mib: s
                        .metric(Metric::Memory)
                        .map(|m| (m - (s.input_bytes + s.weight_bytes + s.output_bytes) as f64 / MIB).max(0.0)),
                })
                .collect();
            by_type.insert(layer_type, TypeTemplates { nearest, samples });
        }
        Templates { by_type }
    }

    /// Whether any sample has a value for `metric`.
    pub fn covers(&self, metric: Metric) -> bool {
        self.by_type.values().flat_map(|t| &t.samples).any(|s| match metric {
            Metric::Latency => true,
            Metric::Power => s.power_w.is_some(),
            Metric::Memory => s.workspace_mib.is_some(),
        })
    }

    /// The nearest measured sample, or `None` when nothing of this type was measured.
    pub fn nearest(&self, layer_type: LayerType, features: &[f64]) -> Option<&Measured> {
        let t = self.by_type.get(&layer_type)?;
        t.samples.get(t.nearest.predict(features) as usize)
    }

    /// Whether any sample of this type was measured.
    pub fn has(&self, layer_type: LayerType) -> bool {
        self.by_type.contains_key(&layer_type)
    }
}
