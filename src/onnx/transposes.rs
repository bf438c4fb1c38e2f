//! Transposes sunk through a graph before import, so that a converter's channels-last islands map as the
//! engines run them.
//!
//! tf2onnx converts a Keras model channels-last inside: it wraps every convolution in a transpose to
//! channels-first and one back, and relies on its own transpose optimiser to cancel the pairs. When that
//! optimiser gives up (it logs "Failed to apply optimize_transpose"; a bias-less convolution before a hard
//! sigmoid is enough), the file keeps the pairs, and the element-wise layers, paddings and means between them
//! run on NHWC tensors. The engines do not run those transposes: ONNX Runtime's transpose optimiser (already at
//! its basic level) pushes each one down through the nodes that do not care about the layout and cancels it
//! against the next, and tract tracks axes the same way. This pass does that on the graph before it is mapped,
//! so the layers import channel-first, as every other network does.
//!
//! A transpose is pushed through a node when every tensor input of the node comes from a transpose with the
//! same permutation: the node then reads the transposes' inputs, its attributes (a padding's pads, a
//! reduction's or a concat's axes) and constant operands (a per-channel bias of shape `[C]`) are permuted to
//! match, and one transpose follows it (none when a reduction's dropped axes leave the rest in order). A
//! transpose of a transpose is one transpose, or none when they cancel. The rewrite is kept only when it leaves
//! fewer transposes than the file had: a graph whose transposes do not meet is imported as it is.

use std::collections::{HashMap, HashSet};
use tract_onnx::pb::{attribute_proto::AttributeType, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto};

/// The transposes sunk: to channels-last and back (`[N, C, H, W]` to `[N, H, W, C]` and back). Others (a
/// transformer's heads moved before the tokens) are what the network computes and stay as the exporter wrote them.
const LAYOUT_PERMS: &[&[i64]] = &[&[0, 2, 3, 1], &[0, 3, 1, 2]];

/// Rewrite steps allowed per node of the graph (each step moves a transpose one node further or removes one).
const STEPS_PER_NODE: usize = 4;

/// Nodes that compute element by element on their first input, whose other inputs (if any) are scalars
/// (Clip's bounds, Dropout's ratio): a transpose passes them unchanged.
const UNARY: &[&str] = &[
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Exp",
    "Log",
    "Abs",
    "Neg",
    "Sqrt",
    "Reciprocal",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Gelu",
    "Mish",
    "Identity",
    "Cast",
    "Clip",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Not",
];

/// Element-wise nodes of several inputs (with numpy broadcasting).
const ELEMENTWISE: &[&str] =
    &["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Equal", "Less", "Greater"];

/// Reductions with `axes` and `keepdims`.
const REDUCTIONS: &[&str] = &[
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceSum",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

/// The model with its transposes sunk ([`sink`] on its graph, at its default domain's opset), when that leaves
/// fewer of them; `None`: the model as it is.
pub fn sink_model(proto: &ModelProto) -> Option<ModelProto> {
    let (nodes, added) = sink(proto.graph.as_ref()?, super::import::default_opset(proto))?;
    let mut sunk = proto.clone();
    let graph = sunk.graph.as_mut()?;
    graph.node = nodes;
    graph.initializer.extend(added);
    Some(sunk)
}

/// The graph's nodes with its transposes sunk, and the constants the rewrite added (permuted copies), or `None`
/// when sinking leaves no fewer transposes than the graph has (nothing to change). `opset`: the model's default
/// domain version (where a padding's pads and a reduction's axes live).
pub fn sink(graph: &GraphProto, opset: i64) -> Option<(Vec<NodeProto>, Vec<TensorProto>)> {
    let before = graph.node.iter().filter(|n| n.op_type == "Transpose").count();
    if before == 0 {
        return None;
    }
    let mut sinker = Sinker::new(graph, opset);
    let mut budget = STEPS_PER_NODE * graph.node.len().max(1);
    while budget > 0 && sinker.step() {
        budget -= 1;
    }
    sinker.remove_dead();
    let after = sinker.nodes.iter().filter(|n| n.op_type == "Transpose").count();
    (after < before).then_some((sinker.nodes, sinker.added))
}

struct Sinker<'a> {
    nodes: Vec<NodeProto>,
    /// Constants by name: the graph's initializers and `Constant` nodes' tensors.
    constants: HashMap<&'a str, &'a TensorProto>,
    /// Names of `Constant` nodes' outputs given as scalars (`value_float`, `value_int`).
    scalar_constants: HashSet<&'a str>,
    graph_outputs: HashSet<&'a str>,
    added: Vec<TensorProto>,
    added_names: HashSet<String>,
    opset: i64,
}

/// The permutation and input of the layout transpose producing a tensor, if one does.
type Transposed<'t> = dyn Fn(&str) -> Option<(Vec<i64>, String)> + 't;

/// One change to the graph.
enum Rewrite {
    /// Transpose node `.0` reads a transpose of `.1`: one transpose of `.1` by `.2` (the identity: none).
    Compose(usize, String, Vec<i64>),
    /// Node `.0` reads untransposed tensors.
    Push(usize, Push),
}

/// What a pushable node needs from the transposes feeding it.
struct Push {
    /// The node's new inputs.
    inputs: Vec<String>,
    /// Constants to add (permuted copies).
    constants: Vec<TensorProto>,
    /// The node's new attributes.
    attributes: Vec<AttributeProto>,
    /// The transpose the node's output needs after it (`None`: the output is already in order).
    after: Option<Vec<i64>>,
}

impl<'a> Sinker<'a> {
    fn new(graph: &'a GraphProto, opset: i64) -> Sinker<'a> {
        let mut constants: HashMap<&str, &TensorProto> =
            graph.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut scalar_constants = HashSet::new();
        for node in graph.node.iter().filter(|n| n.op_type == "Constant" && n.domain.is_empty()) {
            let Some(out) = node.output.first() else { continue };
            for a in &node.attribute {
                match (a.name.as_str(), &a.t) {
                    ("value", Some(t)) => {
                        constants.insert(out.as_str(), t);
                    }
                    ("value_float" | "value_int", _) => {
                        scalar_constants.insert(out.as_str());
                    }
                    _ => {}
                }
            }
        }
        // A graph input of the same name as an initializer overrides it: not a constant.
        for input in &graph.input {
            if graph.initializer.iter().all(|t| t.name != input.name) {
                constants.remove(input.name.as_str());
            }
        }
        Sinker {
            nodes: graph.node.clone(),
            constants,
            scalar_constants,
            graph_outputs: graph.output.iter().map(|o| o.name.as_str()).collect(),
            added: Vec::new(),
            added_names: HashSet::new(),
            opset,
        }
    }

    fn is_constant(&self, tensor: &str) -> bool {
        self.constants.contains_key(tensor)
            || self.scalar_constants.contains(tensor)
            || self.added_names.contains(tensor)
    }

    /// The constant tensor of this name (one of the graph's or one the rewrite added).
    fn constant(&self, tensor: &str) -> Option<&TensorProto> {
        self.constants.get(tensor).copied().or_else(|| self.added.iter().find(|t| t.name == tensor))
    }

    /// One rewrite; false when none is left.
    fn step(&mut self) -> bool {
        match self.next_rewrite() {
            Some(Rewrite::Compose(i, x, combined)) => {
                let node = &mut self.nodes[i];
                node.input = vec![x];
                if is_identity(&combined) {
                    node.op_type = "Identity".into();
                    node.attribute.clear();
                } else {
                    node.attribute = vec![ints_attribute("perm", combined)];
                }
                true
            }
            Some(Rewrite::Push(i, push)) => {
                self.apply(i, push);
                true
            }
            None => false,
        }
    }

    /// The first node, in graph order, that a transpose can be pushed through or merged with.
    fn next_rewrite(&self) -> Option<Rewrite> {
        let producer: HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.output.iter().filter(|o| !o.is_empty()).map(move |o| (o.as_str(), i)))
            .collect();
        let transposed = |tensor: &str| -> Option<(Vec<i64>, String)> {
            let node = &self.nodes[*producer.get(tensor)?];
            if node.op_type != "Transpose" || !node.domain.is_empty() {
                return None;
            }
            let perm = perm(node)?;
            LAYOUT_PERMS.contains(&perm.as_slice()).then(|| Some((perm, node.input.first()?.clone())))?
        };
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.domain.is_empty() && node.domain != "ai.onnx" {
                continue;
            }
            if node.op_type == "Transpose" {
                let Some(outer) = perm(node) else { continue };
                let Some((inner, x)) = node.input.first().and_then(|t| transposed(t)) else { continue };
                if inner.len() != outer.len() {
                    continue;
                }
                let combined: Vec<i64> = outer.iter().map(|&q| inner[q as usize]).collect();
                return Some(Rewrite::Compose(i, x, combined));
            }
            if let Some(push) = self.push(node, &transposed) {
                return Some(Rewrite::Push(i, push));
            }
        }
        None
    }

    /// How `node` reads its inputs' untransposed tensors, when every tensor input comes from a transpose of one
    /// permutation and the node can take them so.
    fn push(&self, node: &NodeProto, transposed: &Transposed) -> Option<Push> {
        let op = node.op_type.as_str();
        if node.output.iter().filter(|o| !o.is_empty()).count() != 1 {
            return None;
        }
        let first = node.input.first().filter(|x| !x.is_empty())?;
        let (perm, x) = transposed(first)?;
        let rank = perm.len();
        let mut push = Push {
            inputs: node.input.clone(),
            constants: Vec::new(),
            attributes: node.attribute.clone(),
            after: Some(perm.clone()),
        };
        push.inputs[0] = x;
        if UNARY.contains(&op) {
            // Clip's bounds and Dropout's ratio: constants, used as they are.
            if node.input[1..].iter().any(|t| !t.is_empty() && !self.is_constant(t)) {
                return None;
            }
        } else if ELEMENTWISE.contains(&op) || op == "Concat" {
            for k in 1..node.input.len() {
                let t = &node.input[k];
                if t.is_empty() {
                    continue;
                }
                if let Some((p, x)) = transposed(t) {
                    if p != perm {
                        return None;
                    }
                    push.inputs[k] = x;
                } else if op != "Concat" && self.is_constant(t) {
                    // `None`: one element, which broadcasts alike either way.
                    if let Some(c) = self.permuted_constant(t, &perm)? {
                        push.inputs[k] = c.name.clone();
                        push.constants.push(c);
                    }
                } else {
                    return None;
                }
            }
            if op == "Concat" {
                let a = push.attributes.iter_mut().find(|a| a.name == "axis")?;
                a.i = perm[normalized_axis(a.i, rank)?];
            }
        } else if op == "Pad" {
            self.pad(node, &perm, &mut push)?;
        } else if REDUCTIONS.contains(&op) {
            self.reduction(node, &perm, &mut push)?;
        } else {
            return None;
        }
        Some(push)
    }

    /// A padding's pads (an attribute before opset 11, a constant input since) in the untransposed axes.
    fn pad(&self, node: &NodeProto, perm: &[i64], push: &mut Push) -> Option<()> {
        let rank = perm.len();
        let permute_pads = |pads: &[i64]| -> Option<Vec<i64>> {
            if pads.len() != 2 * rank {
                return None;
            }
            let mut out = vec![0; 2 * rank];
            for (i, &p) in perm.iter().enumerate() {
                out[p as usize] = pads[i];
                out[rank + p as usize] = pads[rank + i];
            }
            Some(out)
        };
        if self.opset < 11 {
            let a = push.attributes.iter_mut().find(|a| a.name == "pads")?;
            a.ints = permute_pads(&a.ints)?;
            return Some(());
        }
        // An `axes` input (opset 18) names axes of its own: left to the import.
        if node.input.get(3).is_some_and(|t| !t.is_empty()) {
            return None;
        }
        if node.input.get(2).is_some_and(|t| !t.is_empty() && !self.is_constant(t)) {
            return None;
        }
        let pads_name = node.input.get(1).filter(|t| !t.is_empty())?;
        let pads = int64_values(self.constant(pads_name)?)?;
        let permuted = permute_pads(&pads)?;
        self.replace_with_int64s(push, 1, pads_name, permuted);
        Some(())
    }

    /// A reduction's axes in the untransposed axes; with `keepdims` 0, the transpose left for the axes kept.
    fn reduction(&self, node: &NodeProto, perm: &[i64], push: &mut Push) -> Option<()> {
        let rank = perm.len();
        let from_input = node.input.get(1).filter(|t| !t.is_empty());
        let axes: Vec<i64> = match (push.attributes.iter().find(|a| a.name == "axes"), from_input) {
            (Some(a), _) => a.ints.clone(),
            (None, Some(t)) => int64_values(self.constant(t)?)?,
            // All axes, or none with `noop_with_empty_axes`: the layout does not matter to the tensor but does to
            // its shape; left to the import.
            (None, None) => return None,
        };
        let axes: Vec<usize> = axes.iter().map(|&a| normalized_axis(a, rank)).collect::<Option<_>>()?;
        // A reduction over the last axis is a channels-last layer norm's (ConvNeXt's, written out): perfmodel's
        // layer norm normalises the last axes, so it stays channels-last.
        if axes.contains(&(rank - 1)) {
            return None;
        }
        let ours: Vec<i64> = axes.iter().map(|&a| perm[a]).collect();
        match push.attributes.iter_mut().find(|a| a.name == "axes") {
            Some(a) => a.ints = ours,
            None => self.replace_with_int64s(push, 1, from_input?, ours),
        }
        let keepdims = push.attributes.iter().find(|a| a.name == "keepdims").map_or(1, |a| a.i);
        if keepdims == 0 {
            // The axes kept, in the transposed order, name these untransposed axes; the output lists them sorted.
            let kept: Vec<i64> = (0..rank).filter(|i| !axes.contains(i)).map(|i| perm[i]).collect();
            let mut sorted = kept.clone();
            sorted.sort_unstable();
            let after: Vec<i64> = kept.iter().map(|k| sorted.iter().position(|s| s == k).unwrap_or(0) as i64).collect();
            push.after = (!is_identity(&after)).then_some(after);
        }
        Some(())
    }

    /// Make input `k` of the pushed node a new int64 constant of `values` (a permuted copy of constant `base`).
    fn replace_with_int64s(&self, push: &mut Push, k: usize, base: &str, values: Vec<i64>) {
        let name = self.fresh(&format!("{base}#sunk"));
        push.inputs[k] = name.clone();
        let dims = vec![values.len() as i64];
        push.constants.push(TensorProto { name, dims, data_type: 7, int64_data: values, ..Default::default() });
    }

    /// A copy of constant `name` for an operand of a node whose other input is now untransposed by `perm`:
    /// right-aligned to the rank, its axes moved back. `Some(None)`: one element, usable as it is; `None`: its data
    /// would have to move (two axes of more than one element change order).
    fn permuted_constant(&self, name: &str, perm: &[i64]) -> Option<Option<TensorProto>> {
        if self.scalar_constants.contains(name) {
            return Some(None);
        }
        let c = self.constant(name)?;
        if c.dims.iter().all(|&d| d == 1) {
            return Some(None);
        }
        let rank = perm.len();
        if c.dims.len() > rank {
            return None;
        }
        let padded: Vec<i64> = std::iter::repeat_n(1, rank - c.dims.len()).chain(c.dims.iter().copied()).collect();
        // Axis p of the untransposed tensor is axis i of the transposed one where perm[i] = p.
        let mut dims = vec![1; rank];
        for (i, &p) in perm.iter().enumerate() {
            dims[p as usize] = padded[i];
        }
        // The data keeps its order when the axes of more than one element keep theirs.
        let order: Vec<usize> = (0..rank)
            .filter(|&p| dims[p] != 1)
            .map(|p| perm.iter().position(|&q| q as usize == p).unwrap_or(0))
            .collect();
        if order.windows(2).any(|w| w[0] > w[1]) {
            return None;
        }
        let mut copy = c.clone();
        copy.name = self.fresh(&format!("{name}#sunk"));
        copy.dims = dims;
        Some(Some(copy))
    }

    /// A tensor name not yet used by the graph or the rewrite.
    fn fresh(&self, base: &str) -> String {
        let taken = |n: &str| {
            self.constants.contains_key(n)
                || self.added_names.contains(n)
                || self.nodes.iter().any(|node| node.output.iter().any(|o| o == n))
        };
        let mut name = base.to_string();
        let mut k = 1;
        while taken(&name) {
            name = format!("{base}{k}");
            k += 1;
        }
        name
    }

    /// Rewrite node `i` to read the untransposed tensors, with the transpose after it.
    fn apply(&mut self, i: usize, push: Push) {
        for c in push.constants {
            self.added_names.insert(c.name.clone());
            self.added.push(c);
        }
        let output = self.nodes[i].output.iter().find(|o| !o.is_empty()).cloned().unwrap_or_default();
        let inner = self.fresh(&format!("{output}#sunk"));
        let node = &mut self.nodes[i];
        node.input = push.inputs;
        node.attribute = push.attributes;
        let Some(after) = push.after else { return };
        for o in node.output.iter_mut().filter(|o| **o == output) {
            *o = inner.clone();
        }
        let name =
            if node.name.is_empty() { format!("{output}#transpose") } else { format!("{}#transpose", node.name) };
        let transpose = NodeProto {
            name,
            op_type: "Transpose".into(),
            input: vec![inner],
            output: vec![output],
            attribute: vec![ints_attribute("perm", after)],
            ..Default::default()
        };
        self.nodes.insert(i + 1, transpose);
    }

    /// Drop transposes nothing reads any more.
    fn remove_dead(&mut self) {
        loop {
            let read: HashSet<&str> = self.nodes.iter().flat_map(|n| n.input.iter().map(String::as_str)).collect();
            let dead = self.nodes.iter().position(|n| {
                matches!(n.op_type.as_str(), "Transpose" | "Identity")
                    && n.output.iter().all(|o| !read.contains(o.as_str()) && !self.graph_outputs.contains(o.as_str()))
            });
            match dead {
                Some(k) => {
                    self.nodes.remove(k);
                }
                None => return,
            }
        }
    }
}

/// A transpose's permutation (`perm`, or the reversal when absent: unknown rank, `None`).
fn perm(node: &NodeProto) -> Option<Vec<i64>> {
    let p = node.attribute.iter().find(|a| a.name == "perm")?.ints.clone();
    let mut sorted = p.clone();
    sorted.sort_unstable();
    sorted.iter().copied().eq(0..p.len() as i64).then_some(p)
}

fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p == i as i64)
}

fn normalized_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

fn ints_attribute(name: &str, ints: Vec<i64>) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Ints as i32, ints, ..Default::default() }
}

/// The values of an int64 constant stored inline (`int64_data` or little-endian `raw_data`).
fn int64_values(t: &TensorProto) -> Option<Vec<i64>> {
    if t.data_type != 7 {
        return None;
    }
    if !t.int64_data.is_empty() {
        return Some(t.int64_data.clone());
    }
    if !t.raw_data.len().is_multiple_of(8) {
        return None;
    }
    Some(t.raw_data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect())
}
