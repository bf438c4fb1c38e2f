//! Networks: the net.json format users write, and the shape inference that validates a whole graph.
//!
//! A network is a list of layers in execution order; each layer consumes the previous one unless it names its
//! `inputs` (earlier layers, or `"input"` for the network input), so residual and branching networks are plain
//! data. Validation happens once, on load, and every error names the file, the layer and the field.

use crate::error::{Error, Location, Result};
use crate::filled::filled;
use crate::layer::{tensor_elements, LayerConfig, LayerCost, LayerType, Op, Shape};
use serde_json::{json, Map, Value};
use std::path::Path;

/// The name by which layers refer to the network input.
pub const INPUT: &str = "input";

#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    pub op: Op,
    /// Names of the layers (or [`INPUT`]) this layer consumes. Empty means "the previous layer".
    pub inputs: Vec<String>,
}

impl Layer {
    pub fn new(name: impl Into<String>, op: Op) -> Self {
        Layer { name: name.into(), op, inputs: Vec::new() }
    }
    pub fn with_inputs(mut self, inputs: &[&str]) -> Self {
        self.inputs = inputs.iter().map(|s| s.to_string()).collect();
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub name: String,
    pub batch_size: usize,
    /// Input shape without the batch: `[C, H, W]` or `[features]`.
    pub input_shape: Shape,
    pub layers: Vec<Layer>,
}

/// Where a layer's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Input,
    Layer(usize),
}

/// Items grouped under the keys `0..n`, each key's in the order they were added, in two flat vectors instead of a
/// vector per key: an estimate builds such tables per network (the readers of each layer's output, the tensors
/// that die after each step), and a NAS loop estimates thousands of networks a second, where a vector per layer
/// was a third of a candidate's time in the allocator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Groups {
    /// Key `k`'s items are `items[starts[k]..starts[k + 1]]`.
    starts: Vec<usize>,
    items: Vec<usize>,
}

impl Groups {
    /// `(key, item)` pairs, keys below `n`, grouped by key; each key's items keep the pairs' order.
    ///
    /// # Panics
    /// If a key is `n` or more (a caller's bug, as indexing past a per-key vector would be).
    pub fn from_pairs(n: usize, pairs: &[(usize, usize)]) -> Groups {
        let mut starts = vec![0usize; n + 1];
        for &(k, _) in pairs {
            starts[k + 1] += 1;
        }
        for k in 0..n {
            starts[k + 1] += starts[k];
        }
        // Each pair goes to its key's next free slot; `starts[k]` then ends at key k's end, the next key's start.
        let mut items = filled(0usize, pairs.len());
        for &(k, item) in pairs {
            items[starts[k]] = item;
            starts[k] += 1;
        }
        starts.rotate_right(1);
        starts[0] = 0;
        Groups { starts, items }
    }

    /// Key `k`'s items (none for a key past the last).
    pub fn get(&self, k: usize) -> &[usize] {
        match (self.starts.get(k), self.starts.get(k + 1)) {
            (Some(&a), Some(&b)) => &self.items[a..b],
            _ => &[],
        }
    }
}

/// What one layer reads, inline up to two inputs (most layers read one, an add two).
pub type Sources = smallvec::SmallVec<[Source; 2]>;

/// A validated network: resolved edges, shapes and costs for every layer.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub sources: Vec<Sources>,
    /// Each layer alone at the analysed batch size (op and input shapes), as the analysis built it to infer
    /// its output: the estimate reads them many times per layer and should not rebuild them.
    configs: Vec<LayerConfig>,
    pub output_shapes: Vec<Shape>,
    pub costs: Vec<LayerCost>,
}

impl Analysis {
    /// The single-layer config of layer `i` at the analysed batch size.
    pub fn config(&self, i: usize) -> &LayerConfig {
        &self.configs[i]
    }
    /// The shapes layer `i` reads, batch excluded.
    pub fn input_shapes(&self, i: usize) -> &[Shape] {
        &self.configs[i].input_shapes
    }
    /// Whether layer `i` is a convolution over one pixel (a squeeze-excite block's): a matrix-vector product with
    /// a constant weight. Looped alone it finds its weights in the core's cache and runs in a few microseconds;
    /// in a network it reads them from farther and takes 2-4x that, which the calibration's one-pixel term counts.
    pub fn is_pixel_convolution(&self, i: usize) -> bool {
        self.costs[i].weight_elems > 0
            && matches!(self.configs[i].op, crate::layer::Op::Conv2d(_))
            && self.configs[i].input_shapes.first().is_some_and(|s| s.len() == 3 && s[1] == 1 && s[2] == 1)
    }

    pub fn total_params(&self) -> u64 {
        self.costs.iter().map(|c| c.weight_elems).sum()
    }
    pub fn total_flops(&self) -> u64 {
        self.costs.iter().map(|c| c.flops).sum()
    }
}

impl Network {
    pub fn new(name: impl Into<String>, input_shape: impl Into<Shape>) -> Self {
        Network { name: name.into(), batch_size: 1, input_shape: input_shape.into(), layers: Vec::new() }
    }

    /// Read a network from net.json or (by extension) an ONNX file, validated.
    pub fn load(path: impl AsRef<Path>) -> Result<Network> {
        let path = path.as_ref();
        let is_onnx = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
        if is_onnx {
            return crate::onnx::import_onnx(path, false);
        }
        Network::from_json(&read_json(path)?, &path.display().to_string())
    }

    /// [`Network::load`] with the batch size replaced by `batch` when given (a command's `--batch`), validated
    /// again so that a batch too large for the network is reported against the file.
    pub fn load_with_batch(path: impl AsRef<Path>, batch: Option<usize>) -> Result<Network> {
        let path = path.as_ref();
        let mut net = Network::load(path)?;
        if let Some(batch) = batch {
            net.batch_size = batch;
            net.analyze_in(&path.display())?;
        }
        Ok(net)
    }

    /// Parse and validate net.json text; `file` names the source in error messages.
    pub fn from_json_str(text: &str, file: &str) -> Result<Network> {
        Network::from_json(&parse_json(text, file)?, file)
    }

    pub fn from_json(value: &Value, file: &str) -> Result<Network> {
        let at = |field: &str| Location::file(file).field(field);
        let obj = value.as_object().ok_or_else(|| {
            Error::spec(Location::file(file), "expected a JSON object with name, input_shape and layers")
        })?;
        for key in obj.keys() {
            if !["name", "batch_size", "input_shape", "layers"].contains(&key.as_str()) {
                return Err(Error::spec(at(key), "unknown key (known: name, batch_size, input_shape, layers)"));
            }
        }
        let name = match obj.get("name") {
            None => Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("network").to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(Error::spec(at("name"), format!("expected a string, got {v}"))),
        };
        let batch_size = match obj.get("batch_size") {
            None => 1,
            Some(v) => match v.as_u64() {
                Some(b) if b > 0 => b as usize,
                _ => return Err(Error::spec(at("batch_size"), format!("expected a positive integer, got {v}"))),
            },
        };
        let input_shape: Shape = match obj.get("input_shape") {
            None => return Err(Error::spec(at("input_shape"), "missing required field")),
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|d| match d.as_u64() {
                    Some(n) if n > 0 => Ok(n as usize),
                    _ => Err(Error::spec(at("input_shape"), format!("dimensions must be positive integers, got {d}"))),
                })
                .collect::<Result<_>>()?,
            Some(v) => return Err(Error::spec(at("input_shape"), format!("expected a non-empty list, got {v}"))),
        };
        let layer_values = match obj.get("layers") {
            Some(Value::Array(a)) => a,
            Some(v) => return Err(Error::spec(at("layers"), format!("expected a list, got {}", short(v)))),
            None => return Err(Error::spec(at("layers"), "missing required field")),
        };
        if layer_values.is_empty() {
            return Err(Error::spec(at("layers"), "a network needs at least one layer"));
        }
        let mut layers = Vec::with_capacity(layer_values.len());
        for (index, lv) in layer_values.iter().enumerate() {
            let obj = lv.as_object().ok_or_else(|| {
                Error::spec(Location::file(file).layer(format!("#{index}"), index), "expected a JSON object")
            })?;
            let type_hint = obj.get("type").and_then(Value::as_str).unwrap_or("layer");
            let name = match obj.get("name") {
                None => format!("{type_hint}_{index}"),
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(v) => {
                    return Err(Error::spec(
                        Location::file(file).layer(format!("#{index}"), index).field("name"),
                        format!("expected a non-empty string, got {v}"),
                    ))
                }
            };
            let loc = || Location::file(file).layer(name.clone(), index);
            let inputs = match obj.get("inputs") {
                None => Vec::new(),
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| Error::spec(loc().field("inputs"), format!("expected layer names, got {x}")))
                    })
                    .collect::<Result<_>>()?,
                Some(v) => {
                    return Err(Error::spec(loc().field("inputs"), format!("expected a list of layer names, got {v}")))
                }
            };
            let op = Op::from_json(obj).map_err(|e| layer_error(loc(), e))?;
            layers.push(Layer { name, op, inputs });
        }
        let net = Network { name, batch_size, input_shape, layers };
        net.analyze_in(&file)?;
        Ok(net)
    }

    /// Validate the graph and infer every shape.
    pub fn analyze(&self) -> Result<Analysis> {
        // Named in errors only: no string is built for a network that analyses cleanly.
        struct Named<'a>(&'a str);
        impl std::fmt::Display for Named<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "network '{}'", self.0)
            }
        }
        self.analyze_in(&Named(&self.name))
    }

    fn analyze_in(&self, file: &dyn std::fmt::Display) -> Result<Analysis> {
        let file = || file.to_string();
        let n = self.layers.len();
        let mut index_of: rustc_hash::FxHashMap<&str, usize> = Default::default();
        index_of.reserve(n);
        for (i, l) in self.layers.iter().enumerate() {
            let loc = || Location::file(file()).layer(l.name.clone(), i).field("name");
            if l.name == INPUT {
                return Err(Error::spec(loc(), format!("'{INPUT}' is reserved for the network input")));
            }
            if let Some(first) = index_of.insert(l.name.as_str(), i) {
                return Err(Error::spec(loc(), format!("duplicate layer name (first used by layer #{first})")));
            }
        }
        if self.batch_size == 0 {
            return Err(Error::spec(Location::file(file()).field("batch_size"), "must be positive"));
        }
        tensor_elements(&self.input_shape, 1)
            .map_err(|e| Error::spec(Location::file(file()).field("input_shape"), e))?;
        tensor_elements(&self.input_shape, self.batch_size)
            .map_err(|e| Error::spec(Location::file(file()).field("batch_size"), format!("the input {e}")))?;
        let mut analysis = Analysis {
            sources: Vec::with_capacity(n),
            configs: Vec::with_capacity(n),
            output_shapes: Vec::with_capacity(n),
            costs: Vec::with_capacity(n),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let loc = || Location::file(file()).layer(layer.name.clone(), i);
            let mut sources = Sources::with_capacity(layer.inputs.len().max(1));
            if layer.inputs.is_empty() {
                sources.push(if i == 0 { Source::Input } else { Source::Layer(i - 1) });
            }
            for input in &layer.inputs {
                if input == INPUT {
                    sources.push(Source::Input);
                    continue;
                }
                match index_of.get(input.as_str()) {
                    Some(&j) if j < i => sources.push(Source::Layer(j)),
                    Some(&j) if j == i => {
                        return Err(Error::spec(loc().field("inputs"), format!("layer consumes itself ('{input}'): a cycle")))
                    }
                    Some(&j) => {
                        return Err(Error::spec(
                            loc().field("inputs"),
                            format!("'{input}' is layer #{j}, which comes later: inputs must name earlier layers (a cycle or wrong order)"),
                        ))
                    }
                    None => {
                        return Err(Error::spec(
                            loc().field("inputs"),
                            format!("unknown layer '{input}' (use \"{INPUT}\" for the network input)"),
                        ))
                    }
                }
            }
            let shapes: crate::layer::InputShapes = sources
                .iter()
                .map(|s| match s {
                    Source::Input => self.input_shape.clone(),
                    Source::Layer(j) => analysis.output_shapes[*j].clone(),
                })
                .collect();
            let config = LayerConfig::new(layer.op.clone(), shapes, self.batch_size);
            let out = config.output_shape().map_err(|e| layer_error(loc(), e))?;
            let cost = config.cost_of_output(&out).map_err(|e| layer_error(loc(), e))?;
            analysis.sources.push(sources);
            analysis.configs.push(config);
            analysis.output_shapes.push(out);
            analysis.costs.push(cost);
        }
        Ok(analysis)
    }

    /// The net.json form. `inputs` is written only where it is not simply the previous layer.
    pub fn to_json(&self) -> Value {
        let layers: Vec<Value> = self
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut m = Map::new();
                m.insert("name".into(), json!(l.name));
                for (k, v) in l.op.to_json() {
                    m.insert(k, v);
                }
                let implicit =
                    (i == 0 && l.inputs == [INPUT]) || (i > 0 && l.inputs == [self.layers[i - 1].name.clone()]);
                if !l.inputs.is_empty() && !implicit {
                    m.insert("inputs".into(), json!(l.inputs));
                }
                Value::Object(m)
            })
            .collect();
        json!({"name": self.name, "batch_size": self.batch_size, "input_shape": self.input_shape, "layers": layers})
    }

    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(&self.to_json()).expect("JSON values always serialise")
    }

    /// Names of layers whose type has no arithmetic model at all.
    pub fn unsupported_layers(&self) -> Vec<&Layer> {
        self.layers.iter().filter(|l| l.op.layer_type() == LayerType::Unsupported).collect()
    }
}

/// Read a JSON file the user wrote (net.json, configs.json): text that is not UTF-8 or not JSON is bad input
/// naming the file.
pub fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let file = path.display().to_string();
    let text = String::from_utf8(bytes)
        .map_err(|e| Error::spec(Location::file(&file), format!("not UTF-8 text (JSON is expected): {e}")))?;
    parse_json(&text, &file)
}

fn parse_json(text: &str, file: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::spec(Location::file(file), format!("invalid JSON: {e}")))
}

fn layer_error(loc: Location, e: crate::layer::LayerError) -> Error {
    let loc = match e.field {
        Some(f) => loc.field(f),
        None => loc,
    };
    Error::spec(loc, e.message)
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..60])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_each_key_s_items_in_order() {
        let pairs = [(2, 7), (0, 1), (2, 3), (0, 9), (3, 4), (2, 5)];
        let g = Groups::from_pairs(5, &pairs);
        let mut by_key: Vec<Vec<usize>> = vec![Vec::new(); 5];
        for &(k, v) in &pairs {
            by_key[k].push(v);
        }
        for (k, expected) in by_key.iter().enumerate() {
            assert_eq!(g.get(k), expected.as_slice(), "key {k}");
        }
        assert_eq!(g.get(5), &[] as &[usize]);
        assert_eq!(Groups::from_pairs(0, &[]).get(0), &[] as &[usize]);
    }

    const TINY: &str = r#"{"name": "tiny", "batch_size": 1, "input_shape": [3, 224, 224],
     "layers": [
       {"name": "c1", "type": "conv2d", "filters": 32, "kernel": [3,3], "strides": [2,2], "padding": "same", "activation": "relu"},
       {"name": "p1", "type": "max_pool2d", "pool_size": [2,2], "strides": [2,2], "padding": "valid"},
       {"name": "c2", "type": "conv2d", "filters": 32, "kernel": [1,1]},
       {"name": "sum", "type": "add", "inputs": ["p1", "c2"]},
       {"name": "gap", "type": "global_avg_pool2d"},
       {"name": "fc", "type": "dense", "units": 10, "activation": "softmax"}]}"#;

    #[test]
    fn example_from_the_issue_parses_and_round_trips() {
        let net = Network::from_json_str(TINY, "tiny.json").unwrap();
        let a = net.analyze().unwrap();
        assert_eq!(a.output_shapes[0][..], [32, 112, 112]);
        assert_eq!(a.output_shapes[3][..], [32, 56, 56]);
        assert_eq!(a.output_shapes[5][..], [10]);
        assert_eq!(a.sources[3][..], [Source::Layer(1), Source::Layer(2)]);
        let back = Network::from_json(&net.to_json(), "x").unwrap();
        assert_eq!(back, net);
    }

    /// A squeeze-excite block's convolution over one pixel is one; a convolution over more pixels, a depthwise
    /// one over one pixel, a dense layer and products are not.
    #[test]
    fn pixel_convolutions_are_the_convolutions_over_one_pixel() {
        let net = Network::from_json_str(
            r#"{"name": "se", "batch_size": 1, "input_shape": [16, 4, 4], "layers": [
              {"name": "c", "type": "conv2d", "filters": 16, "kernel": [1,1]},
              {"name": "dw", "type": "depthwise_conv2d", "kernel": [3,3], "padding": "same"},
              {"name": "gap", "type": "global_avg_pool2d"},
              {"name": "k", "type": "reshape", "target_shape": [16, 1, 1]},
              {"name": "fc1", "type": "conv2d", "filters": 4, "kernel": [1,1], "activation": "relu"},
              {"name": "dw1", "type": "depthwise_conv2d", "kernel": [1,1]},
              {"name": "flat", "type": "flatten"},
              {"name": "d", "type": "dense", "units": 8},
              {"name": "r", "type": "reshape", "target_shape": [2, 4]},
              {"name": "m", "type": "matmul", "units": 3, "use_bias": false},
              {"name": "t", "type": "transpose", "perm": [1, 0]},
              {"name": "mm", "type": "matmul", "inputs": ["m", "t"], "units": null, "use_bias": false}]}"#,
            "se.json",
        )
        .unwrap();
        let a = net.analyze().unwrap();
        let pixel: Vec<&str> =
            (0..net.layers.len()).filter(|&i| a.is_pixel_convolution(i)).map(|i| net.layers[i].name.as_str()).collect();
        assert_eq!(pixel, ["fc1"]);
    }
}
