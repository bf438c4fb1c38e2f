//! The net.json form of one layer. Each kind of op has one spec struct that serde both reads a layer object into
//! and writes one from, so an op's keys, their types and their spelling are declared once.
//!
//! serde decides whether a value fits a field's type; a value that does not is reported in perfmodel's own words
//! (`field 'kernel': expected an integer or [height, width], got [3]`), which network errors turn into messages
//! naming the file, the layer and the field. A layer's fields are checked in a fixed order — the type, then each
//! field in the order of its spec (missing or ill-typed), then unknown keys, then ranges ([`Op::validate`]) — so the
//! error reported for a layer with several faults does not depend on the order of its keys.

use super::{
    Activation, Conv2d, Dense, DepthwiseConv2d, ElementwiseFn, LResult, LayerConfig, LayerError, LayerType, Op,
    Padding, Pool2d, Shape,
};
use serde::de::{DeserializeOwned, Error as _, IgnoredAny, Unexpected};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Map, Value};

impl Op {
    /// Parse one net.json layer object (without `name` / `inputs`, which the network handles).
    pub fn from_json(obj: &Map<String, Value>) -> LResult<Op> {
        let type_name: String = deserialize::<Head>(obj)?.ty.required("type")?;
        let ty = LayerType::parse(&type_name).ok_or_else(|| {
            LayerError::at("type", format!("unknown layer type '{type_name}' (known: {})", LayerType::names_list()))
        })?;
        match ty {
            LayerType::Conv2d => read(obj, ty, Conv2dSpec::op),
            LayerType::DepthwiseConv2d => read(obj, ty, DepthwiseConv2dSpec::op),
            LayerType::Dense => read(obj, ty, DenseSpec::op),
            LayerType::MaxPool2d => read(obj, ty, |s: Pool2dSpec| s.pool().map(Op::MaxPool2d)),
            LayerType::AvgPool2d => read(obj, ty, |s: Pool2dSpec| s.pool().map(Op::AvgPool2d)),
            LayerType::GlobalAvgPool2d => read(obj, ty, |_: NoFields| Ok(Op::GlobalAvgPool2d)),
            LayerType::GlobalMaxPool2d => read(obj, ty, |_: NoFields| Ok(Op::GlobalMaxPool2d)),
            LayerType::Flatten => read(obj, ty, |_: NoFields| Ok(Op::Flatten)),
            LayerType::Reshape => read(obj, ty, |s: ReshapeSpec| {
                Ok(Op::Reshape { target_shape: s.target_shape.required("target_shape")? })
            }),
            LayerType::Add => read(obj, ty, |_: NoFields| Ok(Op::Add)),
            LayerType::Multiply => read(obj, ty, |_: NoFields| Ok(Op::Multiply)),
            LayerType::Concat => read(obj, ty, |s: ConcatSpec| Ok(Op::Concat { axis: s.axis.or("axis", 0)? })),
            LayerType::Activation => read(obj, ty, ActivationSpec::op),
            LayerType::BatchNorm => read(obj, ty, |_: NoFields| Ok(Op::BatchNorm)),
            LayerType::ZeroPadding2d => read(obj, ty, |s: ZeroPadding2dSpec| {
                Ok(Op::ZeroPadding2d { padding: s.padding.or("padding", [1, 1, 1, 1])? })
            }),
            LayerType::Cropping2d => read(obj, ty, |s: Cropping2dSpec| {
                Ok(Op::Cropping2d { cropping: s.cropping.or("cropping", [0, 0, 0, 0])? })
            }),
            LayerType::Dropout => read(obj, ty, |s: DropoutSpec| Ok(Op::Dropout { rate: s.rate.or("rate", 0.5)? })),
            LayerType::Unsupported => read(obj, ty, |s: UnsupportedSpec| {
                Ok(Op::Unsupported {
                    op_type: s.op_type.required("op_type")?,
                    output_shape: s.output_shape.required("output_shape")?,
                })
            }),
            LayerType::ChannelShuffle => {
                read(obj, ty, |s: ChannelShuffleSpec| Ok(Op::ChannelShuffle { groups: s.groups.required("groups")? }))
            }
            LayerType::ChannelSlice => read(obj, ty, |s: ChannelSliceSpec| {
                Ok(Op::ChannelSlice { start: s.start.or("start", 0)?, end: s.end.required("end")? })
            }),
            LayerType::MatMul => read(obj, ty, |s: MatMulSpec| {
                let units = s.units.read("units")?;
                // As nn.Linear: a constant weight comes with a bias unless told otherwise; two inputs have none.
                Ok(Op::MatMul { units, use_bias: s.use_bias.or("use_bias", units.is_some())? })
            }),
            LayerType::LayerNorm => read(obj, ty, |s: LayerNormSpec| {
                Ok(Op::LayerNorm { axis: s.axis.or("axis", -1)?, epsilon: s.epsilon.or("epsilon", 1e-5)? })
            }),
            LayerType::Softmax => read(obj, ty, |s: SoftmaxSpec| Ok(Op::Softmax { axis: s.axis.or("axis", -1)? })),
            LayerType::Transpose => {
                read(obj, ty, |s: TransposeSpec| Ok(Op::Transpose { perm: s.perm.required("perm")? }))
            }
            LayerType::Embedding => read(obj, ty, |s: EmbeddingSpec| {
                Ok(Op::Embedding { vocab: s.vocab.required("vocab")?, features: s.features.required("features")? })
            }),
            LayerType::Elementwise => read(obj, ty, |s: ElementwiseSpec| {
                let name: String = s.function.required("function")?;
                let function = ElementwiseFn::parse(&name).ok_or_else(|| {
                    let known: Vec<&str> = ElementwiseFn::ALL.iter().map(|f| f.as_str()).collect();
                    LayerError::at("function", format!("unknown function '{name}' (known: {})", known.join(", ")))
                })?;
                Ok(Op::Elementwise {
                    function,
                    constant_shape: s.constant_shape.or("constant_shape", Vec::new())?.into(),
                })
            }),
        }
    }

    /// The JSON form of this op: `type` plus every hyperparameter, spelled out.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = match self {
            Op::Conv2d(c) => write(Conv2dSpec::from(c)),
            Op::DepthwiseConv2d(c) => write(DepthwiseConv2dSpec::from(c)),
            Op::Dense(d) => write(DenseSpec::from(d)),
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => write(Pool2dSpec::from(p)),
            Op::Reshape { target_shape } => write(ReshapeSpec { target_shape: given(target_shape.clone()) }),
            Op::Concat { axis } => write(ConcatSpec { axis: given(*axis) }),
            Op::Activation(a) => write(ActivationSpec { function: given(*a) }),
            Op::ZeroPadding2d { padding } => write(ZeroPadding2dSpec { padding: given(*padding) }),
            Op::Cropping2d { cropping } => write(Cropping2dSpec { cropping: given(*cropping) }),
            Op::Dropout { rate } => write(DropoutSpec { rate: given(*rate) }),
            Op::ChannelShuffle { groups } => write(ChannelShuffleSpec { groups: given(*groups) }),
            Op::ChannelSlice { start, end } => write(ChannelSliceSpec { start: given(*start), end: given(*end) }),
            Op::MatMul { units, use_bias } => {
                write(MatMulSpec { units: units.map_or(Field::Missing, |u| given(u)), use_bias: given(*use_bias) })
            }
            Op::LayerNorm { axis, epsilon } => write(LayerNormSpec { axis: given(*axis), epsilon: given(*epsilon) }),
            Op::Softmax { axis } => write(SoftmaxSpec { axis: given(*axis) }),
            Op::Transpose { perm } => write(TransposeSpec { perm: given(perm.clone()) }),
            Op::Embedding { vocab, features } => {
                write(EmbeddingSpec { vocab: given(*vocab), features: given(*features) })
            }
            Op::Elementwise { function, constant_shape } => write(ElementwiseSpec {
                function: given(function.as_str().to_string()),
                constant_shape: given(constant_shape.to_vec()),
            }),
            Op::Unsupported { op_type, output_shape } => {
                write(UnsupportedSpec { op_type: given(op_type.clone()), output_shape: given(output_shape.to_vec()) })
            }
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d | Op::Flatten | Op::Add | Op::Multiply | Op::BatchNorm => {
                write(NoFields {})
            }
        };
        m.insert("type".into(), json!(self.layer_type().as_str()));
        m
    }
}

impl LayerConfig {
    /// JSON form: the op's fields plus `input_shapes` and `batch_size`.
    pub fn to_json(&self) -> Value {
        let mut m = self.op.to_json();
        m.insert("input_shapes".into(), json!(self.input_shapes));
        m.insert("batch_size".into(), json!(self.batch));
        Value::Object(m)
    }

    pub fn from_json(v: &Value) -> LResult<LayerConfig> {
        let obj = v.as_object().ok_or_else(|| LayerError::new(None, format!("expected a JSON object, got {v}")))?;
        let mut op_obj = obj.clone();
        let shapes = op_obj.remove("input_shapes").ok_or_else(|| missing("input_shapes"))?;
        let batch = op_obj.remove("batch_size").unwrap_or(json!(1));
        let input_shapes: Vec<Shape> = serde_json::from_value(shapes)
            .map_err(|e| LayerError::at("input_shapes", format!("expected a list of shapes: {e}")))?;
        let batch = batch
            .as_u64()
            .filter(|&b| b > 0)
            .ok_or_else(|| LayerError::at("batch_size", format!("expected a positive integer, got {batch}")))?
            as usize;
        let op = Op::from_json(&op_obj)?;
        let config = LayerConfig::new(op, input_shapes, batch);
        config.cost()?;
        Ok(config)
    }
}

/// Read a layer object of type `ty` into its spec `S` and build the op: the spec's fields in order, then keys
/// no spec of this type knows, then the op's ranges.
fn read<S: Spec>(obj: &Map<String, Value>, ty: LayerType, op: impl FnOnce(S) -> LResult<Op>) -> LResult<Op> {
    let object: Object<S> = deserialize(obj)?;
    let op = op(object.spec)?;
    if let Some(key) = object.unknown.keys().next() {
        let mut known = keys::<S>();
        known.extend(["inputs".to_string(), "name".to_string()]);
        known.sort();
        return Err(LayerError::new(Some(key), format!("unknown key for a {ty} layer (known: {})", known.join(", "))));
    }
    op.validate()?;
    Ok(op)
}

/// Deserialize a layer object into a struct whose fields are all [`Field`]s, [`IgnoredAny`] or a map of the rest:
/// none of them fails, so neither does this in practice; a failure is still an error, never a panic.
fn deserialize<T: DeserializeOwned>(obj: &Map<String, Value>) -> LResult<T> {
    T::deserialize(obj).map_err(|e| LayerError::new(None, format!("invalid layer object: {e}")))
}

/// The JSON object of a spec: plain numbers, strings and lists, which always serialise.
fn write(spec: impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(spec) {
        Ok(Value::Object(m)) => m,
        other => unreachable!("a layer spec serialises to a JSON object, got {other:?}"),
    }
}

/// The keys of spec `S`. A spec writes every key it reads, so those of a default spec (each written as null).
fn keys<S: Spec>() -> Vec<String> {
    write(S::default()).into_iter().map(|(key, _)| key).collect()
}

fn missing(key: &str) -> LayerError {
    LayerError::at(key, "missing required field")
}

/// The key every layer object is read by first.
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "type", default)]
    ty: Field<String>,
}

/// A whole layer object: the keys every layer may have, the op's spec, and the keys left over (unknown).
#[derive(Deserialize)]
struct Object<S> {
    #[serde(rename = "type")]
    _type: Option<IgnoredAny>,
    /// `name` and `inputs` belong to the network, which reads them itself.
    #[serde(rename = "name")]
    _name: Option<IgnoredAny>,
    #[serde(rename = "inputs")]
    _inputs: Option<IgnoredAny>,
    #[serde(flatten)]
    spec: S,
    #[serde(flatten)]
    unknown: Map<String, Value>,
}

/// The typed keys of one kind of op: read with every field defaulting to [`Field::Missing`], written whole.
trait Spec: Serialize + DeserializeOwned + Default {}
impl<S: Serialize + DeserializeOwned + Default> Spec for S {}

/// One key of a layer object as serde read it.
#[derive(Debug, Default)]
enum Field<T> {
    /// The key is absent.
    #[default]
    Missing,
    /// The key is `null`: read as absent (only an activation layer's `function` tells the two apart).
    Null,
    Given(T),
    /// A value that is not a `T`, kept for the message.
    Wrong(Value),
}

fn given<T>(value: impl Into<T>) -> Field<T> {
    Field::Given(value.into())
}

impl<T: Wire> Field<T> {
    /// The value, `None` when absent or null, or the field's error when it is not a `T`.
    fn read(self, key: &str) -> LResult<Option<T>> {
        match self {
            Field::Missing | Field::Null => Ok(None),
            Field::Given(value) => Ok(Some(value)),
            Field::Wrong(value) => Err(LayerError::at(key, T::mismatch(&value))),
        }
    }

    fn or<U>(self, key: &str, default: U) -> LResult<U>
    where
        T: Into<U>,
    {
        Ok(self.read(key)?.map_or(default, Into::into))
    }

    fn required<U>(self, key: &str) -> LResult<U>
    where
        T: Into<U>,
    {
        self.read(key)?.map(Into::into).ok_or_else(|| missing(key))
    }
}

impl<'de, T: Wire> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(deserializer)? {
            Value::Null => Field::Null,
            value => match T::deserialize(&value) {
                Ok(typed) => Field::Given(typed),
                Err(_) => Field::Wrong(value),
            },
        })
    }
}

impl<T: Serialize> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Given(value) => value.serialize(serializer),
            Field::Wrong(value) => value.serialize(serializer),
            Field::Missing | Field::Null => serializer.serialize_none(),
        }
    }
}

/// A type a field is read as: serde decides whether a value is one; `mismatch` says why a value is not.
trait Wire: DeserializeOwned {
    fn mismatch(value: &Value) -> String;
}

/// The first of `items` that is not a `T`.
fn first_wrong<T: Wire>(items: &[Value]) -> Option<&Value> {
    items.iter().find(|x| T::deserialize(*x).is_err())
}

impl Wire for usize {
    fn mismatch(v: &Value) -> String {
        format!("expected a non-negative integer, got {v}")
    }
}

impl Wire for i64 {
    fn mismatch(v: &Value) -> String {
        format!("expected an integer, got {v}")
    }
}

impl Wire for f64 {
    fn mismatch(v: &Value) -> String {
        format!("expected a number, got {v}")
    }
}

impl Wire for bool {
    fn mismatch(v: &Value) -> String {
        format!("expected true or false, got {v}")
    }
}

impl Wire for String {
    fn mismatch(v: &Value) -> String {
        format!("expected a string, got {v}")
    }
}

impl Wire for Vec<i64> {
    fn mismatch(v: &Value) -> String {
        match v {
            Value::Array(items) => first_wrong::<i64>(items).map(|x| format!("expected integers, got {x}")),
            _ => None,
        }
        .unwrap_or_else(|| format!("expected a list of integers, got {v}"))
    }
}

impl Wire for Vec<usize> {
    fn mismatch(v: &Value) -> String {
        match v {
            Value::Array(items) => first_wrong::<usize>(items).map(usize::mismatch),
            _ => None,
        }
        .unwrap_or_else(|| format!("expected a list of integers, got {v}"))
    }
}

/// `n` (for both axes) or `[height, width]`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Pair {
    Both(usize),
    HeightWidth([usize; 2]),
}

impl Wire for Pair {
    fn mismatch(v: &Value) -> String {
        match v {
            Value::Number(_) => Some(usize::mismatch(v)),
            Value::Array(items) if items.len() == 2 => first_wrong::<usize>(items).map(usize::mismatch),
            _ => None,
        }
        .unwrap_or_else(|| format!("expected an integer or [height, width], got {v}"))
    }
}

impl From<Pair> for [usize; 2] {
    fn from(pair: Pair) -> Self {
        match pair {
            Pair::Both(n) => [n, n],
            Pair::HeightWidth(hw) => hw,
        }
    }
}

impl From<[usize; 2]> for Pair {
    fn from(hw: [usize; 2]) -> Self {
        Pair::HeightWidth(hw)
    }
}

/// `n` (every side), `[h, w]` (symmetric) or `[top, bottom, left, right]`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Quad {
    All(usize),
    HeightWidth([usize; 2]),
    Sides([usize; 4]),
}

impl Wire for Quad {
    fn mismatch(v: &Value) -> String {
        match v {
            Value::Number(_) => Some(usize::mismatch(v)),
            Value::Array(items) if items.len() == 2 || items.len() == 4 => {
                first_wrong::<usize>(items).map(usize::mismatch)
            }
            _ => None,
        }
        .unwrap_or_else(|| format!("expected n, [h, w] or [top, bottom, left, right], got {v}"))
    }
}

impl From<Quad> for [usize; 4] {
    fn from(quad: Quad) -> Self {
        match quad {
            Quad::All(n) => [n; 4],
            Quad::HeightWidth([h, w]) => [h, h, w, w],
            Quad::Sides(sides) => sides,
        }
    }
}

impl From<[usize; 4]> for Quad {
    fn from(sides: [usize; 4]) -> Self {
        Quad::Sides(sides)
    }
}

/// Spatial padding: `"valid"`, `"same"` (any case) or explicit sizes.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum PaddingSpec {
    Named(PaddingName),
    Explicit(Quad),
}

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum PaddingName {
    Valid,
    Same,
}

impl<'de> Deserialize<'de> for PaddingName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        match name.to_ascii_lowercase().as_str() {
            "valid" => Ok(PaddingName::Valid),
            "same" => Ok(PaddingName::Same),
            _ => Err(D::Error::invalid_value(Unexpected::Str(&name), &"\"valid\" or \"same\"")),
        }
    }
}

impl Wire for PaddingSpec {
    fn mismatch(v: &Value) -> String {
        match v {
            Value::String(s) => format!("expected \"valid\", \"same\" or [t, b, l, r], got \"{s}\""),
            Value::Array(_) | Value::Number(_) => Quad::mismatch(v),
            _ => format!("expected \"valid\", \"same\" or [t, b, l, r], got {v}"),
        }
    }
}

impl From<PaddingSpec> for Padding {
    fn from(spec: PaddingSpec) -> Self {
        match spec {
            PaddingSpec::Named(PaddingName::Valid) => Padding::Valid,
            PaddingSpec::Named(PaddingName::Same) => Padding::Same,
            PaddingSpec::Explicit(quad) => Padding::Explicit(quad.into()),
        }
    }
}

impl From<Padding> for PaddingSpec {
    fn from(padding: Padding) -> Self {
        match padding {
            Padding::Valid => PaddingSpec::Named(PaddingName::Valid),
            Padding::Same => PaddingSpec::Named(PaddingName::Same),
            Padding::Explicit(sides) => PaddingSpec::Explicit(sides.into()),
        }
    }
}

/// An activation by name ([`Activation::parse`]: any case, common aliases).
struct ActivationName(Activation);

impl Serialize for ActivationName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for ActivationName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Activation::parse(&name)
            .map(ActivationName)
            .ok_or_else(|| D::Error::invalid_value(Unexpected::Str(&name), &"an activation name"))
    }
}

impl Wire for ActivationName {
    fn mismatch(v: &Value) -> String {
        match v {
            Value::String(s) => format!("unknown activation '{s}' (known: {})", Activation::names_list()),
            _ => format!("expected an activation name, got {v}"),
        }
    }
}

impl From<ActivationName> for Activation {
    fn from(name: ActivationName) -> Self {
        name.0
    }
}

impl From<Activation> for ActivationName {
    fn from(activation: Activation) -> Self {
        ActivationName(activation)
    }
}

// One spec per kind of op. Each spec's `op` reads its fields in declaration order: the order errors are found in.

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct NoFields {}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Conv2dSpec {
    filters: Field<usize>,
    kernel: Field<Pair>,
    strides: Field<Pair>,
    dilation: Field<Pair>,
    groups: Field<usize>,
    padding: Field<PaddingSpec>,
    use_bias: Field<bool>,
    activation: Field<ActivationName>,
}

impl Conv2dSpec {
    fn op(self) -> LResult<Op> {
        Ok(Op::Conv2d(Conv2d {
            filters: self.filters.required("filters")?,
            kernel: self.kernel.required("kernel")?,
            strides: self.strides.or("strides", [1, 1])?,
            dilation: self.dilation.or("dilation", [1, 1])?,
            groups: self.groups.or("groups", 1)?,
            padding: self.padding.or("padding", Padding::Valid)?,
            use_bias: self.use_bias.or("use_bias", true)?,
            activation: self.activation.or("activation", Activation::Linear)?,
        }))
    }
}

impl From<&Conv2d> for Conv2dSpec {
    fn from(c: &Conv2d) -> Self {
        Conv2dSpec {
            filters: given(c.filters),
            kernel: given(c.kernel),
            strides: given(c.strides),
            dilation: given(c.dilation),
            groups: given(c.groups),
            padding: given(c.padding),
            use_bias: given(c.use_bias),
            activation: given(c.activation),
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DepthwiseConv2dSpec {
    depth_multiplier: Field<usize>,
    kernel: Field<Pair>,
    strides: Field<Pair>,
    dilation: Field<Pair>,
    padding: Field<PaddingSpec>,
    use_bias: Field<bool>,
    activation: Field<ActivationName>,
}

impl DepthwiseConv2dSpec {
    fn op(self) -> LResult<Op> {
        Ok(Op::DepthwiseConv2d(DepthwiseConv2d {
            depth_multiplier: self.depth_multiplier.or("depth_multiplier", 1)?,
            kernel: self.kernel.required("kernel")?,
            strides: self.strides.or("strides", [1, 1])?,
            dilation: self.dilation.or("dilation", [1, 1])?,
            padding: self.padding.or("padding", Padding::Valid)?,
            use_bias: self.use_bias.or("use_bias", true)?,
            activation: self.activation.or("activation", Activation::Linear)?,
        }))
    }
}

impl From<&DepthwiseConv2d> for DepthwiseConv2dSpec {
    fn from(c: &DepthwiseConv2d) -> Self {
        DepthwiseConv2dSpec {
            depth_multiplier: given(c.depth_multiplier),
            kernel: given(c.kernel),
            strides: given(c.strides),
            dilation: given(c.dilation),
            padding: given(c.padding),
            use_bias: given(c.use_bias),
            activation: given(c.activation),
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DenseSpec {
    units: Field<usize>,
    use_bias: Field<bool>,
    activation: Field<ActivationName>,
}

impl DenseSpec {
    fn op(self) -> LResult<Op> {
        Ok(Op::Dense(Dense {
            units: self.units.required("units")?,
            use_bias: self.use_bias.or("use_bias", true)?,
            activation: self.activation.or("activation", Activation::Linear)?,
        }))
    }
}

impl From<&Dense> for DenseSpec {
    fn from(d: &Dense) -> Self {
        DenseSpec { units: given(d.units), use_bias: given(d.use_bias), activation: given(d.activation) }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Pool2dSpec {
    pool_size: Field<Pair>,
    strides: Field<Pair>,
    padding: Field<PaddingSpec>,
}

impl Pool2dSpec {
    /// Keras defaults: a 2x2 pool, strides equal to the pool size.
    fn pool(self) -> LResult<Pool2d> {
        let pool_size = self.pool_size.or("pool_size", [2, 2])?;
        Ok(Pool2d {
            pool_size,
            strides: self.strides.or("strides", pool_size)?,
            padding: self.padding.or("padding", Padding::Valid)?,
        })
    }
}

impl From<&Pool2d> for Pool2dSpec {
    fn from(p: &Pool2d) -> Self {
        Pool2dSpec { pool_size: given(p.pool_size), strides: given(p.strides), padding: given(p.padding) }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ReshapeSpec {
    target_shape: Field<Vec<i64>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ConcatSpec {
    axis: Field<i64>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ActivationSpec {
    function: Field<ActivationName>,
}

impl ActivationSpec {
    /// `function` is required, yet `null` is linear.
    fn op(self) -> LResult<Op> {
        match self.function {
            Field::Missing => {
                Err(LayerError::at("function", format!("missing required field (one of {})", Activation::names_list())))
            }
            function => Ok(Op::Activation(function.or("function", Activation::Linear)?)),
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ZeroPadding2dSpec {
    padding: Field<Quad>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Cropping2dSpec {
    cropping: Field<Quad>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DropoutSpec {
    rate: Field<f64>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ChannelShuffleSpec {
    groups: Field<usize>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ChannelSliceSpec {
    start: Field<usize>,
    end: Field<usize>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct MatMulSpec {
    units: Field<usize>,
    use_bias: Field<bool>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct LayerNormSpec {
    axis: Field<i64>,
    epsilon: Field<f64>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct SoftmaxSpec {
    axis: Field<i64>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct TransposeSpec {
    perm: Field<Vec<usize>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct EmbeddingSpec {
    vocab: Field<usize>,
    features: Field<usize>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ElementwiseSpec {
    function: Field<String>,
    constant_shape: Field<Vec<usize>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct UnsupportedSpec {
    op_type: Field<String>,
    output_shape: Field<Vec<usize>>,
}

#[cfg(test)]
mod tests {
    use crate::layer::tests::conv;
    use crate::layer::*;
    use serde_json::{Map, Value};

    #[test]
    fn json_round_trip_and_precise_errors() {
        let op = conv(16, 3, 2, Padding::Explicit([1, 0, 1, 0]));
        let back = Op::from_json(&op.to_json()).unwrap();
        assert_eq!(op, back);
        let bad: Map<String, Value> = serde_json::from_str(r#"{"type":"conv2d","filters":8,"kernal":[3,3]}"#).unwrap();
        let err = Op::from_json(&bad).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("kernel"));
        let bad: Map<String, Value> =
            serde_json::from_str(r#"{"type":"conv2d","filters":8,"kernel":[3,3],"kernal":1}"#).unwrap();
        assert_eq!(Op::from_json(&bad).unwrap_err().field.as_deref(), Some("kernal"));
        let err = conv(8, 7, 1, Padding::Valid).output_shape(&[smallvec::smallvec![3, 5, 5]]).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("kernel"));
        assert!(err.message.contains("larger than the padded input"), "{err}");
    }

    fn error(text: &str) -> String {
        let obj: Map<String, Value> = serde_json::from_str(text).unwrap();
        Op::from_json(&obj).unwrap_err().to_string()
    }

    #[test]
    fn every_op_is_written_with_the_keys_it_is_read_by() {
        let mut depthwise = DepthwiseConv2d::new([3, 1]);
        depthwise.padding = Padding::Same;
        depthwise.activation = Activation::HardSwish;
        let ops = [
            conv(16, 3, 2, Padding::Explicit([1, 0, 1, 0])),
            Op::DepthwiseConv2d(depthwise),
            Op::Dense(Dense { units: 3, use_bias: false, activation: Activation::Softmax }),
            Op::MaxPool2d(Pool2d::new([3, 3])),
            Op::AvgPool2d(Pool2d { pool_size: [2, 2], strides: [1, 1], padding: Padding::Same }),
            Op::GlobalAvgPool2d,
            Op::GlobalMaxPool2d,
            Op::Flatten,
            Op::Reshape { target_shape: vec![4, -1] },
            Op::Add,
            Op::Multiply,
            Op::Concat { axis: -1 },
            Op::Activation(Activation::Gelu),
            Op::BatchNorm,
            Op::ZeroPadding2d { padding: [0, 1, 2, 3] },
            Op::Cropping2d { cropping: [1, 1, 0, 0] },
            Op::Dropout { rate: 0.25 },
            Op::Unsupported { op_type: "Einsum".into(), output_shape: smallvec::smallvec![2, 3] },
            Op::ChannelShuffle { groups: 2 },
            Op::ChannelSlice { start: 4, end: 8 },
            Op::MatMul { units: Some(64), use_bias: true },
            Op::LayerNorm { axis: -1, epsilon: 1e-6 },
            Op::Softmax { axis: 1 },
            Op::Transpose { perm: vec![1, 0, 2] },
            Op::Elementwise { function: ElementwiseFn::Div, constant_shape: smallvec::smallvec![197, 1] },
            Op::Embedding { vocab: 30522, features: 768 },
        ];
        assert_eq!(ops.len(), LayerType::ALL.len());
        for op in ops {
            let mut obj = op.to_json();
            assert_eq!(Op::from_json(&obj).unwrap(), op);
            obj.insert("zzz".into(), Value::Null);
            let err = error(&Value::Object(obj.clone()).to_string());
            let mut known: Vec<&str> =
                obj.keys().map(String::as_str).filter(|k| !["type", "zzz"].contains(k)).collect();
            known.extend(["inputs", "name"]);
            known.sort();
            let ty = op.layer_type();
            assert_eq!(err, format!("field 'zzz': unknown key for a {ty} layer (known: {})", known.join(", ")));
        }
    }

    #[test]
    fn wrong_values_are_named_and_worded_as_before() {
        let cases = [
            (r#"{"filters":8}"#, "field 'type': missing required field"),
            (r#"{"type":3}"#, "field 'type': expected a string, got 3"),
            (
                r#"{"type":"conv2d","filters":-8,"kernel":3}"#,
                "field 'filters': expected a non-negative integer, got -8",
            ),
            (
                r#"{"type":"conv2d","filters":8,"kernel":[3,"a"]}"#,
                r#"field 'kernel': expected a non-negative integer, got "a""#,
            ),
            (
                r#"{"type":"conv2d","filters":8,"kernel":[3]}"#,
                "field 'kernel': expected an integer or [height, width], got [3]",
            ),
            (
                r#"{"type":"conv2d","filters":8,"kernel":3,"padding":"Full"}"#,
                r#"field 'padding': expected "valid", "same" or [t, b, l, r], got "Full""#,
            ),
            (
                r#"{"type":"conv2d","filters":8,"kernel":3,"padding":[1,2,3]}"#,
                "field 'padding': expected n, [h, w] or [top, bottom, left, right], got [1,2,3]",
            ),
            (r#"{"type":"dense","units":2,"use_bias":1}"#, "field 'use_bias': expected true or false, got 1"),
            (r#"{"type":"dense","units":2,"activation":7}"#, "field 'activation': expected an activation name, got 7"),
            (r#"{"type":"reshape","target_shape":[2,"x"]}"#, r#"field 'target_shape': expected integers, got "x""#),
            (r#"{"type":"reshape","target_shape":2}"#, "field 'target_shape': expected a list of integers, got 2"),
            (r#"{"type":"concat","axis":1.5}"#, "field 'axis': expected an integer, got 1.5"),
            (r#"{"type":"dropout","rate":"x"}"#, r#"field 'rate': expected a number, got "x""#),
            (
                r#"{"type":"unsupported","op_type":"X","output_shape":[2,-1]}"#,
                "field 'output_shape': expected a non-negative integer, got -1",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(error(text), message, "{text}");
        }
        assert!(error(r#"{"type":"dense","units":2,"activation":"tanhh"}"#)
            .starts_with("field 'activation': unknown activation 'tanhh' (known: linear, relu,"));
        assert!(
            error(r#"{"type":"activation"}"#).starts_with("field 'function': missing required field (one of linear,")
        );
    }

    #[test]
    fn fields_are_checked_in_a_fixed_order_and_null_is_absent() {
        // The first faulty field in the spec's order, whatever the order of the keys; unknown keys after them.
        let err = error(r#"{"activation":"x","zzz":1,"kernel":"x","type":"conv2d","filters":8}"#);
        assert!(err.starts_with("field 'kernel'"), "{err}");
        let err = error(r#"{"zzz":1,"kernel":3,"type":"conv2d","filters":0}"#);
        assert!(err.starts_with("field 'zzz'"), "{err}");
        // Null is a default...
        let obj = |text: &str| serde_json::from_str::<Map<String, Value>>(text).unwrap();
        let op = Op::from_json(&obj(r#"{"type":"conv2d","filters":8,"kernel":3,"strides":null}"#)).unwrap();
        assert_eq!(op, conv(8, 3, 1, Padding::Valid));
        assert_eq!(error(r#"{"type":"conv2d","filters":null,"kernel":3}"#), "field 'filters': missing required field");
        // ...and an activation layer's `function: null` is linear, while a missing one is an error.
        let op = Op::from_json(&obj(r#"{"type":"activation","function":null}"#)).unwrap();
        assert_eq!(op, Op::Activation(Activation::Linear));
        // Names and aliases in any case.
        let op = Op::from_json(&obj(r#"{"type":"max_pool2d","padding":"SAME","pool_size":[3,2]}"#)).unwrap();
        assert_eq!(op, Op::MaxPool2d(Pool2d { pool_size: [3, 2], strides: [3, 2], padding: Padding::Same }));
        let op = Op::from_json(&obj(r#"{"type":"activation","function":"SiLU"}"#)).unwrap();
        assert_eq!(op, Op::Activation(Activation::Swish));
    }
}
