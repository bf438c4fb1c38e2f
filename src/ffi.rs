//! The C ABI (`include/perfmodel.h`): the estimator as a linked library, so a neural-architecture search written
//! in C, C++ or Python (ctypes) can ask for thousands of estimates a second without spawning a process per query.
//!
//! Why it looks the way it does:
//! - Every entry point returns a [`PmStatus`] code and keeps a per-thread message for [`pm_last_error`], because C
//!   has no exceptions and a NAS loop needs to tell "this candidate is invalid" from "the models are missing".
//! - No panic may unwind into foreign frames (undefined behaviour), so each entry point runs inside
//!   `catch_unwind` and a panic becomes [`PmStatus::Internal`] with its message.
//! - [`PmLayer`] describes a layer with plain integers, so a search can mutate a preallocated array in place
//!   instead of formatting and parsing JSON for every candidate. Zero-initialised fields mean the net.json
//!   defaults, so `memset(0)` / a fresh ctypes struct plus the fields that matter is a valid layer.
//! - The handle owns an `Estimator`, which is `Send + Sync`: one handle can serve several threads at once.

use crate::error::{Error, Location};
use crate::estimate::{Estimate, Estimator};
use crate::layer::{Activation, Conv2d, Dense, DepthwiseConv2d, LayerError, LayerType, Op, Padding, Pool2d, Shape};
use crate::network::{Layer, Network, INPUT};
use crate::Dirs;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Status codes returned by every `pm_*` function (`pm_status` in the header).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmStatus {
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument has an impossible value: not UTF-8, an unknown enum value, a negative size, a bad handle.
    InvalidArgument = 2,
    /// The network (JSON text or layer array) is invalid: the message names the layer and the field.
    InvalidNetwork = 3,
    /// The model store is missing, corrupt or does not match this library version.
    Model = 4,
    /// Unknown device or invalid device profile.
    Device = 5,
    /// A file could not be read.
    Io = 6,
    /// A bug: a panic inside the library, caught at the boundary.
    Internal = 7,
    /// Any other library error (engine, sensor).
    Other = 8,
}

impl PmStatus {
    fn of(error: &Error) -> PmStatus {
        match error {
            Error::Spec { .. } | Error::Onnx { .. } => PmStatus::InvalidNetwork,
            Error::Model { .. } | Error::Data { .. } => PmStatus::Model,
            Error::Device { .. } => PmStatus::Device,
            Error::Io { .. } => PmStatus::Io,
            Error::Invalid(_) => PmStatus::InvalidArgument,
            Error::Sensor { .. } | Error::Executor(_) | Error::EngineUnavailable(_) => PmStatus::Other,
        }
    }
}

/// The layer types `pm_layer_type` numbers (the header's enum): the first of [`LayerType::ALL`]. Later types
/// (channel shuffle and slice, the transformer types) have no `pm_layer` fields and are passed as JSON.
const C_LAYER_TYPES: usize = 18;

/// One layer for [`pm_estimate_layers`] (`pm_layer` in the header). Integer fields are `int64_t` so a negative
/// value from a careless caller is reported instead of wrapping around.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PmLayer {
    /// `pm_layer_type`: the index of the type in `LayerType::ALL` (unsupported layers need JSON).
    pub layer_type: i32,
    /// `pm_activation` (index in `Activation::ALL`): fused activation of conv2d / depthwise_conv2d / dense, or the
    /// function of an activation layer. 0 = linear.
    pub activation: i32,
    /// conv2d: filters; dense: units; depthwise_conv2d: depth multiplier (0 = 1).
    pub units: i64,
    /// conv2d / depthwise_conv2d: kernel `[h, w]`; pools: pool size (0 = 2).
    pub kernel: [i64; 2],
    /// 0 = default (1 for convolutions, the pool size for pools).
    pub strides: [i64; 2],
    /// 0 = 1.
    pub dilation: [i64; 2],
    /// conv2d groups, 0 = 1.
    pub groups: i64,
    /// `pm_padding`: 0 valid, 1 same, 2 explicit (`pad`).
    pub padding_mode: i32,
    /// Non-zero: the layer has no bias (zero = bias, the net.json default).
    pub no_bias: i32,
    /// `[top, bottom, left, right]`: explicit padding, zero_padding2d amounts or cropping2d amounts.
    pub pad: [i64; 4],
    /// concat axis in the batch-less shape (0 = channels; negative counts from the end).
    pub axis: i64,
    /// dropout rate.
    pub rate: f64,
    /// reshape target shape (one entry may be -1), `target_rank` entries.
    pub target_shape: *const i64,
    pub target_rank: usize,
    /// Indices of earlier layers this layer consumes, -1 for the network input; `n_inputs == 0` means the
    /// previous layer (the network input for layer 0).
    pub inputs: *const i64,
    pub n_inputs: usize,
}

impl Default for PmLayer {
    /// All zeros: the net.json defaults, like `memset(0)` in C.
    fn default() -> Self {
        PmLayer {
            layer_type: 0,
            activation: 0,
            units: 0,
            kernel: [0; 2],
            strides: [0; 2],
            dilation: [0; 2],
            groups: 0,
            padding_mode: 0,
            no_bias: 0,
            pad: [0; 4],
            axis: 0,
            rate: 0.0,
            target_shape: std::ptr::null(),
            target_rank: 0,
            inputs: std::ptr::null(),
            n_inputs: 0,
        }
    }
}

/// Padding modes of [`PmLayer::padding_mode`].
const PADDING_VALID: i32 = 0;
const PADDING_SAME: i32 = 1;
const PADDING_EXPLICIT: i32 = 2;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A success after a success changes nothing (and allocates nothing: a NAS loop succeeds thousands of times a
    // second).
    if message.is_empty() && LAST_ERROR.try_with(|e| e.borrow().is_empty()).unwrap_or(false) {
        return;
    }
    // Interior NULs cannot appear in a C string; replace them rather than lose the message.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the message is dropped rather than panicking outside `catch_unwind`.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = text);
}

/// An error at the boundary: its code and message.
#[derive(Debug)]
struct Failure {
    status: PmStatus,
    message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure { status: PmStatus::of(&e), message: e.to_string() }
    }
}

impl Failure {
    fn null(argument: &str) -> Self {
        Failure { status: PmStatus::NullArgument, message: format!("argument '{argument}' is NULL") }
    }
    fn invalid(message: impl Into<String>) -> Self {
        Failure { status: PmStatus::InvalidArgument, message: message.into() }
    }
}

/// Run one entry point: catch panics, record the message of a failure (or clear it on success), return the code.
fn guard(body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last_error("");
            return PmStatus::Ok as c_int;
        }
        Ok(Err(f)) => f,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".to_string());
            Failure { status: PmStatus::Internal, message: format!("internal error (a bug in perfmodel): {what}") }
        }
    };
    set_last_error(&failure.message);
    failure.status as c_int
}

/// A NUL-terminated UTF-8 argument.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn c_str<'a>(ptr: *const c_char, argument: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::null(argument));
    }
    CStr::from_ptr(ptr).to_str().map_err(|e| Failure::invalid(format!("argument '{argument}' is not UTF-8: {e}")))
}

/// A caller's array as a slice (an empty array may come as NULL).
///
/// # Safety
/// `ptr` is NULL or points to `len` initialised values that outlive the call.
unsafe fn c_slice<'a, T>(ptr: *const T, len: usize, argument: &str) -> Result<&'a [T], Failure> {
    match (ptr.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Failure::null(argument)),
        (false, _) => Ok(std::slice::from_raw_parts(ptr, len)),
    }
}

/// The name of networks built from a layer array; errors found here and in the estimator's shape analysis
/// both start with "network 'pm_layers'".
const LAYER_ARRAY_NETWORK: &str = "pm_layers";

/// Build a network from the caller's layer array; every error names the layer index and the field.
///
/// # Safety
/// The pointer fields of each layer (`target_shape`, `inputs`) follow [`c_slice`]'s contract.
#[cfg(test)]
unsafe fn network_from_layers(layers: &[PmLayer], input_shape: &[i64], batch: usize) -> Result<Network, Failure> {
    let mut net = Network::new(LAYER_ARRAY_NETWORK, Shape::new());
    fill_network(&mut net, layers, input_shape, batch)?;
    Ok(net)
}

thread_local! {
    /// The network [`pm_estimate_layers`] last built on this thread, refilled by the next call: its layers keep
    /// their names (`layer{i}`, the same for the same index) and their input lists' strings, so a NAS loop's
    /// candidate costs no allocation for them.
    static LAYER_NETWORK: RefCell<Network> = RefCell::new(Network::new(LAYER_ARRAY_NETWORK, Shape::new()));
}

/// [`network_from_layers`] into `net`, reusing its layers (a network only this function has filled: layer `i`
/// is named `layer{i}`). After an error `net` holds a part of the array; the next fill overwrites it.
///
/// # Safety
/// As [`network_from_layers`].
unsafe fn fill_network(
    net: &mut Network,
    layers: &[PmLayer],
    input_shape: &[i64],
    batch: usize,
) -> Result<(), Failure> {
    use std::fmt::Write;
    // Named in errors only: a NAS loop calls this thousands of times a second.
    let file = || format!("network '{LAYER_ARRAY_NETWORK}'");
    let spec = |location: Location, message: String| Failure::from(Error::spec(location, message));
    if layers.is_empty() {
        return Err(spec(Location::file(file()).field("layers"), "a network needs at least one layer".into()));
    }
    if batch == 0 {
        return Err(Failure::invalid("argument 'batch' must be positive"));
    }
    let shape = input_shape
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<Shape>>()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            spec(
                Location::file(file()).field("input_shape"),
                format!("dimensions must be positive integers (and at least one), got {input_shape:?}"),
            )
        })?;
    net.input_shape = shape;
    net.batch_size = batch;
    let name = |i: usize| format!("layer{i}");
    net.layers.truncate(layers.len());
    for (i, layer) in layers.iter().enumerate() {
        let at = |e: LayerError| {
            let location = Location::file(file()).layer(name(i), i);
            spec(
                match e.field {
                    Some(f) => location.field(f),
                    None => location,
                },
                e.message,
            )
        };
        let op = op_from_c(layer).map_err(at)?;
        let inputs = c_slice(layer.inputs, layer.n_inputs, "inputs")
            .map_err(|f| at(LayerError::new(Some("inputs"), f.message)))?;
        if let Some(&j) = inputs.iter().find(|&&j| j != -1 && !(j >= 0 && (j as usize) < i)) {
            return Err(at(LayerError::new(
                Some("inputs"),
                format!("input index {j} must be -1 (the network input) or an earlier layer (0..{i})"),
            )));
        }
        if i == net.layers.len() {
            net.layers.push(Layer::new(name(i), op));
        } else {
            net.layers[i].op = op;
        }
        let names = &mut net.layers[i].inputs;
        names.truncate(inputs.len());
        for (k, &j) in inputs.iter().enumerate() {
            if k == names.len() {
                names.push(String::new());
            }
            let text = &mut names[k];
            text.clear();
            // Writing to a String cannot fail.
            let _ = if j == -1 { write!(text, "{INPUT}") } else { write!(text, "layer{j}") };
        }
    }
    Ok(())
}

/// # Safety
/// `layer.target_shape` follows [`c_slice`]'s contract.
unsafe fn op_from_c(layer: &PmLayer) -> Result<Op, LayerError> {
    fn size(field: &str, v: i64, zero_means: usize) -> Result<usize, LayerError> {
        match v {
            0 => Ok(zero_means),
            v if v > 0 => usize::try_from(v).map_err(|_| LayerError::new(Some(field), format!("{v} is too large"))),
            v => Err(LayerError::new(Some(field), format!("must not be negative, got {v}"))),
        }
    }
    fn pair(field: &str, v: [i64; 2], zero_means: [usize; 2]) -> Result<[usize; 2], LayerError> {
        Ok([size(field, v[0], zero_means[0])?, size(field, v[1], zero_means[1])?])
    }
    fn quad(field: &str, v: [i64; 4]) -> Result<[usize; 4], LayerError> {
        Ok([size(field, v[0], 0)?, size(field, v[1], 0)?, size(field, v[2], 0)?, size(field, v[3], 0)?])
    }
    let activation =
        usize::try_from(layer.activation).ok().and_then(|i| Activation::ALL.get(i).copied()).ok_or_else(|| {
            LayerError::new(
                Some("activation"),
                format!("unknown pm_activation {} (0..{})", layer.activation, Activation::ALL.len() - 1),
            )
        })?;
    let padding = || match layer.padding_mode {
        PADDING_VALID => Ok(Padding::Valid),
        PADDING_SAME => Ok(Padding::Same),
        PADDING_EXPLICIT => quad("pad", layer.pad).map(Padding::Explicit),
        m => {
            Err(LayerError::new(Some("padding_mode"), format!("unknown pm_padding {m} (0 valid, 1 same, 2 explicit)")))
        }
    };
    let use_bias = layer.no_bias == 0;
    let pool = || -> Result<Pool2d, LayerError> {
        let pool_size = pair("kernel", layer.kernel, [2, 2])?;
        Ok(Pool2d { pool_size, strides: pair("strides", layer.strides, pool_size)?, padding: padding()? })
    };
    let c_types = &LayerType::ALL[..C_LAYER_TYPES];
    let layer_type = usize::try_from(layer.layer_type).ok().and_then(|i| c_types.get(i).copied()).ok_or_else(|| {
        let names: Vec<&str> = c_types.iter().map(|t| t.as_str()).collect();
        LayerError::new(
            Some("type"),
            format!(
                "unknown pm_layer_type {} (0..{}: {}; other layer types need JSON)",
                layer.layer_type,
                C_LAYER_TYPES - 1,
                names.join(", ")
            ),
        )
    })?;
    let op = match layer_type {
        LayerType::Conv2d => Op::Conv2d(Conv2d {
            filters: size("units", layer.units, 0)?,
            kernel: pair("kernel", layer.kernel, [0, 0])?,
            strides: pair("strides", layer.strides, [1, 1])?,
            dilation: pair("dilation", layer.dilation, [1, 1])?,
            groups: size("groups", layer.groups, 1)?,
            padding: padding()?,
            use_bias,
            activation,
        }),
        LayerType::DepthwiseConv2d => Op::DepthwiseConv2d(DepthwiseConv2d {
            depth_multiplier: size("units", layer.units, 1)?,
            kernel: pair("kernel", layer.kernel, [0, 0])?,
            strides: pair("strides", layer.strides, [1, 1])?,
            dilation: pair("dilation", layer.dilation, [1, 1])?,
            padding: padding()?,
            use_bias,
            activation,
        }),
        LayerType::Dense => Op::Dense(Dense { units: size("units", layer.units, 0)?, use_bias, activation }),
        LayerType::MaxPool2d => Op::MaxPool2d(pool()?),
        LayerType::AvgPool2d => Op::AvgPool2d(pool()?),
        LayerType::GlobalAvgPool2d => Op::GlobalAvgPool2d,
        LayerType::GlobalMaxPool2d => Op::GlobalMaxPool2d,
        LayerType::Flatten => Op::Flatten,
        LayerType::Reshape => {
            let target = c_slice(layer.target_shape, layer.target_rank, "target_shape")
                .map_err(|f| LayerError::new(Some("target_shape"), f.message))?;
            Op::Reshape { target_shape: target.to_vec() }
        }
        LayerType::Add => Op::Add,
        LayerType::Multiply => Op::Multiply,
        LayerType::Concat => Op::Concat { axis: layer.axis },
        LayerType::Activation => Op::Activation(activation),
        LayerType::BatchNorm => Op::BatchNorm,
        LayerType::ZeroPadding2d => Op::ZeroPadding2d { padding: quad("pad", layer.pad)? },
        LayerType::Cropping2d => Op::Cropping2d { cropping: quad("pad", layer.pad)? },
        LayerType::Dropout => Op::Dropout { rate: layer.rate },
        LayerType::Unsupported => {
            return Err(LayerError::new(
                Some("type"),
                "an unsupported layer needs its op_type and output_shape: pass the network as JSON",
            ))
        }
        LayerType::ChannelShuffle
        | LayerType::ChannelSlice
        | LayerType::MatMul
        | LayerType::LayerNorm
        | LayerType::Softmax
        | LayerType::Transpose
        | LayerType::Elementwise
        | LayerType::Embedding => {
            unreachable!("pm_layer_type numbers only the first {C_LAYER_TYPES} layer types")
        }
    };
    op.validate()?;
    Ok(op)
}

/// The message of the most recent `pm_*` call on this thread: empty when it succeeded. Never NULL; valid until
/// the next `pm_*` call on the same thread.
#[no_mangle]
pub extern "C" fn pm_last_error() -> *const c_char {
    LAST_ERROR.try_with(|e| e.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// The library version (static string).
#[no_mangle]
pub extern "C" fn pm_version() -> *const c_char {
    static VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("version contains a NUL"),
    };
    VERSION.as_ptr()
}

/// Whole-network totals (`pm_result` in the header); NaN where the device has no model for a metric.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PmResult {
    pub latency_ms: f64,
    pub energy_mj: f64,
    pub peak_memory_mib: f64,
    pub memory_two_largest_mib: f64,
    pub memory_two_mean_mib: f64,
    pub layers: u64,
    pub uncovered: u64,
}

impl From<&Estimate> for PmResult {
    fn from(e: &Estimate) -> Self {
        PmResult::of(&e.total, e.layers.len(), e.uncovered.len())
    }
}

impl PmResult {
    fn of(total: &crate::estimate::Totals, layers: usize, uncovered: usize) -> PmResult {
        PmResult {
            latency_ms: total.latency_ms,
            energy_mj: total.energy_mj.unwrap_or(f64::NAN),
            peak_memory_mib: total.peak_memory_mib,
            memory_two_largest_mib: total.memory_two_largest_mib,
            memory_two_mean_mib: total.memory_two_mean_mib,
            layers: layers as u64,
            uncovered: uncovered as u64,
        }
    }
}

/// The opaque `pm_estimator`. The tag catches a pointer that is not a handle (or a closed one whose memory
/// was not reused yet) before it is used as one.
pub struct PmEstimator {
    tag: u64,
    estimator: Estimator,
}

const HANDLE_TAG: u64 = 0x706d_6573_7469_6d61; // "pmestima"

impl PmEstimator {
    /// The handle given to C; [`pm_estimator_close`] takes it back.
    fn into_handle(estimator: Estimator) -> *mut PmEstimator {
        Box::into_raw(Box::new(PmEstimator { tag: HANDLE_TAG, estimator }))
    }
}

/// Handles are shared between the caller's threads.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<PmEstimator>()
};

/// # Safety
/// `handle` is NULL or a pointer obtained from [`pm_estimator_open`] and not yet closed.
unsafe fn estimator<'a>(handle: *const PmEstimator) -> Result<&'a Estimator, Failure> {
    if handle.is_null() {
        return Err(Failure::null("estimator"));
    }
    let handle = &*handle;
    if handle.tag != HANDLE_TAG {
        return Err(Failure::invalid("argument 'estimator' is not an open pm_estimator (closed or never opened)"));
    }
    Ok(&handle.estimator)
}

/// Open the trained models of `device` under `models_dir`.
///
/// # Safety
/// `models_dir` and `device` are NULL or NUL-terminated strings; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pm_estimator_open(
    models_dir: *const c_char,
    device: *const c_char,
    out: *mut *mut PmEstimator,
) -> c_int {
    guard(|| {
        let models_dir = c_str(models_dir, "models_dir")?;
        let device = c_str(device, "device")?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let estimator = Estimator::open(Path::new(models_dir), device)?;
        out.write(PmEstimator::into_handle(estimator));
        Ok(())
    })
}

/// The estimator `perfmodel estimate --method METHOD --models-dir .. --data-dir .. --collectors-dir ..` uses:
/// the device profile in `collectors_dir` supplies the memory bandwidth for cheap layers without a predictor
/// (and the peak numbers for `paleo`); `data_dir` holds the samples of the `template` method.
///
/// # Safety
/// As for [`pm_estimator_open`].
#[no_mangle]
pub unsafe extern "C" fn pm_estimator_open_method(
    models_dir: *const c_char,
    data_dir: *const c_char,
    collectors_dir: *const c_char,
    device: *const c_char,
    method: *const c_char,
    out: *mut *mut PmEstimator,
) -> c_int {
    guard(|| {
        let dirs = Dirs::default()
            .with_models(c_str(models_dir, "models_dir")?)
            .with_data(c_str(data_dir, "data_dir")?)
            .with_collectors(c_str(collectors_dir, "collectors_dir")?);
        let device = c_str(device, "device")?;
        let method = c_str(method, "method")?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let estimator = Estimator::open_method(method, device, &dirs)?;
        out.write(PmEstimator::into_handle(estimator));
        Ok(())
    })
}

/// Release an estimator; NULL is ignored.
///
/// # Safety
/// `handle` is NULL or a pointer from [`pm_estimator_open`] that is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn pm_estimator_close(handle: *mut PmEstimator) {
    if handle.is_null() {
        return;
    }
    // Dropping an estimator only frees memory; a panic there would be a bug, and must not unwind into C.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        (*handle).tag = 0;
        drop(Box::from_raw(handle));
    }));
}

/// # Safety
/// As for [`pm_estimate_json`].
unsafe fn estimate_json(handle: *const PmEstimator, json: *const c_char, batch: usize) -> Result<Estimate, Failure> {
    let estimator = estimator(handle)?;
    let text = c_str(json, "json")?;
    let mut net = Network::from_json_str(text, "<json text>")?;
    if batch > 0 {
        net.batch_size = batch;
    }
    Ok(estimator.estimate(&net)?)
}

/// Estimate a network given as net.json text; `batch > 0` overrides its batch size.
///
/// # Safety
/// `handle` as for [`pm_estimator_close`] (but open); `json` NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pm_estimate_json(
    handle: *const PmEstimator,
    json: *const c_char,
    batch: usize,
    out: *mut PmResult,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let estimate = estimate_json(handle, json, batch)?;
        out.write(PmResult::from(&estimate));
        Ok(())
    })
}

/// Like [`pm_estimate_json`], returning the whole estimate as JSON text owned by the caller
/// (free with [`pm_string_free`]).
///
/// # Safety
/// As for [`pm_estimate_json`]; `out_json` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pm_estimate_json_full(
    handle: *const PmEstimator,
    json: *const c_char,
    batch: usize,
    out_json: *mut *mut c_char,
) -> c_int {
    guard(|| {
        if out_json.is_null() {
            return Err(Failure::null("out_json"));
        }
        let estimate = estimate_json(handle, json, batch)?;
        let text = serde_json::to_string_pretty(&estimate)
            .map_err(|e| Failure::from(Error::Invalid(format!("cannot encode the estimate as JSON: {e}"))))?;
        // JSON escapes control characters, so the text has no interior NUL.
        let text = CString::new(text).map_err(|e| Failure::invalid(format!("estimate JSON contains NUL: {e}")))?;
        out_json.write(text.into_raw());
        Ok(())
    })
}

/// Free a string returned by this library; NULL is ignored.
///
/// # Safety
/// `s` is NULL or a pointer returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn pm_string_free(s: *mut c_char) {
    if !s.is_null() {
        drop(CString::from_raw(s));
    }
}

/// Estimate a network given as `n` layers in execution order fed by an input of shape `input_shape[0..rank]`.
///
/// # Safety
/// `handle` open; `layers` NULL or `n` valid layers whose pointer fields follow the header's contract;
/// `input_shape` NULL or `rank` values; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pm_estimate_layers(
    handle: *const PmEstimator,
    layers: *const PmLayer,
    n: usize,
    input_shape: *const i64,
    rank: usize,
    batch: usize,
    out: *mut PmResult,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let estimator = estimator(handle)?;
        let layers = c_slice(layers, n, "layers")?;
        let input_shape = c_slice(input_shape, rank, "input_shape")?;
        LAYER_NETWORK.with(|cell| {
            // A fresh network if this thread's is in use (an estimate cannot call back here; kept safe anyway).
            let mut fresh;
            let mut held = cell.try_borrow_mut();
            let net = match held.as_deref_mut() {
                Ok(net) => net,
                Err(_) => {
                    fresh = Network::new(LAYER_ARRAY_NETWORK, Shape::new());
                    &mut fresh
                }
            };
            fill_network(net, layers, input_shape, batch)?;
            // The totals alone: the per-layer rows and notes of a full estimate are not returned here.
            let (total, uncovered) = estimator.estimate_totals(net)?;
            out.write(PmResult::of(&total, net.layers.len(), uncovered));
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(filters: i64, k: i64) -> PmLayer {
        PmLayer { layer_type: 0, units: filters, kernel: [k, k], ..PmLayer::default() }
    }

    fn layers_net(layers: &[PmLayer], input: &[i64]) -> Result<Network, Failure> {
        unsafe { network_from_layers(layers, input, 1) }
    }

    fn message(r: Result<Network, Failure>) -> (PmStatus, String) {
        let f = r.expect_err("expected an error");
        (f.status, f.message)
    }

    #[test]
    fn zeroed_fields_mean_the_json_defaults() {
        let json = r#"{"name": "pm_layers", "input_shape": [3, 32, 32], "layers": [
            {"name": "layer0", "type": "conv2d", "filters": 8, "kernel": 3},
            {"name": "layer1", "type": "max_pool2d"},
            {"name": "layer2", "type": "depthwise_conv2d", "kernel": 3, "padding": "same", "activation": "relu6",
             "use_bias": false},
            {"name": "layer3", "type": "add", "inputs": ["layer1", "layer2"]},
            {"name": "layer4", "type": "concat", "inputs": ["layer3", "layer2"], "axis": 0},
            {"name": "layer5", "type": "reshape", "target_shape": [-1, 4]},
            {"name": "layer6", "type": "flatten"},
            {"name": "layer7", "type": "dense", "units": 10, "activation": "softmax"}]}"#;
        let expected = Network::from_json_str(json, "x").unwrap();
        let (i0, i3, i4, target) = ([-1i64], [1i64, 2], [3i64, 2], [-1i64, 4]);
        let layers = [
            PmLayer { inputs: i0.as_ptr(), n_inputs: 1, ..conv(8, 3) },
            PmLayer { layer_type: 3, ..PmLayer::default() },
            PmLayer { layer_type: 1, kernel: [3, 3], padding_mode: 1, activation: 2, no_bias: 1, ..PmLayer::default() },
            PmLayer { layer_type: 9, inputs: i3.as_ptr(), n_inputs: 2, ..PmLayer::default() },
            PmLayer { layer_type: 11, inputs: i4.as_ptr(), n_inputs: 2, ..PmLayer::default() },
            PmLayer { layer_type: 8, target_shape: target.as_ptr(), target_rank: 2, ..PmLayer::default() },
            PmLayer { layer_type: 7, ..PmLayer::default() },
            PmLayer { layer_type: 2, units: 10, activation: 11, ..PmLayer::default() },
        ];
        let net = layers_net(&layers, &[3, 32, 32]).unwrap();
        // The JSON form names inputs only where they are not the previous layer; compare the resolved graphs.
        assert_eq!(net.to_json(), expected.to_json());
        assert_eq!(net.analyze().unwrap().output_shapes, expected.analyze().unwrap().output_shapes);
    }

    #[test]
    fn enum_values_follow_the_header() {
        assert_eq!(LayerType::ALL[16], LayerType::Dropout);
        assert_eq!(LayerType::ALL[17], LayerType::Unsupported);
        assert_eq!(Activation::ALL[11], Activation::Softmax);
        assert_eq!(PmStatus::Other as i32, 8);
    }

    #[test]
    fn invalid_layers_name_the_layer_and_the_field() {
        let (status, msg) = message(layers_net(&[conv(8, 3), conv(-4, 3)], &[3, 8, 8]));
        assert_eq!(status, PmStatus::InvalidNetwork);
        assert!(msg.contains("layer 'layer1' (#1), field 'units'") && msg.contains("-4"), "{msg}");

        let (_, msg) = message(layers_net(&[conv(8, 3), PmLayer { layer_type: 18, ..conv(8, 3) }], &[3, 8, 8]));
        assert!(msg.contains("field 'type'") && msg.contains("unknown pm_layer_type 18"), "{msg}");
        let (_, msg) = message(layers_net(&[PmLayer { layer_type: 17, ..conv(8, 3) }], &[3, 8, 8]));
        assert!(msg.contains("field 'type'") && msg.contains("pass the network as JSON"), "{msg}");

        let (_, msg) = message(layers_net(&[PmLayer { activation: 99, ..conv(8, 3) }], &[3, 8, 8]));
        assert!(msg.contains("field 'activation'") && msg.contains("99"), "{msg}");

        let (_, msg) = message(layers_net(&[PmLayer { padding_mode: 5, ..conv(8, 3) }], &[3, 8, 8]));
        assert!(msg.contains("field 'padding_mode'"), "{msg}");

        let forward = [2i64];
        let bad_input = PmLayer { layer_type: 9, inputs: forward.as_ptr(), n_inputs: 1, ..PmLayer::default() };
        let (_, msg) = message(layers_net(&[conv(8, 3), bad_input, conv(8, 3)], &[3, 8, 8]));
        assert!(msg.contains("layer 'layer1' (#1), field 'inputs'") && msg.contains("earlier layer"), "{msg}");

        let reshape = PmLayer { layer_type: 8, target_rank: 2, ..PmLayer::default() };
        let (status, msg) = message(layers_net(&[reshape], &[3, 8, 8]));
        assert_eq!(status, PmStatus::InvalidNetwork);
        assert!(msg.contains("field 'target_shape'") && msg.contains("NULL"), "{msg}");

        let (_, msg) = message(layers_net(&[conv(8, 3)], &[3, -8, 8]));
        assert!(msg.contains("field 'input_shape'"), "{msg}");
        let (status, _) = message(unsafe { network_from_layers(&[conv(8, 3)], &[3, 8, 8], 0) });
        assert_eq!(status, PmStatus::InvalidArgument);
    }

    #[test]
    fn impossible_shapes_are_reported_by_estimation_with_the_layer() {
        // The conversion accepts the hyperparameters; the shape check in analysis rejects the kernel.
        let net = layers_net(&[conv(8, 9)], &[3, 4, 4]).unwrap();
        let err = net.analyze().unwrap_err().to_string();
        assert!(err.contains("layer 'layer0' (#0), field 'kernel'"), "{err}");
        // Sizes whose products overflow u64 (found in QA: a panic in debug builds, a wrapped count in release).
        let (_, err) = message(layers_net(&[conv(i64::MAX, 1)], &[3, 4, 4]));
        assert!(err.contains("layer 'layer0' (#0), field 'filters'") && err.contains("too large"), "{err}");
        let net = layers_net(&[conv(8, 1)], &[1 << 40, 1 << 40, 1]).unwrap();
        let err = net.analyze().unwrap_err().to_string();
        assert!(err.contains("field 'input_shape'") && err.contains("2^40"), "{err}");
    }

    fn last_error() -> String {
        unsafe { CStr::from_ptr(pm_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn panics_become_internal_errors_and_success_clears_the_message() {
        let code = guard(|| panic!("boom {}", 42));
        assert_eq!(code, PmStatus::Internal as c_int);
        assert!(last_error().contains("boom 42"), "{}", last_error());
        assert_eq!(guard(|| Ok(())), 0);
        assert_eq!(last_error(), "");
    }

    #[test]
    fn null_arguments_are_rejected() {
        let mut out = std::ptr::null_mut();
        let code = unsafe { pm_estimator_open(std::ptr::null(), c"local".as_ptr(), &mut out) };
        assert_eq!(code, PmStatus::NullArgument as c_int);
        assert!(last_error().contains("'models_dir'"), "{}", last_error());
        assert!(out.is_null());
        let mut result = PmResult::default();
        let code = unsafe { pm_estimate_json(std::ptr::null(), c"{}".as_ptr(), 0, &mut result) };
        assert_eq!(code, PmStatus::NullArgument as c_int);
        assert!(last_error().contains("'estimator'"), "{}", last_error());
    }
}
