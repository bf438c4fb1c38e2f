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
//!
//! Each source device's models err in their own way where their rows were thin (one device's depthwise model
//! put PyTorch's padded stride-2 depthwise convolutions at 3.4x, another's at half), so on a machine no device
//! was made on, every shipped device of the engine is scaled by the same probes and their predictions are
//! combined layer by layer (a geometric mean): on one new machine, three devices alone were off by up to 25-29%
//! on 22 networks, combined by up to 22%.

use crate::engine::Executor;
use crate::error::{Error, Result};
use crate::layer::{LayerConfig, LayerType};
use crate::metric::Metric;
use crate::network::{Analysis, Network};
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
    /// Dense layers whose weights fit this machine's last-level cache: at batch 1, the streaming of their weights
    /// from it.
    Dense,
    /// Dense layers whose weights do not fit this machine's last-level cache: the streaming of their weights from
    /// memory, which follows the memory's bandwidth rather than the core (a VGG or AlexNet head).
    DenseStreamed,
    /// Sliding-window poolings.
    Pool,
    /// Element-wise layers and everything else that moves memory.
    Elementwise,
}

impl ProbeClass {
    pub const ALL: [ProbeClass; 6] = [
        ProbeClass::Conv,
        ProbeClass::Depthwise,
        ProbeClass::Dense,
        ProbeClass::DenseStreamed,
        ProbeClass::Pool,
        ProbeClass::Elementwise,
    ];

    /// The class whose probes scale a layer's predictions: by its type and, for a dense layer, whether its
    /// `weight_bytes` fit this machine's last-level cache of `llc_bytes` ([`ProbeClass::of_config`] on a config).
    pub fn of(layer_type: LayerType, weight_bytes: u64, llc_bytes: u64) -> ProbeClass {
        match layer_type {
            LayerType::Conv2d => ProbeClass::Conv,
            LayerType::DepthwiseConv2d => ProbeClass::Depthwise,
            LayerType::Dense if weight_bytes > llc_bytes => ProbeClass::DenseStreamed,
            LayerType::Dense => ProbeClass::Dense,
            LayerType::MaxPool2d | LayerType::AvgPool2d | LayerType::GlobalAvgPool2d | LayerType::GlobalMaxPool2d => {
                ProbeClass::Pool
            }
            _ => ProbeClass::Elementwise,
        }
    }

    /// [`ProbeClass::of`] a layer config, its weights as f32 (a config whose cost cannot be computed counts none).
    pub fn of_config(config: &LayerConfig, llc_bytes: u64) -> ProbeClass {
        let weight_bytes = config.cost().map_or(0, |c| c.weight_elems * crate::units::F32_BYTES);
        ProbeClass::of(config.layer_type(), weight_bytes, llc_bytes)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProbeClass::Conv => "conv",
            ProbeClass::Depthwise => "depthwise",
            ProbeClass::Dense => "dense",
            ProbeClass::DenseStreamed => "dense_streamed",
            ProbeClass::Pool => "pool",
            ProbeClass::Elementwise => "elementwise",
        }
    }
}

/// The probe layers, batch 1: the layers typical networks spend their time in, per class: ResNet-50's stem and
/// the 3x3 and 1x1 convolutions of its four stages, MobileNet v2's depthwise convolutions at four resolutions,
/// the classifier heads of MobileNet, ResNet, VGG and AlexNet (the larger ones beyond many machines' last-level
/// cache: their class is decided by this machine's), a stem pooling and a global one, and a ReLU, a batch norm
/// and a residual add at ResNet sizes.
const PROBES: [&str; 20] = [
    r#"{"type":"conv2d","filters":64,"kernel":[7,7],"strides":[2,2],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[3,224,224]]}"#,
    r#"{"type":"conv2d","filters":64,"kernel":[3,3],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[64,56,56]]}"#,
    r#"{"type":"conv2d","filters":256,"kernel":[1,1],"batch_size":1,"input_shapes":[[64,56,56]]}"#,
    r#"{"type":"conv2d","filters":128,"kernel":[3,3],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[128,28,28]]}"#,
    r#"{"type":"conv2d","filters":256,"kernel":[1,1],"activation":"relu","batch_size":1,"input_shapes":[[1024,14,14]]}"#,
    r#"{"type":"conv2d","filters":512,"kernel":[3,3],"padding":"same","activation":"relu","batch_size":1,"input_shapes":[[512,7,7]]}"#,
    r#"{"type":"depthwise_conv2d","kernel":[3,3],"strides":[2,2],"padding":"same","batch_size":1,"input_shapes":[[96,112,112]]}"#,
    r#"{"type":"depthwise_conv2d","kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[144,56,56]]}"#,
    r#"{"type":"depthwise_conv2d","kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[384,14,14]]}"#,
    r#"{"type":"depthwise_conv2d","kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[960,7,7]]}"#,
    r#"{"type":"dense","units":1000,"batch_size":1,"input_shapes":[[1280]]}"#,
    r#"{"type":"dense","units":1000,"batch_size":1,"input_shapes":[[2048]]}"#,
    r#"{"type":"dense","units":4096,"batch_size":1,"input_shapes":[[4096]]}"#,
    r#"{"type":"dense","units":4096,"batch_size":1,"input_shapes":[[9216]]}"#,
    r#"{"type":"max_pool2d","pool_size":[3,3],"strides":[2,2],"padding":"same","batch_size":1,"input_shapes":[[64,112,112]]}"#,
    r#"{"type":"global_avg_pool2d","batch_size":1,"input_shapes":[[2048,7,7]]}"#,
    r#"{"type":"activation","function":"relu","batch_size":1,"input_shapes":[[64,112,112]]}"#,
    r#"{"type":"batch_norm","batch_size":1,"input_shapes":[[128,56,56]]}"#,
    r#"{"type":"add","batch_size":1,"input_shapes":[[256,56,56],[256,56,56]]}"#,
    r#"{"type":"batch_norm","batch_size":1,"input_shapes":[[512,28,28]]}"#,
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

/// The probe layers timed here, once for every source device they scale.
#[derive(Debug, Clone)]
pub struct ProbeTimes {
    /// Each probe's config, class on this machine and median time (ms).
    times: Vec<(LayerConfig, ProbeClass, f64)>,
    pub seconds: f64,
}

impl ProbeTimes {
    /// Time every probe layer with `executor`; a dense probe's class follows this machine's last-level cache.
    pub fn measure(executor: &dyn Executor) -> Result<ProbeTimes> {
        let started = Instant::now();
        let llc = host_llc_bytes();
        let mut times = Vec::with_capacity(PROBES.len());
        for json in PROBES {
            let value: serde_json::Value = serde_json::from_str(json).expect("probe configs are valid JSON");
            let config =
                LayerConfig::from_json(&value).map_err(|e| Error::Invalid(format!("zero-shot probe {json}: {e}")))?;
            let class = ProbeClass::of_config(&config, llc);
            let measured_ms = time_layer(executor, &config)?;
            times.push((config, class, measured_ms));
        }
        Ok(ProbeTimes { times, seconds: started.elapsed().as_secs_f64() })
    }
}

/// A source device's latency models brought to this machine.
#[derive(Debug, Clone, Serialize)]
pub struct ZeroShot {
    pub source_device: String,
    pub probes: Vec<ProbeTiming>,
    /// measured / predicted per class: the median over the class's probes (a dense class without probes on this
    /// machine takes the other dense class's; any other class without probes, the median over every probe).
    pub factors: BTreeMap<ProbeClass, f64>,
    /// The probes' timing here (shared by every source device they scale).
    pub seconds: f64,
}

impl ZeroShot {
    /// Scale `store`'s latency models by probes timed here: each probe predicted by the store's model of its
    /// type (probes of a type it has no model of are left out).
    pub fn from_times(store: &ModelStore, times: &ProbeTimes) -> Result<ZeroShot> {
        let mut probes = Vec::new();
        for (config, class, measured_ms) in &times.times {
            let Some(predictor) = store.predictor(config.layer_type(), Metric::Latency) else { continue };
            let features = config.features().map_err(|e| Error::Invalid(format!("zero-shot probe {config:?}: {e}")))?;
            let predicted_ms = predictor.predict(&features);
            if predicted_ms > 0.0 && *measured_ms > 0.0 {
                probes.push(ProbeTiming {
                    class: *class,
                    layer_type: config.layer_type(),
                    measured_ms: *measured_ms,
                    predicted_ms,
                });
            }
        }
        if probes.is_empty() {
            return Err(Error::Device {
                device: store.device().to_string(),
                message: "no latency model of the zero-shot probe layers: it cannot be scaled to this machine".into(),
            });
        }
        // The median of the probes' measured / predicted: one probe the source's model gets badly wrong (a stride-2
        // depthwise convolution predicted at 3.4x by one device's model) must not set the factor of its whole kind.
        let ratio = |of: &mut dyn Iterator<Item = &ProbeTiming>| {
            let r: Vec<f64> = of.map(|t| t.measured_ms / t.predicted_ms).collect();
            crate::stats::median(&r)
        };
        let all = ratio(&mut probes.iter()).unwrap_or(1.0);
        let of_class = |class: ProbeClass| ratio(&mut probes.iter().filter(|p| p.class == class));
        let dense = of_class(ProbeClass::Dense);
        let streamed = of_class(ProbeClass::DenseStreamed);
        let factors = ProbeClass::ALL
            .into_iter()
            .map(|class| {
                let f = match class {
                    ProbeClass::Dense => dense.or(streamed),
                    ProbeClass::DenseStreamed => streamed.or(dense),
                    _ => of_class(class),
                };
                (class, f.unwrap_or(all))
            })
            .collect();
        Ok(ZeroShot { source_device: store.device().to_string(), probes, factors, seconds: times.seconds })
    }

    /// The factor of a class's latencies.
    pub fn factor(&self, class: ProbeClass) -> f64 {
        self.factors.get(&class).copied().unwrap_or(1.0)
    }

    /// `conv x0.62, depthwise x0.80, ...`.
    pub fn factors_text(&self) -> String {
        self.factors.iter().map(|(c, f)| format!("{} x{f:.2}", c.as_str())).collect::<Vec<_>>().join(", ")
    }
}

/// This machine's last-level cache (L3, else L2), bytes; unbounded when neither is known, so that no dense
/// layer counts as streamed from memory.
pub fn host_llc_bytes() -> u64 {
    let host = crate::device::Fingerprint::of_host();
    host.l3_bytes.or(host.l2_bytes).unwrap_or(u64::MAX)
}

/// The probe class of every layer of `net` on this machine (by type, and for dense layers by their weights).
pub fn layer_classes(net: &Network, analysis: &Analysis) -> Vec<ProbeClass> {
    let llc = host_llc_bytes();
    (0..net.layers.len()).map(|i| ProbeClass::of_config(analysis.config(i), llc)).collect()
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
    fn every_probe_is_a_valid_layer_and_dense_layers_are_classed_by_the_cache() {
        for json in PROBES {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let config = LayerConfig::from_json(&v).unwrap();
            assert!(config.features().is_ok() && config.cost().is_ok(), "{json}");
        }
        let mib = 1 << 20;
        assert_eq!(ProbeClass::of(LayerType::Dense, 144 * mib, 32 * mib), ProbeClass::DenseStreamed);
        assert_eq!(ProbeClass::of(LayerType::Dense, 8 * mib, 32 * mib), ProbeClass::Dense);
        assert_eq!(ProbeClass::of(LayerType::Dense, 144 * mib, 480 * mib), ProbeClass::Dense);
        assert_eq!(ProbeClass::of(LayerType::Add, 0, 32 * mib), ProbeClass::Elementwise);
        assert_eq!(ProbeClass::of(LayerType::GlobalAvgPool2d, 0, 32 * mib), ProbeClass::Pool);
        assert_eq!(ProbeClass::of(LayerType::Conv2d, 144 * mib, 32 * mib), ProbeClass::Conv);
    }
}
