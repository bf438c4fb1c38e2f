//! Read an ONNX model into a perfmodel [`Network`].
//!
//! tract-onnx parses the protobuf and infers every tensor's shape (and the value of every tensor computable from
//! constants, so `Shape → Gather → Concat → Reshape` chains and `Constant` nodes fold away); this module maps
//! the remaining nodes onto perfmodel layers in graph order. Every mapped layer's output shape is then checked
//! against tract's inference, so a mapping mistake is an error, not a silently wrong estimate.
//!
//! Choices:
//! - An activation (Relu, Clip(0, 6), Sigmoid, Tanh, HardSwish, Softmax, LeakyRelu, Elu, HardSigmoid, a hard
//!   sigmoid written out as `Clip(x + 3, 0, 6) / 6`, and the gate patterns `x * Sigmoid(x)` = swish,
//!   `x * HardSigmoid(x)` = hard swish, and GELU written as its erf formula or its tanh approximation, their
//!   products in any grouping) that is the only consumer of a
//!   conv, depthwise or dense output is fused into that layer's `activation`, as Keras describes layers and as
//!   the collector measures them; elsewhere it is an `activation` layer. `MatMul` followed by a constant `Add`
//!   is one dense layer with a bias.
//! - Reshape-like nodes (Flatten, Reshape, Squeeze, Unsqueeze, Identity) whose output already has the shape
//!   perfmodel gives their input (e.g. the Flatten ONNX needs after global pooling, where perfmodel's global
//!   pooling already yields `[C]`) are dropped; a global pooling whose output feeds anything else is followed
//!   by a `<name>/keepdims` reshape to `[C, 1, 1]`.
//! - A node perfmodel cannot map is never dropped: the import fails listing every such node by name and op
//!   type, or, when unsupported ops are allowed, keeps it as an `unsupported` layer with tract's output shape.
//! - A mean or max over H and W (`ReduceMean`/`ReduceMax`, axes as an attribute or, since opset 18, an input) is
//!   global pooling, as PyTorch's newer exporter writes `adaptive_avg_pool2d(x, 1)`; a `Concat` of one tensor
//!   (DenseNet's `torch.cat([x])`) is that tensor.
//! - Weights stored beside the model (`NAME.onnx.data`, the newer exporter's default) are read from the model's
//!   directory.
//! - A transformer's layers: `MatMul` by a constant 2-D weight on a sequence (`[batch, ..., K]`) is a `matmul`
//!   with `units` (a constant `Add` after it its bias), a `MatMul` of two tensors a product, `Softmax` over an
//!   axis other than the channels' and `LayerNormalization` are those layers (axes counted from the end), as is
//!   a layer norm written out before opset 17 (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, then a Mul by
//!   the scale and an Add of the bias) or as tf2onnx writes TensorFlow's moments; a `Transpose` that keeps the batch first is one; an Add, Sub, Mul or Div
//!   of a tensor and a constant is an `elementwise` layer, a `Gather` of the network's ids in a constant table
//!   an `embedding`, and a `Gather` of one element of the first axis after the batch (a class token) a
//!   `channel_slice` and a `reshape` that drops the axis; a `Gather` of every element of an axis in order (the
//!   newer exporter's `as_strided` view) is a reshape.
//! - With a batch of 1, tensors whose first axis is not the batch (`nn.MultiheadAttention` computes sequence
//!   first: torchvision's ViT transposes the batch behind the tokens, splits the packed query/key/value
//!   projection with Unsqueeze, Transpose and Gather, and moves the batch back) are taken whole per sample: a
//!   node that moves the batch reads its input through a free reshape that adds the unit axis, maps with its
//!   axes one further, and a tensor whose first axis is 1 again is batch first after another free reshape. A
//!   transpose that moves only axes of one element is a reshape; a Gemm on such rows a product with a weight.
//! - A Concat of a tensor with constants along an axis after the batch (a ViT's class token before its patches)
//!   is a zero padding of that axis: the tensor copied into a larger buffer, which is what it costs.
//! - A per-channel `Mul` and `Add` of constants on `[N, C, H, W]` (a batch norm tf2onnx leaves after a depthwise
//!   or biased convolution) is a batch norm.
//! - A channels-last island (tf2onnx's transposes around each convolution, left when its transpose optimiser
//!   gives up) is first put back channel-first ([`super::transposes`]), as the engines do before running it; a
//!   per-channel constant `Add` after a bias-less convolution is its bias.
//! - A symbolic batch dimension is fixed to 1; any other symbolic input dimension is an error.

use crate::error::{Error, Result};
use crate::layer::{
    tensor_elements, Activation, Conv2d, Dense, DepthwiseConv2d, ElementwiseFn, Op, Padding, Pool2d, Shape, MAX_SIZE,
};
use crate::network::{Layer, Network, INPUT};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use tract_onnx::pb::{tensor_shape_proto::dimension, type_proto, ModelProto, NodeProto};
use tract_onnx::prelude::tract_data::internal::bail;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

/// Import an ONNX file as a network (see the module docs for what is mapped and how).
pub fn import_onnx(path: &Path, allow_unsupported: bool) -> Result<Network> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let file = path.display().to_string();
    let proto = tract_onnx::onnx()
        .proto_model_for_read(&mut &bytes[..])
        .map_err(|e| Error::Onnx { file: file.clone(), message: format!("not a readable ONNX model: {e:#}") })?;
    let default_name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("network");
    // Weights stored beside the model (`NAME.onnx.data`, what PyTorch's newer exporter writes) are read from the
    // model's directory.
    let dir = path.parent().map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d });
    let dir = dir.and_then(Path::to_str);
    let sunk = super::transposes::sink_model(&proto);
    Importer::new(sunk.as_ref().unwrap_or(&proto), &file, dir)?.run(default_name, allow_unsupported)
}

/// Import an in-memory ONNX model (its weights inside it); `file` names it in errors.
pub fn import_proto(proto: &ModelProto, file: &str, default_name: &str, allow_unsupported: bool) -> Result<Network> {
    let sunk = super::transposes::sink_model(proto);
    Importer::new(sunk.as_ref().unwrap_or(proto), file, None)?.run(default_name, allow_unsupported)
}

/// The version of the default (`ai.onnx`) domain the model imports (1 when it names none).
pub(super) fn default_opset(proto: &ModelProto) -> i64 {
    proto.opset_import.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map_or(1, |o| o.version)
}

/// How one ONNX node becomes part of the network.
enum Mapping {
    /// A new layer consuming the node's non-constant inputs.
    Layer(Op),
    /// The node's output is the same tensor as this (non-constant) input.
    Alias(String),
    /// Fuse an activation into the layer producing this tensor.
    FuseActivation(String, Activation),
    /// Give the dense layer or convolution producing this tensor its bias.
    FuseBias(String),
    /// Global pooling: a layer, plus a `[C, 1, 1]` reshape when a consumer needs the spatial dims.
    GlobalPool(Op),
    /// One layer per output of the node, each consuming its non-constant input.
    Layers(Vec<Op>),
    /// Layers one after another, the first consuming the node's input, the last producing its output.
    Chain(Vec<Op>),
}

struct Importer<'a> {
    file: &'a str,
    graph: &'a tract_onnx::pb::GraphProto,
    opset: i64,
    model: InferenceModel,
    outlets: HashMap<String, OutletId>,
    input_name: String,
    batch: usize,
    input_shape: Shape,
    /// How many node inputs (plus graph outputs) read each tensor.
    consumers: HashMap<&'a str, usize>,
    /// Node index of each tensor's producer.
    producer: HashMap<&'a str, usize>,
    /// Why tract's shape inference stopped early, if it did.
    analysis_error: Option<String>,
    /// With a batch of 1, tensors whose first axis is not the batch (a sequence-first attention's, after a
    /// transpose that moves the batch): their ONNX shape, all of it per sample (see [`Importer::relayout`]).
    batchless: std::cell::RefCell<HashMap<String, Vec<usize>>>,
}

impl<'a> Importer<'a> {
    /// `model_dir`: where external data (weights in files beside the model) is read from.
    fn new(proto: &'a ModelProto, file: &'a str, model_dir: Option<&str>) -> Result<Importer<'a>> {
        let err = |message: String| Error::Onnx { file: file.to_string(), message };
        let graph = proto.graph.as_ref().ok_or_else(|| err("the model has no graph".into()))?;
        let opset = default_opset(proto);
        let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
        let inputs: Vec<_> = graph.input.iter().filter(|i| !initializers.contains(i.name.as_str())).collect();
        let input = match inputs.as_slice() {
            [one] => *one,
            _ => {
                let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(err(format!(
                    "perfmodel networks have exactly one input, this graph has {}: {}",
                    inputs.len(),
                    names.join(", ")
                )));
            }
        };
        let dims =
            declared_dims(input).ok_or_else(|| err(format!("input '{}' declares no tensor shape", input.name)))?;
        let mut full_shape = Vec::with_capacity(dims.len());
        for (k, d) in dims.iter().enumerate() {
            match d {
                Ok(v) if *v > 0 => full_shape.push(*v as usize),
                _ if k == 0 => full_shape.push(1),
                Ok(v) => return Err(err(format!("input '{}' dimension {k} is {v}", input.name))),
                Err(param) => {
                    return Err(err(format!(
                        "input '{}' dimension {k} is symbolic ('{param}'): perfmodel needs a fixed input shape \
                         (only the batch may be symbolic)",
                        input.name
                    )))
                }
            }
        }
        if full_shape.len() < 2 {
            return Err(err(format!("input '{}' has shape {full_shape:?}: expected [batch, ...]", input.name)));
        }
        // tract's shape inference does unchecked arithmetic on sizes: absurd ones are refused before it sees them.
        tensor_elements(&full_shape[1..], full_shape[0]).map_err(|e| err(format!("input '{}': {e}", input.name)))?;
        check_size_attributes(graph).map_err(err)?;
        // tract asserts on some malformed graphs instead of returning an error (a fuzzer found a Gather whose
        // shape inference indexes out of bounds): its panics become this file's error too.
        let guarded =
            |what: &str, panic: String| err(format!("tract failed while {what} the graph (it panicked: {panic})"));
        let parsed = crate::error::catch_engine_panic(|| tract_onnx::onnx().parse(proto, model_dir))
            .map_err(|p| guarded("parsing", p))?
            .map_err(|e| err(format!("tract cannot parse the graph: {e:#}")))?;
        let mut model = parsed.model;
        let outlets = parsed.outlets_by_name;
        let input_outlet = *outlets
            .get(&input.name)
            .ok_or_else(|| err(format!("tract found no tensor for input '{}'", input.name)))?;
        let fact =
            model.outlet_fact(input_outlet).map_err(|e| err(format!("{e:#}")))?.clone().with_shape(full_shape.clone());
        model.set_outlet_fact(input_outlet, fact).map_err(|e| err(format!("{e:#}")))?;
        let analysis_error = crate::error::catch_engine_panic(|| model.analyse(true))
            .map_err(|p| guarded("analysing", p))?
            .err()
            .map(|e| format!("{e:#}"));

        let mut consumers: HashMap<&str, usize> = HashMap::new();
        let mut producer = HashMap::new();
        for (i, node) in graph.node.iter().enumerate() {
            for input in node.input.iter().filter(|s| !s.is_empty()) {
                *consumers.entry(input.as_str()).or_default() += 1;
            }
            for output in node.output.iter().filter(|s| !s.is_empty()) {
                producer.insert(output.as_str(), i);
            }
        }
        for output in &graph.output {
            *consumers.entry(output.name.as_str()).or_default() += 1;
        }
        Ok(Importer {
            file,
            graph,
            opset,
            model,
            outlets,
            input_name: input.name.clone(),
            batch: full_shape[0],
            input_shape: Shape::from_slice(&full_shape[1..]),
            consumers,
            producer,
            analysis_error,
            batchless: Default::default(),
        })
    }

    fn error(&self, message: String) -> Error {
        Error::Onnx { file: self.file.to_string(), message }
    }

    fn fact(&self, tensor: &str) -> Option<&InferenceFact> {
        self.outlets.get(tensor).and_then(|o| self.model.outlet_fact(*o).ok())
    }

    /// The value of a tensor computable from constants alone.
    fn value(&self, tensor: &str) -> Option<Arc<Tensor>> {
        self.fact(tensor).and_then(|f| f.value.concretize())
    }

    /// Full shape (batch first) as tract inferred it; for a batch-less tensor its ONNX shape after the batch of 1.
    fn shape(&self, tensor: &str) -> Option<Vec<usize>> {
        if let Some(onnx) = self.batchless.borrow().get(tensor) {
            return Some(std::iter::once(1).chain(onnx.iter().copied()).collect());
        }
        self.fact(tensor).and_then(|f| f.shape.as_concrete_finite().ok().flatten()).map(|s| s.to_vec())
    }

    /// The shape as tract inferred it, whatever perfmodel's layout of the tensor.
    fn onnx_shape(&self, tensor: &str) -> Option<Vec<usize>> {
        self.fact(tensor).and_then(|f| f.shape.as_concrete_finite().ok().flatten()).map(|s| s.to_vec())
    }

    fn is_batchless(&self, tensor: &str) -> bool {
        self.batchless.borrow().contains_key(tensor)
    }

    /// Whether `node`, reading batch-first tensors, moves or reshapes their first axis (the batch): a transpose
    /// that puts another axis first, a reshape that changes the first dimension, a gather or concat along it.
    fn moves_batch(&self, node: &NodeProto, x: &str) -> bool {
        let (Some(in_shape), Some(out_shape)) =
            (self.onnx_shape(x), node.output.first().and_then(|o| self.onnx_shape(o)))
        else {
            return false;
        };
        let axis_zero = |default: i64| {
            let axis = node.get_attr_opt::<i64>("axis").ok().flatten().unwrap_or(default);
            axis == 0 || axis == -(in_shape.len() as i64)
        };
        match node.op_type.as_str() {
            "Transpose" => match node.get_attr_opt_vec::<i64>("perm").ok().flatten() {
                Some(perm) => perm.first().is_some_and(|&p| p != 0),
                None => in_shape.len() > 1,
            },
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => out_shape.first() != in_shape.first(),
            "Gather" => node.input.first().map(String::as_str) == Some(x) && axis_zero(0),
            "Concat" => axis_zero(1),
            _ => false,
        }
    }

    /// A node on tensors whose first axis is not the batch, with a batch of 1 (how `nn.MultiheadAttention`
    /// computes, sequence first, and moves the batch back): perfmodel takes such a tensor's whole ONNX shape as
    /// its per-sample shape, behind a batch of 1, so the node maps as one that keeps the batch first, its axes
    /// one further. A batch-first input is first viewed so (a free reshape that adds the unit axis); the
    /// node's outputs are batch-less. Returns the node to map, its dynamic inputs, and the view layers to add
    /// before it (name, op, the tensor viewed, the view's tensor).
    #[allow(clippy::type_complexity)]
    fn relayout(
        &self,
        node: &NodeProto,
        dynamic: &[&String],
    ) -> (NodeProto, Vec<String>, Vec<(String, Op, String, String)>) {
        let mut node = node.clone();
        let mut views = Vec::new();
        let mut inputs = Vec::with_capacity(dynamic.len());
        for t in dynamic {
            if self.is_batchless(t) {
                inputs.push(t.to_string());
                continue;
            }
            let onnx = self.onnx_shape(t).unwrap_or_default();
            let view = format!("{t}#batchless");
            let target_shape = onnx.iter().map(|&d| d as i64).collect();
            views.push((format!("{t}/batchless"), Op::Reshape { target_shape }, t.to_string(), view.clone()));
            self.batchless.borrow_mut().insert(view.clone(), onnx);
            for input in node.input.iter_mut().filter(|i| *i == *t) {
                *input = view.clone();
            }
            inputs.push(view);
        }
        let rank = dynamic.first().and_then(|t| self.onnx_shape(t)).map_or(0, |s| s.len()) as i64;
        let op = node.op_type.clone();
        // A lookup in a constant table: its axis is the table's, not the ids'.
        let table_lookup = op == "Gather" && node.input.first().is_some_and(|t| self.value(t).is_some());
        let mut has_axis = false;
        for attr in &mut node.attribute {
            match attr.name.as_str() {
                "perm" => attr.ints = std::iter::once(0).chain(attr.ints.iter().map(|p| p.saturating_add(1))).collect(),
                "axis" if !table_lookup => {
                    has_axis = true;
                    if attr.i >= 0 {
                        attr.i = attr.i.saturating_add(1);
                    }
                }
                "axes" => attr.ints.iter_mut().filter(|a| **a >= 0).for_each(|a| *a = a.saturating_add(1)),
                _ => {}
            }
        }
        // Defaults that count from the front: a gather's and a split's axis 0, a softmax's 1 before opset 13, a
        // transpose's reversal.
        let default_axis = match op.as_str() {
            "Gather" if !table_lookup => Some(1),
            "Split" => Some(1),
            "Softmax" | "LogSoftmax" if self.opset < 13 => Some(2),
            _ => None,
        };
        if let (false, Some(axis)) = (has_axis, default_axis) {
            node.attribute.push(tract_onnx::pb::AttributeProto {
                name: "axis".into(),
                i: axis,
                r#type: tract_onnx::pb::attribute_proto::AttributeType::Int as i32,
                ..Default::default()
            });
        }
        if op == "Transpose" && !node.attribute.iter().any(|a| a.name == "perm") {
            node.attribute.push(tract_onnx::pb::AttributeProto {
                name: "perm".into(),
                ints: std::iter::once(0).chain((1..=rank).rev()).collect(),
                r#type: tract_onnx::pb::attribute_proto::AttributeType::Ints as i32,
                ..Default::default()
            });
        }
        (node, inputs, views)
    }

    fn consumers(&self, tensor: &str) -> usize {
        self.consumers.get(tensor).copied().unwrap_or(0)
    }

    /// The node producing `tensor` if it is an `op` node and `tensor` has exactly `readers` readers.
    fn produced_by(&self, tensor: &str, op: &str, readers: usize) -> Option<usize> {
        let &n = self.producer.get(tensor)?;
        (self.graph.node[n].op_type == op && self.consumers(tensor) == readers).then_some(n)
    }

    /// A binary node's operands as (the tensor, the constant), when exactly one of the two is constant.
    fn tensor_and_constant<'n>(&self, node: &'n NodeProto) -> Option<(&'n String, &'n String)> {
        let [a, b] = node.input.as_slice() else { return None };
        match (self.value(a).is_some(), self.value(b).is_some()) {
            (false, true) => Some((a, b)),
            (true, false) => Some((b, a)),
            _ => None,
        }
    }

    /// The axes a reduction node reduces: its `axes` attribute or, since opset 18, its second input (constant);
    /// empty when it names none.
    fn reduction_axes(&self, node: &NodeProto) -> std::result::Result<Vec<i64>, String> {
        Ok(match node.get_attr_opt_vec::<i64>("axes").map_err(|e| format!("{e:#}"))? {
            Some(axes) => axes,
            None => match node.input.get(1).filter(|a| !a.is_empty()) {
                Some(a) => ints(&*self.value(a).ok_or("the axes are not constant")?).map_err(|e| format!("{e:#}"))?,
                None => Vec::new(),
            },
        })
    }

    fn run(self, default_name: &str, allow_unsupported: bool) -> Result<Network> {
        let gates = self.gate_patterns();
        let mut built = Built::new(&self.input_name);
        let mut unmapped: Vec<String> = Vec::new();

        for (index, node) in self.graph.node.iter().enumerate() {
            let outputs: Vec<&String> = node.output.iter().filter(|s| !s.is_empty()).collect();
            if outputs.iter().all(|o| self.value(o).is_some()) || gates.absorbed.contains(&index) {
                continue;
            }
            let label = if node.name.is_empty() { outputs.first().map_or("", |s| s.as_str()) } else { &node.name };
            let base_name = if label.is_empty() { format!("{}_{index}", node.op_type) } else { label.to_string() };
            let gate = gates.gated.get(&index);
            let shuffle = gates.shuffles.get(&index);
            let norm = gates.norms.get(&index);
            let dynamic: Vec<&String> = match (gate, shuffle, norm) {
                (Some((x, _, _)), _, _) | (None, Some((x, _)), _) | (None, None, Some((x, _))) => vec![x],
                (None, None, None) => node.input.iter().filter(|s| !s.is_empty() && self.value(s).is_none()).collect(),
            };
            // With a batch of 1, a node on tensors whose first axis is not the batch, or that moves it, maps with
            // their whole ONNX shapes per sample ([`Importer::relayout`]); a pattern keeps its input's layout.
            let pattern = gate.is_some() || shuffle.is_some() || norm.is_some();
            let batchless_in = dynamic.iter().any(|t| self.is_batchless(t));
            let relaid = self.batch == 1
                && !pattern
                && !dynamic.is_empty()
                && (batchless_in || (dynamic.len() == 1 && self.moves_batch(node, dynamic[0])));
            // Axes given as inputs (Slice's, Pad's, a reduction's since opset 18) count with the batch first:
            // on a batch-less tensor they would name the wrong axes.
            let axes_as_inputs = matches!(node.op_type.as_str(), "Slice" | "Pad")
                || (node.op_type.starts_with("Reduce") && node.input.len() > 1);
            let relaid_node;
            let (node, dynamic_names): (&NodeProto, Vec<String>) = if relaid {
                let (relaid_to, inputs, views) = self.relayout(node, &dynamic);
                for (name, op, from, view) in views {
                    // Viewed so before (its batch moved back, or another reader): the same view.
                    if built.source.contains_key(&view) {
                        continue;
                    }
                    let Some(from) = built.source.get(&from).cloned() else {
                        return Err(self.error(format!(
                            "node '{base_name}' ({}) reads '{from}', which no node produces",
                            node.op_type
                        )));
                    };
                    built.add(name, op, vec![from], &view);
                }
                relaid_node = relaid_to;
                (&relaid_node, inputs)
            } else {
                (node, dynamic.iter().map(|t| t.to_string()).collect())
            };
            if relaid || (pattern && batchless_in) {
                for o in &outputs {
                    if let Some(onnx) = self.onnx_shape(o) {
                        self.batchless.borrow_mut().insert(o.to_string(), onnx);
                    }
                }
            }
            let dynamic: Vec<&String> = dynamic_names.iter().collect();
            let mut sources = Vec::with_capacity(dynamic.len());
            for t in &dynamic {
                match built.source.get(t.as_str()) {
                    Some(s) => sources.push(s.clone()),
                    None => {
                        return Err(self.error(format!(
                            "node '{base_name}' ({}) reads '{t}', which no node produces",
                            node.op_type
                        )))
                    }
                }
            }
            let mapping = match (gate, shuffle, norm) {
                _ if relaid && axes_as_inputs => {
                    Err("not supported on a tensor whose first axis is not the batch (its axes are inputs)".into())
                }
                (Some((x, activation, reads)), _, _) => Ok(self.activation_mapping(x, *activation, *reads, &built)),
                (None, Some((_, groups)), _) => Ok(Mapping::Layer(Op::ChannelShuffle { groups: *groups })),
                (None, None, Some((_, op))) => Ok(Mapping::Layer(op.clone())),
                (None, None, None) => self.map_node(node, &dynamic, &built),
            };
            match mapping {
                Ok(Mapping::Layer(op)) => {
                    built.add(base_name.clone(), op, sources, outputs[0]);
                }
                Ok(Mapping::Chain(ops)) => {
                    let (count, mut input) = (ops.len(), sources.clone());
                    for (k, op) in ops.into_iter().enumerate() {
                        // The intermediate tensors have no ONNX name (no shape of tract's to check them against).
                        let (name, tensor) = if k + 1 == count {
                            (base_name.clone(), outputs[0].clone())
                        } else {
                            (format!("{base_name}/step{k}"), format!("{}#step{k}", outputs[0]))
                        };
                        input = vec![built.add(name, op, input, &tensor)];
                    }
                }
                Ok(Mapping::Layers(ops)) => {
                    for (k, (op, out)) in ops.into_iter().zip(&outputs).enumerate() {
                        built.add(format!("{base_name}/out{k}"), op, sources.clone(), out);
                    }
                }
                Ok(Mapping::GlobalPool(op)) => {
                    let name = built.add(base_name.clone(), op, sources, outputs[0]);
                    if self.needs_spatial_dims(outputs[0]) {
                        let channels = self.shape(outputs[0]).map_or(0, |s| s[1]) as i64;
                        let keep = Op::Reshape { target_shape: vec![channels, 1, 1] };
                        built.add(format!("{name}/keepdims"), keep, vec![name], outputs[0]);
                    }
                }
                Ok(Mapping::Alias(input)) => {
                    let s = built.source[input.as_str()].clone();
                    built.source.insert(outputs[0].clone(), s);
                }
                Ok(Mapping::FuseActivation(input, activation)) => {
                    let i = built.layer_of(&input).expect("fusion targets a layer");
                    match &mut built.layers[i].op {
                        Op::Conv2d(c) => c.activation = activation,
                        Op::DepthwiseConv2d(c) => c.activation = activation,
                        Op::Dense(d) => d.activation = activation,
                        _ => unreachable!("activation_mapping only fuses into conv, depthwise and dense layers"),
                    }
                    built.retarget(i, outputs[0]);
                }
                Ok(Mapping::FuseBias(input)) => {
                    let i = built.layer_of(&input).expect("fusion targets a layer");
                    match &mut built.layers[i].op {
                        Op::Dense(d) => d.use_bias = true,
                        Op::MatMul { use_bias, .. } => *use_bias = true,
                        Op::Conv2d(c) => c.use_bias = true,
                        Op::DepthwiseConv2d(c) => c.use_bias = true,
                        _ => {}
                    }
                    built.retarget(i, outputs[0]);
                }
                Err(reason) => {
                    unmapped.push(format!("'{base_name}' ({}): {reason}", node.op_type));
                    if sources.is_empty() {
                        return Err(self.error(format!(
                            "node '{base_name}' ({}) takes no input from the network and cannot be folded to a \
                             constant",
                            node.op_type
                        )));
                    }
                    for (k, out) in outputs.iter().enumerate() {
                        let shape = self.shape(out).ok_or_else(|| {
                            self.error(format!(
                                "cannot infer the output shape of node '{base_name}' ({}){}",
                                node.op_type,
                                self.analysis_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
                            ))
                        })?;
                        let Some(output_shape) = shape.get(1..) else {
                            return Err(self.error(format!(
                                "node '{base_name}' ({}) has a scalar (rank-0) output where a layer needs [batch, ...]",
                                node.op_type
                            )));
                        };
                        let op = Op::Unsupported {
                            op_type: node.op_type.clone(),
                            output_shape: Shape::from_slice(output_shape),
                        };
                        let name = if k == 0 { base_name.clone() } else { format!("{base_name}/out{k}") };
                        built.add(name, op, sources.clone(), out);
                    }
                }
            }
            // A batch-less output whose first axis is 1 again (`view(batch, heads, ...)`): batch first from here,
            // through a free reshape that drops the unit axis.
            for o in &outputs {
                let onnx = match self.batchless.borrow().get(o.as_str()) {
                    Some(onnx) if onnx.len() >= 2 && onnx[0] == 1 => onnx.clone(),
                    _ => continue,
                };
                let Some(from) = built.source.get(o.as_str()).cloned() else { continue };
                let view = format!("{o}#batchless");
                self.batchless.borrow_mut().insert(view.clone(), onnx.clone());
                if let Some(i) = built.layer_of(o).filter(|&i| built.expected[i] == **o) {
                    built.retarget(i, &view);
                }
                self.batchless.borrow_mut().remove(o.as_str());
                let target_shape = onnx[1..].iter().map(|&d| d as i64).collect();
                built.add(format!("{base_name}/batch_first"), Op::Reshape { target_shape }, vec![from], o);
            }
        }
        if !unmapped.is_empty() && !allow_unsupported {
            return Err(self.error(format!(
                "{} node(s) perfmodel cannot map: {}; rerun with --allow-unsupported to keep them as \
                 'unsupported' layers (reported as uncovered by estimates)",
                unmapped.len(),
                unmapped.join("; ")
            )));
        }
        if built.layers.is_empty() {
            return Err(self.error("the graph has no operation on its input".into()));
        }
        // Exporters name every graph alike (PyTorch `main_graph`, older ones `torch-jit-export`, tf2onnx
        // `tf2onnx`): such a network is named after its file, so a table of several tells them apart.
        let generic = ["main_graph", "torch-jit-export", "torch_jit", "tf2onnx", "graph"];
        let name = if self.graph.name.trim().is_empty() || generic.contains(&self.graph.name.trim()) {
            default_name.to_string()
        } else {
            self.graph.name.clone()
        };
        let Built { layers, expected, .. } = built;
        let network = Network { name, batch_size: self.batch, input_shape: self.input_shape.clone(), layers };
        let analysis = network.analyze().map_err(|e| self.error(format!("imported network is invalid: {e}")))?;
        for (i, tensor) in expected.iter().enumerate() {
            let ours = &analysis.output_shapes[i];
            if let Some(mut theirs) = self.shape(tensor) {
                if matches!(network.layers[i].op, Op::GlobalAvgPool2d | Op::GlobalMaxPool2d) {
                    theirs.truncate(2); // ONNX keeps the pooled 1x1 spatial dims, perfmodel does not
                }
                if theirs.get(1..) != Some(ours.as_slice()) {
                    return Err(self.error(format!(
                        "layer '{}' ({}): perfmodel infers output shape {ours:?} but tract infers {:?} for '{tensor}'",
                        network.layers[i].name,
                        network.layers[i].op.layer_type(),
                        theirs.get(1..).unwrap_or_default()
                    )));
                }
            }
        }
        Ok(network)
    }

    /// Whether any consumer of a global pooling output needs it as `[C, 1, 1]` rather than `[C]`.
    fn needs_spatial_dims(&self, tensor: &str) -> bool {
        let reads = |n: &&NodeProto| n.input.iter().any(|i| i == tensor);
        // Nodes folded to constants (e.g. `Shape`) only look at the shape.
        let folded = |n: &&NodeProto| n.output.iter().filter(|o| !o.is_empty()).all(|o| self.value(o).is_some());
        self.graph.node.iter().filter(|n| reads(n) && !folded(n)).any(|n| {
            !matches!(n.op_type.as_str(), "Flatten" | "Reshape" | "Squeeze")
                || n.output.first().and_then(|o| self.shape(o)).is_some_and(|s| s.len() != 2)
        })
    }

    /// `x * Sigmoid(x)`, `x * HardSigmoid(x)` (alpha 1/6) and the GELU formula: the inner nodes are absorbed, the
    /// final Mul becomes the activation.
    fn gate_patterns(&self) -> Gates {
        let mut gates = Gates::default();
        for (index, node) in self.graph.node.iter().enumerate() {
            if let Some((x, groups, first, last)) = self.channel_shuffle_at(node) {
                gates.absorbed.extend([first, index]);
                gates.shuffles.insert(last, (x, groups));
            }
            if node.op_type != "Mul" || node.input.len() != 2 {
                continue;
            }
            for (x, g) in [(0, 1), (1, 0)] {
                let (x, g) = (&node.input[x], &node.input[g]);
                let Some(&gate) = self.producer.get(g.as_str()) else { continue };
                let gate_node = &self.graph.node[gate];
                // The gate's input and the nodes it is made of.
                let (activation, input, mut inner) = match gate_node.op_type.as_str() {
                    "Sigmoid" => (Activation::Swish, gate_node.input.first().cloned(), vec![]),
                    "HardSigmoid" if hard_sigmoid_is_hard_swish_gate(gate_node) => {
                        (Activation::HardSwish, gate_node.input.first().cloned(), vec![])
                    }
                    _ => match self.arithmetic_hard_sigmoid_at(gate) {
                        Some((input, inner)) => (Activation::HardSwish, Some(input), inner),
                        None => continue,
                    },
                };
                if input.as_ref() == Some(x) && self.consumers(g) == 1 && self.value(x).is_none() {
                    inner.push(gate);
                    let reads = self.reads_of(x, inner.iter().copied().chain([index]));
                    gates.absorbed.extend(inner);
                    gates.gated.insert(index, (x.clone(), activation, reads));
                    break;
                }
            }
            if let Some((x, parts)) = self.gelu_ending_at(node).or_else(|| self.tanh_gelu_ending_at(node)) {
                let reads = self.reads_of(&x, parts.iter().copied().chain([index]));
                gates.absorbed.extend(parts);
                gates.gated.insert(index, (x, Activation::Gelu, reads));
            }
        }
        for index in 0..self.graph.node.len() {
            let norm = self.layer_norm_ending_at(index).or_else(|| self.moments_layer_norm_ending_at(index));
            if let Some((x, norm, parts)) = norm {
                gates.absorbed.extend(parts);
                gates.norms.insert(index, (x, norm));
                continue;
            }
            if gates.absorbed.contains(&index) {
                continue;
            }
            // A hard sigmoid written out (that no hard swish took), a batch norm written as a per-channel
            // product and sum: one layer each.
            let written_out = match self.arithmetic_hard_sigmoid_at(index) {
                Some((x, parts)) => Some((x, Op::Activation(Activation::HardSigmoid), parts)),
                None => self.per_channel_affine_at(index).map(|(x, parts)| (x, Op::BatchNorm, parts)),
            };
            if let Some((x, op, parts)) = written_out {
                gates.absorbed.extend(parts);
                gates.norms.insert(index, (x, op));
            }
        }
        gates
    }

    /// How many inputs of `nodes` read `x`: a pattern's reads of the tensor it gates, which are then all of its
    /// readers when the activation fuses into the layer producing it.
    fn reads_of(&self, x: &str, nodes: impl Iterator<Item = usize>) -> usize {
        nodes.map(|n| self.graph.node[n].input.iter().filter(|i| *i == x).count()).sum()
    }

    /// A hard sigmoid written out, as tf2onnx writes Keras': `Mul(Clip(Add(x, 3), 0, 6), 1/6)` (or a `Div` by 6),
    /// `last` its final node: the input `x` and the inner nodes (the Add and the Clip).
    fn arithmetic_hard_sigmoid_at(&self, last: usize) -> Option<(String, Vec<usize>)> {
        let node = &self.graph.node[last];
        let scalar = |t: &str| self.value(t).and_then(|v| scalar_f32(&v).ok());
        let [a, b] = node.input.as_slice() else { return None };
        let sixth = |t: &str| scalar(t).is_some_and(|v| close(v, 1.0 / 6.0));
        let clipped = match node.op_type.as_str() {
            "Mul" if sixth(b) => a,
            "Mul" if sixth(a) => b,
            "Div" if scalar(b) == Some(6.0) => a,
            _ => return None,
        };
        let clip = self.produced_by(clipped, "Clip", 1)?;
        if self.clip_bounds(&self.graph.node[clip]).ok()? != (Some(0.0), Some(6.0)) {
            return None;
        }
        let add = self.produced_by(self.graph.node[clip].input.first()?, "Add", 1)?;
        let [p, q] = self.graph.node[add].input.as_slice() else { return None };
        let x = match (scalar(p), scalar(q)) {
            (_, Some(3.0)) => p,
            (Some(3.0), _) => q,
            _ => return None,
        };
        self.value(x).is_none().then(|| (x.clone(), vec![add, clip]))
    }

    /// A batch norm as tf2onnx leaves it after a depthwise convolution or one with a bias: `Add(Mul(x, scale),
    /// shift)` of an `[N, C, H, W]` tensor and constants of one value per channel (`[1, C, 1, 1]`). `last` is the
    /// Add: the tensor and the inner node (the Mul).
    fn per_channel_affine_at(&self, last: usize) -> Option<(String, Vec<usize>)> {
        let node = &self.graph.node[last];
        if node.op_type != "Add" {
            return None;
        }
        let (m, shift) = self.tensor_and_constant(node)?;
        let mul = self.produced_by(m, "Mul", 1)?;
        let (x, scale) = self.tensor_and_constant(&self.graph.node[mul])?;
        let shape = self.shape(x)?;
        let [_, channels, _, _] = shape.as_slice() else { return None };
        let per_channel =
            |c: &str| self.value(c).is_some_and(|v| matches!(v.shape(), [c, 1, 1] | [1, c, 1, 1] if c == channels));
        (per_channel(shift) && per_channel(scale)).then(|| (x.clone(), vec![mul]))
    }

    /// Layer normalisation as exporters write it before opset 17: `Add(Mul(Div(Sub(x, ReduceMean(x)),
    /// Sqrt(Add(ReduceMean(Pow(Sub(..), 2)), epsilon))), scale), bias)`, both means over the same trailing axes,
    /// the scale's Mul and the bias's Add each optional. `last` is the index of its final node: the normalised
    /// tensor `x`, the layer, and the inner nodes to absorb.
    fn layer_norm_ending_at(&self, last: usize) -> Option<(String, Op, Vec<usize>)> {
        let from = |t: &str, op: &str, readers: usize| self.produced_by(t, op, readers);
        let (mut n, mut parts) = (last, Vec::new());
        // The bias's Add, then the scale's Mul, each optional.
        for op in ["Add", "Mul"] {
            let node = &self.graph.node[n];
            if node.op_type == op {
                let (t, _) = self.tensor_and_constant(node)?;
                if n != last {
                    parts.push(n);
                }
                n = *self.producer.get(t.as_str())?;
                if self.consumers(t) != 1 {
                    return None;
                }
            }
        }
        let div = &self.graph.node[n];
        if div.op_type != "Div" || div.input.len() != 2 {
            return None;
        }
        if n != last {
            parts.push(n);
        }
        let (centred, root) = (&div.input[0], &div.input[1]);
        let sub = from(centred, "Sub", 2)?;
        let sqrt = from(root, "Sqrt", 1)?;
        let add_eps = from(self.graph.node[sqrt].input.first()?, "Add", 1)?;
        let add_node = &self.graph.node[add_eps];
        let (variance, eps_tensor) = self.tensor_and_constant(add_node)?;
        let epsilon = scalar_f32(&*self.value(eps_tensor)?).ok()?;
        let var_mean = from(variance, "ReduceMean", 1)?;
        let pow = from(self.graph.node[var_mean].input.first()?, "Pow", 1)?;
        let pow_node = &self.graph.node[pow];
        let two = scalar_f32(&*self.value(pow_node.input.get(1)?)?).ok()?;
        if pow_node.input.first()? != centred || two != 2.0 {
            return None;
        }
        let sub_node = &self.graph.node[sub];
        let (x, mean) = (sub_node.input.first()?, sub_node.input.get(1)?);
        let mean_node = from(mean, "ReduceMean", 1)?;
        if self.graph.node[mean_node].input.first()? != x || self.value(x).is_some() {
            return None;
        }
        let rank = self.shape(x)?.len() as i64;
        let axes = |n: usize| -> Option<Vec<i64>> {
            let axes = self.reduction_axes(&self.graph.node[n]).ok()?;
            let mut axes: Vec<i64> = axes.iter().map(|&a| if a < 0 { a + rank } else { a }).collect();
            axes.sort_unstable();
            Some(axes)
        };
        // The same axes, the last ones, never the batch.
        let trailing = axes(mean_node)?;
        if trailing != axes(var_mean)? || trailing.first().is_none_or(|&a| a <= 0) {
            return None;
        }
        if !trailing.iter().copied().eq(trailing[0]..rank) {
            return None;
        }
        let epsilon = shortest_decimal(epsilon);
        parts.extend([sub, sqrt, add_eps, var_mean, pow, mean_node]);
        Some((x.clone(), Op::LayerNorm { axis: trailing[0] - rank, epsilon }, parts))
    }

    /// Layer normalisation as tf2onnx writes Keras' (TensorFlow's `moments`): `Add(Mul(x, s), Add(Mul(Neg(m), s),
    /// beta))` with `s = Mul(Reciprocal(Sqrt(Add(v, epsilon))), gamma)`, `v = GlobalAveragePool(Mul(d, d))`,
    /// `d = Sub(x, m)` and `m = GlobalAveragePool(x)`, a global average pool of a sequence `[batch, tokens, ...]`
    /// averaging the axes after the tokens. `last` is the final Add: the normalised tensor, the layer, the inner
    /// nodes to absorb.
    fn moments_layer_norm_ending_at(&self, last: usize) -> Option<(String, Op, Vec<usize>)> {
        let node = |n: usize| &self.graph.node[n];
        let from = |t: &str, op: &str, readers: usize| self.produced_by(t, op, readers);
        // The operands of a binary node in both orders.
        let orders = |n: usize| -> Option<[(String, String); 2]> {
            let [a, b] = node(n).input.as_slice() else { return None };
            Some([(a.clone(), b.clone()), (b.clone(), a.clone())])
        };
        let end = node(last);
        if end.op_type != "Add" {
            return None;
        }
        for (scaled, shifted) in orders(last)? {
            let Some(mul_x) = from(&scaled, "Mul", 1) else { continue };
            let Some(add_beta) = from(&shifted, "Add", 1) else { continue };
            // beta + (-m) · s
            let Some((p, _beta)) = self.tensor_and_constant(node(add_beta)) else { continue };
            let Some(mul_m) = from(p, "Mul", 1) else { continue };
            for (x, s_tensor) in orders(mul_x)? {
                let Some((neg_m, s_other)) = orders(mul_m)?.into_iter().find(|(n, _)| from(n, "Neg", 1).is_some())
                else {
                    continue;
                };
                if s_other != s_tensor || self.value(&x).is_some() {
                    continue;
                }
                let neg = from(&neg_m, "Neg", 1)?;
                let m = node(neg).input.first()?.clone();
                let mean = from(&m, "GlobalAveragePool", 2)?;
                if node(mean).input.first() != Some(&x) {
                    continue;
                }
                // s = rstd · gamma, read by both products
                let s = from(&s_tensor, "Mul", 2)?;
                let (rstd, _gamma) = self.tensor_and_constant(node(s))?;
                let reciprocal = from(rstd, "Reciprocal", 1)?;
                let sqrt = from(node(reciprocal).input.first()?, "Sqrt", 1)?;
                let add_eps = from(node(sqrt).input.first()?, "Add", 1)?;
                let (v, eps) = self.tensor_and_constant(node(add_eps))?;
                let epsilon = scalar_f32(&*self.value(eps)?).ok()?;
                let variance = from(v, "GlobalAveragePool", 1)?;
                let square = from(node(variance).input.first()?, "Mul", 1)?;
                let [d1, d2] = node(square).input.as_slice() else { return None };
                if d1 != d2 {
                    return None;
                }
                let sub = from(d1, "Sub", 2)?;
                if node(sub).input.as_slice() != [x.clone(), m.clone()] {
                    return None;
                }
                let rank = self.shape(&x)?.len() as i64;
                if rank < 3 {
                    return None;
                }
                let parts =
                    vec![mul_x, add_beta, mul_m, neg, mean, s, reciprocal, sqrt, add_eps, variance, square, sub];
                let epsilon = shortest_decimal(epsilon);
                return Some((x, Op::LayerNorm { axis: 2 - rank, epsilon }, parts));
            }
        }
        None
    }

    /// `Reshape([N, C, H, W] → [N, g, C/g, H, W]) → Transpose(0, 2, 1, 3, 4) → Reshape(→ [N, C, H, W])` (how
    /// PyTorch exports ShuffleNet's channel shuffle), `transpose` its middle node: the shuffled tensor, the
    /// groups, the first Reshape's and the last Reshape's node indices.
    fn channel_shuffle_at(&self, transpose: &NodeProto) -> Option<(String, usize, usize, usize)> {
        if transpose.op_type != "Transpose" || transpose.get_attr_opt_vec::<i64>("perm").ok()?? != [0, 2, 1, 3, 4] {
            return None;
        }
        let grouped = transpose.input.first()?;
        let first = *self.producer.get(grouped.as_str())?;
        let reshape = &self.graph.node[first];
        let x = reshape.input.first()?;
        let (shape, split) = (self.shape(x)?, self.shape(grouped)?);
        let channels = shape.get(1).copied()?;
        if reshape.op_type != "Reshape" || self.consumers(grouped) != 1 || shape.len() != 4 || split.len() != 5 {
            return None;
        }
        let groups = split[1];
        if groups == 0
            || split[1].checked_mul(split[2]) != Some(channels)
            || split[0] != shape[0]
            || split[3..] != shape[2..]
        {
            return None;
        }
        let out = transpose.output.first()?;
        if self.consumers(out) != 1 {
            return None;
        }
        let last = self.graph.node.iter().position(|n| n.input.first() == Some(out))?;
        let back = &self.graph.node[last];
        let back_shape = back.output.first().and_then(|o| self.shape(o))?;
        (back.op_type == "Reshape" && back_shape == shape).then(|| (x.clone(), groups, first, last))
    }

    /// `0.5 · x · (1 + erf(x / √2))` (how PyTorch exports GELU, and perfmodel), its products in any order and
    /// grouping, the division by √2 also as a product by 1/√2 (tf2onnx): the gated tensor `x` and the inner nodes
    /// to absorb.
    fn gelu_ending_at(&self, last: &NodeProto) -> Option<(String, Vec<usize>)> {
        let (pairs, parts) = self.half_product_ending_at(last)?;
        for (x, gate) in pairs {
            let Some((add, inner)) = self.one_plus(&gate, "Erf") else { continue };
            let Some(q) = self.graph.node[inner].input.first() else { continue };
            let scaled = match self.produced_by(q, "Div", 1) {
                Some(div) => {
                    let node = &self.graph.node[div];
                    let root_two = node.input.get(1).and_then(|c| self.value(c)).and_then(|c| scalar_f32(&c).ok());
                    (node.input.first() == Some(&x) && root_two.is_some_and(|v| close(v, std::f32::consts::SQRT_2)))
                        .then(|| vec![div])
                }
                None => self.product_factors(q, 1).and_then(|(c, factors, nodes)| {
                    (close(c, std::f32::consts::FRAC_1_SQRT_2) && factors == [x.clone()]).then_some(nodes)
                }),
            };
            if let Some(scaled) = scaled {
                let mut parts = parts;
                parts.extend([add, inner]);
                parts.extend(scaled);
                return Some((x, parts));
            }
        }
        None
    }

    /// `last` as `0.5 · a · b` (a `Mul` whose product has two tensor factors and constants making 0.5): both
    /// orders of the two factors, and the product's nodes but `last`.
    #[allow(clippy::type_complexity)]
    fn half_product_ending_at(&self, last: &NodeProto) -> Option<([(String, String); 2], Vec<usize>)> {
        if last.op_type != "Mul" {
            return None;
        }
        let out = last.output.first()?;
        let last_index = self.producer.get(out.as_str()).copied()?;
        let (half, factors, mut parts) = self.product_factors(out, self.consumers(out))?;
        parts.retain(|&n| n != last_index);
        let [a, b] = factors.as_slice() else { return None };
        if !close(half, 0.5) || self.value(a).is_some() || self.value(b).is_some() {
            return None;
        }
        Some(([(a.clone(), b.clone()), (b.clone(), a.clone())], parts))
    }

    /// `gate` as `1 + op(...)` (an `Add` of the constant 1 and an `op` node, each read once): the Add's and the
    /// op's node indices.
    fn one_plus(&self, gate: &str, op: &str) -> Option<(usize, usize)> {
        let add = self.produced_by(gate, "Add", 1)?;
        let [a, b] = self.graph.node[add].input.as_slice() else { return None };
        let is_one = |t: &str| self.value(t).and_then(|v| scalar_f32(&v).ok()) == Some(1.0);
        let other = match (is_one(a), is_one(b)) {
            (true, false) => b,
            (false, true) => a,
            _ => return None,
        };
        let inner = self.produced_by(other, op, 1)?;
        Some((add, inner))
    }

    /// The factors of the product `tensor` is: the node producing it when that is a `Mul` (or a `Pow` by a
    /// constant whole exponent) that only `readers` nodes read, recursively through `Mul`s read once; the
    /// product of the constant factors, the other factors' tensors, and the nodes passed through.
    fn product_factors(&self, tensor: &str, readers: usize) -> Option<(f32, Vec<String>, Vec<usize>)> {
        let (mut constant, mut factors, mut nodes) = (1.0f32, Vec::new(), Vec::new());
        let mut pending = vec![(tensor.to_string(), readers)];
        while let Some((t, readers)) = pending.pop() {
            if let Some(v) = self.value(&t) {
                constant *= scalar_f32(&v).ok()?;
                continue;
            }
            let node = self.produced_by(&t, "Mul", readers).or_else(|| self.produced_by(&t, "Pow", readers));
            let Some(n) = node.filter(|_| nodes.len() < 8) else {
                factors.push(t);
                continue;
            };
            let node = &self.graph.node[n];
            nodes.push(n);
            match node.op_type.as_str() {
                "Pow" => {
                    let exponent = scalar_f32(&*self.value(node.input.get(1)?)?).ok()?;
                    if !(1.0..=4.0).contains(&exponent) || exponent.fract() != 0.0 {
                        return None;
                    }
                    factors.extend(std::iter::repeat_n(node.input.first()?.clone(), exponent as usize));
                }
                _ => pending.extend(node.input.iter().map(|i| (i.clone(), 1))),
            }
        }
        Some((constant, factors, nodes))
    }

    /// GELU's tanh approximation, `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, as the TorchScript
    /// exporter writes `nn.GELU(approximate='tanh')` and tf2onnx Keras' `gelu(approximate=True)`: its products in
    /// any order and grouping, the cube as `x·x·x` or `Pow(x, 3)`. The gated tensor `x` and the inner nodes to
    /// absorb.
    fn tanh_gelu_ending_at(&self, last: &NodeProto) -> Option<(String, Vec<usize>)> {
        let (pairs, parts) = self.half_product_ending_at(last)?;
        for (x, gate) in pairs {
            let Some((add, tanh)) = self.one_plus(&gate, "Tanh") else { continue };
            // √(2/π) · (x + 0.044715 · x³)
            let Some(u) = self.graph.node[tanh].input.first() else { continue };
            let Some((scale, inner, scale_nodes)) = self.product_factors(u, 1) else { continue };
            let ([sum], true) = (inner.as_slice(), close(scale, (2.0 / std::f32::consts::PI).sqrt())) else {
                continue;
            };
            let Some(sum_add) = self.produced_by(sum, "Add", 1) else { continue };
            let [p, q] = self.graph.node[sum_add].input.as_slice() else { continue };
            let cube_term = match (*p == x, *q == x) {
                (true, false) => q,
                (false, true) => p,
                _ => continue,
            };
            let Some((coefficient, cube, cube_nodes)) = self.product_factors(cube_term, 1) else { continue };
            if close(coefficient, 0.044715) && cube.len() == 3 && cube.iter().all(|c| *c == x) {
                let mut parts = parts;
                parts.extend([add, tanh, sum_add]);
                parts.extend(scale_nodes);
                parts.extend(cube_nodes);
                return Some((x, parts));
            }
        }
        None
    }

    /// Fuse `activation` into the layer producing `x` when that is a conv, depthwise or dense layer without one,
    /// `x` is its output and nothing but the activation's `readers` nodes reads `x`; else an activation layer.
    fn activation_mapping(&self, x: &str, activation: Activation, readers: usize, built: &Built) -> Mapping {
        let fusable = built.layer_of(x).is_some_and(|i| {
            let linear = matches!(
                &built.layers[i].op,
                Op::Conv2d(Conv2d { activation: Activation::Linear, .. })
                    | Op::DepthwiseConv2d(DepthwiseConv2d { activation: Activation::Linear, .. })
                    | Op::Dense(Dense { activation: Activation::Linear, .. })
            );
            linear && built.expected[i] == x && self.consumers(x) == readers
        });
        if fusable {
            Mapping::FuseActivation(x.to_string(), activation)
        } else {
            Mapping::Layer(Op::Activation(activation))
        }
    }

    /// The shape perfmodel gives tensor `x` (batch excluded): tract's, except that global pooling yields `[C]`.
    fn our_shape(&self, x: &str, built: &Built) -> Option<Vec<usize>> {
        let tract = self.shape(x)?;
        match built.layer_of(x).map(|i| &built.layers[i].op) {
            Some(Op::GlobalAvgPool2d | Op::GlobalMaxPool2d) => tract.get(1).map(|&c| vec![c]),
            _ => tract.get(1..).map(<[usize]>::to_vec),
        }
    }

    fn is_bias_free_dense(&self, x: &str, built: &Built) -> bool {
        built.layer_of(x).is_some_and(|i| {
            matches!(
                built.layers[i].op,
                Op::Dense(Dense { use_bias: false, .. }) | Op::MatMul { units: Some(_), use_bias: false }
            ) && built.expected[i] == x
                && self.consumers(x) == 1
        })
    }

    /// Whether `x` is the only output of a convolution (plain or depthwise) with no bias and no activation, read
    /// only by the node at hand.
    fn is_bias_free_conv(&self, x: &str, built: &Built) -> bool {
        built.layer_of(x).is_some_and(|i| {
            let bias_free = match &built.layers[i].op {
                Op::Conv2d(c) => !c.use_bias && c.activation == Activation::Linear,
                Op::DepthwiseConv2d(c) => !c.use_bias && c.activation == Activation::Linear,
                _ => false,
            };
            bias_free && built.expected[i] == x && self.consumers(x) == 1
        })
    }

    /// An element-wise operation of the tensor `x` and one constant (an attention scale, a position embedding, a
    /// mask): the constant's shape without the batch, as it broadcasts over `x`.
    fn elementwise_constant(
        &self,
        node: &NodeProto,
        x: &str,
        in_shape: &[usize],
        out_shape: &[usize],
    ) -> std::result::Result<Mapping, String> {
        let operands: Vec<&String> = node.input.iter().filter(|s| !s.is_empty()).collect();
        let [first, second] = operands.as_slice() else {
            return Err("only an element-wise operation of one tensor and one constant is supported".into());
        };
        let function = match node.op_type.as_str() {
            "Add" | "Sum" => ElementwiseFn::Add,
            "Mul" => ElementwiseFn::Mul,
            "Sub" => ElementwiseFn::Sub,
            "Div" => ElementwiseFn::Div,
            other => return Err(format!("no element-wise function for {other}")),
        };
        let constant = if first.as_str() == x { second } else { first };
        if first.as_str() != x && matches!(function, ElementwiseFn::Sub | ElementwiseFn::Div) {
            return Err("a constant minus or divided by a tensor is not supported".into());
        }
        let value = self.value(constant).ok_or("the other operand is not constant")?;
        if out_shape != in_shape {
            return Err(format!("the constant {:?} enlarges the tensor {in_shape:?} to {out_shape:?}", value.shape()));
        }
        // Aligned from the right with [batch, ...]: an axis over the batch must be 1 and is dropped.
        let mut shape = value.shape().to_vec();
        if shape.len() == in_shape.len() {
            if shape[0] != 1 {
                return Err(format!("a constant of shape {shape:?} varies over the batch"));
            }
            shape.remove(0);
        }
        if shape.len() > in_shape.len() {
            return Err(format!("a constant of shape {:?} has more axes than the tensor {in_shape:?}", value.shape()));
        }
        // Leading unit axes broadcast alike with or without them.
        while shape.first() == Some(&1) {
            shape.remove(0);
        }
        Ok(Mapping::Layer(Op::Elementwise { function, constant_shape: shape.into() }))
    }

    /// A tensor concatenated with constants along an axis after the batch (a ViT's class token before its patch
    /// tokens): what it costs is the tensor copied into a larger buffer, which is what a zero padding of that
    /// axis does. The axis is padded as the H of `[C, H, W]`: the axes before it merged into C, those after it
    /// into W, through free reshapes when the tensor is not already of that form.
    fn concat_with_constants(
        &self,
        node: &NodeProto,
        x: &str,
        dynamic: &[&String],
        in_shape: &[usize],
        out_shape: &[usize],
    ) -> std::result::Result<Mapping, String> {
        if dynamic.len() != 1 {
            return Err("concatenating constants with more than one tensor is not supported".into());
        }
        let rank = in_shape.len();
        let axis = node.get_attr::<i64>("axis").map_err(|e| format!("{e:#}"))?;
        let axis = if axis < 0 { axis + rank as i64 } else { axis };
        if axis <= 0 || axis as usize >= rank {
            return Err(format!("only a concatenation along an axis after the batch is supported (axis {axis})"));
        }
        let axis = axis as usize;
        let (mut before, mut after, mut seen) = (0, 0, false);
        for input in node.input.iter().filter(|i| !i.is_empty()) {
            if input == x {
                if seen {
                    return Err("the tensor is concatenated more than once".into());
                }
                seen = true;
                continue;
            }
            let value = self.value(input).ok_or("an operand is neither the tensor nor constant")?;
            // Aligned from the right with the tensor's shape (a batch-less tensor's is one axis longer).
            let shape = value.shape();
            let at = (axis + shape.len()).checked_sub(rank).ok_or("a constant has more axes than the tensor")?;
            let rows = shape.get(at).copied().unwrap_or(0);
            if seen {
                after += rows;
            } else {
                before += rows;
            }
        }
        if out_shape.get(axis) != Some(&(in_shape[axis] + before + after)) {
            return Err(format!("concatenating constants makes {out_shape:?} of {in_shape:?} along axis {axis}"));
        }
        let per_sample = &in_shape[1..];
        let a = axis - 1;
        let merged = [per_sample[..a].iter().product(), per_sample[a], per_sample[a + 1..].iter().product::<usize>()];
        let pad = Op::ZeroPadding2d { padding: [before, after, 0, 0] };
        if per_sample.len() == 3 && a == 1 {
            return Ok(Mapping::Layer(pad));
        }
        let shape = |dims: &[usize]| Op::Reshape { target_shape: dims.iter().map(|&d| d as i64).collect() };
        Ok(Mapping::Chain(vec![shape(&merged), pad, shape(&out_shape[1..])]))
    }

    fn map_node(&self, node: &NodeProto, dynamic: &[&String], built: &Built) -> std::result::Result<Mapping, String> {
        let x = dynamic.first().map(|s| s.as_str()).ok_or("no input from the network")?;
        let in_shape = self.shape(x).ok_or("tract could not infer its input shape")?;
        let out_shape =
            node.output.first().and_then(|o| self.shape(o)).ok_or("tract could not infer its output shape")?;
        if in_shape.is_empty() || out_shape.is_empty() {
            // Every tensor between layers has a batch dimension; a scalar is not a layer's input or output.
            return Err(format!(
                "a scalar (rank-0) tensor where a layer needs [batch, ...]: {in_shape:?} -> {out_shape:?}"
            ));
        }
        let single = || if dynamic.len() == 1 { Ok(()) } else { Err("expected exactly one non-constant input") };
        let attr_err = |e: TractError| format!("{e:#}");
        let act = |a: Activation| Ok(self.activation_mapping(x, a, 1, built));
        match node.op_type.as_str() {
            "Conv" => {
                single()?;
                if in_shape.len() != 4 {
                    return Err(format!("only 2-D convolutions are supported (input {in_shape:?})"));
                }
                let weight = node.input.get(1).and_then(|w| self.value(w)).ok_or("the weights are not constant")?;
                let &[filters, _, kh, kw] = weight.shape() else {
                    return Err(format!("the weights have shape {:?}, expected 4 dimensions", weight.shape()));
                };
                let kernel = [kh, kw];
                let strides = pair_attr(node, "strides").map_err(attr_err)?;
                let dilation = pair_attr(node, "dilations").map_err(attr_err)?;
                let groups = node.get_attr_opt::<i64>("group").map_err(attr_err)?.unwrap_or(1) as usize;
                let padding = self.padding(node, &in_shape, kernel, strides, dilation)?;
                let use_bias = node.input.get(2).is_some_and(|b| !b.is_empty());
                let channels = in_shape[1];
                if groups == channels && groups > 1 && filters % channels == 0 {
                    let mut c = DepthwiseConv2d::new(kernel);
                    c.depth_multiplier = filters / channels;
                    (c.strides, c.dilation, c.padding, c.use_bias) = (strides, dilation, padding, use_bias);
                    Ok(Mapping::Layer(Op::DepthwiseConv2d(c)))
                } else {
                    let mut c = Conv2d::new(filters, kernel);
                    (c.strides, c.dilation, c.groups, c.padding, c.use_bias) =
                        (strides, dilation, groups, padding, use_bias);
                    Ok(Mapping::Layer(Op::Conv2d(c)))
                }
            }
            // A product of two tensors (attention's queries by keys, weights by values).
            "MatMul" if dynamic.len() == 2 => {
                if in_shape.len() < 3 || out_shape.len() < 3 {
                    return Err(format!("a product of two tensors needs matrices (input {in_shape:?})"));
                }
                Ok(Mapping::Layer(Op::MatMul { units: None, use_bias: false }))
            }
            // A constant weight applied to every row of a sequence (`nn.Linear` on tokens); its bias, an Add
            // after it, is fused like a dense layer's.
            "MatMul" if in_shape.len() > 2 => {
                single()?;
                if node.input.first().map(|s| s.as_str()) != Some(x) {
                    return Err("the non-constant operand must be the first".into());
                }
                let weight = node.input.get(1).and_then(|w| self.value(w)).ok_or("the weight is not constant")?;
                let &[_, units] = weight.shape() else {
                    return Err(format!("only a 2-D constant weight is supported (shape {:?})", weight.shape()));
                };
                Ok(Mapping::Layer(Op::MatMul { units: Some(units), use_bias: false }))
            }
            // A linear layer on a sequence-first attention's rows (`[tokens, features]` with a batch of 1: a
            // batch-less tensor): the product of a constant weight, as on a sequence.
            "Gemm" if in_shape.len() > 2 => {
                single()?;
                let flag = |name: &str| node.get_attr_opt::<i64>(name).map_err(attr_err).map(|v| v.unwrap_or(0));
                if flag("transA")? != 0 {
                    return Err("transA = 1 is not supported".into());
                }
                if node.input.first().map(|s| s.as_str()) != Some(x) {
                    return Err("the non-constant operand must be the first".into());
                }
                for (name, default) in [("alpha", 1.0), ("beta", 1.0)] {
                    if node.get_attr_opt::<f32>(name).map_err(attr_err)?.unwrap_or(default) != 1.0 {
                        return Err(format!("only {name} = 1 is supported"));
                    }
                }
                let units = *out_shape.last().ok_or("no output shape")?;
                let bias = node.input.get(2).filter(|b| !b.is_empty());
                if let Some(b) = bias {
                    let b = self.value(b).ok_or("the bias is not constant")?;
                    if b.len() != units || b.shape().last() != Some(&units) {
                        return Err(format!("only a bias of one value per unit is supported (shape {:?})", b.shape()));
                    }
                }
                Ok(Mapping::Layer(Op::MatMul { units: Some(units), use_bias: bias.is_some() }))
            }
            "Gemm" | "MatMul" => {
                single()?;
                if in_shape.len() != 2 {
                    return Err(format!("only [batch, features] inputs are supported (input {in_shape:?})"));
                }
                let gemm = node.op_type == "Gemm";
                if gemm && node.get_attr_opt::<i64>("transA").map_err(attr_err)?.unwrap_or(0) != 0 {
                    return Err("transA = 1 is not supported".into());
                }
                if node.input.first().map(|s| s.as_str()) != Some(x) {
                    return Err("the non-constant operand must be the first".into());
                }
                let units = out_shape[1];
                let use_bias = gemm && node.input.get(2).is_some_and(|b| !b.is_empty());
                Ok(Mapping::Layer(Op::Dense(Dense { units, use_bias, activation: Activation::Linear })))
            }
            "MaxPool" | "AveragePool" => {
                single()?;
                if in_shape.len() != 4 {
                    return Err(format!("only 2-D pooling is supported (input {in_shape:?})"));
                }
                let kernel = pair_attr(node, "kernel_shape").map_err(attr_err)?;
                if pair_attr(node, "dilations").map_err(attr_err)? != [1, 1] {
                    return Err("dilated pooling is not supported".into());
                }
                let strides = pair_attr(node, "strides").map_err(attr_err)?;
                let mut padding = self.padding(node, &in_shape, kernel, strides, [1, 1])?;
                if node.get_attr_opt::<i64>("ceil_mode").map_err(attr_err)?.unwrap_or(0) != 0 {
                    padding = ceil_mode_padding(padding, &in_shape, kernel, strides);
                }
                let pool = Pool2d { pool_size: kernel, strides, padding };
                Ok(Mapping::Layer(if node.op_type == "MaxPool" { Op::MaxPool2d(pool) } else { Op::AvgPool2d(pool) }))
            }
            "GlobalAveragePool" | "GlobalMaxPool" if in_shape.len() == 4 => {
                single()?;
                Ok(Mapping::GlobalPool(if node.op_type == "GlobalMaxPool" {
                    Op::GlobalMaxPool2d
                } else {
                    Op::GlobalAvgPool2d
                }))
            }
            // A mean or max over H and W is global pooling (PyTorch's newer exporter writes
            // `adaptive_avg_pool2d(x, 1)` and `x.mean((2, 3))` so).
            "ReduceMean" | "ReduceMax" if in_shape.len() == 4 => {
                single()?;
                let axes = self.reduction_axes(node)?;
                let mut spatial: Vec<i64> = axes.iter().map(|&a| if a < 0 { a + 4 } else { a }).collect();
                spatial.sort_unstable();
                if spatial != [2, 3] {
                    return Err(format!("only a reduction over H and W (global pooling) is supported (axes {axes:?})"));
                }
                let op = if node.op_type == "ReduceMax" { Op::GlobalMaxPool2d } else { Op::GlobalAvgPool2d };
                match node.get_attr_opt::<i64>("keepdims").map_err(attr_err)?.unwrap_or(1) {
                    0 => Ok(Mapping::Layer(op)),
                    _ => Ok(Mapping::GlobalPool(op)),
                }
            }
            "Add" | "Sum" | "Mul" | "Sub" | "Div" => {
                let all_dynamic = dynamic.len() == node.input.iter().filter(|s| !s.is_empty()).count();
                if all_dynamic && matches!(node.op_type.as_str(), "Sub" | "Div") {
                    return Err("a subtraction or division of two tensors has no perfmodel layer".into());
                }
                if all_dynamic && dynamic.len() >= 2 {
                    return Ok(Mapping::Layer(if node.op_type == "Mul" { Op::Multiply } else { Op::Add }));
                }
                if node.op_type == "Add" && dynamic.len() == 1 && self.is_bias_free_dense(x, built) {
                    let units = in_shape[in_shape.len() - 1];
                    let bias = node.input.iter().find(|s| s.as_str() != x).and_then(|b| self.value(b));
                    // One value per unit, along the last axis (not a per-row constant of the same length).
                    let per_unit = |b: &Tensor| b.len() == units && b.shape().last() == Some(&units);
                    if bias.is_some_and(|b| per_unit(&b)) && out_shape == in_shape {
                        return Ok(Mapping::FuseBias(x.to_string()));
                    }
                }
                // A per-channel constant added to a bias-less convolution's output is its bias (tf2onnx writes a
                // batch norm folded into a convolution so when its transpose optimiser gave up).
                if node.op_type == "Add" && dynamic.len() == 1 && self.is_bias_free_conv(x, built) {
                    let bias = node.input.iter().find(|s| s.as_str() != x).and_then(|b| self.value(b));
                    let per_channel = |b: &Tensor| {
                        let dims = b.shape();
                        let channels = in_shape.get(1).copied().unwrap_or(0);
                        b.len() == channels && dims.len() >= 3 && dims[dims.len() - 3] == channels
                    };
                    if bias.is_some_and(|b| per_channel(&b)) && out_shape == in_shape && in_shape.len() == 4 {
                        return Ok(Mapping::FuseBias(x.to_string()));
                    }
                }
                self.elementwise_constant(node, x, &in_shape, &out_shape)
            }
            "Concat" => {
                // A constant operand with no element adds nothing; any other has no perfmodel layer.
                let constant_elements = node
                    .input
                    .iter()
                    .filter(|i| !i.is_empty() && !dynamic.contains(i))
                    .map(|c| self.value(c).map_or(1, |t| t.len()))
                    .sum::<usize>();
                if constant_elements > 0 {
                    return self.concat_with_constants(node, x, dynamic, &in_shape, &out_shape);
                }
                // `torch.cat([x])` (DenseNet's first layer of a block): the tensor itself.
                if dynamic.len() == 1 {
                    return Ok(Mapping::Alias(x.to_string()));
                }
                let axis = node.get_attr::<i64>("axis").map_err(attr_err)?;
                let axis = if axis < 0 { axis + in_shape.len() as i64 } else { axis };
                if axis <= 0 {
                    return Err("concatenation along the batch axis is not supported".into());
                }
                Ok(Mapping::Layer(Op::Concat { axis: axis - 1 }))
            }
            "Relu" => act(Activation::Relu),
            "Sigmoid" => act(Activation::Sigmoid),
            "Tanh" => act(Activation::Tanh),
            "HardSwish" => act(Activation::HardSwish),
            "Elu" => act(Activation::Elu),
            "LeakyRelu" => act(Activation::LeakyRelu),
            "HardSigmoid" => act(Activation::HardSigmoid),
            "Gelu" => act(Activation::Gelu),
            "Clip" => {
                let (lo, hi) = self.clip_bounds(node).map_err(attr_err)?;
                let hi = hi.filter(|h| *h < f32::MAX); // exporters write FLT_MAX for "no upper bound"
                match (lo, hi) {
                    (Some(lo), Some(hi)) if lo == 0.0 && hi == 6.0 => act(Activation::Relu6),
                    (Some(0.0), None) => act(Activation::Relu),
                    _ => Err(format!("only Clip(0, 6) (relu6) and Clip(0) (relu) are supported, got {lo:?}..{hi:?}")),
                }
            }
            "Softmax" => {
                let default = if self.opset < 13 { 1 } else { -1 };
                let axis = node.get_attr_opt::<i64>("axis").map_err(attr_err)?.unwrap_or(default);
                let rank = in_shape.len() as i64;
                let axis = if axis < 0 { axis + rank } else { axis };
                if axis == 1 {
                    return act(Activation::Softmax);
                }
                if axis <= 0 || axis >= rank || (self.opset < 13 && axis != rank - 1) {
                    // Before opset 13 Softmax flattens the axes from `axis` on: one axis only when it is the last.
                    return Err(format!("only softmax over one axis other than the batch is supported (axis {axis})"));
                }
                // Counted from the end, as a transformer's attention names it (-1: over the keys).
                Ok(Mapping::Layer(Op::Softmax { axis: axis - rank }))
            }
            // One element of the first axis after the batch (a sequence's class token: BERT's pooler, a ViT's
            // head): a slice of it, then the axis dropped.
            "Gather" if node.input.first().map(String::as_str) == Some(x) => {
                single()?;
                let axis = node.get_attr_opt::<i64>("axis").map_err(attr_err)?.unwrap_or(0);
                let axis = if axis < 0 { axis + in_shape.len() as i64 } else { axis };
                let index = node.input.get(1).and_then(|i| self.value(i)).ok_or("the index is not constant")?;
                // Every element of the axis in order, in some shape (the newer exporter's `as_strided` view of a
                // pooled tensor): a reshape.
                let every = ints(&index).is_ok_and(|ix| {
                    axis > 0
                        && in_shape.get(axis as usize) == Some(&ix.len())
                        && ix.iter().copied().eq(0..ix.len() as i64)
                });
                if every && tensor_elements(&out_shape[1..], 1).is_ok() {
                    let target_shape = out_shape[1..].iter().map(|&d| d as i64).collect();
                    return Ok(Mapping::Layer(Op::Reshape { target_shape }));
                }
                if axis != 1 || index.rank() != 0 {
                    return Err("only a single element of the first axis after the batch is supported".into());
                }
                let at = ints(&index).map_err(attr_err)?[0];
                let length = in_shape[1] as i64;
                let at = if at < 0 { at + length } else { at };
                if !(0..length).contains(&at) {
                    return Err(format!("index {at} is outside the axis of {length}"));
                }
                let slice = Op::ChannelSlice { start: at as usize, end: at as usize + 1 };
                let target_shape = out_shape[1..].iter().map(|&d| d as i64).collect();
                Ok(Mapping::Chain(vec![slice, Op::Reshape { target_shape }]))
            }
            // A lookup of ids in a constant table (a transformer's token embedding).
            "Gather" => {
                single()?;
                let table = node
                    .input
                    .first()
                    .and_then(|t| self.value(t))
                    .ok_or("only a lookup in a constant table is supported")?;
                if node.input.get(1).map(String::as_str) != Some(x) {
                    return Err("only a lookup of the network's values in a constant table is supported".into());
                }
                if node.get_attr_opt::<i64>("axis").map_err(attr_err)?.unwrap_or(0) != 0 {
                    return Err("only a lookup of a table's rows (axis 0) is supported".into());
                }
                let &[vocab, features] = table.shape() else {
                    return Err(format!("only a 2-D table is supported (shape {:?})", table.shape()));
                };
                Ok(Mapping::Layer(Op::Embedding { vocab, features }))
            }
            "LayerNormalization" => {
                single()?;
                let rank = in_shape.len() as i64;
                let axis = node.get_attr_opt::<i64>("axis").map_err(attr_err)?.unwrap_or(-1);
                let axis = if axis < 0 { axis + rank } else { axis };
                if axis <= 0 || axis >= rank {
                    return Err(format!("only a normalisation over axes after the batch is supported (axis {axis})"));
                }
                let epsilon = node.get_attr_opt::<f32>("epsilon").map_err(attr_err)?.unwrap_or(1e-5);
                let epsilon = shortest_decimal(epsilon);
                Ok(Mapping::Layer(Op::LayerNorm { axis: axis - rank, epsilon }))
            }
            "Transpose" => {
                single()?;
                let perm = node.get_attr_opt_vec::<i64>("perm").map_err(attr_err)?;
                let perm = perm.unwrap_or_else(|| (0..in_shape.len() as i64).rev().collect());
                let mut sorted = perm.clone();
                sorted.sort_unstable();
                if !sorted.iter().copied().eq(0..in_shape.len() as i64) {
                    return Err(format!("perm {perm:?} is not a permutation of the {} axes", in_shape.len()));
                }
                if perm[0] != 0 {
                    return Err(format!(
                        "only a transpose that keeps the batch axis first is supported (perm {perm:?})"
                    ));
                }
                let perm: Vec<usize> = perm[1..].iter().map(|&p| p as usize - 1).collect();
                if perm.iter().enumerate().all(|(i, &p)| i == p) {
                    return Ok(Mapping::Alias(x.to_string()));
                }
                // Moving only axes of one element (a batch of 1 put after the tokens) moves no data: a reshape.
                let dims = &in_shape[1..];
                let moved: Vec<usize> = perm.iter().copied().filter(|&p| dims[p] != 1).collect();
                if moved.windows(2).all(|w| w[0] < w[1]) {
                    let target_shape = out_shape[1..].iter().map(|&d| d as i64).collect();
                    return Ok(Mapping::Layer(Op::Reshape { target_shape }));
                }
                Ok(Mapping::Layer(Op::Transpose { perm }))
            }
            "BatchNormalization" => {
                single()?;
                Ok(Mapping::Layer(Op::BatchNorm))
            }
            "Dropout" => {
                single()?;
                let rate = match node.input.get(1).filter(|s| !s.is_empty()).and_then(|r| self.value(r)) {
                    Some(t) => scalar_f32(&t).map_err(attr_err)?,
                    None => node.get_attr_opt::<f32>("ratio").map_err(attr_err)?.unwrap_or(0.5),
                };
                // ONNX stores the ratio as f32: round away the f32 noise (0.2f32 is 0.20000000298...).
                let rate = (f64::from(rate) * 1e6).round() / 1e6;
                Ok(Mapping::Layer(Op::Dropout { rate: rate.clamp(0.0, 0.999) }))
            }
            "Identity" => Ok(Mapping::Alias(x.to_string())),
            "Flatten" | "Reshape" | "Squeeze" | "Unsqueeze" => {
                single()?;
                if out_shape.first() != in_shape.first() {
                    return Err(format!("reshaping {in_shape:?} to {out_shape:?} changes the batch dimension"));
                }
                let ours = self.our_shape(x, built);
                if ours.as_deref() == Some(&out_shape[1..]) {
                    return Ok(Mapping::Alias(x.to_string()));
                }
                let flatten = node.op_type == "Flatten" && out_shape.len() == 2;
                Ok(Mapping::Layer(if flatten {
                    Op::Flatten
                } else {
                    Op::Reshape { target_shape: out_shape[1..].iter().map(|&d| d as i64).collect() }
                }))
            }
            "Pad" => {
                single()?;
                self.zero_padding(node, &in_shape)
            }
            "Slice" => {
                single()?;
                self.cropping(node, &in_shape)
            }
            // Channels split into parts (ShuffleNet's channel split as the newer exporter writes it): one
            // channel slice per output, their sizes as tract infers them.
            "Split" if in_shape.len() == 4 => {
                single()?;
                let axis = node.get_attr_opt::<i64>("axis").map_err(attr_err)?.unwrap_or(0);
                if axis != 1 && axis != -3 {
                    return Err(format!("only a split of the channels is supported (axis {axis})"));
                }
                let mut start = 0;
                let mut parts = Vec::new();
                if node.output.iter().any(|o| o.is_empty()) {
                    return Err("a split with an unnamed output is not supported".into());
                }
                for out in &node.output {
                    let shape = self.shape(out).ok_or("tract could not infer an output shape")?;
                    let end = start + shape.get(1).copied().unwrap_or(0);
                    if end == start || end > in_shape[1] {
                        return Err(format!("a split part of {} channels is not supported", end - start));
                    }
                    parts.push(Op::ChannelSlice { start, end });
                    start = end;
                }
                Ok(Mapping::Layers(parts))
            }
            _ => Err("no perfmodel layer type for this op".into()),
        }
    }
}

impl Importer<'_> {
    /// Explicit `[top, bottom, left, right]` padding of a conv or pool from `pads` / `auto_pad`, named `valid` or
    /// `same` when it is one of those.
    fn padding(
        &self,
        node: &NodeProto,
        in_shape: &[usize],
        kernel: [usize; 2],
        strides: [usize; 2],
        dilation: [usize; 2],
    ) -> std::result::Result<Padding, String> {
        let hw = [in_shape[2], in_shape[3]];
        let same = Padding::Same.resolve(hw, kernel, strides, dilation);
        let auto = node.get_attr_opt::<&str>("auto_pad").map_err(|e| format!("{e:#}"))?.unwrap_or("NOTSET");
        let pads = match auto {
            "NOTSET" => match node.get_attr_opt_vec::<i64>("pads").map_err(|e| format!("{e:#}"))? {
                None => [0; 4],
                Some(p) if p.len() == 4 && p.iter().all(|&v| v >= 0) => {
                    [p[0] as usize, p[2] as usize, p[1] as usize, p[3] as usize]
                }
                Some(p) => return Err(format!("pads {p:?} are not 4 non-negative values")),
            },
            "VALID" => [0; 4],
            "SAME_UPPER" => same,
            // The odd pixel goes to the beginning instead of the end.
            "SAME_LOWER" => [same[1], same[0], same[3], same[2]],
            other => return Err(format!("unknown auto_pad '{other}'")),
        };
        Ok(if pads == [0; 4] {
            Padding::Valid
        } else if pads == same {
            Padding::Same
        } else {
            Padding::Explicit(pads)
        })
    }

    /// Clip bounds: inputs 1 and 2 from opset 11, attributes `min` / `max` before.
    fn clip_bounds(&self, node: &NodeProto) -> TractResult<(Option<f32>, Option<f32>)> {
        if self.opset < 11 {
            return Ok((node.get_attr_opt::<f32>("min")?, node.get_attr_opt::<f32>("max")?));
        }
        let bound = |k: usize| -> TractResult<Option<f32>> {
            match node.input.get(k).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(name) => match self.value(name) {
                    Some(t) => Ok(Some(scalar_f32(&t)?)),
                    None => bail!("bound '{name}' is not constant"),
                },
            }
        };
        Ok((bound(1)?, bound(2)?))
    }

    /// Constant zero padding of the spatial axes only.
    fn zero_padding(&self, node: &NodeProto, in_shape: &[usize]) -> std::result::Result<Mapping, String> {
        let e = |e: TractError| format!("{e:#}");
        if in_shape.len() != 4 {
            return Err(format!("only padding of [N, C, H, W] tensors is supported (input {in_shape:?})"));
        }
        let mode = node.get_attr_opt::<&str>("mode").map_err(e)?.unwrap_or("constant");
        if mode != "constant" {
            return Err(format!("only constant padding is supported, got mode '{mode}'"));
        }
        let (pads, value) = if self.opset < 11 {
            let pads = node.get_attr_opt_vec::<i64>("pads").map_err(e)?.ok_or("missing pads")?;
            (pads, node.get_attr_opt::<f32>("value").map_err(e)?.unwrap_or(0.0))
        } else {
            let pads = node.input.get(1).and_then(|p| self.value(p)).ok_or("pads are not constant")?;
            let value = match node.input.get(2).filter(|s| !s.is_empty()) {
                None => 0.0,
                Some(v) => scalar_f32(&*self.value(v).ok_or("the pad value is not constant")?).map_err(e)?,
            };
            (ints(&pads).map_err(e)?, value)
        };
        if node.input.get(3).is_some_and(|a| !a.is_empty()) {
            return Err("padding with explicit axes is not supported".into());
        }
        let spatial_only = pads.len() == 8 && pads[0] == 0 && pads[1] == 0 && pads[4] == 0 && pads[5] == 0;
        if !spatial_only || pads.iter().any(|&p| p < 0) || value != 0.0 {
            return Err(format!(
                "only non-negative zero padding of H and W is supported, got pads {pads:?}, value {value}"
            ));
        }
        let padding = [pads[2], pads[6], pads[3], pads[7]].map(|p| p as usize);
        Ok(Mapping::Layer(Op::ZeroPadding2d { padding }))
    }

    /// A step-1 slice of the spatial axes only: cropping.
    fn cropping(&self, node: &NodeProto, in_shape: &[usize]) -> std::result::Result<Mapping, String> {
        let e = |e: TractError| format!("{e:#}");
        if in_shape.len() != 4 || self.opset < 10 {
            return Err(format!("only slicing H and W of [N, C, H, W] tensors is supported (input {in_shape:?})"));
        }
        let constant = |k: usize| -> std::result::Result<Option<Vec<i64>>, String> {
            match node.input.get(k).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(name) => Ok(Some(ints(&*self.value(name).ok_or("slice bounds are not constant")?).map_err(e)?)),
            }
        };
        let starts = constant(1)?.ok_or("missing starts")?;
        let ends = constant(2)?.ok_or("missing ends")?;
        let axes = constant(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = constant(4)?.unwrap_or_else(|| vec![1; starts.len()]);
        // Channels of one tensor (ShuffleNet's channel split, `x.chunk(2, dim=1)`).
        if let ([1 | -3], [start], [end], [1]) = (axes.as_slice(), starts.as_slice(), ends.as_slice(), steps.as_slice())
        {
            let size = in_shape[1] as i64;
            let clamp = |v: i64| if v < 0 { (v + size).max(0) } else { v.min(size) };
            let (start, end) = (clamp(*start), clamp(*end));
            if start < end {
                return Ok(Mapping::Layer(Op::ChannelSlice { start: start as usize, end: end as usize }));
            }
        }
        let mut cropping = [0usize; 4];
        for (k, &axis) in axes.iter().enumerate() {
            let axis = if axis < 0 { axis + 4 } else { axis };
            let size = in_shape.get(axis as usize).copied().unwrap_or(0) as i64;
            let clamp = |v: i64| if v < 0 { (v + size).max(0) } else { v.min(size) };
            let (start, end) = (clamp(starts[k]), clamp(ends[k]));
            let full = start == 0 && end == size;
            if steps.get(k) != Some(&1) || !(axis == 2 || axis == 3 || full) || start >= end {
                return Err(format!("only step-1 slices of H and W are supported (axes {axes:?}, steps {steps:?})"));
            }
            let at = if axis == 2 {
                0
            } else if axis == 3 {
                2
            } else {
                continue;
            };
            cropping[at] = start as usize;
            cropping[at + 1] = (size - end) as usize;
        }
        Ok(Mapping::Layer(Op::Cropping2d { cropping }))
    }
}

/// The layers built so far and which layer holds each non-constant tensor.
struct Built {
    layers: Vec<Layer>,
    /// Layer name (or [`INPUT`]) holding each tensor.
    source: HashMap<String, String>,
    index: HashMap<String, usize>,
    /// For each layer, the ONNX tensor its output is (after fusions): checked against tract's shapes.
    expected: Vec<String>,
    used_names: HashSet<String>,
}

impl Built {
    fn new(input: &str) -> Built {
        Built {
            layers: Vec::new(),
            source: HashMap::from([(input.to_string(), INPUT.to_string())]),
            index: HashMap::new(),
            expected: Vec::new(),
            used_names: HashSet::from([INPUT.to_string()]),
        }
    }

    /// Add a layer (with a unique name) producing `tensor`; returns its name.
    fn add(&mut self, name: String, op: Op, inputs: Vec<String>, tensor: &str) -> String {
        let mut unique = name.clone();
        let mut k = 2;
        while !self.used_names.insert(unique.clone()) {
            unique = format!("{name}_{k}");
            k += 1;
        }
        self.layers.push(Layer { name: unique.clone(), op, inputs });
        self.index.insert(unique.clone(), self.layers.len() - 1);
        self.expected.push(tensor.to_string());
        self.source.insert(tensor.to_string(), unique.clone());
        unique
    }

    fn layer_of(&self, tensor: &str) -> Option<usize> {
        self.source.get(tensor).and_then(|name| self.index.get(name)).copied()
    }

    /// Layer `i` now produces `tensor` (a fused activation or bias extended it).
    fn retarget(&mut self, i: usize, tensor: &str) {
        self.expected[i] = tensor.to_string();
        self.source.insert(tensor.to_string(), self.layers[i].name.clone());
    }
}

#[derive(Default)]
struct Gates {
    /// Sigmoid / HardSigmoid nodes folded into the Mul that gates with them, the inner nodes of GELUs, and the
    /// first Reshape and the Transpose of channel shuffles.
    absorbed: HashSet<usize>,
    /// Mul node → (gated tensor, activation, how many of the pattern's inputs read the tensor).
    gated: HashMap<usize, (String, Activation, usize)>,
    /// The last Reshape of a channel shuffle → (the shuffled tensor, groups).
    shuffles: HashMap<usize, (String, usize)>,
    /// The last node of a layer norm written out in elementary ops → (the normalised tensor, the layer).
    norms: HashMap<usize, (String, Op)>,
}

/// `v` as the shortest decimal that reads back as the same f32 (an epsilon of 1e-6, not 9.99999997e-7).
fn shortest_decimal(v: f32) -> f64 {
    // f32's Display always writes something f64 parses (NaN and inf included).
    v.to_string().parse::<f64>().unwrap_or(f64::from(v))
}

/// `HardSigmoid(alpha = 1/6, beta = 0.5)` is the gate of hard swish.
fn hard_sigmoid_is_hard_swish_gate(node: &NodeProto) -> bool {
    let alpha = node.get_attr_opt::<f32>("alpha").ok().flatten().unwrap_or(0.2);
    let beta = node.get_attr_opt::<f32>("beta").ok().flatten().unwrap_or(0.5);
    (alpha - 1.0 / 6.0).abs() < 1e-4 && (beta - 0.5).abs() < 1e-6
}

/// Size attributes of convolution and pooling nodes must lie in `0..=MAX_SIZE`, as perfmodel's own layers do.
fn check_size_attributes(graph: &tract_onnx::pb::GraphProto) -> std::result::Result<(), String> {
    const SIZES: [&str; 4] = ["pads", "kernel_shape", "strides", "dilations"];
    for node in &graph.node {
        for attr in node.attribute.iter().filter(|a| SIZES.contains(&a.name.as_str())) {
            if let Some(v) = attr.ints.iter().find(|&&v| !(0..=MAX_SIZE as i64).contains(&v)) {
                return Err(format!(
                    "node '{}' ({}): attribute '{}' has {v}, outside 0..={MAX_SIZE}",
                    node.name, node.op_type, attr.name
                ));
            }
        }
    }
    Ok(())
}

/// A 2-element attribute (strides, dilations, kernel_shape), 1 when absent.
fn pair_attr(node: &NodeProto, name: &str) -> TractResult<[usize; 2]> {
    match node.get_attr_opt_vec::<i64>(name)? {
        None => Ok([1, 1]),
        Some(v) if v.len() == 2 && v.iter().all(|&x| x > 0) => Ok([v[0] as usize, v[1] as usize]),
        Some(v) => bail!("attribute '{name}' must be two positive integers, got {v:?}"),
    }
}

/// `ceil_mode = 1` rounds the output size up; the same windows come from extra bottom/right padding.
fn ceil_mode_padding(padding: Padding, in_shape: &[usize], kernel: [usize; 2], strides: [usize; 2]) -> Padding {
    let hw = [in_shape[2], in_shape[3]];
    let mut pads = padding.resolve(hw, kernel, strides, [1, 1]);
    for axis in 0..2 {
        let padded = hw[axis] + pads[2 * axis] + pads[2 * axis + 1];
        if padded >= kernel[axis] {
            let span = padded - kernel[axis];
            let out = span.div_ceil(strides[axis]) + 1;
            pads[2 * axis + 1] += (out - 1) * strides[axis] + kernel[axis] - padded;
        }
    }
    Padding::Explicit(pads)
}

/// Two constants equal to a thousandth (exporters round √2, 1/√2, √(2/π) and 0.044715 differently).
fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-3 * b.abs()
}

fn scalar_f32(t: &Tensor) -> TractResult<f32> {
    let t = t.cast_to::<f32>()?;
    let view = t.to_plain_array_view::<f32>()?;
    match view.iter().next() {
        Some(v) if view.len() == 1 => Ok(*v),
        _ => bail!("expected a scalar, got shape {:?}", t.shape()),
    }
}

fn ints(t: &Tensor) -> TractResult<Vec<i64>> {
    Ok(t.cast_to::<i64>()?.to_plain_array_view::<i64>()?.iter().copied().collect())
}

/// Declared input dimensions: `Ok(value)` or `Err(symbol name)`.
fn declared_dims(input: &tract_onnx::pb::ValueInfoProto) -> Option<Vec<std::result::Result<i64, String>>> {
    let Some(type_proto::Value::TensorType(t)) = input.r#type.as_ref()?.value.as_ref() else { return None };
    let shape = t.shape.as_ref()?;
    Some(
        shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(dimension::Value::DimValue(v)) => Ok(*v),
                Some(dimension::Value::DimParam(p)) => Err(p.clone()),
                None => Err("?".to_string()),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::export_network;

    fn conv(filters: usize, k: usize, padding: Padding, activation: Activation) -> Op {
        let mut c = Conv2d::new(filters, [k, k]);
        c.padding = padding;
        c.activation = activation;
        Op::Conv2d(c)
    }

    fn round_trip(net: &Network) -> Network {
        let exported = export_network(net).unwrap();
        import_proto(&exported.model, "mem.onnx", "mem", false).unwrap()
    }

    /// A residual + concat + squeeze-excite network using every layer type the importer maps back one to one.
    fn zoo_like() -> Network {
        let mut strided = Conv2d::new(16, [3, 3]);
        strided.strides = [2, 2];
        strided.padding = Padding::Explicit([1, 0, 1, 0]);
        strided.activation = Activation::Relu;
        let mut grouped = Conv2d::new(16, [3, 3]);
        grouped.groups = 4;
        grouped.dilation = [2, 2];
        grouped.padding = Padding::Same;
        grouped.use_bias = false;
        grouped.activation = Activation::Gelu;
        let mut dw = DepthwiseConv2d::new([3, 3]);
        dw.padding = Padding::Same;
        dw.depth_multiplier = 2;
        dw.activation = Activation::Relu6;
        let mut net = Network::new("zoo_like", vec![3, 32, 32]);
        net.batch_size = 2;
        net.layers = vec![
            Layer::new("pad", Op::ZeroPadding2d { padding: [1, 1, 2, 0] }),
            Layer::new("stem", Op::Conv2d(strided)),
            Layer::new("bn", Op::BatchNorm),
            Layer::new("g", Op::Conv2d(grouped)),
            Layer::new("sum", Op::Add).with_inputs(&["bn", "g"]),
            Layer::new("act", Op::Activation(Activation::HardSwish)),
            Layer::new("dw", Op::DepthwiseConv2d(dw)),
            Layer::new("pw", conv(16, 1, Padding::Valid, Activation::Swish)),
            Layer::new("cat", Op::Concat { axis: 0 }).with_inputs(&["act", "pw"]),
            Layer::new("se_pool", Op::GlobalAvgPool2d),
            Layer::new("se_shape", Op::Reshape { target_shape: vec![32, 1, 1] }),
            Layer::new("se_gate", conv(32, 1, Padding::Valid, Activation::Sigmoid)),
            Layer::new("se", Op::Multiply).with_inputs(&["cat", "se_gate"]),
            Layer::new("mp", Op::MaxPool2d(Pool2d { pool_size: [3, 3], strides: [2, 2], padding: Padding::Same })),
            Layer::new("ap", Op::AvgPool2d(Pool2d::new([2, 2]))),
            Layer::new("crop", Op::Cropping2d { cropping: [1, 0, 0, 1] }),
            Layer::new("drop", Op::Dropout { rate: 0.5 }),
            Layer::new("flat", Op::Flatten),
            Layer::new("fc", Op::Dense(Dense { units: 10, use_bias: false, activation: Activation::Softmax })),
        ];
        net
    }

    #[test]
    fn exported_networks_import_back_unchanged() {
        let net = zoo_like();
        net.analyze().unwrap();
        let back = round_trip(&net);
        assert_eq!(back.to_json(), net.to_json(), "\n{}\n---\n{}", back.to_json_string(), net.to_json_string());
    }

    #[test]
    fn activation_layers_after_conv_are_fused_and_gap_flatten_dropped() {
        let mut net = Network::new("fuse", vec![3, 8, 8]);
        net.layers = vec![
            Layer::new("c", conv(4, 3, Padding::Valid, Activation::Linear)),
            Layer::new("r", Op::Activation(Activation::Relu)),
            Layer::new("gap", Op::GlobalMaxPool2d),
            Layer::new("flat", Op::Flatten),
            Layer::new("fc", Op::Dense(Dense { units: 3, use_bias: true, activation: Activation::Linear })),
            Layer::new("e", Op::Activation(Activation::Elu)),
        ];
        let back = round_trip(&net);
        let names: Vec<&str> = back.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["c", "gap", "fc"]);
        assert_eq!(back.layers[0].op, conv(4, 3, Padding::Valid, Activation::Relu));
        assert_eq!(back.layers[2].op, Op::Dense(Dense { units: 3, use_bias: true, activation: Activation::Elu }));
    }

    #[test]
    fn unmapped_nodes_are_listed_or_kept() {
        let mut net = Network::new("lrn", vec![4, 8, 8]);
        net.layers = vec![
            Layer::new("c", conv(4, 3, Padding::Same, Activation::Relu)),
            Layer::new("norm", Op::Activation(Activation::Tanh)),
            Layer::new("c2", conv(4, 3, Padding::Same, Activation::Relu)),
        ];
        let mut model = export_network(&net).unwrap().model;
        let graph = model.graph.as_mut().unwrap();
        let node = graph.node.iter_mut().find(|n| n.name == "norm").unwrap();
        node.op_type = "LRN".into();
        node.attribute.push(tract_onnx::pb::AttributeProto {
            name: "size".into(),
            r#type: tract_onnx::pb::attribute_proto::AttributeType::Int as i32,
            i: 3,
            ..Default::default()
        });
        let err = import_proto(&model, "m.onnx", "m", false).unwrap_err().to_string();
        assert!(err.contains("m.onnx") && err.contains("'norm' (LRN)") && err.contains("--allow-unsupported"), "{err}");
        let kept = import_proto(&model, "m.onnx", "m", true).unwrap();
        assert_eq!(
            kept.layers[1].op,
            Op::Unsupported { op_type: "LRN".into(), output_shape: smallvec::smallvec![4, 8, 8] }
        );
        assert_eq!(kept.layers.len(), 3);
    }
}
