//! `perfmodel train` as a library call: read a device's data, and for each (layer type, metric) remove
//! outliers, select a regressor by cross-validation, refit it on all rows and store it.

use crate::collect::speed;
use crate::data::{self, Sample};
use crate::error::{Error, Result};
use crate::layer::LayerType;
use crate::metric::Metric;
use crate::train::cv::Prior;
use crate::train::cv::{self, Candidate, Evaluation, SelectBy};
use crate::train::isolation::IsolationForest;
use crate::train::model::{EngineFeatures, KnownPart, Predictor, TransferMode};
use crate::train::store::{self, Manifest, ModelEntry, ModelFile, ModelStore, NominalSpeed, Scores, FORMAT_VERSION};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Fewer measured rows than this and a triplet is skipped (reported, not trained).
pub const MIN_ROWS: usize = 10;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Layer types to train; empty = every layer type with data.
    pub layers: Vec<LayerType>,
    pub metrics: Vec<Metric>,
    pub folds: usize,
    pub seed: u64,
    pub select_by: SelectBy,
    /// Fraction of rows the isolation forest removes before training (0 = none).
    pub contamination: f64,
    pub learning_curve: bool,
    /// Method families to try (`ert`, `xgb`, `tree`, `knn`, `linear`); empty = all.
    pub methods: Vec<String>,
    /// Threads for cross-validation (0 = one per core); results do not depend on it.
    pub jobs: usize,
    /// Whether the device's data was measured here with tract (a `host` profile), so models may ask tract how
    /// it runs a layer on this machine.
    pub host_engine: HostEngine,
    /// Other devices' trained models to build on (`--transfer-from`): each triplet also tries candidates that
    /// learn this device's values relative to a source's prediction ([`TransferMode`]); cross-validation on
    /// this device's rows decides between them and training from scratch.
    pub transfer_from: Vec<Arc<ModelStore>>,
    /// What one of ONNX Runtime's layout conversions costs on the device, in ms per MiB (timed by `train` for a
    /// device measured here with ONNX Runtime's blocked layout), recorded in the manifest for the estimate.
    pub reorder_ms_per_mib: Option<f64>,
    /// ONNX Runtime's NCHWc block on the device's machine (from its profile's fingerprint), recorded in the
    /// manifest so that the estimate follows the device's layout wherever it runs.
    pub nchwc_block: Option<usize>,
    /// Fraction of each triplet's rows held out before anything else (`--holdout`): never seen by the outlier
    /// removal, cross-validation or the refit, and predicted by the trained model afterwards, so the report
    /// states an error on rows the whole pipeline, selection included, never saw. 0 = none.
    pub holdout: f64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            layers: vec![],
            metrics: Metric::ALL.to_vec(),
            folds: 5,
            seed: 42,
            select_by: SelectBy::Mape,
            contamination: 0.02,
            learning_curve: false,
            methods: vec![],
            jobs: 0,
            host_engine: HostEngine::Off,
            transfer_from: Vec::new(),
            reorder_ms_per_mib: None,
            nchwc_block: None,
            holdout: 0.0,
        }
    }
}

/// What training may ask of tract about how it runs a layer on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostEngine {
    /// The data was measured elsewhere or with another engine.
    #[default]
    Off,
    /// Memory models count dense and conv2d weights as tract packs them here instead of as f32.
    Layouts,
    /// Layouts, and conv2d and dense latency candidates are also tried with the engine's features
    /// ([`EngineFeatures`]), which mirror tract's single-thread tile walk: for 1-thread profiles.
    LayoutsAndTiles,
    /// The data was measured with ONNX Runtime, whose layout and kernel for a convolution follow from its shape
    /// and the machine's NCHWc block (0: no blocked layout, as below the `all` level): conv2d latency candidates
    /// are also tried with them as features ([`EngineFeatures::onnxruntime`]), wherever the data was measured.
    OnnxRuntime { nchwc_block: usize },
}

/// The rows of one (layer type, metric): features recomputed from each stored config through
/// [`crate::LayerConfig::features`] (the same code path estimation uses) and the measured value.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    pub keys: Vec<String>,
    pub x: Vec<Vec<f64>>,
    pub y: Vec<f64>,
}

impl Dataset {
    /// `source` names the data file in errors. With a nominal speed, latencies of layer types that follow the
    /// speed probe are brought to it (rows without a probe reading stay as measured).
    pub fn from_samples(
        samples: &[Sample],
        metric: Metric,
        source: &Path,
        nominal: Option<&NominalSpeed>,
    ) -> Result<Dataset> {
        let mut d = Dataset::default();
        for (row, s) in samples.iter().enumerate() {
            let Some(mut value) = s.metric(metric).filter(|v| v.is_finite()) else { continue };
            if let (Metric::Latency, Some(n), Some(probe), true) =
                (metric, nominal, s.speed_ref_ms, speed::follows_probe(s.layer_type))
            {
                value = speed::at_nominal_speed(value, probe, n.nominal_ms);
            }
            let features = s
                .config
                .features()
                .map_err(|e| Error::data(source, row as u64 + 2, format!("sample {}: column 'config': {e}", s.key)))?;
            d.keys.push(s.key.clone());
            d.x.push(features);
            d.y.push(value);
        }
        Ok(d)
    }

    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    pub fn subset(&self, rows: &[usize]) -> Dataset {
        Dataset {
            keys: rows.iter().map(|&i| self.keys[i].clone()).collect(),
            x: rows.iter().map(|&i| self.x[i].clone()).collect(),
            y: rows.iter().map(|&i| self.y[i]).collect(),
        }
    }

    /// SHA-256 over keys, features and targets, in row order.
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        for ((k, x), y) in self.keys.iter().zip(&self.x).zip(&self.y) {
            h.update(k.as_bytes());
            x.iter().for_each(|v| h.update(v.to_le_bytes()));
            h.update(y.to_le_bytes());
        }
        store::hex(&h.finalize())
    }

    /// Rows for the isolation forest: features and target on a log scale (sizes and latencies span orders of
    /// magnitude; on a linear scale every large layer would look anomalous).
    fn outlier_space(&self) -> Vec<Vec<f64>> {
        self.x
            .iter()
            .zip(&self.y)
            .map(|(x, y)| x.iter().chain(std::iter::once(y)).map(|v| v.signum() * v.abs().ln_1p()).collect())
            .collect()
    }
}

/// A row taken out before training.
#[derive(Debug, Clone, PartialEq)]
pub struct RemovedRow {
    pub key: String,
    pub measured: f64,
}

/// The rows held out of a triplet's training (`--holdout`) and what the trained model predicts for them.
#[derive(Debug, Clone, PartialEq)]
pub struct Holdout {
    pub keys: Vec<String>,
    pub measured: Vec<f64>,
    pub predicted: Vec<f64>,
}

impl Holdout {
    pub fn scores(&self) -> Scores {
        cv::scores(&self.measured, &self.predicted)
    }

    /// Median absolute percentage error over the rows measured above 0 (NaN without such rows).
    pub fn median_ape(&self) -> f64 {
        let ape: Vec<f64> = self
            .measured
            .iter()
            .zip(&self.predicted)
            .filter(|(m, _)| **m > 0.0)
            .map(|(m, p)| 100.0 * (p - m).abs() / m)
            .collect();
        crate::stats::median(&ape).unwrap_or(f64::NAN)
    }
}

/// Split off a seeded `fraction` of the rows (at least one, and at least [`MIN_ROWS`] left to train on); `None`
/// when `fraction` is 0 or too few rows remain.
pub fn holdout_split(data: &Dataset, fraction: f64, seed: u64) -> Option<(Dataset, Dataset)> {
    if fraction <= 0.0 {
        return None;
    }
    let n = data.len();
    let held = ((n as f64 * fraction).round() as usize).max(1);
    if n < held + MIN_ROWS {
        return None;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x4_01d0));
    let (held, kept) = order.split_at(held);
    let (mut held, mut kept) = (held.to_vec(), kept.to_vec());
    held.sort_unstable();
    kept.sort_unstable();
    Some((data.subset(&kept), data.subset(&held)))
}

/// Validation MAPE of each candidate on growing training subsets.
#[derive(Debug, Clone)]
pub struct LearningCurve {
    pub validation_rows: usize,
    pub train_sizes: Vec<usize>,
    /// (candidate label, MAPE per step).
    pub mape: Vec<(String, Vec<f64>)>,
}

/// Everything learned about one (layer type, metric).
#[derive(Debug, Clone)]
pub struct TripletResult {
    pub layer_type: LayerType,
    pub metric: Metric,
    pub samples: usize,
    pub removed: Vec<RemovedRow>,
    pub evaluations: Vec<Evaluation>,
    pub best: usize,
    /// Measured values of the rows trained on (order of the evaluations' out-of-fold predictions).
    pub measured: Vec<f64>,
    /// Feature rows trained on (same order).
    pub evaluation_rows: Vec<Vec<f64>>,
    pub predictor: Predictor,
    pub data_hash: String,
    pub train_seconds: f64,
    pub learning_curve: Option<LearningCurve>,
    /// Median coefficient of variation of the repeated timings behind the latency rows (latency only, when the
    /// data records it): context for the model's error — a busy machine during collection shows up here.
    pub median_latency_cv: Option<f64>,
    /// Whether the candidates that built on another device's model were tried (`--transfer-from`).
    pub transfer_tried: bool,
    /// The held-out rows and their predictions (`--holdout`).
    pub holdout: Option<Holdout>,
}

/// The best candidate of one kind in a triplet's cross-validation.
#[derive(Debug, Clone, PartialEq)]
pub struct BestOfKind {
    pub label: String,
    pub mape: f64,
}

impl TripletResult {
    pub fn chosen(&self) -> &Evaluation {
        &self.evaluations[self.best]
    }
    pub fn cv(&self) -> Scores {
        self.chosen().scores
    }

    /// When transfer was tried: the best transfer candidate and the best from scratch by CV MAPE (either may
    /// be missing when all its candidates were skipped).
    pub fn transfer_comparison(&self) -> Option<(Option<BestOfKind>, Option<BestOfKind>)> {
        if !self.transfer_tried {
            return None;
        }
        let best = |transfer: bool| {
            self.evaluations
                .iter()
                .filter(|e| !e.predicted.is_empty() && e.scores.mape.is_finite())
                .filter(|e| e.label.contains("+from:") == transfer)
                .min_by(|a, b| a.scores.mape.total_cmp(&b.scores.mape))
                .map(|e| BestOfKind { label: e.label.clone(), mape: e.scores.mape })
        };
        Some((best(true), best(false)))
    }

    /// One line when transfer was tried: the best transfer and scratch CV MAPE and which was kept, by how much.
    pub fn transfer_verdict(&self) -> Option<String> {
        let (transfer, scratch) = self.transfer_comparison()?;
        let chose_transfer = self.chosen().label.contains("+from:");
        let mape = |b: &Option<BestOfKind>| b.as_ref().map_or("-".to_string(), |b| format!("{:.2}", b.mape));
        let verdict = match (&transfer, &scratch) {
            (Some(t), Some(s)) if (t.mape - s.mape).abs() < 0.005 => {
                format!("tie: {} kept", if chose_transfer { "transfer" } else { "scratch" })
            }
            (Some(t), Some(s)) if chose_transfer => format!("transfer wins by {:.2} points", s.mape - t.mape),
            (Some(t), Some(s)) if t.mape < s.mape => format!(
                "scratch kept: transfer at best {:.2} points better (the transfer selected is within the margin of {:.0}% \
                 and {TRANSFER_MIN_MAPE_GAIN} points)",
                s.mape - t.mape,
                100.0 * TRANSFER_MARGIN
            ),
            (Some(t), Some(s)) => format!("scratch wins by {:.2} points", t.mape - s.mape),
            (Some(_), None) => "transfer (no scratch candidate ran)".to_string(),
            _ => "scratch (no transfer candidate ran)".to_string(),
        };
        Some(format!("transfer {:>7}  scratch {:>7}  {verdict}", mape(&transfer), mape(&scratch)))
    }
}

/// A (layer type, metric) that was not trained, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub layer_type: LayerType,
    pub metric: Metric,
    pub reason: String,
}

#[derive(Debug)]
pub struct TrainRun {
    pub device: String,
    pub results: Vec<TripletResult>,
    pub skipped: Vec<Skipped>,
    pub manifest: Manifest,
    /// A partial retrain's nominal speed when it kept the stored models' one over the rows' own median probe
    /// reading (kept, the rows'), in ms: see [`kept_nominal_speed`].
    pub kept_nominal_ms: Option<(f64, f64)>,
}

/// Remove outliers, select, refit: one triplet.
pub fn train_triplet(
    layer_type: LayerType,
    metric: Metric,
    data: &Dataset,
    candidates: &[Candidate],
    options: &TrainOptions,
    mut progress: impl FnMut(&str),
) -> Result<TripletResult> {
    let started = Instant::now();
    let flagged =
        IsolationForest::default().with_seed(options.seed).outliers(&data.outlier_space(), options.contamination);
    let kept: Vec<usize> = (0..data.len()).filter(|i| flagged.binary_search(i).is_err()).collect();
    let removed = flagged.iter().map(|&i| RemovedRow { key: data.keys[i].clone(), measured: data.y[i] }).collect();
    let clean = data.subset(&kept);
    let selection = cv::select(
        candidates,
        &clean.x,
        &clean.y,
        options.folds,
        options.seed,
        options.select_by,
        options.jobs,
        &mut progress,
    )?;
    let mut selection = selection;
    selection.best = prefer_scratch_on_ties(candidates, &selection.evaluations, selection.best, options.select_by);
    progress("refit");
    let predictor = candidates[selection.best].fit(&clean.x, &clean.y)?;
    let train_seconds = started.elapsed().as_secs_f64();
    let learning_curve = if options.learning_curve {
        progress("learning curve");
        Some(learning_curve(candidates, &selection.evaluations, &clean, options.seed)?)
    } else {
        None
    };
    Ok(TripletResult {
        layer_type,
        metric,
        samples: clean.len(),
        removed,
        evaluations: selection.evaluations,
        best: selection.best,
        measured: clean.y.clone(),
        evaluation_rows: clean.x.clone(),
        predictor,
        data_hash: clean.hash(),
        train_seconds,
        learning_curve,
        median_latency_cv: None,
        transfer_tried: candidates.iter().any(Candidate::is_transfer),
        holdout: None,
    })
}

/// Relative margin by which a transfer candidate must beat the best candidate trained from scratch to be kept.
pub const TRANSFER_MARGIN: f64 = 0.02;

/// Least gain, in CV MAPE points, for which a transfer candidate is kept when selecting by MAPE.
pub const TRANSFER_MIN_MAPE_GAIN: f64 = 0.5;

/// The chosen candidate, unless it builds on another device's model and the best from scratch is within
/// [`TRANSFER_MARGIN`] of it (and, by MAPE, within [`TRANSFER_MIN_MAPE_GAIN`] points): then that one. A
/// transferred model carries its source's extrapolations to layers no row of this device resembles (on one
/// machine, a source's depthwise model put PyTorch's padded stride-2 depthwise convolutions at 3x their time; on
/// another, a depthwise memory model built on a source's, ahead by 0.34 points of CV MAPE on 131 rows, put
/// MobileNets' peak memory 11-19% high where the one from scratch was within 0.6%); it is worth that risk only
/// where it is measurably better on this device's own rows.
fn prefer_scratch_on_ties(candidates: &[Candidate], evaluations: &[Evaluation], best: usize, by: SelectBy) -> usize {
    if !candidates[best].is_transfer() {
        return best;
    }
    let chosen = by.loss(&evaluations[best].scores);
    let scratch = (0..candidates.len())
        .filter(|&i| !candidates[i].is_transfer() && !evaluations[i].predicted.is_empty())
        .min_by(|&a, &b| by.loss(&evaluations[a].scores).total_cmp(&by.loss(&evaluations[b].scores)));
    let mut margin = TRANSFER_MARGIN * chosen.abs().max(0.01);
    if by == SelectBy::Mape {
        margin = margin.max(TRANSFER_MIN_MAPE_GAIN);
    }
    match scratch {
        Some(i) if by.loss(&evaluations[i].scores) <= chosen + margin => i,
        _ => best,
    }
}

/// The paper's learning-curve study: a fixed validation set (20 % of the rows, seeded) and 15 training subsets
/// growing linearly up to all remaining rows (each a prefix of one seeded shuffle, so every step contains the
/// previous one). Done for every method family with the configuration that won cross-validation in that family.
pub fn learning_curve(
    candidates: &[Candidate],
    evaluations: &[Evaluation],
    data: &Dataset,
    seed: u64,
) -> Result<LearningCurve> {
    const STEPS: usize = 15;
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x1ea2));
    let validation_rows = (data.len() / 5).max(1);
    let (validation, pool) = order.split_at(validation_rows);
    let val = data.subset(validation);
    let train_sizes: Vec<usize> =
        (1..=STEPS).map(|s| (pool.len() * s).div_ceil(STEPS).max(2)).filter(|&n| n <= pool.len()).collect();
    let mut best_per_family: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in candidates.iter().enumerate() {
        if evaluations[i].predicted.is_empty() {
            continue;
        }
        let entry = best_per_family.entry(c.estimator.method()).or_insert(i);
        if evaluations[i].scores.mape < evaluations[*entry].scores.mape {
            *entry = i;
        }
    }
    let mut mape = Vec::new();
    for &i in best_per_family.values() {
        let mut per_step = Vec::with_capacity(train_sizes.len());
        for &n in &train_sizes {
            let train = data.subset(&pool[..n]);
            let value = match candidates[i].fit(&train.x, &train.y) {
                Ok(p) => {
                    let predicted: Vec<f64> = val.x.iter().map(|x| p.predict(x)).collect();
                    cv::scores(&val.y, &predicted).mape
                }
                Err(_) => f64::NAN,
            };
            per_step.push(value);
        }
        mape.push((candidates[i].label(), per_step));
    }
    Ok(LearningCurve { validation_rows, train_sizes, mape })
}

/// Progress of a whole run: (triplets done, triplets total, what is being done now).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

/// Train every requested triplet of `device` from `data_dir` and write the models and manifest to `models_dir`.
/// Triplets not retrained keep their existing models when the existing manifest is compatible.
pub fn train_device(
    data_dir: &Path,
    models_dir: &Path,
    device: &str,
    options: &TrainOptions,
    progress: Progress,
) -> Result<TrainRun> {
    let all = data::read_device(data_dir, device)?;
    let nominal =
        if options.layers.is_empty() { nominal_speed(&all) } else { kept_nominal_speed(models_dir, device, &all) };
    let kept_nominal_ms = nominal_speed(&all)
        .zip(nominal.as_ref())
        .filter(|(rows, used)| rows.nominal_ms != used.nominal_ms)
        .map(|(rows, used)| (used.nominal_ms, rows.nominal_ms));
    let layer_types: Vec<LayerType> =
        if options.layers.is_empty() { all.keys().copied().collect() } else { options.layers.clone() };
    if layer_types.is_empty() {
        return Err(Error::Device {
            device: device.to_string(),
            message: format!("no data files in {}", data_dir.join(device).display()),
        });
    }
    let candidates: Vec<Candidate> = cv::default_candidates(options.seed)
        .into_iter()
        .filter(|c| options.methods.is_empty() || options.methods.iter().any(|m| m == c.estimator.method()))
        .collect();
    if candidates.is_empty() {
        return Err(Error::Invalid(format!(
            "no candidate methods among {:?} (known: {})",
            options.methods,
            cv::METHODS.join(", ")
        )));
    }
    let total = layer_types.len() * options.metrics.len();
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut done = 0;
    for &layer_type in &layer_types {
        let Some(samples) = all.get(&layer_type) else {
            for &metric in &options.metrics {
                skipped.push(Skipped {
                    layer_type,
                    metric,
                    reason: format!("no data file {}", data::file_path(&data_dir.join(device), layer_type).display()),
                });
            }
            done += options.metrics.len();
            continue;
        };
        for &metric in &options.metrics {
            let source = data::file_path(&data_dir.join(device), layer_type);
            let dataset = Dataset::from_samples(samples, metric, &source, nominal.as_ref())?;
            let (dataset, held_out) = match holdout_split(&dataset, options.holdout, options.seed) {
                Some((train, held)) => (train, Some(held)),
                None => (dataset, None),
            };
            if dataset.len() < MIN_ROWS.max(options.folds) {
                skipped.push(Skipped {
                    layer_type,
                    metric,
                    reason: format!(
                        "{} of {} rows have a measured {} (at least {} needed)",
                        dataset.len(),
                        samples.len(),
                        metric.column(),
                        MIN_ROWS.max(options.folds)
                    ),
                });
            } else {
                let label = format!("{layer_type}/{metric}");
                let mut candidates = candidates_for(&candidates, layer_type, metric, options.host_engine);
                let base = candidates.clone();
                for source in &options.transfer_from {
                    if let Some(p) = source.predictor(layer_type, metric) {
                        candidates.extend(transfer_candidates(&base, source.device(), p));
                    }
                }
                let mut result = train_triplet(layer_type, metric, &dataset, &candidates, options, |what| {
                    progress(done, total, &format!("{label}: {what}"))
                })?;
                if metric == Metric::Latency {
                    let mut cvs: Vec<f64> = samples
                        .iter()
                        .filter(|s| s.metric(metric).is_some())
                        .filter_map(|s| s.latency_cv)
                        .filter(|v| v.is_finite())
                        .collect();
                    cvs.sort_by(f64::total_cmp);
                    result.median_latency_cv = cvs.get(cvs.len() / 2).copied();
                }
                if let Some(held) = held_out {
                    let predicted = held.x.iter().map(|x| result.predictor.predict(x)).collect();
                    result.holdout = Some(Holdout { keys: held.keys, measured: held.y, predicted });
                }
                results.push(result);
            }
            done += 1;
            progress(done, total, "");
        }
    }
    if results.is_empty() {
        let reasons: Vec<String> =
            skipped.iter().map(|s| format!("{}/{}: {}", s.layer_type, s.metric, s.reason)).collect();
        return Err(Error::Device {
            device: device.to_string(),
            message: format!("nothing to train ({})", reasons.join("; ")),
        });
    }
    let engine = EngineRecord {
        engine: engine_of(&all),
        reorder_ms_per_mib: options.reorder_ms_per_mib,
        nchwc_block: options.nchwc_block,
    };
    let manifest = write_models(models_dir, device, &results, nominal, engine)?;
    Ok(TrainRun { device: device.to_string(), results, skipped, manifest, kept_nominal_ms })
}

/// The candidates of one triplet: memory models learn only what the layer needs beyond its f32 inputs, weights
/// and outputs (see [`KnownPart`]), with the weights as tract packs them here on a host engine; latency and
/// power have no such known part. Latency of the layers whose time follows their arithmetic (conv2d, depthwise,
/// dense) is also tried per FLOP, and of the memory-bound sliding windows and element-wise layers (pooling,
/// activation, batch norm) per input element; with [`HostEngine::LayoutsAndTiles`], conv2d, dense and matmul
/// latency are also tried with tract's features appended ([`EngineFeatures`]), alone and per FLOP, and with
/// [`HostEngine::OnnxRuntime`] conv2d latency with ONNX Runtime's. Cross-validation decides.
pub fn candidates_for(
    candidates: &[Candidate],
    layer_type: LayerType,
    metric: Metric,
    host_engine: HostEngine,
) -> Vec<Candidate> {
    let names = layer_type.feature_names();
    let known = match metric {
        Metric::Memory => KnownPart::tensor_mib(&names).map(|k| {
            if matches!(host_engine, HostEngine::Layouts | HostEngine::LayoutsAndTiles) {
                k.with_engine_weights(layer_type, &names)
            } else {
                k
            }
        }),
        Metric::Latency | Metric::Power => None,
    };
    let plain: Vec<Candidate> = candidates.iter().map(|c| c.clone().with_known_part(known.clone())).collect();
    if metric != Metric::Latency {
        return plain;
    }
    let engine = match host_engine {
        HostEngine::LayoutsAndTiles => EngineFeatures::for_layer(layer_type, &names),
        HostEngine::OnnxRuntime { nchwc_block } => EngineFeatures::onnxruntime(layer_type, &names, nchwc_block),
        HostEngine::Off | HostEngine::Layouts => None,
    };
    // What a layer's time is tried per: a FLOP for the products, an input element for the memory-bound sliding
    // windows and element-wise layers. On one x86 machine a 2x2 stride-2 max pooling took 3.1-3.6 ns per input
    // element from 0.15 to 67 MiB of input, where the latency itself spans three decades: trees learn that
    // almost flat rate far better, and it extends to images larger than the training data's.
    let unit = match layer_type {
        LayerType::Conv2d | LayerType::DepthwiseConv2d | LayerType::Dense => Some("flops"),
        LayerType::MaxPool2d | LayerType::AvgPool2d | LayerType::Activation | LayerType::BatchNorm => {
            Some("input_elems")
        }
        _ => None,
    };
    let unit = unit.and_then(|unit| names.iter().position(|n| n == unit)).and_then(|i| u16::try_from(i).ok());
    let mut all = plain.clone();
    if engine.is_some() {
        all.extend(plain.iter().map(|c| c.clone().with_engine_features(engine.clone())));
    }
    if unit.is_some() {
        all.extend(plain.iter().map(|c| c.clone().with_engine_features(engine.clone()).with_per_unit(unit)));
    }
    all
}

/// Candidates that build on `source`'s model of the triplet: the plain ones with a log target (a new machine is
/// mostly a ratio of a known one, and ratios are multiplicative) learning the ratio to the source's prediction,
/// and every plain one seeing the source's prediction as a feature. Not the engine-feature or per-unit
/// variants: the source's prediction already carries what they add.
pub fn transfer_candidates(base: &[Candidate], source_device: &str, source: &Predictor) -> Vec<Candidate> {
    let prior =
        |mode| Some(Arc::new(Prior { source_device: source_device.to_string(), predictor: source.clone(), mode }));
    let plain = || base.iter().filter(|c| c.engine_features.is_none() && c.per_unit.is_none() && c.trees.is_none());
    let ratio =
        plain().filter(|c| c.log_target && c.known.is_none()).map(|c| c.clone().with_prior(prior(TransferMode::Ratio)));
    let feature = plain().map(|c| c.clone().with_prior(prior(TransferMode::Feature)));
    ratio.chain(feature).collect()
}

/// The nominal speed of a device's data: the median speed-probe reading over all its measured rows (`None`
/// when no row has one). Computed over every layer type, so retraining some triplets keeps the same nominal.
pub fn nominal_speed(all: &BTreeMap<LayerType, Vec<Sample>>) -> Option<NominalSpeed> {
    let measured = || all.values().flatten().filter(|s| s.latency_ms.is_some());
    let nominal_ms = speed::nominal_ms(measured().filter_map(|s| s.speed_ref_ms))?;
    Some(NominalSpeed {
        probe_key: speed::probe_key(),
        nominal_ms,
        probed_rows: measured().filter(|s| s.speed_ref_ms.is_some()).count(),
        rows: measured().count(),
        elasticity: speed::PROBE_ELASTICITY,
    })
}

/// The nominal speed for retraining some of a device's layer types: the one its stored models were trained at,
/// when they were measured with the same engine and probe, else the data's own ([`nominal_speed`]). Rows added
/// since (a new layer type, more configs) move the median probe reading a little, and latency models trained at
/// two nominal speeds would not add up: `write_models` would then drop the stored latency models of every other
/// probe-following type, and a `train --layers max_pool2d` would leave the device without its convolutions'
/// latency models. The nominal is only the speed every row is brought to, so any fixed one serves.
fn kept_nominal_speed(models_dir: &Path, device: &str, all: &BTreeMap<LayerType, Vec<Sample>>) -> Option<NominalSpeed> {
    let fresh = nominal_speed(all)?;
    let stored = ModelStore::open(models_dir, device)
        .ok()
        .and_then(|s| (s.manifest().engine == engine_of(all)).then(|| s.manifest().speed_probe.clone()).flatten());
    match stored {
        Some(stored) if stored.probe_key == fresh.probe_key && stored.elasticity == fresh.elasticity => Some(stored),
        _ => Some(fresh),
    }
}

/// The engine most of a device's rows were measured with (their `engine` column); `None` without rows.
pub fn engine_of(all: &BTreeMap<LayerType, Vec<Sample>>) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for sample in all.values().flatten() {
        *counts.entry(sample.engine.as_str()).or_default() += 1;
    }
    counts.into_iter().max_by_key(|&(_, n)| n).map(|(engine, _)| engine.to_string())
}

/// Write the trained models, keeping compatible existing entries for triplets that were not retrained.
/// What the manifest records of the engine that measured the rows.
struct EngineRecord {
    engine: Option<String>,
    reorder_ms_per_mib: Option<f64>,
    nchwc_block: Option<usize>,
}

fn write_models(
    models_dir: &Path,
    device: &str,
    results: &[TripletResult],
    speed_probe: Option<NominalSpeed>,
    record: EngineRecord,
) -> Result<Manifest> {
    // One training of a device at a time: another one's save would remove this one's new files.
    let lock_path = store::device_dir(models_dir, device).join(".train.lock");
    let _lock = crate::fsio::try_lock(&lock_path, || {
        format!("another `perfmodel train` is saving models of device '{device}' ({} is locked)", lock_path.display())
    })?;
    let EngineRecord { engine, mut reorder_ms_per_mib, nchwc_block } = record;
    let mut entries: Vec<ModelEntry> = Vec::new();
    let mut files: Vec<ModelFile> = Vec::new();
    let mut feature_names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in results {
        let file = ModelFile::new(r.layer_type, r.metric, r.predictor.clone());
        feature_names.insert(r.layer_type.as_str().to_string(), file.feature_names.clone());
        entries.push(ModelEntry {
            layer_type: r.layer_type.as_str().to_string(),
            metric: r.metric.as_str().to_string(),
            file: store::model_file_name(r.layer_type, r.metric),
            file_sha256: String::new(),
            method: r.predictor.method().to_string(),
            samples: r.samples,
            removed_outliers: r.removed.len(),
            data_hash: r.data_hash.clone(),
            cv: r.cv(),
            held_out: r.holdout.as_ref().map(|h| h.keys.len()),
        });
        files.push(file);
    }
    let mut kept_entries = Vec::new();
    if let Ok(existing) = ModelStore::open(models_dir, device).and_then(|s| {
        // Models of another engine are not kept (a profile's engine or its settings changed).
        if s.manifest().engine == engine {
            Ok(s)
        } else {
            Err(Error::Invalid("another engine".into()))
        }
    }) {
        // A conversion rate measured before (on the device's machine) holds for the same engine.
        if reorder_ms_per_mib.is_none() {
            reorder_ms_per_mib = existing.manifest().reorder_ms_per_mib;
        }
        // A latency model of a probe-following layer type trained at another nominal speed (or on raw targets)
        // would not add up with the new ones: it is dropped, to be retrained, rather than kept.
        let same_speed = existing.manifest().speed_probe == speed_probe;
        let speed_bound = |e: &ModelEntry| {
            e.metric == Metric::Latency.as_str() && LayerType::parse(&e.layer_type).is_some_and(speed::follows_probe)
        };
        for entry in &existing.manifest().models {
            if !entries.iter().any(|e| e.layer_type == entry.layer_type && e.metric == entry.metric)
                && (same_speed || !speed_bound(entry))
            {
                if let Some(names) = existing.manifest().feature_names.get(&entry.layer_type) {
                    feature_names.insert(entry.layer_type.clone(), names.clone());
                }
                kept_entries.push(entry.clone());
            }
        }
    }
    entries.extend(kept_entries);
    entries.sort_by(|a, b| (&a.layer_type, &a.metric).cmp(&(&b.layer_type, &b.metric)));
    let mut device_hash = Sha256::new();
    for e in &entries {
        device_hash.update(e.data_hash.as_bytes());
    }
    let mut manifest = Manifest {
        format_version: FORMAT_VERSION,
        perfmodel_version: crate::VERSION.to_string(),
        device: device.to_string(),
        feature_names,
        data_hash: store::hex(&device_hash.finalize()),
        models: entries,
        speed_probe,
        engine,
        reorder_ms_per_mib,
        nchwc_block,
    };
    ModelStore::save(models_dir, &mut manifest, &files)?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_is_kept_only_when_it_beats_scratch_by_the_margin() {
        let x: Vec<Vec<f64>> = (0..12).map(|i| vec![i as f64]).collect();
        let y: Vec<f64> = (0..12).map(|i| 1.0 + i as f64).collect();
        let scratch = cv::default_candidates(1).into_iter().find(|c| c.estimator.method() == "linear").unwrap();
        let source = scratch.fit(&x, &y).unwrap();
        let transfer = transfer_candidates(&[scratch.clone()], "src", &source).remove(0);
        let candidates = [scratch, transfer];
        let evaluation = |mape: f64| Evaluation {
            label: String::new(),
            scores: Scores { mape, ..Scores::default() },
            predicted: vec![1.0],
            seconds: 0.0,
        };
        // Kept when ahead by more than 2% and, by MAPE, more than half a point.
        let cases = [(10.0, 5.0, 1), (10.0, 9.9, 0), (0.0, 0.0, 0), (0.5, 0.0, 0), (0.34, 0.0, 0), (1.0, 0.2, 1)];
        for (scratch_mape, transfer_mape, kept) in cases {
            let evaluations = [evaluation(scratch_mape), evaluation(transfer_mape)];
            let best = if transfer_mape < scratch_mape { 1 } else { 0 };
            let best = if scratch_mape == transfer_mape { 1 } else { best };
            assert_eq!(
                prefer_scratch_on_ties(&candidates, &evaluations, best, SelectBy::Mape),
                kept,
                "scratch {scratch_mape}, transfer {transfer_mape}"
            );
        }
    }
}
