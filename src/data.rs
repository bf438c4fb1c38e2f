//! Collected measurements: `data/<device>/<layer_type>.csv`, one row per (layer config, batch size).
//!
//! The files are the product's ground truth and are written over hours by a process that may be killed at any
//! moment, so every append is flushed and fsynced before the next measurement starts, and opening a file for
//! appending repairs the one kind of damage a crash can leave (an incomplete last line) by truncating it, and
//! says so. Anything else that does not parse is reported with the file and line, never skipped: a model trained
//! on silently half-read data would be wrong without anyone noticing.
//!
//! Columns: `key`, `layer_type`, `config` (the [`LayerConfig`] as JSON), one column per
//! [`LayerType::feature_names`] (the batch size is the `batch` feature), then [`MEASUREMENT_COLUMNS`]. Metrics
//! carry their unit in the column name; an empty cell means "not measured" (power on a machine without a power
//! sensor, every metric of a failed config).

use crate::error::{Error, Result};
use crate::layer::{LayerConfig, LayerType};
use crate::metric::Metric;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Columns before the features.
pub const LEADING_COLUMNS: [&str; 3] = ["key", "layer_type", "config"];

/// Columns after the features: measurements, spread statistics, status and provenance.
pub const MEASUREMENT_COLUMNS: [&str; 19] = [
    "latency_ms",
    "latency_mad_ms",
    "latency_cv",
    "repetitions",
    "rounds",
    "tukey_outliers",
    "power_w",
    "energy_mj",
    "memory_mib",
    "input_bytes",
    "weight_bytes",
    "output_bytes",
    "status",
    "reason",
    "perfmodel_version",
    "engine",
    "threads",
    "timestamp",
    "speed_ref_ms",
];

/// Columns a file written before [`MEASUREMENT_COLUMNS`] gained `speed_ref_ms` has (its rows read with
/// `speed_ref_ms` empty; [`SampleWriter::open`] upgrades such a file before appending to it).
const LEGACY_MEASUREMENT_COLUMNS: usize = 18;

/// The header of a data file for one layer type.
pub fn header(layer_type: LayerType) -> Vec<String> {
    let mut h: Vec<String> = LEADING_COLUMNS.iter().map(|s| s.to_string()).collect();
    h.extend(layer_type.feature_names());
    h.extend(MEASUREMENT_COLUMNS.iter().map(|s| s.to_string()));
    h
}

/// The data file of one layer type inside a device directory.
pub fn file_path(device_dir: &Path, layer_type: LayerType) -> PathBuf {
    device_dir.join(format!("{}.csv", layer_type.as_str()))
}

/// Outcome of measuring one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Measured, spread within the device profile's limit.
    Ok,
    /// Measured, but the spread stayed above the limit after one re-measurement; use with care.
    Unstable,
    /// Could not be built or run (the reason column says why); no metrics.
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unstable => "unstable",
            Status::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        [Status::Ok, Status::Unstable, Status::Failed].into_iter().find(|x| x.as_str() == s)
    }
}

/// One measured (config, batch size): a row of a data file.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// [`LayerConfig::key`] of `config`: the resume key.
    pub key: String,
    pub layer_type: LayerType,
    pub batch: usize,
    pub config: LayerConfig,
    /// [`LayerConfig::features`], in the order of [`LayerType::feature_names`].
    pub features: Vec<f64>,
    /// Median latency of one inference (whole batch).
    pub latency_ms: Option<f64>,
    /// Median absolute deviation of the timed repetitions.
    pub latency_mad_ms: Option<f64>,
    /// Coefficient of variation (standard deviation / mean) of the timed repetitions.
    pub latency_cv: Option<f64>,
    /// Timed repetitions behind the median (all rounds).
    pub repetitions: u64,
    pub rounds: u64,
    /// Repetitions outside the Tukey fences (1.5 IQR); counted, not dropped.
    pub tukey_outliers: u64,
    /// Average power while the layer runs; `None` without a power sensor or outside the power subset.
    pub power_w: Option<f64>,
    /// Energy of one inference (power × latency).
    pub energy_mj: Option<f64>,
    /// Peak heap growth while building and running the layer; `None` without the counting allocator.
    pub memory_mib: Option<f64>,
    /// Planned tensor sizes (f32), whole batch.
    pub input_bytes: u64,
    pub weight_bytes: u64,
    pub output_bytes: u64,
    pub status: Status,
    /// Why a sample failed or is unstable; empty otherwise.
    pub reason: String,
    pub perfmodel_version: String,
    /// Engine name and version (`Executor::describe`).
    pub engine: String,
    pub threads: usize,
    /// UTC, RFC 3339.
    pub timestamp: String,
    /// The collector's speed probe ([`crate::collect::speed`]) while this sample was timed: the median time of
    /// one fixed reference convolution, in ms. On a machine whose speed drifts (a shared VM), latency divided by
    /// it is comparable across minutes; `None` for rows collected without the probe.
    pub speed_ref_ms: Option<f64>,
}

impl Sample {
    /// A sample for `config` with its identity, features and planned sizes filled in and nothing measured yet
    /// (status `failed`, reason "not measured" until the collector records a result).
    pub fn unmeasured(config: &LayerConfig) -> Result<Sample> {
        let invalid = |e: crate::layer::LayerError| {
            Error::Invalid(format!("{} layer config {}: {e}", config.layer_type(), config.to_json()))
        };
        let cost = config.cost().map_err(invalid)?;
        use crate::units::F32_BYTES;
        Ok(Sample {
            key: config.key().map_err(invalid)?,
            layer_type: config.layer_type(),
            batch: config.batch,
            config: config.clone(),
            features: config.features().map_err(invalid)?,
            latency_ms: None,
            latency_mad_ms: None,
            latency_cv: None,
            repetitions: 0,
            rounds: 0,
            tukey_outliers: 0,
            power_w: None,
            energy_mj: None,
            memory_mib: None,
            input_bytes: cost.input_elems * F32_BYTES,
            weight_bytes: cost.weight_elems * F32_BYTES,
            output_bytes: cost.output_elems * F32_BYTES,
            status: Status::Failed,
            reason: "not measured".into(),
            perfmodel_version: crate::VERSION.into(),
            engine: String::new(),
            threads: 0,
            timestamp: now_rfc3339(),
            speed_ref_ms: None,
        })
    }

    /// The value of a metric, `None` when it was not measured (failed samples have no metrics).
    pub fn metric(&self, metric: Metric) -> Option<f64> {
        if self.status == Status::Failed {
            return None;
        }
        match metric {
            Metric::Latency => self.latency_ms,
            Metric::Power => self.power_w,
            Metric::Memory => self.memory_mib,
        }
    }

    fn to_record(&self) -> Vec<String> {
        let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
        let mut r = vec![self.key.clone(), self.layer_type.as_str().to_string(), self.config.to_json().to_string()];
        r.extend(self.features.iter().map(|x| x.to_string()));
        r.extend([
            opt(self.latency_ms),
            opt(self.latency_mad_ms),
            opt(self.latency_cv),
            self.repetitions.to_string(),
            self.rounds.to_string(),
            self.tukey_outliers.to_string(),
            opt(self.power_w),
            opt(self.energy_mj),
            opt(self.memory_mib),
            self.input_bytes.to_string(),
            self.weight_bytes.to_string(),
            self.output_bytes.to_string(),
            self.status.as_str().to_string(),
            self.reason.clone(),
            self.perfmodel_version.clone(),
            self.engine.clone(),
            self.threads.to_string(),
            self.timestamp.clone(),
            opt(self.speed_ref_ms),
        ]);
        r
    }

    /// Parse one row; the error message names the column.
    fn from_record(header: &[String], fields: &[&str]) -> std::result::Result<Sample, String> {
        if fields.len() != header.len() {
            return Err(format!("expected {} fields (as in the header), found {}", header.len(), fields.len()));
        }
        let col = |name: &str| header.iter().position(|h| h == name).map(|i| fields[i]);
        let get = |name: &str| col(name).ok_or_else(|| format!("missing column '{name}'"));
        let layer_type = LayerType::parse(get("layer_type")?).ok_or_else(|| {
            format!("column 'layer_type': unknown layer type '{}' (known: {})", fields[1], LayerType::names_list())
        })?;
        let expected = self::header(layer_type);
        let legacy = &expected[..expected.len() - (MEASUREMENT_COLUMNS.len() - LEGACY_MEASUREMENT_COLUMNS)];
        if header != expected.as_slice() && header != legacy {
            return Err(format!(
                "the header does not match the columns of a {layer_type} file (feature names changed? expected: {})",
                expected.join(",")
            ));
        }
        let num = |name: &str| -> std::result::Result<Option<f64>, String> {
            let s = get(name)?;
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<f64>().map(Some).map_err(|_| format!("column '{name}': expected a number, got '{s}'"))
        };
        let int = |name: &str| -> std::result::Result<u64, String> {
            let s = get(name)?;
            s.parse::<u64>().map_err(|_| format!("column '{name}': expected a non-negative integer, got '{s}'"))
        };
        let config_text = get("config")?;
        let config_json: serde_json::Value =
            serde_json::from_str(config_text).map_err(|e| format!("column 'config': invalid JSON: {e}"))?;
        let config = LayerConfig::from_json(&config_json).map_err(|e| format!("column 'config': {e}"))?;
        if config.layer_type() != layer_type {
            return Err(format!("column 'config': a {} layer in a row of type {layer_type}", config.layer_type()));
        }
        let feature_names = layer_type.feature_names();
        let mut features = Vec::with_capacity(feature_names.len());
        for name in &feature_names {
            features.push(num(name)?.ok_or_else(|| format!("column '{name}': empty feature value"))?);
        }
        let status_text = get("status")?;
        let status = Status::parse(status_text)
            .ok_or_else(|| format!("column 'status': expected ok, unstable or failed, got '{status_text}'"))?;
        let latency_ms = num("latency_ms")?;
        if status != Status::Failed && latency_ms.is_none() {
            return Err(format!("column 'latency_ms': empty in a row with status {}", status.as_str()));
        }
        Ok(Sample {
            key: get("key")?.to_string(),
            layer_type,
            batch: config.batch,
            config,
            features,
            latency_ms,
            latency_mad_ms: num("latency_mad_ms")?,
            latency_cv: num("latency_cv")?,
            repetitions: int("repetitions")?,
            rounds: int("rounds")?,
            tukey_outliers: int("tukey_outliers")?,
            power_w: num("power_w")?,
            energy_mj: num("energy_mj")?,
            memory_mib: num("memory_mib")?,
            input_bytes: int("input_bytes")?,
            weight_bytes: int("weight_bytes")?,
            output_bytes: int("output_bytes")?,
            status,
            reason: get("reason")?.to_string(),
            perfmodel_version: get("perfmodel_version")?.to_string(),
            engine: get("engine")?.to_string(),
            threads: int("threads")? as usize,
            timestamp: get("timestamp")?.to_string(),
            speed_ref_ms: match col("speed_ref_ms") {
                Some(_) => num("speed_ref_ms")?,
                None => None,
            },
        })
    }
}

/// Current UTC time as RFC 3339 (seconds).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A parsed file: the samples, and where the last record starts when a crash tore it.
struct Parsed {
    samples: Vec<Sample>,
    /// (byte offset, 1-based line, why) of an incomplete last record.
    damaged_tail: Option<(u64, u64, String)>,
    /// The header predates the `speed_ref_ms` column.
    legacy_header: bool,
}

fn parse_file(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes);
    let mut records = reader.byte_records();
    let complete = bytes.ends_with(b"\n");
    let header: Vec<String> = match records.next() {
        None => return Ok(Parsed { samples: vec![], damaged_tail: None, legacy_header: false }),
        Some(Err(e)) => return Err(Error::data(path, 1, format!("unreadable header: {e}"))),
        Some(Ok(rec)) => {
            let fields: Vec<String> = rec.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
            let is_only_line = !bytes.iter().take(bytes.len().saturating_sub(1)).any(|&b| b == b'\n');
            if is_only_line && !complete {
                return Ok(Parsed {
                    samples: vec![],
                    damaged_tail: Some((0, 1, "incomplete header line".into())),
                    legacy_header: false,
                });
            }
            if fields.get(..LEADING_COLUMNS.len()).is_none_or(|lead| lead != LEADING_COLUMNS) {
                return Err(Error::data(
                    path,
                    1,
                    format!("not a perfmodel data file: the header must start with {}", LEADING_COLUMNS.join(",")),
                ));
            }
            fields
        }
    };
    let legacy_header = !header.iter().any(|h| h == "speed_ref_ms");
    let mut rows: Vec<(u64, u64, std::result::Result<Sample, String>)> = Vec::new();
    for rec in records {
        let (byte, line, parsed) = match rec {
            Ok(rec) => {
                let pos = rec.position().map(|p| (p.byte(), p.line())).unwrap_or((0, 0));
                let fields: std::result::Result<Vec<&str>, String> = rec
                    .iter()
                    .enumerate()
                    .map(|(i, f)| std::str::from_utf8(f).map_err(|_| format!("field {} is not valid UTF-8", i + 1)))
                    .collect();
                (pos.0, pos.1, fields.and_then(|f| Sample::from_record(&header, &f)))
            }
            Err(e) => {
                let pos = e.position().map(|p| (p.byte(), p.line())).unwrap_or((0, 0));
                (pos.0, pos.1, Err(e.to_string()))
            }
        };
        rows.push((byte, line, parsed));
    }
    // A crash can only tear the last line (each row is one write ending in a line end); a complete line that
    // does not parse is corruption of another kind and is reported like any other bad line.
    let mut damaged_tail = None;
    if !complete {
        if let Some((byte, line, _)) = rows.pop() {
            damaged_tail = Some((byte, line, "incomplete last line (no line end)".to_string()));
        }
    }
    let mut samples = Vec::with_capacity(rows.len());
    for (_, line, parsed) in rows {
        samples.push(parsed.map_err(|why| Error::data(path, line, why))?);
    }
    Ok(Parsed { samples, damaged_tail, legacy_header })
}

/// Read every sample of one data file. An incomplete last line (a crash during a write) is an error here: it is
/// repaired only by [`SampleWriter::open`] (i.e. by rerunning `perfmodel collect`), never silently skipped.
pub fn read_samples(path: &Path) -> Result<Vec<Sample>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_samples(path, &bytes)
}

/// [`read_samples`] of a file's bytes already read (`path` names it in errors): what the fuzzer drives.
pub fn parse_samples(path: &Path, bytes: &[u8]) -> Result<Vec<Sample>> {
    let parsed = parse_file(path, bytes)?;
    if let Some((_, line, why)) = parsed.damaged_tail {
        return Err(Error::data(
            path,
            line,
            format!(
                "{why}; the collector was probably interrupted while writing it — rerun `perfmodel collect` \
                     for this device to repair the file (it truncates the damaged line and re-measures it)"
            ),
        ));
    }
    Ok(parsed.samples)
}

/// All data files of a device (`DATA_DIR/DEVICE/<layer_type>.csv`), by layer type. Files whose name is not a
/// layer type (notes, provenance) are ignored; shard sub-directories too (merge them first).
pub fn read_device(data_dir: &Path, device: &str) -> Result<BTreeMap<LayerType, Vec<Sample>>> {
    let dir = data_dir.join(device);
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Device {
                device: device.to_string(),
                message: format!(
                    "no collected data in {} (run `perfmodel collect --device {device}` first)",
                    dir.display()
                ),
            }
        } else {
            Error::io(&dir, e)
        }
    })?;
    let mut out = BTreeMap::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("csv") {
            continue;
        }
        let Some(layer_type) = path.file_stem().and_then(|s| s.to_str()).and_then(LayerType::parse) else {
            continue;
        };
        let samples = read_samples(&path)?;
        if let Some(bad) = samples.iter().position(|s| s.layer_type != layer_type) {
            return Err(Error::data(
                &path,
                bad as u64 + 2,
                format!("a {} row in the {layer_type} file", samples[bad].layer_type),
            ));
        }
        out.insert(layer_type, samples);
    }
    Ok(out)
}

/// Appends samples to one data file durably (each row is written whole, flushed and fsynced).
pub struct SampleWriter {
    path: PathBuf,
    file: File,
    layer_type: Option<LayerType>,
    statuses: HashMap<String, Status>,
    repair_note: Option<String>,
}

impl SampleWriter {
    /// Open (or create) a data file for appending. Existing rows are validated; a damaged last line is truncated
    /// away (see [`SampleWriter::repair_note`]); damage anywhere else is an [`Error::Data`].
    pub fn open(path: &Path) -> Result<SampleWriter> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io(path, e)),
        };
        let parsed = parse_file(path, &bytes)?;
        let mut upgrade_note = None;
        if parsed.legacy_header {
            // Rows stay as they are, with an empty speed_ref_ms; the whole file is replaced at once, so an
            // interruption leaves either the old file or the upgraded one. A torn last line is dropped here as
            // the repair below would drop it.
            let mut buf = csv::WriterBuilder::new().from_writer(Vec::new());
            let encode = |e: csv::Error| Error::Invalid(format!("{}: cannot encode row: {e}", path.display()));
            if let Some(first) = parsed.samples.first() {
                buf.write_record(header(first.layer_type)).map_err(encode)?;
            }
            for s in &parsed.samples {
                buf.write_record(s.to_record()).map_err(encode)?;
            }
            let upgraded = buf.into_inner().map_err(|e| Error::Invalid(format!("cannot encode rows: {e}")))?;
            crate::fsio::write_atomic(path, &upgraded)?;
            let torn = match &parsed.damaged_tail {
                Some((_, line, why)) => format!("; removed the damaged last line {line} ({why}), measured again"),
                None => String::new(),
            };
            upgrade_note = Some(format!(
                "{}: upgraded to the current columns (added speed_ref_ms, empty for its {} existing rows){torn}",
                path.display(),
                parsed.samples.len()
            ));
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(|e| Error::io(path, e))?;
        let mut repair_note = upgrade_note;
        if let (false, Some((offset, line, why))) = (parsed.legacy_header, &parsed.damaged_tail) {
            let dropped = bytes.len() as u64 - offset;
            file.set_len(*offset).map_err(|e| Error::io(path, e))?;
            file.sync_all().map_err(|e| Error::io(path, e))?;
            repair_note = Some(format!(
                "{}: repaired: removed the damaged last line {line} ({dropped} bytes: {why}), left by an \
                 interrupted write; that sample will be measured again",
                path.display()
            ));
        }
        let layer_type = parsed.samples.first().map(|s| s.layer_type);
        let statuses = parsed.samples.iter().map(|s| (s.key.clone(), s.status)).collect();
        Ok(SampleWriter { path: path.to_path_buf(), file, layer_type, statuses, repair_note })
    }

    /// What was repaired when opening, for the user to see.
    pub fn repair_note(&self) -> Option<&str> {
        self.repair_note.as_deref()
    }

    /// Whether a sample with this key is already in the file.
    pub fn contains(&self, key: &str) -> bool {
        self.statuses.contains_key(key)
    }

    /// The recorded status of a key, if it is in the file.
    pub fn status(&self, key: &str) -> Option<Status> {
        self.statuses.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.statuses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one row and make it durable before returning. A key already in the file is refused.
    pub fn append(&mut self, sample: &Sample) -> Result<()> {
        if let Some(t) = self.layer_type {
            if t != sample.layer_type {
                return Err(Error::Invalid(format!(
                    "{}: cannot append a {} sample to a {t} file",
                    self.path.display(),
                    sample.layer_type
                )));
            }
        }
        if self.statuses.contains_key(&sample.key) {
            return Err(Error::Invalid(format!("{}: sample {} is already recorded", self.path.display(), sample.key)));
        }
        let mut buf = csv::WriterBuilder::new().from_writer(Vec::new());
        let write_err = |e: csv::Error| Error::Invalid(format!("{}: cannot encode row: {e}", self.path.display()));
        let len = self.file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        if len == 0 {
            buf.write_record(header(sample.layer_type)).map_err(write_err)?;
        }
        buf.write_record(sample.to_record()).map_err(write_err)?;
        let bytes = buf.into_inner().map_err(|e| Error::Invalid(format!("cannot encode row: {e}")))?;
        self.file.write_all(&bytes).map_err(|e| Error::io(&self.path, e))?;
        self.file.flush().map_err(|e| Error::io(&self.path, e))?;
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))?;
        self.layer_type = Some(sample.layer_type);
        self.statuses.insert(sample.key.clone(), sample.status);
        Ok(())
    }
}

/// Join data files (e.g. shards collected on different machines) into `output` without duplicates: the first
/// occurrence of a key wins, and a failed row is replaced by a measured one of the same key. Returns the rows
/// written. All inputs must hold the same layer type.
pub fn merge_files(inputs: &[PathBuf], output: &Path) -> Result<usize> {
    let mut merged: Vec<Sample> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for input in inputs {
        for s in read_samples(input)? {
            if let Some(first) = merged.first() {
                if first.layer_type != s.layer_type {
                    return Err(Error::Invalid(format!(
                        "{}: holds {} samples, but the merge already has {} samples",
                        input.display(),
                        s.layer_type,
                        first.layer_type
                    )));
                }
            }
            match index.get(&s.key) {
                Some(&i) if merged[i].status == Status::Failed && s.status != Status::Failed => merged[i] = s,
                Some(_) => {}
                None => {
                    index.insert(s.key.clone(), merged.len());
                    merged.push(s);
                }
            }
        }
    }
    let Some(first) = merged.first() else {
        return Err(Error::Invalid(format!("nothing to merge: {} inputs hold no samples", inputs.len())));
    };
    let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
    let encode = |e: csv::Error| Error::Invalid(format!("{}: cannot encode row: {e}", output.display()));
    w.write_record(header(first.layer_type)).map_err(encode)?;
    for s in &merged {
        w.write_record(s.to_record()).map_err(encode)?;
    }
    let bytes = w.into_inner().map_err(|e| Error::Invalid(format!("cannot encode rows: {e}")))?;
    crate::fsio::write_atomic(output, &bytes)?;
    Ok(merged.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Conv2d, Op};

    fn sample(filters: usize) -> Sample {
        let cfg = LayerConfig::new(Op::Conv2d(Conv2d::new(filters, [3, 3])), vec![smallvec::smallvec![3, 8, 8]], 1);
        let mut s = Sample::unmeasured(&cfg).unwrap();
        s.status = Status::Ok;
        s.reason.clear();
        s.latency_ms = Some(0.125);
        s.latency_mad_ms = Some(0.01);
        s.latency_cv = Some(0.05);
        s.repetitions = 15;
        s.rounds = 3;
        s.memory_mib = Some(0.5);
        s.engine = "test".into();
        s.threads = 1;
        s
    }

    #[test]
    fn append_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("local/conv2d.csv");
        let mut w = SampleWriter::open(&path).unwrap();
        let (a, b) = (sample(4), sample(8));
        w.append(&a).unwrap();
        w.append(&b).unwrap();
        assert!(w.append(&a).is_err(), "duplicate key must be refused");
        let back = read_samples(&path).unwrap();
        assert_eq!(back, vec![a.clone(), b]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().next().unwrap(), header(LayerType::Conv2d).join(","));
        let reopened = SampleWriter::open(&path).unwrap();
        assert!(reopened.contains(&a.key) && reopened.repair_note().is_none());
        let by_type = read_device(dir.path(), "local").unwrap();
        assert_eq!(by_type[&LayerType::Conv2d].len(), 2);
        assert_eq!(by_type[&LayerType::Conv2d][0].metric(Metric::Latency), Some(0.125));
        assert_eq!(by_type[&LayerType::Conv2d][0].metric(Metric::Power), None);
    }

    #[test]
    fn truncated_last_line_is_an_error_to_read_and_repaired_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conv2d.csv");
        let mut w = SampleWriter::open(&path).unwrap();
        w.append(&sample(4)).unwrap();
        w.append(&sample(8)).unwrap();
        drop(w);
        let full = std::fs::read(&path).unwrap();
        std::fs::write(&path, &full[..full.len() - 20]).unwrap();
        let err = read_samples(&path).unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("incomplete last line"), "{err}");
        let w = SampleWriter::open(&path).unwrap();
        assert!(w.repair_note().unwrap().contains("repaired"), "{:?}", w.repair_note());
        assert_eq!(w.len(), 1);
        assert_eq!(read_samples(&path).unwrap().len(), 1);
    }

    #[test]
    fn corrupt_middle_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conv2d.csv");
        let mut w = SampleWriter::open(&path).unwrap();
        for f in [4, 8, 16] {
            w.append(&sample(f)).unwrap();
        }
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines[2] = lines[2].replacen(",ok,", ",fine,", 1);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        for err in [read_samples(&path).unwrap_err(), SampleWriter::open(&path).err().unwrap()] {
            let msg = err.to_string();
            assert!(matches!(err, Error::Data { line: 3, .. }), "{msg}");
            assert!(msg.contains("conv2d.csv") && msg.contains("'status'"), "{msg}");
        }
    }

    #[test]
    fn complete_but_corrupt_last_line_is_an_error_not_a_repair() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conv2d.csv");
        let mut w = SampleWriter::open(&path).unwrap();
        w.append(&sample(4)).unwrap();
        w.append(&sample(8)).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap().replace(",ok,", ",okay,");
        std::fs::write(&path, &text).unwrap();
        let err = SampleWriter::open(&path).err().unwrap();
        assert!(matches!(err, Error::Data { line: 2, .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "nothing truncated");
    }

    #[test]
    fn files_without_the_speed_column_read_and_are_upgraded_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conv2d.csv");
        let mut w = SampleWriter::open(&path).unwrap();
        let mut probed = sample(4);
        probed.speed_ref_ms = Some(2.5);
        w.append(&probed).unwrap();
        w.append(&sample(8)).unwrap();
        drop(w);
        // The same rows as a file of the previous layout: without the last column.
        let text = std::fs::read_to_string(&path).unwrap();
        let legacy: String = text.lines().map(|l| format!("{}\n", &l[..l.rfind(',').unwrap()])).collect();
        std::fs::write(&path, &legacy).unwrap();
        let rows = read_samples(&path).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|s| s.speed_ref_ms.is_none()));
        assert_eq!(rows[0].latency_ms, Some(0.125));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), legacy, "reading changes nothing");
        let mut w = SampleWriter::open(&path).unwrap();
        assert!(w.repair_note().unwrap().contains("upgraded"), "{:?}", w.repair_note());
        let mut third = sample(16);
        third.speed_ref_ms = Some(2.5);
        w.append(&third).unwrap();
        drop(w);
        let rows = read_samples(&path).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.iter().map(|s| s.speed_ref_ms).collect::<Vec<_>>(), vec![None, None, Some(2.5)]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().next().unwrap(), header(LayerType::Conv2d).join(","));
    }

    #[test]
    fn merge_drops_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let (p1, p2, out) = (dir.path().join("a.csv"), dir.path().join("b.csv"), dir.path().join("m/conv2d.csv"));
        let mut w1 = SampleWriter::open(&p1).unwrap();
        w1.append(&sample(4)).unwrap();
        w1.append(&sample(8)).unwrap();
        let mut w2 = SampleWriter::open(&p2).unwrap();
        w2.append(&sample(8)).unwrap();
        w2.append(&sample(16)).unwrap();
        assert_eq!(merge_files(&[p1, p2], &out).unwrap(), 3);
        let keys: std::collections::HashSet<String> = read_samples(&out).unwrap().into_iter().map(|s| s.key).collect();
        assert_eq!(keys.len(), 3);
    }
}
