//! Import of the published TVM_Profiling_Dataset (Sponner et al. 2022; one JSON file per measured layer) into
//! perfmodel's data files, so its devices can be trained and estimated like collected ones.
//!
//! The files use Keras conventions (NHWC shapes with a `null` batch, time in ms, power in W, memory in GiB), and
//! their `padding` field is not what was run: the benchmark always built unpadded convolutions and recorded
//! the resulting `output shape`. So padding is derived from the output shape (the smallest explicit padding
//! that reproduces it) and the output shape is checked against perfmodel's own shape rules.

use crate::data::{self, Sample, SampleWriter, Status};
use crate::error::{Error, Location, Result};
use crate::layer::{Activation, Conv2d, Dense, LayerConfig, LayerType, Op, Padding};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

const GIB_IN_MIB: f64 = 1024.0;

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportSummary {
    /// (data file, rows appended) per layer type.
    pub written: Vec<(PathBuf, usize)>,
    /// Files whose config and batch size were already in the data (from an earlier import or another file).
    pub duplicates: Vec<PathBuf>,
    pub files_read: usize,
}

fn spec(path: &Path, field: &str, message: impl Into<String>) -> Error {
    Error::spec(Location::file(path.display().to_string()).field(field), message)
}

fn number(path: &Path, obj: &Map<String, Value>, field: &str) -> Result<f64> {
    match obj.get(field) {
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| spec(path, field, format!("expected a non-negative number, got {v}"))),
        None => Err(spec(path, field, "missing required field")),
    }
}

fn count(path: &Path, obj: &Map<String, Value>, field: &str) -> Result<usize> {
    match obj.get(field) {
        Some(v) => v
            .as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or_else(|| spec(path, field, format!("expected a positive integer, got {v}"))),
        None => Err(spec(path, field, "missing required field")),
    }
}

fn pair(path: &Path, obj: &Map<String, Value>, field: &str) -> Result<[usize; 2]> {
    let v = obj.get(field).ok_or_else(|| spec(path, field, "missing required field"))?;
    match v.as_array().map(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>()) {
        Some(Some(a)) if a.len() == 2 && a.iter().all(|&n| n > 0) => Ok([a[0] as usize, a[1] as usize]),
        _ => Err(spec(path, field, format!("expected two positive integers, got {v}"))),
    }
}

/// A Keras shape `[null, d1, ...]` without its batch entry.
fn keras_shape(path: &Path, obj: &Map<String, Value>, field: &str) -> Result<Vec<usize>> {
    let v = obj.get(field).ok_or_else(|| spec(path, field, "missing required field"))?;
    let bad = || spec(path, field, format!("expected [null, positive integers...], got {v}"));
    let items = v.as_array().ok_or_else(bad)?;
    if items.len() < 2 || !items[0].is_null() {
        return Err(bad());
    }
    items[1..].iter().map(|d| d.as_u64().filter(|&n| n > 0).map(|n| n as usize).ok_or_else(bad)).collect()
}

/// Smallest `[top, bottom, left, right]` padding for which the convolution yields `out` from `input`.
fn padding_for_output(
    input: [usize; 2],
    out: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilation: [usize; 2],
) -> [usize; 4] {
    let mut pads = [0; 4];
    for axis in 0..2 {
        let effective = dilation[axis] * (kernel[axis] - 1) + 1;
        let total = ((out[axis].saturating_sub(1)) * strides[axis] + effective).saturating_sub(input[axis]);
        pads[2 * axis] = total / 2;
        pads[2 * axis + 1] = total - total / 2;
    }
    pads
}

/// One file → its layer config and measurements.
fn parse_file(path: &Path) -> Result<Sample> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Error::spec(Location::file(path.display().to_string()), format!("invalid JSON: {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| Error::spec(Location::file(path.display().to_string()), "expected a JSON object per sample"))?;
    let workload = obj.get("workload").and_then(Value::as_str).unwrap_or_default();
    let batch = count(path, obj, "batch_size")?;
    let input = keras_shape(path, obj, "input shape")?;
    let output = keras_shape(path, obj, "output shape")?;
    let config = match workload {
        "conv2d" => {
            let (&[h, w, c], &[oh, ow, filters]) = (input.as_slice(), output.as_slice()) else {
                return Err(spec(path, "input shape", "conv2d needs NHWC input and output shapes"));
            };
            let kernel = pair(path, obj, "kernel")?;
            let strides = pair(path, obj, "strides")?;
            let dilation = pair(path, obj, "dilation")?;
            let groups = obj.get("groups").map_or(Ok(1), |_| count(path, obj, "groups"))?;
            if count(path, obj, "filters")? != filters {
                return Err(spec(path, "filters", format!("does not match the output shape's {filters} channels")));
            }
            let padding = padding_for_output([h, w], [oh, ow], kernel, strides, dilation);
            let op = Op::Conv2d(Conv2d {
                filters,
                kernel,
                strides,
                dilation,
                groups,
                padding: Padding::Explicit(padding),
                use_bias: false,
                activation: Activation::Linear,
            });
            LayerConfig::new(op, vec![smallvec::smallvec![c, h, w]], batch)
        }
        "dense" => {
            let (&[features], &[units]) = (input.as_slice(), output.as_slice()) else {
                return Err(spec(path, "input shape", "dense needs [null, features] input and output shapes"));
            };
            LayerConfig::new(
                Op::Dense(Dense { units, use_bias: false, activation: Activation::Linear }),
                vec![smallvec::smallvec![features]],
                batch,
            )
        }
        other => {
            return Err(spec(
                path,
                "workload",
                format!("unsupported workload '{other}' (this importer reads conv2d and dense)"),
            ))
        }
    };
    let computed = config.output_shape().map_err(|e| spec(path, "output shape", e.to_string()))?;
    let expected: Vec<usize> = match output.as_slice() {
        &[oh, ow, c] => vec![c, oh, ow],
        other => other.to_vec(),
    };
    if computed.as_slice() != expected.as_slice() {
        return Err(spec(
            path,
            "output shape",
            format!(
                "no padding reproduces it: the layer yields {computed:?} (channels-first), the file says {expected:?}"
            ),
        ));
    }
    let latency_ms = number(path, obj, "time")?;
    let power_w = number(path, obj, "power")?;
    let memory_gib = number(path, obj, "memory")?;
    let mut sample = Sample::unmeasured(&config)?;
    sample.latency_ms = Some(latency_ms);
    sample.power_w = Some(power_w);
    sample.energy_mj = Some(power_w * latency_ms);
    sample.memory_mib = Some(memory_gib * GIB_IN_MIB);
    sample.repetitions = 1;
    sample.rounds = 1;
    sample.status = Status::Ok;
    sample.reason =
        format!("imported from TVM_Profiling_Dataset {}", path.file_name().unwrap_or_default().to_string_lossy());
    sample.engine = "tvm-cuda (TVM_Profiling_Dataset)".to_string();
    Ok(sample)
}

/// Read `dir/{conv2d,dense}/*.json` and append them to `data_dir/<device>/{conv2d,dense}.csv`. Every file is
/// parsed and checked before anything is written, so a bad file leaves the data untouched.
pub fn import_tvm_profiling(dir: &Path, data_dir: &Path, device: &str) -> Result<ImportSummary> {
    let mut by_type: Vec<(LayerType, Vec<(PathBuf, Sample)>)> = Vec::new();
    let mut summary = ImportSummary::default();
    for layer_type in [LayerType::Conv2d, LayerType::Dense] {
        let sub = dir.join(layer_type.as_str());
        let entries = match std::fs::read_dir(&sub) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&sub, e)),
        };
        let mut paths: Vec<PathBuf> = entries
            .map(|e| e.map(|e| e.path()).map_err(|err| Error::io(&sub, err)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
            .collect();
        paths.sort();
        let mut samples = Vec::with_capacity(paths.len());
        for path in paths {
            let sample = parse_file(&path)?;
            if sample.layer_type != layer_type {
                return Err(spec(
                    &path,
                    "workload",
                    format!("a {} sample in the {layer_type} folder", sample.layer_type),
                ));
            }
            samples.push((path, sample));
        }
        summary.files_read += samples.len();
        by_type.push((layer_type, samples));
    }
    if summary.files_read == 0 {
        return Err(Error::Invalid(format!(
            "{}: no conv2d/*.json or dense/*.json files (expected the TVM_Profiling_Dataset layout)",
            dir.display()
        )));
    }
    let device_dir = data_dir.join(device);
    for (layer_type, samples) in by_type {
        let path = data::file_path(&device_dir, layer_type);
        let mut writer = SampleWriter::open(&path)?;
        let mut appended = 0;
        for (file, sample) in samples {
            if writer.contains(&sample.key) {
                summary.duplicates.push(file);
                continue;
            }
            writer.append(&sample)?;
            appended += 1;
        }
        summary.written.push((path, appended));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_reproduces_the_recorded_output() {
        // 'same' in the file, but the benchmark ran unpadded: 35x35, 3x3 → 33x33.
        assert_eq!(padding_for_output([35, 35], [33, 33], [3, 3], [1, 1], [1, 1]), [0; 4]);
        // A real 'same' output needs padding, odd pixel at the bottom/right.
        assert_eq!(padding_for_output([35, 35], [35, 35], [4, 4], [1, 1], [1, 1]), [1, 2, 1, 2]);
        assert_eq!(padding_for_output([224, 224], [112, 112], [7, 7], [2, 2], [1, 1]), [2, 3, 2, 3]);
    }

    #[test]
    fn converts_units_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m-conv_16.json");
        std::fs::write(
            &file,
            r#"{"filters": 8, "kernel": [3, 3], "strides": [2, 2], "padding": "same", "dilation": [1, 1],
               "groups": 1, "input shape": [null, 15, 15, 4], "output shape": [null, 7, 7, 8],
               "workload": "conv2d", "batch_size": 16, "time": 1.5, "power": 100.0, "memory": 0.5}"#,
        )
        .unwrap();
        let s = parse_file(&file).unwrap();
        assert_eq!(s.config.input_shapes[..], [crate::layer::Shape::from_slice(&[4, 15, 15])]);
        assert_eq!(s.config.output_shape().unwrap()[..], [8, 7, 7]);
        assert_eq!((s.batch, s.latency_ms, s.power_w, s.memory_mib), (16, Some(1.5), Some(100.0), Some(512.0)));
        assert_eq!(s.energy_mj, Some(150.0));
        std::fs::write(&file, r#"{"workload": "conv2d", "batch_size": 1, "input shape": [null, 35, 35, 3], "output shape": [null, 2, 2, 2], "filters": 2, "kernel": [3, 3], "strides": [1, 1], "dilation": [1, 1], "time": 1, "power": 1, "memory": 1}"#).unwrap();
        let err = parse_file(&file).unwrap_err().to_string();
        assert!(err.contains("m-conv_16.json") && err.contains("output shape"), "{err}");
    }
}
