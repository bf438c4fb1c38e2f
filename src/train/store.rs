//! The model store: one binary file per (layer type, metric) under `models/<device>/` plus a JSON manifest.
//!
//! Estimation must never answer with a model that was trained on different features or written by an
//! incompatible build, so every file carries the format version, the perfmodel version and the feature names,
//! and the manifest carries each file's SHA-256; [`ModelStore::open`] checks all of them and fails with
//! [`Error::Model`] naming the file instead of predicting something wrong.

use crate::error::{Error, Result};
use crate::fsio::write_atomic;
use crate::layer::LayerType;
use crate::metric::Metric;
use crate::train::model::Predictor;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bumped whenever the binary layout of model files or the manifest changes.
/// 9: trees are written as [`crate::train::model::Forest`] (f32 values, 8-byte nodes).
/// 10: engine features can be ONNX Runtime's ([`crate::engine::packing::PackedShape::OnnxRuntimeConv2d`]).
/// 11: and a depthwise convolution's ([`crate::engine::packing::PackedShape::OnnxRuntimeDepthwise`]).
pub const FORMAT_VERSION: u32 = 11;

/// The oldest format this build still reads: version 8 stores (f64 trees, [`crate::train::model::FlatForest`])
/// and versions 9 and 10 decode unchanged (each format only added enum variants), so devices trained before keep
/// their models and calibrations.
pub const OLDEST_FORMAT_READ: u32 = 8;

/// Largest model file accepted (bounds allocations when decoding a corrupt file).
const MAX_MODEL_BYTES: usize = 256 << 20;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_MODEL_BYTES>()
}

/// Cross-validated quality of a model (means over the folds, in the metric's unit; MAPE in percent).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Scores {
    pub r2: f64,
    pub mae: f64,
    pub medae: f64,
    pub mape: f64,
    pub maxe: f64,
}

/// What the manifest says about one stored predictor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    pub layer_type: String,
    pub metric: String,
    /// Path relative to the device directory, e.g. `conv2d/latency.bin`.
    pub file: String,
    pub file_sha256: String,
    pub method: String,
    pub samples: usize,
    pub removed_outliers: usize,
    /// SHA-256 over the rows (features and target) this model was trained on.
    pub data_hash: String,
    pub cv: Scores,
    /// Rows held out of this model's training (`train --holdout`): an evaluation's model, not the device's best.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub perfmodel_version: String,
    pub device: String,
    /// Feature names per layer type, as [`LayerType::feature_names`] gave them at training time.
    pub feature_names: BTreeMap<String, Vec<String>>,
    /// SHA-256 over all training rows of the device.
    pub data_hash: String,
    pub models: Vec<ModelEntry>,
    /// The speed probe the latency targets were brought to (null when the data has no probe readings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_probe: Option<NominalSpeed>,
    /// The engine that measured the training rows (their `engine` column, e.g. `onnxruntime 1.32.0
    /// (optimisation all)`): the estimate follows that engine's rules. Absent in stores trained before engines
    /// other than tract were collected: tract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// What one of ONNX Runtime's layout conversions costs on the device, ms per MiB of the tensor (see
    /// `OrtExecutor::reorder_ms_per_mib`): a blocked layer measured alone paid two, inside a network it may pay
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder_ms_per_mib: Option<f64>,
    /// ONNX Runtime's NCHWc block on the device's machine (from its profile's fingerprint), which the estimate's
    /// layout rules follow wherever it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nchwc_block: Option<usize>,
}

impl Manifest {
    /// The nominal probe time the latency models were trained at, when it was measured with this build's
    /// probe; else why there is none (for the caller's message).
    pub fn nominal_probe_ms(&self) -> std::result::Result<f64, &'static str> {
        match &self.speed_probe {
            Some(n) if n.probe_key != crate::collect::speed::probe_key() => {
                Err("were trained with another speed probe (retrain them)")
            }
            Some(n) if n.elasticity != crate::collect::speed::PROBE_ELASTICITY => {
                Err("were brought to nominal speed with another probe elasticity (retrain them)")
            }
            Some(n) => Ok(n.nominal_ms),
            None => Err("have no nominal speed: their data has no speed-probe readings (collect and train again)"),
        }
    }
}

/// Latency models of layer types that follow the machine's speed ([`crate::collect::speed::follows_probe`])
/// predict the time at which the probe takes `nominal_ms`: the median probe reading over the device's data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NominalSpeed {
    /// [`crate::collect::speed::probe_key`] of the probe the data was collected with.
    pub probe_key: String,
    pub nominal_ms: f64,
    /// Rows of the device's data with a probe reading, and rows in all.
    pub probed_rows: usize,
    pub rows: usize,
    /// [`crate::collect::speed::PROBE_ELASTICITY`] the latencies were brought to nominal speed with (1 for
    /// stores trained before it existed).
    #[serde(default = "full_elasticity")]
    pub elasticity: f64,
}

fn full_elasticity() -> f64 {
    1.0
}

/// The content of one `<metric>.bin` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub format_version: u32,
    pub perfmodel_version: String,
    pub layer_type: String,
    pub metric: String,
    pub feature_names: Vec<String>,
    pub predictor: Predictor,
}

impl ModelFile {
    pub fn new(layer_type: LayerType, metric: Metric, predictor: Predictor) -> ModelFile {
        ModelFile {
            format_version: FORMAT_VERSION,
            perfmodel_version: crate::VERSION.to_string(),
            layer_type: layer_type.as_str().to_string(),
            metric: metric.as_str().to_string(),
            feature_names: layer_type.feature_names(),
            predictor,
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        bincode::serde::encode_to_vec(self, bincode_config())
            .map_err(|e| Error::Invalid(format!("cannot encode the {}/{} model: {e}", self.layer_type, self.metric)))
    }

    /// Decode and check a model file against this build and the expected (layer type, metric).
    pub fn decode(path: &Path, bytes: &[u8], layer_type: LayerType, metric: Metric) -> Result<ModelFile> {
        let (file, used): (ModelFile, usize) = bincode::serde::decode_from_slice(bytes, bincode_config())
            .map_err(|e| Error::model(path, format!("not a valid perfmodel model file ({e})")))?;
        if used != bytes.len() {
            return Err(Error::model(path, format!("{} trailing bytes after the model", bytes.len() - used)));
        }
        check_versions(path, file.format_version, &file.perfmodel_version)?;
        if file.layer_type != layer_type.as_str() || file.metric != metric.as_str() {
            return Err(Error::model(
                path,
                format!(
                    "holds the {}/{} model, expected {}/{}",
                    file.layer_type,
                    file.metric,
                    layer_type.as_str(),
                    metric.as_str()
                ),
            ));
        }
        check_feature_names(path, layer_type, &file.feature_names)?;
        Ok(file)
    }
}

fn check_versions(path: &Path, format_version: u32, perfmodel_version: &str) -> Result<()> {
    if !(OLDEST_FORMAT_READ..=FORMAT_VERSION).contains(&format_version) {
        return Err(Error::model(
            path,
            format!(
                "model format version {format_version}, this build reads versions {OLDEST_FORMAT_READ} to {FORMAT_VERSION}; retrain with 'perfmodel train'"
            ),
        ));
    }
    if perfmodel_version != crate::VERSION {
        return Err(Error::model(
            path,
            format!(
                "written by perfmodel {perfmodel_version}, this is perfmodel {}; retrain with 'perfmodel train'",
                crate::VERSION
            ),
        ));
    }
    Ok(())
}

fn check_feature_names(path: &Path, layer_type: LayerType, names: &[String]) -> Result<()> {
    let expected = layer_type.feature_names();
    if names != expected.as_slice() {
        let first_difference = names
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .map(|i| format!("feature #{i} is '{}', expected '{}'", names[i], expected[i]))
            .unwrap_or_else(|| format!("{} features, expected {}", names.len(), expected.len()));
        return Err(Error::model(
            path,
            format!(
                "trained on different {} features ({first_difference}); retrain with 'perfmodel train'",
                layer_type
            ),
        ));
    }
    Ok(())
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// What a store's models record of the engine where they were trained ([`ModelStore::engine_answers_here`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedEngine {
    /// Packed weights only: the instruction set is known to match, the caches are not.
    Layouts,
    /// Packed weights and tract's lowering and tiles: the instruction set and the caches match.
    LayoutsAndTiles,
}

/// The devices under `models_dir` whose models were trained on this machine ([`ModelStore::trained_here`]),
/// sorted; directories without a store that opens are skipped. For the hint given when a device's models come
/// from another machine: it opens every store, so it is not for a hot path.
pub fn devices_trained_here(models_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(models_dir) else { return Vec::new() };
    let mut devices: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|device| ModelStore::open(models_dir, device).is_ok_and(|store| store.trained_here()))
        .collect();
    devices.sort();
    devices
}

pub fn device_dir(models_dir: &Path, device: &str) -> PathBuf {
    models_dir.join(device)
}

pub fn manifest_path(models_dir: &Path, device: &str) -> PathBuf {
    device_dir(models_dir, device).join("manifest.json")
}

/// Relative path of a model file inside the device directory.
pub fn model_file_name(layer_type: LayerType, metric: Metric) -> String {
    format!("{}/{}.bin", layer_type.as_str(), metric.as_str())
}

/// Whether `file` is where a save puts the model of `layer_type`/`metric`: `dense/latency.<16 hex>.bin`, or
/// `dense/latency.bin` as stores written before content names have it. Nothing else (no other directory, no
/// `..`) is ever opened.
fn is_model_file_name(file: &str, layer_type: LayerType, metric: Metric) -> bool {
    if file == model_file_name(layer_type, metric) {
        return true;
    }
    let prefix = format!("{}/{}.", layer_type.as_str(), metric.as_str());
    file.strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(".bin"))
        .is_some_and(|hash| hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Write the model files of a save under names of their content (`dense/latency.<hash>.bin`) and point the
/// manifest's entries at them. The manifest, written after them by [`ModelStore::save`], is the commit point:
/// until it is replaced it names the previous files, which are never overwritten, so a save killed at any moment
/// leaves a store that opens with the previous models or the new ones, never a mix.
fn write_model_files(models_dir: &Path, manifest: &mut Manifest, models: &[ModelFile]) -> Result<()> {
    let dir = device_dir(models_dir, &manifest.device);
    for file in models {
        let entry = manifest
            .models
            .iter_mut()
            .find(|e| e.layer_type == file.layer_type && e.metric == file.metric)
            .ok_or_else(|| {
                Error::Invalid(format!("no manifest entry for the {}/{} model", file.layer_type, file.metric))
            })?;
        let bytes = file.encode()?;
        entry.file_sha256 = sha256_hex(&bytes);
        entry.file = format!("{}/{}.{}.bin", file.layer_type, file.metric, &entry.file_sha256[..16]);
        write_atomic(dir.join(&entry.file), &bytes)?;
    }
    Ok(())
}

/// After a save, remove the model files of layer types' directories that the new manifest does not name (the
/// previous save's, or those of a save that was killed before its manifest), and the temporary files of a save
/// killed while writing one (only `train` writes there, under its lock). Best effort: a file left behind is only
/// disk space.
fn remove_unreferenced_model_files(dir: &Path, manifest: &Manifest) {
    let referenced: std::collections::HashSet<PathBuf> = manifest.models.iter().map(|e| dir.join(&e.file)).collect();
    for layer_type in LayerType::ALL {
        let Ok(files) = std::fs::read_dir(dir.join(layer_type.as_str())) else { continue };
        for file in files.flatten().map(|f| f.path()) {
            let temp = file.file_name().and_then(|n| n.to_str()).is_some_and(crate::fsio::is_temp_file_name);
            if temp || (file.extension().is_some_and(|e| e == "bin") && !referenced.contains(&file)) {
                let _ = std::fs::remove_file(&file);
            }
        }
    }
}

/// All trained predictors of one device, loaded and verified. Cheap to share between threads.
#[derive(Debug)]
pub struct ModelStore {
    /// Distinct for every store opened in this process: predictions cached per thread are keyed by it.
    id: u64,
    device: String,
    dir: PathBuf,
    manifest: Manifest,
    predictors: Predictors,
}

/// A store's predictors in a table of one slot per layer type and metric: an estimate looks one up for every
/// layer it predicts, and a slot is an index where a map was a search.
#[derive(Debug, Clone, Default)]
struct Predictors {
    slots: Vec<Option<Predictor>>,
}

impl Predictors {
    fn slot(layer_type: LayerType, metric: Metric) -> usize {
        layer_type as usize * Metric::ALL.len() + metric as usize
    }

    fn get(&self, layer_type: LayerType, metric: Metric) -> Option<&Predictor> {
        self.slots.get(Self::slot(layer_type, metric)).and_then(Option::as_ref)
    }

    fn insert(&mut self, layer_type: LayerType, metric: Metric, predictor: Predictor) {
        let slot = Self::slot(layer_type, metric);
        let len = (LayerType::ALL.len() * Metric::ALL.len()).max(slot + 1);
        if self.slots.len() < len {
            self.slots.resize(len, None);
        }
        self.slots[slot] = Some(predictor);
    }

    /// The predictors, ordered by layer type, then metric.
    fn values(&self) -> impl Iterator<Item = &Predictor> {
        self.slots.iter().flatten()
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Predictor> {
        self.slots.iter_mut().flatten()
    }

    /// The layer type and metric of each predictor, in the order of [`Predictors::values`].
    fn keys(&self) -> impl Iterator<Item = (LayerType, Metric)> + '_ {
        let metrics = Metric::ALL.len();
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .filter_map(move |(i, _)| Some((*LayerType::ALL.get(i / metrics)?, Metric::ALL[i % metrics])))
    }
}

/// A number no other store opened in this process has.
fn next_store_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ModelStore {
    /// This store's identity within the process (distinct for every store opened, even of the same files).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The store with its memory models counting weights as tract packs them on this machine, whatever machine
    /// they were trained on (by default only the training machine's packing is used, else the f32 weights): for
    /// models brought to this machine by zero-shot scaling, whose memory is this machine's. A new identity, so
    /// that no prediction cached for the store as it was answers for it.
    pub fn packing_for_this_machine(mut self) -> ModelStore {
        self.predictors.values_mut().for_each(Predictor::pack_for_this_machine);
        self.id = next_store_id();
        self
    }

    /// Load `models_dir/<device>/manifest.json` and every model it lists.
    pub fn open(models_dir: &Path, device: &str) -> Result<ModelStore> {
        let dir = device_dir(models_dir, device);
        let manifest_file = manifest_path(models_dir, device);
        let text = std::fs::read_to_string(&manifest_file).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::model(
                    &manifest_file,
                    format!("no trained models for device '{device}' (run 'perfmodel train --device {device}')"),
                )
            } else {
                Error::io(&manifest_file, e)
            }
        })?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| Error::model(&manifest_file, format!("invalid manifest: {e}")))?;
        check_versions(&manifest_file, manifest.format_version, &manifest.perfmodel_version)?;
        if manifest.device != device {
            return Err(Error::model(
                &manifest_file,
                format!("manifest is for device '{}', expected '{device}'", manifest.device),
            ));
        }
        let mut predictors = Predictors::default();
        for entry in &manifest.models {
            let layer_type = LayerType::parse(&entry.layer_type).ok_or_else(|| {
                Error::model(&manifest_file, format!("unknown layer type '{}' in the manifest", entry.layer_type))
            })?;
            let metric = Metric::parse(&entry.metric).ok_or_else(|| {
                Error::model(&manifest_file, format!("unknown metric '{}' in the manifest", entry.metric))
            })?;
            match manifest.feature_names.get(&entry.layer_type) {
                Some(names) => check_feature_names(&manifest_file, layer_type, names)?,
                None => {
                    return Err(Error::model(
                        &manifest_file,
                        format!("no feature names recorded for layer type '{}'", entry.layer_type),
                    ))
                }
            }
            if !is_model_file_name(&entry.file, layer_type, metric) {
                return Err(Error::model(
                    &manifest_file,
                    format!("unexpected model path '{}' for {layer_type}/{metric}", entry.file),
                ));
            }
            let path = dir.join(&entry.file);
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let digest = sha256_hex(&bytes);
            if digest != entry.file_sha256 {
                return Err(Error::model(
                    &path,
                    format!(
                        "file content does not match the manifest (SHA-256 {digest}, manifest says {}); the file was modified or is corrupt, retrain with 'perfmodel train'",
                        entry.file_sha256
                    ),
                ));
            }
            let file = ModelFile::decode(&path, &bytes, layer_type, metric)?;
            predictors.insert(layer_type, metric, file.predictor);
        }
        Ok(ModelStore { id: next_store_id(), device: device.to_string(), dir, manifest, predictors })
    }

    /// Write `models` (each atomically, recording its SHA-256 in the manifest entry of the same layer type and
    /// metric), then the manifest. Entries without a file in `models` must refer to files already in place.
    pub fn save(models_dir: &Path, manifest: &mut Manifest, models: &[ModelFile]) -> Result<()> {
        write_model_files(models_dir, manifest, models)?;
        let dir = device_dir(models_dir, &manifest.device);
        let text = serde_json::to_string_pretty(manifest)
            .map_err(|e| Error::Invalid(format!("cannot encode the manifest: {e}")))?;
        write_atomic(dir.join("manifest.json"), text.as_bytes())?;
        remove_unreferenced_model_files(&dir, manifest);
        Ok(())
    }

    pub fn predictor(&self, layer_type: LayerType, metric: Metric) -> Option<&Predictor> {
        self.predictors.get(layer_type, metric)
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The machine the models were trained on (tract's instruction set and cache sizes there, as their engine
    /// features record them) when it is not this one; `None` when they were trained here or record no machine.
    /// Every model of a store comes from one collection on one machine, so one model that says so speaks for
    /// all of them, the element-wise ones that record nothing included.
    pub fn trained_elsewhere(&self) -> Option<String> {
        self.predictors.values().filter_map(|p| p.engine_features()).find(|e| !e.applies()).map(|e| e.machine())
    }

    /// Whether the models record the machine they were trained on and it is this one. Only tract's answers record
    /// a machine (its kernels and cache sizes); ONNX Runtime's features follow from the shape and the device's
    /// NCHWc block, which many machines share, so such a store records none.
    pub fn trained_here(&self) -> bool {
        self.predictors.values().any(|p| p.engine_features().is_some_and(|e| e.shape.asks_tract()))
            && self.trained_elsewhere().is_none()
    }

    /// What of tract's answers where the models were trained they record, when every record is this machine's
    /// answer too: the packed weights (memory models; the instruction set decides them) and, when a latency
    /// model saw tract's lowering and tiles, those (the instruction set and the caches decide them). Features
    /// computed here then describe that machine as far as the records go, so its rows can be retrained here (in a
    /// newer store format, say) with them; its speed is another matter, which the device's profile tells.
    /// `None`: nothing recorded, or a record another machine's tract answered.
    pub fn engine_answers_here(&self) -> Option<RecordedEngine> {
        let (mut weights, mut tiles) = (false, false);
        for p in self.predictors.values() {
            if let Some(e) = p.engine_features().filter(|e| e.shape.asks_tract()) {
                if !e.applies() {
                    return None;
                }
                tiles = true;
            }
            if let Some(w) = p.known_part().and_then(|k| k.engine_weights.as_ref()) {
                if !w.applies() {
                    return None;
                }
                weights = true;
            }
        }
        match (weights, tiles) {
            (_, true) => Some(RecordedEngine::LayoutsAndTiles),
            (true, false) => Some(RecordedEngine::Layouts),
            (false, false) => None,
        }
    }

    /// Layer types with at least one predictor.
    pub fn layer_types(&self) -> Vec<LayerType> {
        let mut types: Vec<LayerType> = self.predictors.keys().map(|(t, _)| t).collect();
        types.dedup();
        types
    }

    /// Total size in bytes of the model files.
    pub fn size_bytes(&self) -> u64 {
        self.manifest
            .models
            .iter()
            .filter_map(|e| std::fs::metadata(self.dir.join(&e.file)).ok())
            .map(|m| m.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::cv::default_candidates;
    use crate::train::model::Predictor;

    const _: () = {
        const fn shareable<T: Send + Sync>() {}
        shareable::<ModelStore>();
    };

    /// Dense-layer feature rows with a target that depends on them.
    fn data() -> (Vec<Vec<f64>>, Vec<f64>) {
        let n = LayerType::Dense.feature_names().len();
        let x: Vec<Vec<f64>> = (0..120)
            .map(|i| (0..n).map(|j| ((i * 7 + j * 13) % 31) as f64 + (i % 5) as f64 * j as f64).collect())
            .collect();
        let y = x.iter().map(|r| 0.5 + r[1] * r[2] / 10.0).collect();
        (x, y)
    }

    /// Fit every candidate method, save the predictors as a store, return (models dir, predictors).
    fn saved_store() -> (tempfile::TempDir, Vec<(LayerType, Metric, Predictor)>) {
        let (x, y) = data();
        let candidates = default_candidates(7);
        let dir = tempfile::tempdir().unwrap();
        // One model per candidate family, spread over (layer type, metric) slots so each gets its own file.
        let slots = [
            (LayerType::Dense, Metric::Latency),
            (LayerType::Dense, Metric::Power),
            (LayerType::Dense, Metric::Memory),
            (LayerType::Conv2d, Metric::Latency),
            (LayerType::Conv2d, Metric::Power),
        ];
        let mut files = Vec::new();
        let mut entries = Vec::new();
        let mut saved = Vec::new();
        let mut feature_names = BTreeMap::new();
        for (slot, method) in slots.iter().zip(crate::train::cv::METHODS) {
            let candidate = candidates
                .iter()
                .filter(|c| c.estimator.method() == method && c.log_target)
                .max_by_key(|c| c.log_features)
                .unwrap();
            let (layer_type, metric) = *slot;
            // Conv2d has more features than our dense rows: pad with zeros.
            let width = layer_type.feature_names().len();
            let rows: Vec<Vec<f64>> =
                x.iter().map(|r| (0..width).map(|j| r.get(j).copied().unwrap_or(0.0)).collect()).collect();
            let predictor = candidate.fit(&rows, &y).unwrap();
            feature_names.insert(layer_type.as_str().to_string(), layer_type.feature_names());
            entries.push(ModelEntry {
                layer_type: layer_type.as_str().into(),
                metric: metric.as_str().into(),
                file: model_file_name(layer_type, metric),
                file_sha256: String::new(),
                method: predictor.method().into(),
                samples: rows.len(),
                removed_outliers: 0,
                data_hash: "test".into(),
                cv: Scores::default(),
                held_out: None,
            });
            files.push(ModelFile::new(layer_type, metric, predictor.clone()));
            saved.push((layer_type, metric, predictor));
        }
        let mut manifest = Manifest {
            format_version: FORMAT_VERSION,
            perfmodel_version: crate::VERSION.into(),
            device: "dev".into(),
            feature_names,
            data_hash: "test".into(),
            models: entries,
            speed_probe: None,
            engine: None,
            reorder_ms_per_mib: None,
            nchwc_block: None,
        };
        ModelStore::save(dir.path(), &mut manifest, &files).unwrap();
        (dir, saved)
    }

    #[test]
    fn a_nominal_speed_holds_only_for_this_probe_and_elasticity() {
        let mut manifest = Manifest {
            format_version: FORMAT_VERSION,
            perfmodel_version: crate::VERSION.into(),
            device: "dev".into(),
            feature_names: BTreeMap::new(),
            data_hash: String::new(),
            models: Vec::new(),
            speed_probe: None,
            engine: None,
            reorder_ms_per_mib: None,
            nchwc_block: None,
        };
        assert!(manifest.nominal_probe_ms().unwrap_err().contains("no nominal speed"));
        // Written before the elasticity existed: the latencies were scaled fully (elasticity 1).
        let old = r#"{"probe_key": "KEY", "nominal_ms": 2.0, "probed_rows": 1, "rows": 1}"#;
        let mut nominal: NominalSpeed = serde_json::from_str(&old.replace("KEY", &crate::collect::speed::probe_key()))
            .expect("an old manifest's speed_probe reads");
        assert_eq!(nominal.elasticity, 1.0);
        manifest.speed_probe = Some(nominal.clone());
        assert!(manifest.nominal_probe_ms().unwrap_err().contains("another probe elasticity"));
        nominal.elasticity = crate::collect::speed::PROBE_ELASTICITY;
        manifest.speed_probe = Some(nominal.clone());
        assert_eq!(manifest.nominal_probe_ms(), Ok(2.0));
        nominal.probe_key = "another".into();
        manifest.speed_probe = Some(nominal);
        assert!(manifest.nominal_probe_ms().unwrap_err().contains("another speed probe"));
    }

    #[test]
    fn saved_and_loaded_models_predict_exactly_the_same() {
        let (dir, saved) = saved_store();
        let store = ModelStore::open(dir.path(), "dev").unwrap();
        let (x, _) = data();
        for (layer_type, metric, predictor) in &saved {
            let loaded = store.predictor(*layer_type, *metric).unwrap();
            assert_eq!(loaded, predictor);
            let width = layer_type.feature_names().len();
            for r in &x {
                let row: Vec<f64> = (0..width).map(|j| r.get(j).copied().unwrap_or(0.0)).collect();
                assert_eq!(loaded.predict(&row).to_bits(), predictor.predict(&row).to_bits(), "{}", predictor.method());
            }
        }
        assert_eq!(store.layer_types(), vec![LayerType::Conv2d, LayerType::Dense]);
        assert!(store.predictor(LayerType::Dense, Metric::Latency).unwrap().method().ends_with("+log"));
    }

    fn expect_model_error(dir: &Path, needle: &str, file: &str) {
        match ModelStore::open(dir, "dev") {
            Err(Error::Model { path, message }) => {
                // Model files are named after their content: `power.bin` stands for `power.<hash>.bin`.
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                assert!(name.starts_with(file.trim_end_matches(".bin")), "{} should name {file}", path.display());
                assert!(message.contains(needle), "'{message}' should contain '{needle}'");
            }
            other => panic!("expected a model error, got {other:?}"),
        }
    }

    /// The path of a saved model file, as the manifest names it.
    fn model_path(dir: &Path, layer_type: &str, metric: &str) -> PathBuf {
        let manifest: Manifest =
            serde_json::from_str(&std::fs::read_to_string(dir.join("dev/manifest.json")).unwrap()).unwrap();
        let entry = manifest.models.iter().find(|e| e.layer_type == layer_type && e.metric == metric).unwrap();
        dir.join("dev").join(&entry.file)
    }

    /// A save killed after it wrote new model files but before its manifest (the commit point) leaves the
    /// previous models in use, intact; the next save removes the orphans, the replaced files and the temporary
    /// file of a write cut off.
    #[test]
    fn a_save_killed_before_its_manifest_leaves_the_previous_models() {
        let (dir, saved) = saved_store();
        let open = || ModelStore::open(dir.path(), "dev").unwrap();
        let answer = |store: &ModelStore| {
            let row = vec![1.0; LayerType::Dense.feature_names().len()];
            store.predictor(LayerType::Dense, Metric::Latency).unwrap().predict(&row).to_bits()
        };
        let before = answer(&open());
        let old_file = model_path(dir.path(), "dense", "latency");
        // New models for every slot, from other data: the save is cut off after the model files.
        let mut manifest = open().manifest().clone();
        let (x, _) = data();
        let y: Vec<f64> = x.iter().map(|r| 100.0 + r[0]).collect();
        let linear = default_candidates(7).into_iter().find(|c| c.estimator.method() == "linear").unwrap();
        let files: Vec<ModelFile> = saved
            .iter()
            .map(|(t, m, _)| {
                let width = t.feature_names().len();
                let rows: Vec<Vec<f64>> =
                    x.iter().map(|r| (0..width).map(|j| r.get(j).copied().unwrap_or(0.0)).collect()).collect();
                ModelFile::new(*t, *m, linear.fit(&rows, &y).unwrap())
            })
            .collect();
        write_model_files(dir.path(), &mut manifest, &files).unwrap();
        // ...and one more cut off while writing a model file leaves its temporary file.
        let temp = dir.path().join("dev/dense/.perfmodel-Ab12Cd.tmp");
        std::fs::write(&temp, b"half a model").unwrap();
        let reopened = open();
        assert_eq!(answer(&reopened), before, "the previous models answer");
        assert!(old_file.is_file());
        // The next complete save commits the new models and removes every file the manifest does not name.
        ModelStore::save(dir.path(), &mut manifest, &files).unwrap();
        assert_ne!(answer(&open()), before);
        assert!(!old_file.exists(), "the replaced file is removed");
        assert!(!temp.exists(), "the killed save's temporary file is removed");
        let on_disk: usize = ["dense", "conv2d"]
            .iter()
            .map(|t| std::fs::read_dir(dir.path().join("dev").join(t)).unwrap().count())
            .sum();
        assert_eq!(on_disk, manifest.models.len(), "one file per model, no orphans");
    }

    #[test]
    fn tampered_file_is_refused() {
        let (dir, _) = saved_store();
        let path = model_path(dir.path(), "dense", "latency");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        expect_model_error(dir.path(), "does not match the manifest", path.file_name().unwrap().to_str().unwrap());
    }

    /// Rewrite one model file (and its manifest hash) after changing its content with `edit`.
    fn rewrite(dir: &Path, edit: impl Fn(&mut ModelFile)) {
        let path = model_path(dir, "dense", "power");
        let bytes = std::fs::read(&path).unwrap();
        let (mut file, _): (ModelFile, usize) = bincode::serde::decode_from_slice(&bytes, bincode_config()).unwrap();
        edit(&mut file);
        let bytes = file.encode().unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let manifest_file = dir.join("dev/manifest.json");
        let mut manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(&manifest_file).unwrap()).unwrap();
        for e in &mut manifest.models {
            if path.ends_with(&e.file) {
                e.file_sha256 = sha256_hex(&bytes);
            }
        }
        std::fs::write(&manifest_file, serde_json::to_string(&manifest).unwrap()).unwrap();
    }

    #[test]
    fn every_layer_type_and_metric_has_a_slot_of_its_own_and_keys_name_it() {
        for (i, t) in LayerType::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i, "{t}");
        }
        for (i, m) in Metric::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i, "{m}");
        }
        let mut table = Predictors::default();
        use crate::train::model::{Linear, Model, Standardizer};
        let standardizer = Standardizer { mean: vec![], scale: vec![] };
        let model = Model::Linear(Linear { standardizer, coefficients: vec![], intercept: 1.0 });
        let linear = Predictor::new("linear", false, model);
        let pairs = [(LayerType::ALL[25], Metric::Memory), (LayerType::Conv2d, Metric::Latency)];
        for (t, m) in pairs {
            table.insert(t, m, linear.clone());
        }
        assert_eq!(table.keys().collect::<Vec<_>>(), [(LayerType::Conv2d, Metric::Latency), pairs[0]]);
        assert!(table.get(LayerType::Conv2d, Metric::Latency).is_some());
        assert!(table.get(LayerType::Conv2d, Metric::Memory).is_none());
        assert_eq!(table.values().count(), 2);
    }

    #[test]
    fn mismatched_feature_names_are_refused() {
        let (dir, _) = saved_store();
        rewrite(dir.path(), |f| f.feature_names[1] = "in_channels".into());
        expect_model_error(dir.path(), "trained on different dense features (feature #1 is 'in_channels'", "power.bin");
        let (dir, _) = saved_store();
        let manifest_file = dir.path().join("dev/manifest.json");
        let text = std::fs::read_to_string(&manifest_file).unwrap().replacen("\"units\"", "\"neurons\"", 1);
        std::fs::write(&manifest_file, text).unwrap();
        expect_model_error(dir.path(), "trained on different dense features", "manifest.json");
    }

    #[test]
    fn other_versions_are_refused() {
        let (dir, _) = saved_store();
        rewrite(dir.path(), |f| f.perfmodel_version = "0.0.1".into());
        expect_model_error(dir.path(), "written by perfmodel 0.0.1", "power.bin");
        let (dir, _) = saved_store();
        rewrite(dir.path(), |f| f.format_version = FORMAT_VERSION + 1);
        expect_model_error(dir.path(), "model format version", "power.bin");
        let (dir, _) = saved_store();
        let manifest_file = dir.path().join("dev/manifest.json");
        let text = std::fs::read_to_string(&manifest_file).unwrap();
        let text = text.replacen(&format!("\"format_version\": {FORMAT_VERSION}"), "\"format_version\": 99", 1);
        std::fs::write(&manifest_file, text).unwrap();
        expect_model_error(dir.path(), "model format version 99", "manifest.json");
    }

    #[test]
    fn truncated_file_and_missing_store_are_clear_errors() {
        let (dir, _) = saved_store();
        rewrite(dir.path(), |_| {});
        let path = model_path(dir.path(), "dense", "power");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        // The hash check comes first; with a matching hash the decoder must still refuse the truncated file.
        let manifest_file = dir.path().join("dev/manifest.json");
        let mut manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(&manifest_file).unwrap()).unwrap();
        for e in &mut manifest.models {
            if path.ends_with(&e.file) {
                e.file_sha256 = sha256_hex(&bytes[..bytes.len() / 2]);
            }
        }
        std::fs::write(&manifest_file, serde_json::to_string(&manifest).unwrap()).unwrap();
        expect_model_error(dir.path(), "not a valid perfmodel model file", "power.bin");
        let empty = tempfile::tempdir().unwrap();
        expect_model_error(empty.path(), "no trained models for device 'dev'", "manifest.json");
    }
}
