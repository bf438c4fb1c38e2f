//! The outlier detector: layers that run far slower than the models say they should.
//!
//! A layer measured in the whole network (`perfmodel bench`, or any tool writing the same keys) is compared with
//! its prediction. A large measured/predicted ratio means the engine runs this configuration badly (an
//! unfavourable shape for its kernels, a missed fusion) or that the model has never seen anything like it; both
//! are worth a look. Two tests flag a layer:
//! - its ratio exceeds the threshold;
//! - an isolation forest (the one training uses to clean data, [`IsolationForest`]) on the layers' sizes and
//!   log ratio isolates it (score ≥ [`ISOLATION_SCORE`]) while it runs slower than predicted: an unusual ratio for
//!   its size, even below the threshold.
//!
//! The sizes (log of input, weight and output elements and FLOPs) are the part of the feature vector every layer
//! type shares, so one forest covers the whole network. Layers that should cost nothing (free, fused) have no
//! ratio; they are flagged when they take at least [`EXPECTED_FREE_SHARE`] of the measured time. Flagged layers are
//! ranked by the time tuning could save, measured − predicted.
//!
//! An element-wise layer the engine ran inside a neighbour (measured at 0 ms) is compared there
//! ([`fused_into`]): otherwise every ReLU that absorbed a batch norm would look like a slow kernel. The
//! neighbour's ratio then covers both; the isolation forest still sees the neighbour's own sizes.

use crate::error::{Error, Result};
use crate::estimate::Estimate;
use crate::layer::LayerType;
use crate::network::Network;
use crate::train::isolation::IsolationForest;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Isolation score from which a slower-than-predicted layer counts as isolated (0.5 is typical, 1 is certain).
pub const ISOLATION_SCORE: f64 = 0.6;

/// Share of the measured network time from which a layer predicted to cost nothing is flagged.
pub const EXPECTED_FREE_SHARE: f64 = 0.01;

/// Measured time of one layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredLayer {
    pub name: String,
    pub latency_ms: f64,
}

#[derive(Deserialize)]
struct MeasuredFile {
    layers: Vec<MeasuredLayer>,
}

/// Read per-layer measurements: a JSON object with `layers` [{`name`, `latency_ms`}] (other keys are ignored, so
/// `perfmodel bench --format json` output works as it is).
pub fn read_measured(path: &Path) -> Result<Vec<MeasuredLayer>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let file: MeasuredFile = serde_json::from_str(&text).map_err(|e| {
        Error::Invalid(format!(
            "{}: expected a JSON object with \"layers\": [{{\"name\", \"latency_ms\"}}] (as written by `perfmodel bench --format json`): {e}",
            path.display()
        ))
    })?;
    for (i, l) in file.layers.iter().enumerate() {
        if !(l.latency_ms.is_finite() && l.latency_ms >= 0.0) {
            return Err(Error::Invalid(format!(
                "{}: layers[{i}] ('{}'), field 'latency_ms': expected a non-negative number, got {}",
                path.display(),
                l.name,
                l.latency_ms
            )));
        }
    }
    Ok(file.layers)
}

/// One layer, measured against predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub name: String,
    #[serde(rename = "type", serialize_with = "super::layer_type_name")]
    pub layer_type: LayerType,
    pub measured_ms: f64,
    pub predicted_ms: f64,
    /// measured / predicted (the prediction including the layers in `fused`); null when the layer is predicted
    /// to cost nothing or ran inside another layer (`fused_into`).
    pub ratio: Option<f64>,
    pub isolation_score: Option<f64>,
    /// measured − predicted: what tuning could save at best.
    pub saving_ms: f64,
    /// Why it is flagged: `ratio`, `isolation`, `expected_free`; empty when it is not.
    pub flagged_by: Vec<&'static str>,
    /// Layers the engine ran inside this one ([`fused_into`]): their predicted time is part of `predicted_ms`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fused: Vec<String>,
    /// The layer this one ran inside: measured at 0 ms, its predicted time is compared there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fused_into: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutlierReport {
    pub network: String,
    pub device: String,
    pub threshold: f64,
    pub measured_total_ms: f64,
    pub predicted_total_ms: f64,
    /// Flagged layers, largest saving first.
    pub outliers: Vec<Comparison>,
    /// Every compared layer, in network order.
    pub layers: Vec<Comparison>,
    pub notes: Vec<String>,
}

/// Compare `measured` (matched by layer name) with `estimate` of `net` and flag outliers.
pub fn find_outliers(
    net: &Network,
    estimate: &Estimate,
    measured: &[MeasuredLayer],
    threshold: f64,
) -> Result<OutlierReport> {
    if !(threshold.is_finite() && threshold > 0.0) {
        return Err(Error::Invalid(format!("the threshold must be a positive number, got {threshold}")));
    }
    if estimate.layers.len() != net.layers.len() {
        return Err(Error::Invalid(format!(
            "the estimate has {} layers, network '{}' has {}: it is not this network's estimate",
            estimate.layers.len(),
            net.name,
            net.layers.len()
        )));
    }
    let analysis = net.analyze()?;
    let index: HashMap<&str, usize> = net.layers.iter().enumerate().map(|(i, l)| (l.name.as_str(), i)).collect();
    let mut measured_of: Vec<Option<f64>> = vec![None; net.layers.len()];
    for m in measured {
        let i = *index.get(m.name.as_str()).ok_or_else(|| {
            Error::Invalid(format!("measured layer '{}' is not a layer of network '{}'", m.name, net.name))
        })?;
        measured_of[i] = Some(m.latency_ms);
    }
    let measured_total_ms: f64 = measured.iter().map(|m| m.latency_ms).sum();
    let layer_types: Vec<LayerType> = net.layers.iter().map(|l| l.op.layer_type()).collect();
    let predicted_of: Vec<Option<f64>> = estimate.layers.iter().map(|l| l.latency_ms).collect();
    // Only a layer predicted to take time has time to credit.
    let mut into = fused_into(&analysis, &measured_of, &layer_types);
    for (i, predicted) in predicted_of.iter().enumerate() {
        // A target without a prediction is not compared at all: its folded layers stay themselves.
        if !predicted.is_some_and(|ms| ms > 0.0) || into[i].is_some_and(|t| predicted_of[t].is_none()) {
            into[i] = None;
        }
    }
    // A residual add the estimate runs inside a convolution (`fused:<conv>`, the convolution's predictor ending
    // in `+add:<add>`) ran there in tract too: its predicted time is already the convolution's.
    for (i, est) in estimate.layers.iter().enumerate() {
        let Some(owner) = est.predictor.fused_into().and_then(|name| index.get(name)) else { continue };
        if estimate.layers[*owner].predictor.fused_add() == Some(est.name.as_str()) && measured_of[i] == Some(0.0) {
            into[i] = Some(*owner);
        }
    }
    let mut credited = vec![0.0; net.layers.len()];
    for (i, target) in into.iter().enumerate() {
        if let (Some(t), Some(ms)) = (target, predicted_of[i]) {
            credited[*t] += ms;
        }
    }
    let mut notes = Vec::new();
    let mut layers = Vec::new();
    let mut sizes = Vec::new();
    let (mut unmeasured, mut unpredicted) = (Vec::new(), Vec::new());
    for (i, (layer, est)) in net.layers.iter().zip(&estimate.layers).enumerate() {
        let Some(measured_ms) = measured_of[i] else {
            unmeasured.push(layer.name.as_str());
            continue;
        };
        let Some(own_ms) = est.latency_ms else {
            unpredicted.push(layer.name.as_str());
            continue;
        };
        if let Some(t) = into[i] {
            layers.push(Comparison {
                name: layer.name.clone(),
                layer_type: est.layer_type,
                measured_ms,
                predicted_ms: own_ms,
                ratio: None,
                isolation_score: None,
                saving_ms: 0.0,
                flagged_by: Vec::new(),
                fused: Vec::new(),
                fused_into: Some(net.layers[t].name.clone()),
            });
            continue;
        }
        let predicted_ms = own_ms + credited[i];
        let ratio = (predicted_ms > 0.0).then(|| measured_ms / predicted_ms);
        if let Some(r) = ratio {
            let c = analysis.costs[i];
            let log = |x: u64| (1.0 + x as f64).ln();
            sizes.push((
                layers.len(),
                vec![log(c.input_elems), log(c.weight_elems), log(c.output_elems), log(c.flops), r.max(1e-9).ln()],
            ));
        }
        layers.push(Comparison {
            name: layer.name.clone(),
            layer_type: est.layer_type,
            measured_ms,
            predicted_ms,
            ratio,
            isolation_score: None,
            saving_ms: measured_ms - predicted_ms,
            flagged_by: Vec::new(),
            fused: (0..into.len()).filter(|&j| into[j] == Some(i)).map(|j| net.layers[j].name.clone()).collect(),
            fused_into: None,
        });
    }
    let rows: Vec<Vec<f64>> = sizes.iter().map(|(_, r)| r.clone()).collect();
    let scores = IsolationForest::default().scores(&rows);
    for ((at, _), score) in sizes.iter().zip(scores) {
        layers[*at].isolation_score = Some(score);
    }
    for c in &mut layers {
        match c.ratio {
            Some(r) => {
                if r > threshold {
                    c.flagged_by.push("ratio");
                }
                if r > 1.0 && c.isolation_score.is_some_and(|s| s >= ISOLATION_SCORE) {
                    c.flagged_by.push("isolation");
                }
            }
            None if c.measured_ms >= EXPECTED_FREE_SHARE * measured_total_ms && c.measured_ms > 0.0 => {
                c.flagged_by.push("expected_free")
            }
            None => {}
        }
    }
    let mut outliers: Vec<Comparison> = layers.iter().filter(|c| !c.flagged_by.is_empty()).cloned().collect();
    outliers.sort_by(|a, b| b.saving_ms.total_cmp(&a.saving_ms));
    if !unmeasured.is_empty() {
        notes.push(format!("no measurement for {} layer(s): {}", unmeasured.len(), unmeasured.join(", ")));
    }
    if !unpredicted.is_empty() {
        notes.push(format!("no prediction (uncovered) for {} layer(s): {}", unpredicted.len(), unpredicted.join(", ")));
    }
    Ok(OutlierReport {
        network: net.name.clone(),
        device: estimate.device.clone(),
        threshold,
        measured_total_ms,
        predicted_total_ms: estimate.total.latency_ms,
        outliers,
        layers,
        notes,
    })
}

/// Where the engine measured the time of a layer it ran inside a neighbour. tract runs a chain of element-wise
/// layers as one node (a batch norm and the ReLU after it, with the residual add before them when the add has
/// no other reader: ResNet v2's pre-activations), and fuses a residual add whose result is read twice into the
/// matrix product of the convolution feeding it. Such a layer gets no node of its own and is measured at 0 ms,
/// while its neighbour's time includes its work: compared layer by layer, the neighbour looks 2-4x slower than
/// predicted (on ResNet101 v2, 26 of 30 layers flagged were such ReLUs). So a layer measured at 0 ms is credited
/// forward, through readers that were also measured at 0, to the element-wise layer that was measured, when
/// each has a single reader; else backward to a producer whose only reader it is and that was measured (or
/// was itself credited); of two such producers (an add of two products), the first input. Only element-wise
/// layers are credited. `None` for every other layer and where neither fits (the layer is then compared alone).
fn fused_into(
    analysis: &crate::network::Analysis,
    measured: &[Option<f64>],
    layer_types: &[LayerType],
) -> Vec<Option<usize>> {
    use crate::network::Source;
    let n = measured.len();
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, sources) in analysis.sources.iter().enumerate() {
        for s in sources {
            if let Source::Layer(j) = s {
                readers[*j].push(i);
            }
        }
    }
    let ran = |i: usize| measured[i].is_some_and(|ms| ms > 0.0);
    let folded = |i: usize| measured[i] == Some(0.0);
    let elementwise = |i: usize| {
        matches!(layer_types[i], LayerType::Activation | LayerType::BatchNorm | LayerType::Add | LayerType::Multiply)
    };
    // Readers come after their producers: forward targets from the last layer back.
    let mut forward: Vec<Option<usize>> = vec![None; n];
    for i in (0..n).rev() {
        forward[i] = match readers[i].as_slice() {
            [r] if ran(*r) && elementwise(*r) => Some(*r),
            [r] if folded(*r) => forward[*r],
            _ => None,
        };
    }
    let mut into: Vec<Option<usize>> = vec![None; n];
    // Only element-wise layers: a 0-ms concat tract never built (SqueezeNet) did no work anywhere.
    for i in (0..n).filter(|&i| folded(i) && elementwise(i)) {
        let backward = || {
            analysis.sources[i].iter().find_map(|s| match s {
                Source::Layer(p) if readers[*p].len() == 1 => match ran(*p) {
                    true => Some(*p),
                    false => into[*p],
                },
                _ => None,
            })
        };
        into[i] = forward[i].or_else(backward);
    }
    into
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::baseline::Roofline;
    use crate::estimate::{Estimator, Method};

    /// Twelve 1x1 convolutions of growing width, then a flatten.
    fn chain() -> Network {
        let mut layers = String::new();
        for i in 0..12 {
            layers.push_str(&format!(
                r#"{{"name": "c{i}", "type": "conv2d", "filters": {}, "kernel": [1, 1]}},"#,
                8 + 4 * i
            ));
        }
        let text = format!(
            r#"{{"name": "chain", "input_shape": [8, 16, 16], "layers": [{layers} {{"name": "f", "type": "flatten"}}]}}"#
        );
        Network::from_json_str(&text, "chain.json").unwrap()
    }

    fn predicted() -> (Network, Estimate) {
        let net = chain();
        let e = Estimator::new("dev", Method::Paleo(Roofline { peak_gflops: 1.0, memory_bandwidth_gbs: 1.0 }));
        let estimate = e.estimate(&net).unwrap();
        (net, estimate)
    }

    fn measured(estimate: &Estimate, scale: impl Fn(&str) -> f64) -> Vec<MeasuredLayer> {
        estimate
            .layers
            .iter()
            .map(|l| MeasuredLayer { name: l.name.clone(), latency_ms: l.latency_ms.unwrap() * scale(&l.name) })
            .collect()
    }

    #[test]
    fn ratio_above_threshold_is_flagged_and_ranked_by_saving() {
        let (net, estimate) = predicted();
        // Everything runs 1.2x slower than predicted; c3 5x, c9 3x (c9 is wider, so it could save more).
        let m = measured(&estimate, |n| match n {
            "c3" => 5.0,
            "c9" => 3.0,
            _ => 1.2,
        });
        let report = find_outliers(&net, &estimate, &m, 2.0).unwrap();
        let names: Vec<&str> = report.outliers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), 2, "{:?}", report.outliers);
        let saving = |n: &str| report.layers.iter().find(|c| c.name == n).unwrap().saving_ms;
        assert_eq!(names[0], if saving("c9") > saving("c3") { "c9" } else { "c3" });
        assert!(report.outliers.iter().all(|c| c.flagged_by.contains(&"ratio")));
        assert!((report.outliers.iter().find(|c| c.name == "c3").unwrap().ratio.unwrap() - 5.0).abs() < 1e-9);
        // The flatten is predicted free and measured at 0: compared, no ratio, not flagged.
        let f = report.layers.iter().find(|c| c.name == "f").unwrap();
        assert_eq!(f.ratio, None);
        assert!(f.flagged_by.is_empty());
    }

    #[test]
    fn isolation_forest_flags_an_unusual_ratio_below_the_threshold() {
        let (net, estimate) = predicted();
        let m = measured(&estimate, |n| if n == "c6" { 1.9 } else { 1.0 });
        let report = find_outliers(&net, &estimate, &m, 2.0).unwrap();
        let c6 = report.layers.iter().find(|c| c.name == "c6").unwrap();
        assert!(c6.isolation_score.unwrap() > report.layers[0].isolation_score.unwrap());
        assert_eq!(report.outliers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["c6"]);
        assert_eq!(report.outliers[0].flagged_by, vec!["isolation"]);
    }

    #[test]
    fn time_in_a_layer_predicted_free_is_flagged() {
        let (net, estimate) = predicted();
        let mut m = measured(&estimate, |_| 1.0);
        let total: f64 = m.iter().map(|l| l.latency_ms).sum();
        m.last_mut().unwrap().latency_ms = 0.2 * total;
        let report = find_outliers(&net, &estimate, &m, 2.0).unwrap();
        assert_eq!(report.outliers[0].name, "f");
        assert_eq!(report.outliers[0].flagged_by, vec!["expected_free"]);
    }

    #[test]
    fn a_layer_the_engine_ran_inside_a_neighbour_is_compared_there() {
        // As tract runs ResNet v2: `a` is read twice, so it fuses into the product of c1, a producer it is the
        // only reader of; bnp (after `a`) runs in one node with the ReLU after it; add2 has one reader, so it
        // runs in the element-wise node of bnq and rq. The estimate folds bn0 into c0 itself (predicted 0 ms).
        let text = r#"{"name": "fold", "input_shape": [8, 16, 16], "layers": [
          {"name": "c0", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
          {"name": "bn0", "type": "batch_norm"},
          {"name": "c1", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
          {"name": "c2", "type": "conv2d", "filters": 8, "kernel": [1, 1], "inputs": ["bn0"]},
          {"name": "a", "type": "add", "inputs": ["c1", "c2"]},
          {"name": "bnp", "type": "batch_norm"},
          {"name": "rp", "type": "activation", "function": "relu"},
          {"name": "c3", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
          {"name": "add2", "type": "add", "inputs": ["c3", "a"]},
          {"name": "bnq", "type": "batch_norm"},
          {"name": "rq", "type": "activation", "function": "relu"}]}"#;
        let net = Network::from_json_str(text, "fold.json").unwrap();
        let e = Estimator::new("dev", Method::Paleo(Roofline { peak_gflops: 1.0, memory_bandwidth_gbs: 1.0 }));
        let estimate = e.estimate(&net).unwrap();
        let predicted = |n: &str| estimate.layers.iter().find(|l| l.name == n).unwrap().latency_ms.unwrap();
        assert_eq!(predicted("bn0"), 0.0);
        assert!(["a", "bnp", "add2", "bnq"].iter().all(|n| predicted(n) > 0.0));
        // As the engine measures it: the folded layers at 0, their work in the neighbour. rp runs 3x slow.
        let m: Vec<MeasuredLayer> = estimate
            .layers
            .iter()
            .map(|l| {
                let ms = match l.name.as_str() {
                    "a" | "bnp" | "add2" | "bnq" => 0.0,
                    "c1" => predicted("c1") + predicted("a"),
                    "rp" => 3.0 * (predicted("rp") + predicted("bnp")),
                    "rq" => predicted("rq") + predicted("add2") + predicted("bnq"),
                    n => predicted(n),
                };
                MeasuredLayer { name: l.name.clone(), latency_ms: ms }
            })
            .collect();
        let report = find_outliers(&net, &estimate, &m, 2.0).unwrap();
        let row = |n: &str| report.layers.iter().find(|c| c.name == n).unwrap().clone();
        for (folded, into) in [("a", "c1"), ("bnp", "rp"), ("add2", "rq"), ("bnq", "rq")] {
            assert_eq!(row(folded).fused_into.as_deref(), Some(into), "{folded}");
            assert!(row(into).fused.contains(&folded.to_string()), "{into}");
            assert!(row(folded).flagged_by.is_empty() && row(folded).ratio.is_none());
        }
        assert!(row("bn0").fused_into.is_none() && row("c0").fused.is_empty(), "predicted free: nothing to credit");
        assert!((row("c1").ratio.unwrap() - 1.0).abs() < 1e-9 && (row("rq").ratio.unwrap() - 1.0).abs() < 1e-9);
        assert!((row("rp").ratio.unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(report.outliers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["rp"]);
        // A concat at 0 ms (tract never built it) did no work anywhere: it stays itself and credits no one.
        let text = r#"{"name": "cat", "input_shape": [8, 16, 16], "layers": [
          {"name": "c0", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
          {"name": "c1", "type": "conv2d", "filters": 8, "kernel": [1, 1], "inputs": ["input"]},
          {"name": "cat", "type": "concat", "axis": 0, "inputs": ["c0", "c1"]},
          {"name": "sq", "type": "conv2d", "filters": 4, "kernel": [1, 1]}]}"#;
        let cat_net = Network::from_json_str(text, "cat.json").unwrap();
        let cat_estimate = e.estimate(&cat_net).unwrap();
        assert!(cat_estimate.layers[2].latency_ms.unwrap() > 0.0, "the baseline prices the concat");
        let mut m = measured(&cat_estimate, |_| 1.0);
        m.iter_mut().filter(|l| l.name == "cat").for_each(|l| l.latency_ms = 0.0);
        let report = find_outliers(&cat_net, &cat_estimate, &m, 2.0).unwrap();
        assert!(report.layers.iter().all(|c| c.fused.is_empty() && c.fused_into.is_none()), "{:?}", report.layers);
        // The estimate of another network is an error, not a panic.
        let err = find_outliers(&cat_net, &estimate, &m, 2.0).unwrap_err().to_string();
        assert!(err.contains("not this network's estimate"), "{err}");
        // Measured as predicted (no layer at 0 ms that was predicted to take time), nothing is credited.
        let plain = measured(&estimate, |_| 1.0);
        let report = find_outliers(&net, &estimate, &plain, 2.0).unwrap();
        assert!(report.layers.iter().all(|c| c.fused.is_empty() && c.fused_into.is_none()));
    }

    #[test]
    fn unknown_layer_names_and_bad_files_are_errors() {
        let (net, estimate) = predicted();
        let m = vec![MeasuredLayer { name: "nope".into(), latency_ms: 1.0 }];
        let err = find_outliers(&net, &estimate, &m, 2.0).unwrap_err().to_string();
        assert!(err.contains("'nope'") && err.contains("chain"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(&path, r#"{"layers": [{"name": "c0"}]}"#).unwrap();
        let err = read_measured(&path).unwrap_err().to_string();
        assert!(err.contains("m.json") && err.contains("latency_ms"), "{err}");
        std::fs::write(&path, r#"{"layers": [{"name": "c0", "latency_ms": -1}]}"#).unwrap();
        let err = read_measured(&path).unwrap_err().to_string();
        assert!(err.contains("layers[0]") && err.contains("'c0'"), "{err}");
    }
}
