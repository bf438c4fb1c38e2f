//! Zero-shot estimates for a machine no device was made on: another machine's models, scaled per kind of layer
//! by a few seconds of speed probes timed here.
//!
//! Why: a layer's time on a new machine is mostly its time on a known machine times how much faster the new
//! one runs that kind of work, and the kinds differ: compute-bound convolutions follow the core's arithmetic,
//! poolings and element-wise layers its memory, a batch-1 dense layer the streaming of its weights. Crop ("An
//! Analytical Cost Model for Cross-Platform Performance Prediction of Tensor Programs") combines program features
//! from a source machine with hardware features from seconds of microbenchmarks on the target; here the
//! microbenchmarks are a few representative layers of each kind, timed with the engine here and predicted by
//! the source device's own models, and their ratio scales that device's predictions of the same kind.

use crate::engine::Executor;
use crate::error::{Error, Result};
use crate::layer::{LayerConfig, LayerType};
use crate::metric::Metric;
use crate::train::ModelStore;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The kinds of work a machine can be faster or slower at, each scaled by its own probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeClass {
    /// Convolutions: arithmetic through the engine's matrix-product kernels.
    Conv,
    /// Depthwise convolutions: a few operations per element, in the engine's own loops.
    Depthwise,
    /// Dense layers: at batch 1, the streaming of their weights.
    Dense,
    /// Sliding-window poolings.
    Pool,
    /// Element-wise layers and everything else that moves memory.
    Elementwise,
}

impl ProbeClass {
    /// The class whose probes scale a layer type's predictions.
    pub fn of(layer_type: LayerType) -> ProbeClass {
        match layer_type {
            LayerType::Conv2d => ProbeClass::Conv,
            LayerType::DepthwiseConv2d => ProbeClass::Depthwise,
            LayerType::Dense => ProbeClass::Dense,
            LayerType::MaxPool2d | LayerType::AvgPool2d | LayerType::GlobalAvgPool2d | LayerType::GlobalMaxPool2d => {
                ProbeClass::Pool
            }
            _ => ProbeClass::Elementwise,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProbeClass::Conv => "conv",
            ProbeClass::Depthwise => "depthwise",
            ProbeClass::Dense => "dense",
            ProbeClass::Pool => "pool",
            ProbeClass::Elementwise => "elementwise",
        }
    }
}

/// The probe layers, batch 1: the layers typical networks spend their time in, per class: ResNet-50's stem and
/// the 3x3 and 1x1 convolutions of its four stages, MobileNet v2's depthwise convolutions at four resolutions,
/// the classifier heads of MobileNet, ResNet and VGG, a stem pooling and a global one, and a ReLU, a batch norm
/// and a residual add at ResNet sizes.
const PROBES: [(ProbeClass, &str); 19] = [
    (
        ProbeClass::Conv,
        r#"{"type":"conv2d","filters":64,"kernel":[7,7],"strides":[2,2],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[3,224,224]]}"#,
    ),
    (
        ProbeClass::Conv,
        r#"{"type":"conv2d","filters":64,"kernel":[3,3],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[64,56,56]]}"#,
    ),
    (ProbeClass::Conv, r#"{"type":"conv2d","filters":256,"kernel":[1,1],"batch_size":1,"input_shapes":[[64,56,56]]}"#),
    (
        ProbeClass::Conv,
        r#"{"type":"conv2d","filters":128,"kernel":[3,3],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[128,28,28]]}"#,
    ),
    (
        ProbeClass::Conv,
        r#"{"type":"conv2d","filters":256,"kernel":[1,1],"activation":"relu","batch_size":1,"input_shapes":[[1024,14,14]]}"#,
    ),
    (
        ProbeClass::Conv,
        r#"{"type":"conv2d","filters":512,"kernel":[3,3],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[512,7,7]]}"#,
    ),
    (
        ProbeClass::Depthwise,
        r#"{"type":"depthwise_conv2d","kernel":[3,3],"strides":[2,2],"padding":"same","batch_size":1,"input_shapes":[[96,112,112]]}"#,
    ),
    (
        ProbeClass::Depthwise,
        r#"{"type":"depthwise_conv2d","kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[144,56,56]]}"#,
    ),
    (
        ProbeClass::Depthwise,
        r#"{"type":"depthwise_conv2d","kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[384,14,14]]}"#,
    ),
    (
        ProbeClass::Depthwise,
        r#"{"type":"depthwise_conv2d","kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[960,7,7]]}"#,
    ),
    (ProbeClass::Dense, r#"{"type":"dense","units":1000,"batch_size":1,"input_shapes":[[1280]]}"#),
    (ProbeClass::Dense, r#"{"type":"dense","units":1000,"batch_size":1,"input_shapes":[[2048]]}"#),
    (ProbeClass::Dense, r#"{"type":"dense","units":4096,"batch_size":1,"input_shapes":[[4096]]}"#),
    (
        ProbeClass::Pool,
        r#"{"type":"max_pool2d","pool_size":[3,3],"strides":[2,2],"padding":"same","batch_size":1,"input_shapes":[[64,112,112]]}"#,
    ),
    (ProbeClass::Pool, r#"{"type":"global_avg_pool2d","batch_size":1,"input_shapes":[[2048,7,7]]}"#),
    (
        ProbeClass::Elementwise,
        r#"{"type":"activation","function":"relu","batch_size":1,"input_shapes":[[64,112,112]]}"#,
    ),
    (ProbeClass::Elementwise, r#"{"type":"batch_norm","batch_size":1,"input_shapes":[[128,56,56]]}"#),
    (ProbeClass::Elementwise, r#"{"type":"add","batch_size":1,"input_shapes":[[256,56,56],[256,56,56]]}"#),
    (ProbeClass::Elementwise, r#"{"type":"batch_norm","batch_size":1,"input_shapes":[[512,28,28]]}"#),
];

/// Timing of one probe: at least this many runs, and runs until this much time has passed.
const MIN_RUNS: usize = 5;
const RUN_TIME: Duration = Duration::from_millis(150);

/// One probe layer: its time here and the source device's prediction of it.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeTiming {
    pub class: ProbeClass,
    #[serde(serialize_with = "layer_type_name")]
    pub layer_type: LayerType,
    pub measured_ms: f64,
    pub predicted_ms: f64,
}

/// A source device's latency models brought to this machine.
#[derive(Debug, Clone, Serialize)]
pub struct ZeroShot {
    pub source_device: String,
    pub probes: Vec<ProbeTiming>,
    /// measured / predicted per class: the median over the class's probes (over every probe for a class the
    /// source has no model for).
    pub factors: BTreeMap<ProbeClass, f64>,
    pub seconds: f64,
}

impl ZeroShot {
    /// Time the probes with `executor` and predict them with `store`'s latency models.
    pub fn measure(store: &ModelStore, executor: &dyn Executor) -> Result<ZeroShot> {
        let started = Instant::now();
        let mut probes = Vec::new();
        for (class, json) in PROBES {
            let value: serde_json::Value = serde_json::from_str(json).expect("probe configs are valid JSON");
            let config =
                LayerConfig::from_json(&value).map_err(|e| Error::Invalid(format!("zero-shot probe {json}: {e}")))?;
            let Some(predictor) = store.predictor(config.layer_type(), Metric::Latency) else { continue };
            let features = config.features().map_err(|e| Error::Invalid(format!("zero-shot probe {json}: {e}")))?;
            let predicted_ms = predictor.predict(&features);
            let measured_ms = time_layer(executor, &config)?;
            if predicted_ms > 0.0 && measured_ms > 0.0 {
                probes.push(ProbeTiming { class, layer_type: config.layer_type(), measured_ms, predicted_ms });
            }
        }
        if probes.is_empty() {
            return Err(Error::Device {
                device: store.device().to_string(),
                message: "no latency model of the zero-shot probe layers: it cannot be scaled to this machine".into(),
            });
        }
        // The median of the probes' measured / predicted: one probe the source's model gets badly wrong (a stride-2
        // depthwise convolution predicted at 3.4x by one device's model) must not
        // set the factor of its whole kind.
        let ratio = |of: &mut dyn Iterator<Item = &ProbeTiming>| {
            let mut r: Vec<f64> = of.map(|t| t.measured_ms / t.predicted_ms).collect();
            r.sort_by(f64::total_cmp);
            let n = r.len();
            (n > 0).then(|| if n % 2 == 1 { r[n / 2] } else { (r[n / 2 - 1] + r[n / 2]) / 2.0 })
        };
        let all = ratio(&mut probes.iter()).unwrap_or(1.0);
        let factors =
            [ProbeClass::Conv, ProbeClass::Depthwise, ProbeClass::Dense, ProbeClass::Pool, ProbeClass::Elementwise]
                .into_iter()
                .map(|class| (class, ratio(&mut probes.iter().filter(|p| p.class == class)).unwrap_or(all)))
                .collect();
        Ok(ZeroShot {
            source_device: store.device().to_string(),
            probes,
            factors,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// The factor a layer type's latency is scaled by.
    pub fn factor(&self, layer_type: LayerType) -> f64 {
        self.factors.get(&ProbeClass::of(layer_type)).copied().unwrap_or(1.0)
    }

    /// `conv x0.62, depthwise x0.80, ...`.
    pub fn factors_text(&self) -> String {
        self.factors.iter().map(|(c, f)| format!("{} x{f:.2}", c.as_str())).collect::<Vec<_>>().join(", ")
    }
}

fn layer_type_name<S: serde::Serializer>(t: &LayerType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(t.as_str())
}

/// Median wall time of one layer run, ms.
fn time_layer(executor: &dyn Executor, config: &LayerConfig) -> Result<f64> {
    let mut workload = executor.prepare_layer(config)?;
    let mut times = crate::engine::time_runs(workload.as_mut(), 2, MIN_RUNS, RUN_TIME, 1000)?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_probe_is_a_valid_layer_of_its_class() {
        for (class, json) in PROBES {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let config = LayerConfig::from_json(&v).unwrap();
            assert_eq!(ProbeClass::of(config.layer_type()), class, "{json}");
            assert!(config.features().is_ok());
        }
        assert_eq!(ProbeClass::of(LayerType::Add), ProbeClass::Elementwise);
        assert_eq!(ProbeClass::of(LayerType::GlobalAvgPool2d), ProbeClass::Pool);
    }
}
