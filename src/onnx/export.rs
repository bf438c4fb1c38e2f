//! Export layers and networks as in-memory ONNX graphs, the stable way to hand a model to tract (its internal op
//! structs change between versions; the ONNX loader does not).
//!
//! Layout is NCHW with the batch as the first dimension. Weights are seeded random f32 values scaled by fan-in
//! (LeCun uniform) and batch-norm statistics are the identity, so activations stay in a normal floating-point
//! range through deep networks: denormals or overflows would distort timings.
//!
//! Naming: a layer's output tensor and its main node are named after the layer; any extra node it needs (a
//! fused activation, a flatten after global pooling) is named `<layer>/<suffix>`. [`Exported::owners`] maps
//! every node name to the layer that owns it, which is how per-node engine timings are attributed back to
//! layers.

use crate::error::{Error, Location, Result};
use crate::layer::{Activation, Conv2d, LayerConfig, Op, Shape};
use crate::network::{Network, Source, INPUT};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use tract_onnx::pb::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};

/// The ONNX operator set the exported graphs use (14: the first with `HardSwish`).
pub const OPSET: i64 = 14;
/// ONNX IR version matching [`OPSET`].
const IR_VERSION: i64 = 7;
/// Slope of `leaky_relu` (Keras' `LeakyReLU` default).
pub const LEAKY_RELU_ALPHA: f32 = 0.3;
/// Name of the single layer in a model built by [`export_layer`].
pub const LAYER_NAME: &str = "layer";

/// An exported model and, for every node, the name of the layer that owns it.
#[derive(Debug, Clone)]
pub struct Exported {
    pub model: ModelProto,
    pub owners: HashMap<String, String>,
}

/// A one-layer model for a config: graph inputs `input0`, `input1`, ... (one per input shape), one output.
pub fn export_layer(config: &LayerConfig) -> Result<Exported> {
    let out_shape = config.output_shape().map_err(|e| Error::Invalid(format!("layer config: {e}")))?;
    let mut g = GraphBuilder::new(config.batch, seed_of(LAYER_NAME));
    let mut inputs = Vec::with_capacity(config.input_shapes.len());
    for (i, shape) in config.input_shapes.iter().enumerate() {
        let name = format!("input{i}");
        g.inputs.push(value_info(&name, config.batch, shape));
        inputs.push(name);
    }
    g.layer(LAYER_NAME, &config.op, &inputs, &config.input_shapes)
        .map_err(|message| Error::Invalid(format!("layer config ({}): {message}", config.layer_type())))?;
    g.outputs.push(value_info(LAYER_NAME, config.batch, &out_shape));
    Ok(g.finish(&format!("perfmodel-{}", config.layer_type())))
}

/// The whole network as one model: graph input `input`, outputs = layers nobody consumes.
pub fn export_network(net: &Network) -> Result<Exported> {
    let analysis = net.analyze()?;
    let mut g = GraphBuilder::new(net.batch_size, seed_of(&net.name));
    g.inputs.push(value_info(INPUT, net.batch_size, &net.input_shape));
    let mut consumed = vec![false; net.layers.len()];
    for (i, layer) in net.layers.iter().enumerate() {
        let inputs: Vec<String> = analysis.sources[i]
            .iter()
            .map(|s| match s {
                Source::Input => INPUT.to_string(),
                Source::Layer(j) => {
                    consumed[*j] = true;
                    net.layers[*j].name.clone()
                }
            })
            .collect();
        g.layer(&layer.name, &layer.op, &inputs, analysis.input_shapes(i)).map_err(|message| {
            Error::spec(Location::file(format!("network '{}'", net.name)).layer(layer.name.clone(), i), message)
        })?;
    }
    for (i, layer) in net.layers.iter().enumerate() {
        if !consumed[i] {
            g.outputs.push(value_info(&layer.name, net.batch_size, &analysis.output_shapes[i]));
        }
    }
    Ok(g.finish(&net.name))
}

/// Deterministic weights per model name, so two exports of the same network are identical.
fn seed_of(name: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 32 bytes"))
}

fn dims_with_batch(batch: usize, shape: &[usize]) -> Vec<i64> {
    std::iter::once(batch as i64).chain(shape.iter().map(|&d| d as i64)).collect()
}

fn value_info(name: &str, batch: usize, shape: &[usize]) -> ValueInfoProto {
    let dim = dims_with_batch(batch, shape)
        .into_iter()
        .map(|d| tensor_shape_proto::Dimension {
            denotation: String::new(),
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
        doc_string: String::new(),
    }
}

/// The static shape of a graph input or output written by [`value_info`] (batch first); `None` when a
/// dimension is symbolic or missing.
pub fn value_info_shape(info: &ValueInfoProto) -> Option<Vec<i64>> {
    let Some(type_proto::Value::TensorType(tensor)) = info.r#type.as_ref()?.value.as_ref() else { return None };
    tensor
        .shape
        .as_ref()?
        .dim
        .iter()
        .map(|d| match d.value {
            Some(tensor_shape_proto::dimension::Value::DimValue(v)) if v >= 0 => Some(v),
            _ => None,
        })
        .collect()
}

fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Int as i32, i, ..Default::default() }
}

fn attr_ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Ints as i32, ints: ints.to_vec(), ..Default::default() }
}

fn attr_float(name: &str, f: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Float as i32, f, ..Default::default() }
}

fn pair(p: [usize; 2]) -> Vec<i64> {
    vec![p[0] as i64, p[1] as i64]
}

/// perfmodel pads are `[top, bottom, left, right]`; ONNX wants `[top, left, bottom, right]`.
fn onnx_pads(p: [usize; 4]) -> Vec<i64> {
    vec![p[0] as i64, p[2] as i64, p[1] as i64, p[3] as i64]
}

type Built = std::result::Result<(), String>;

struct GraphBuilder {
    batch: usize,
    rng: ChaCha8Rng,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    owners: HashMap<String, String>,
    /// The layer whose nodes are being emitted (owner of every node added).
    current: String,
    /// The opset the model declares: [`OPSET`], or higher when an op needs it (`LayerNormalization`: 17).
    opset: i64,
}

impl GraphBuilder {
    fn new(batch: usize, seed: u64) -> Self {
        GraphBuilder {
            batch,
            rng: ChaCha8Rng::seed_from_u64(seed),
            nodes: Vec::new(),
            initializers: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            owners: HashMap::new(),
            current: String::new(),
            opset: OPSET,
        }
    }

    fn finish(self, name: &str) -> Exported {
        let graph = GraphProto {
            node: self.nodes,
            name: name.to_string(),
            initializer: self.initializers,
            input: self.inputs,
            output: self.outputs,
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: IR_VERSION,
            opset_import: vec![OperatorSetIdProto { domain: String::new(), version: self.opset }],
            producer_name: "perfmodel".into(),
            producer_version: crate::VERSION.into(),
            graph: Some(graph),
            ..Default::default()
        };
        Exported { model, owners: self.owners }
    }

    fn node(&mut self, name: String, op_type: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) {
        self.owners.insert(name.clone(), self.current.clone());
        self.nodes.push(NodeProto {
            name,
            op_type: op_type.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.to_string()],
            attribute,
            ..Default::default()
        });
    }

    fn initializer(&mut self, name: String, dims: Vec<i64>, data_type: DataType, f: Vec<f32>, i: Vec<i64>) -> String {
        self.initializers.push(TensorProto {
            name: name.clone(),
            dims,
            data_type: data_type as i32,
            float_data: f,
            int64_data: i,
            ..Default::default()
        });
        name
    }

    fn const_f32(&mut self, name: String, dims: Vec<i64>, values: Vec<f32>) -> String {
        self.initializer(name, dims, DataType::Float, values, Vec::new())
    }

    fn const_i64(&mut self, name: String, values: Vec<i64>) -> String {
        let dims = vec![values.len() as i64];
        self.initializer(name, dims, DataType::Int64, Vec::new(), values)
    }

    /// Uniform in ±sqrt(3 / fan_in): unit-variance outputs for unit-variance inputs. Large tensors repeat a
    /// random block (values do not matter to timing as long as they are normal floats; filling 100M weights
    /// one random number at a time made exporting VGG-sized networks take minutes).
    fn random(&mut self, name: String, dims: Vec<i64>, fan_in: usize) -> String {
        const BLOCK: usize = 4096;
        let count = dims.iter().product::<i64>() as usize;
        let limit = (3.0 / fan_in.max(1) as f32).sqrt();
        let block: Vec<f32> = (0..count.min(BLOCK)).map(|_| self.rng.random_range(-limit..limit)).collect();
        let mut values = Vec::with_capacity(count);
        while values.len() < count {
            let take = (count - values.len()).min(block.len());
            values.extend_from_slice(&block[..take]);
        }
        self.const_f32(name, dims, values)
    }

    /// Emit the nodes of one layer reading `inputs` (tensor names) and producing the tensor `name`.
    fn layer(&mut self, name: &str, op: &Op, inputs: &[String], shapes: &[Shape]) -> Built {
        self.current = name.to_string();
        let x = inputs[0].as_str();
        let channels = shapes[0].first().copied().unwrap_or(1);
        match op {
            Op::Conv2d(c) => self.grouped_conv(name, x, c, &shapes[0]),
            Op::DepthwiseConv2d(d) => {
                // ONNX has no depthwise op: it is a grouped convolution with one group per input channel.
                let c = Conv2d {
                    filters: channels * d.depth_multiplier,
                    kernel: d.kernel,
                    strides: d.strides,
                    dilation: d.dilation,
                    groups: channels,
                    padding: d.padding,
                    use_bias: d.use_bias,
                    activation: d.activation,
                };
                self.grouped_conv(name, x, &c, &shapes[0]);
            }
            Op::Dense(d) => {
                let w = self.random(format!("{name}/weight"), vec![channels as i64, d.units as i64], channels);
                let mut ins = vec![x.to_string(), w];
                if d.use_bias {
                    ins.push(self.random(format!("{name}/bias"), vec![d.units as i64], channels));
                }
                let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
                self.with_activation(name, d.activation, |g, out| g.node(name.to_string(), "Gemm", &ins, out, vec![]));
            }
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                let pads = p.padding.resolve([shapes[0][1], shapes[0][2]], p.pool_size, p.strides, [1, 1]);
                let mut attrs = vec![
                    attr_ints("kernel_shape", &pair(p.pool_size)),
                    attr_ints("strides", &pair(p.strides)),
                    attr_ints("pads", &onnx_pads(pads)),
                ];
                let op_type = if matches!(op, Op::MaxPool2d(_)) {
                    "MaxPool"
                } else {
                    attrs.push(attr_int("count_include_pad", 0));
                    "AveragePool"
                };
                self.node(name.to_string(), op_type, &[x], name, attrs);
            }
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => {
                let op_type = if matches!(op, Op::GlobalAvgPool2d) { "GlobalAveragePool" } else { "GlobalMaxPool" };
                let pooled = format!("{name}/pooled");
                self.node(name.to_string(), op_type, &[x], &pooled, vec![]);
                self.node(format!("{name}/flatten"), "Flatten", &[&pooled], name, vec![attr_int("axis", 1)]);
            }
            Op::Flatten => self.node(name.to_string(), "Flatten", &[x], name, vec![attr_int("axis", 1)]),
            Op::Reshape { target_shape } => {
                let mut dims = vec![self.batch as i64];
                dims.extend(target_shape);
                let shape = self.const_i64(format!("{name}/shape"), dims);
                self.node(name.to_string(), "Reshape", &[x, &shape], name, vec![]);
            }
            Op::Add | Op::Multiply => {
                let aligned = self.align_ranks(name, inputs, shapes);
                let ins: Vec<&str> = aligned.iter().map(String::as_str).collect();
                match (op, ins.len()) {
                    (Op::Add, 2) => self.node(name.to_string(), "Add", &ins, name, vec![]),
                    (Op::Add, _) => self.node(name.to_string(), "Sum", &ins, name, vec![]),
                    _ => {
                        // ONNX Mul is binary: chain it, the last product being the layer's output.
                        let mut acc = ins[0].to_string();
                        for (k, next) in ins.iter().enumerate().skip(1) {
                            let last = k + 1 == ins.len();
                            let (node, out) = if last {
                                (name.to_string(), name.to_string())
                            } else {
                                (format!("{name}/mul{k}"), format!("{name}/mul{k}"))
                            };
                            self.node(node, "Mul", &[&acc, next], &out, vec![]);
                            acc = out;
                        }
                    }
                }
            }
            Op::Concat { axis } => {
                let rank = shapes[0].len() as i64;
                let axis = if *axis < 0 { axis + rank } else { *axis };
                let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
                self.node(name.to_string(), "Concat", &ins, name, vec![attr_int("axis", axis + 1)]);
            }
            Op::Activation(a) => self.activation(name, *a, x, name, true),
            Op::BatchNorm => {
                // Statistics like a trained network's, one value per channel: with identity ones (scale 1, shift
                // 0, mean 0, variance 1) tract turns the layer into a multiply by one scalar and drops the add,
                // which no trained network's batch norm is.
                let c = channels as i64;
                let mut per_channel = |low: f32, high: f32| -> Vec<f32> {
                    (0..channels).map(|_| self.rng.random_range(low..high)).collect()
                };
                let (scale_v, bias_v) = (per_channel(0.5, 1.5), per_channel(-0.5, 0.5));
                let (mean_v, var_v) = (per_channel(-0.5, 0.5), per_channel(0.5, 1.5));
                let scale = self.const_f32(format!("{name}/scale"), vec![c], scale_v);
                let bias = self.const_f32(format!("{name}/bias"), vec![c], bias_v);
                let mean = self.const_f32(format!("{name}/mean"), vec![c], mean_v);
                let var = self.const_f32(format!("{name}/var"), vec![c], var_v);
                let attrs = vec![attr_float("epsilon", 1e-3)];
                self.node(name.to_string(), "BatchNormalization", &[x, &scale, &bias, &mean, &var], name, attrs);
            }
            Op::ZeroPadding2d { padding } => {
                let [t, b, l, r] = padding.map(|p| p as i64);
                let pads = self.const_i64(format!("{name}/pads"), vec![0, 0, t, l, 0, 0, b, r]);
                self.node(name.to_string(), "Pad", &[x, &pads], name, vec![]);
            }
            Op::Cropping2d { cropping } => {
                let [t, b, l, r] = cropping.map(|p| p as i64);
                let (h, w) = (shapes[0][1] as i64, shapes[0][2] as i64);
                let starts = self.const_i64(format!("{name}/starts"), vec![t, l]);
                let ends = self.const_i64(format!("{name}/ends"), vec![h - b, w - r]);
                let axes = self.const_i64(format!("{name}/axes"), vec![2, 3]);
                self.node(name.to_string(), "Slice", &[x, &starts, &ends, &axes], name, vec![]);
            }
            Op::ChannelShuffle { groups } => {
                // As PyTorch writes it: [N, g, C/g, H, W], swap the two channel axes, back to [N, C, H, W].
                let (g, input) = (*groups as i64, dims_with_batch(self.batch, &shapes[0]));
                let mut grouped = vec![input[0], g, input[1] / g];
                grouped.extend(&input[2..]);
                let grouped = self.const_i64(format!("{name}/grouped"), grouped);
                let split = format!("{name}/split");
                self.node(split.clone(), "Reshape", &[x, &grouped], &split, vec![]);
                let perm: Vec<i64> = [0, 2, 1].into_iter().chain(3..input.len() as i64 + 1).collect();
                let swapped = format!("{name}/swap");
                self.node(swapped.clone(), "Transpose", &[&split], &swapped, vec![attr_ints("perm", &perm)]);
                let back = self.const_i64(format!("{name}/shape"), input);
                self.node(name.to_string(), "Reshape", &[&swapped, &back], name, vec![]);
            }
            Op::MatMul { units: Some(units), use_bias } => {
                // As PyTorch writes nn.Linear on a sequence: MatMul by the transposed weight, then Add the bias.
                let k = shapes[0].last().copied().unwrap_or(1);
                let w = self.random(format!("{name}/weight"), vec![k as i64, *units as i64], k);
                if *use_bias {
                    let product = format!("{name}/matmul");
                    self.node(product.clone(), "MatMul", &[x, &w], &product, vec![]);
                    let bias = self.random(format!("{name}/bias"), vec![*units as i64], k);
                    self.node(name.to_string(), "Add", &[&product, &bias], name, vec![]);
                } else {
                    self.node(name.to_string(), "MatMul", &[x, &w], name, vec![]);
                }
            }
            Op::MatMul { units: None, .. } => {
                self.node(name.to_string(), "MatMul", &[x, inputs[1].as_str()], name, vec![]);
            }
            Op::LayerNorm { axis, epsilon } => {
                let rank = shapes[0].len();
                let axis = crate::layer::resolve_axis(*axis, rank).map_err(|e| e.message)?;
                let normalized: Vec<i64> = shapes[0][axis..].iter().map(|&d| d as i64).collect();
                let size = normalized.iter().product::<i64>() as usize;
                let mut values =
                    |low: f32, high: f32| -> Vec<f32> { (0..size).map(|_| self.rng.random_range(low..high)).collect() };
                let (scale_v, bias_v) = (values(0.5, 1.5), values(-0.5, 0.5));
                let scale = self.const_f32(format!("{name}/scale"), normalized.clone(), scale_v);
                let bias = self.const_f32(format!("{name}/bias"), normalized, bias_v);
                self.opset = self.opset.max(17);
                let attrs = vec![attr_int("axis", axis as i64 + 1), attr_float("epsilon", *epsilon as f32)];
                self.node(name.to_string(), "LayerNormalization", &[x, &scale, &bias], name, attrs);
            }
            Op::Softmax { axis } => {
                let axis = crate::layer::resolve_axis(*axis, shapes[0].len()).map_err(|e| e.message)?;
                self.node(name.to_string(), "Softmax", &[x], name, vec![attr_int("axis", axis as i64 + 1)]);
            }
            Op::Embedding { vocab, features } => {
                // The network's inputs are f32: ids in [0, vocab) from them (|x| · (vocab - 1), truncated), spread
                // over the table as real token ids are.
                let (abs, scaled, ids) = (format!("{name}/abs"), format!("{name}/scaled"), format!("{name}/ids"));
                self.node(abs.clone(), "Abs", &[x], &abs, vec![]);
                let top = self.const_f32(format!("{name}/top"), vec![], vec![(*vocab - 1) as f32]);
                self.node(scaled.clone(), "Mul", &[&abs, &top], &scaled, vec![]);
                self.node(ids.clone(), "Cast", &[&scaled], &ids, vec![attr_int("to", DataType::Int64 as i64)]);
                let table = self.random(format!("{name}/table"), vec![*vocab as i64, *features as i64], *features);
                self.node(name.to_string(), "Gather", &[&table, &ids], name, vec![attr_int("axis", 0)]);
            }
            Op::Elementwise { function, constant_shape } => {
                // A constant away from 0 (a divisor too), broadcast from the right over [N, ...input].
                let count = constant_shape.iter().product::<usize>();
                let values: Vec<f32> = (0..count).map(|_| self.rng.random_range(0.5..1.5)).collect();
                let dims = constant_shape.iter().map(|&d| d as i64).collect();
                let constant = self.const_f32(format!("{name}/constant"), dims, values);
                self.node(name.to_string(), function.onnx_op(), &[x, &constant], name, vec![]);
            }
            Op::Transpose { perm } => {
                let perm: Vec<i64> = [0].into_iter().chain(perm.iter().map(|&p| p as i64 + 1)).collect();
                self.node(name.to_string(), "Transpose", &[x], name, vec![attr_ints("perm", &perm)]);
            }
            Op::ChannelSlice { start, end } => {
                let starts = self.const_i64(format!("{name}/starts"), vec![*start as i64]);
                let ends = self.const_i64(format!("{name}/ends"), vec![*end as i64]);
                let axes = self.const_i64(format!("{name}/axes"), vec![1]);
                self.node(name.to_string(), "Slice", &[x, &starts, &ends, &axes], name, vec![]);
            }
            Op::Dropout { rate } => {
                let ratio = self.const_f32(format!("{name}/ratio"), vec![], vec![*rate as f32]);
                self.node(name.to_string(), "Dropout", &[x, &ratio], name, vec![]);
            }
            Op::Unsupported { op_type, .. } => {
                return Err(format!(
                    "an 'unsupported' layer (ONNX op '{op_type}') has no executable form; \
                     replace it with supported layers to run the network"
                ))
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        name: &str,
        x: &str,
        weight_dims: Vec<i64>,
        fan_in: usize,
        groups: usize,
        kernel: [usize; 2],
        strides: [usize; 2],
        dilation: [usize; 2],
        pads: [usize; 4],
        use_bias: bool,
        activation: Activation,
    ) {
        let filters = weight_dims[0];
        let w = self.random(format!("{name}/weight"), weight_dims, fan_in);
        let mut ins = vec![x.to_string(), w];
        if use_bias {
            ins.push(self.random(format!("{name}/bias"), vec![filters], fan_in));
        }
        let attrs = vec![
            attr_ints("kernel_shape", &pair(kernel)),
            attr_ints("strides", &pair(strides)),
            attr_ints("dilations", &pair(dilation)),
            attr_ints("pads", &onnx_pads(pads)),
            attr_int("group", groups as i64),
        ];
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        self.with_activation(name, activation, |g, out| g.node(name.to_string(), "Conv", &ins, out, attrs));
    }

    /// A (grouped) convolution of a `[C, H, W]` input, with weights and bias from the seeded generator.
    fn grouped_conv(&mut self, name: &str, x: &str, c: &Conv2d, input: &[usize]) {
        let in_per_group = input[0] / c.groups;
        let weight_dims = vec![c.filters as i64, in_per_group as i64, c.kernel[0] as i64, c.kernel[1] as i64];
        let fan_in = in_per_group * c.kernel[0] * c.kernel[1];
        let pads = c.padding.resolve([input[1], input[2]], c.kernel, c.strides, c.dilation);
        self.conv(
            name,
            x,
            weight_dims,
            fan_in,
            c.groups,
            c.kernel,
            c.strides,
            c.dilation,
            pads,
            c.use_bias,
            c.activation,
        );
    }

    /// Emit a layer's main node through `main(graph, output_tensor)`, followed by its fused activation.
    fn with_activation(&mut self, name: &str, activation: Activation, main: impl FnOnce(&mut Self, &str)) {
        if activation == Activation::Linear {
            main(self, name);
        } else {
            let pre = format!("{name}/preact");
            main(self, &pre);
            self.activation(name, activation, &pre, name, false);
        }
    }

    /// Nodes computing `activation(x)` into `out`. The final node is named `<layer>` when the activation is the
    /// layer itself (`standalone`), else `<layer>/<function>`; helper nodes get further suffixes.
    fn activation(&mut self, layer: &str, activation: Activation, x: &str, out: &str, standalone: bool) {
        let func = activation.as_str();
        let last = if standalone { layer.to_string() } else { format!("{layer}/{func}") };
        let part = |p: &str| format!("{layer}/{func}_{p}");
        match activation {
            Activation::Linear => self.node(last, "Identity", &[x], out, vec![]),
            Activation::Relu => self.node(last, "Relu", &[x], out, vec![]),
            Activation::Relu6 => {
                let lo = self.const_f32(part("min"), vec![], vec![0.0]);
                let hi = self.const_f32(part("max"), vec![], vec![6.0]);
                self.node(last, "Clip", &[x, &lo, &hi], out, vec![]);
            }
            Activation::LeakyRelu => {
                self.node(last, "LeakyRelu", &[x], out, vec![attr_float("alpha", LEAKY_RELU_ALPHA)])
            }
            Activation::Elu => self.node(last, "Elu", &[x], out, vec![attr_float("alpha", 1.0)]),
            Activation::Sigmoid => self.node(last, "Sigmoid", &[x], out, vec![]),
            Activation::HardSigmoid => self.node(last, "HardSigmoid", &[x], out, vec![]),
            Activation::Tanh => self.node(last, "Tanh", &[x], out, vec![]),
            Activation::HardSwish => self.node(last, "HardSwish", &[x], out, vec![]),
            Activation::Softmax => self.node(last, "Softmax", &[x], out, vec![attr_int("axis", 1)]),
            Activation::Swish => {
                let sig = part("sigmoid");
                self.node(sig.clone(), "Sigmoid", &[x], &sig, vec![]);
                self.node(last, "Mul", &[x, &sig], out, vec![]);
            }
            Activation::Gelu => {
                // x * 0.5 * (1 + erf(x / sqrt(2)))
                let sqrt2 = self.const_f32(part("sqrt2"), vec![], vec![std::f32::consts::SQRT_2]);
                let one = self.const_f32(part("one"), vec![], vec![1.0]);
                let half = self.const_f32(part("half"), vec![], vec![0.5]);
                let (div, erf, add, mul) = (part("div"), part("erf"), part("add"), part("mul"));
                self.node(div.clone(), "Div", &[x, &sqrt2], &div, vec![]);
                self.node(erf.clone(), "Erf", &[&div], &erf, vec![]);
                self.node(add.clone(), "Add", &[&erf, &one], &add, vec![]);
                self.node(mul.clone(), "Mul", &[x, &add], &mul, vec![]);
                self.node(last, "Mul", &[&mul, &half], out, vec![]);
            }
        }
    }

    /// perfmodel broadcasts batch-less shapes from the right; with the batch in front, a lower-rank input must
    /// first get leading unit dimensions (`[N, 1, .., dims]`) or ONNX would align it against the batch.
    fn align_ranks(&mut self, name: &str, inputs: &[String], shapes: &[Shape]) -> Vec<String> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut out = Vec::with_capacity(inputs.len());
        for (k, (input, shape)) in inputs.iter().zip(shapes).enumerate() {
            if shape.len() == rank {
                out.push(input.clone());
                continue;
            }
            let mut dims = vec![self.batch as i64];
            dims.extend(std::iter::repeat_n(1, rank - shape.len()));
            dims.extend(shape.iter().map(|&d| d as i64));
            let target = self.const_i64(format!("{name}/rank{k}_shape"), dims);
            let reshaped = format!("{name}/rank{k}");
            self.node(reshaped.clone(), "Reshape", &[input, &target], &reshaped, vec![]);
            out.push(reshaped);
        }
        out
    }
}
