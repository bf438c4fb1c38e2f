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
use crate::layer::{Activation, Conv2d, Dense, DepthwiseConv2d, LayerError, LayerType, Op, Padding, Pool2d, Shape};
use crate::network::{Layer, Network, INPUT};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

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
            Error::Sensor { .. } | Error::Executor(_) => PmStatus::Other,
        }
    }
}

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

/// Padding modes of [`PmLayer::padding_mode`].
const PADDING_VALID: i32 = 0;
const PADDING_SAME: i32 = 1;
const PADDING_EXPLICIT: i32 = 2;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs cannot appear in a C string; replace them rather than lose the message.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// An error at the boundary: its code and message.
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

/// The file label of networks built from a layer array, as it appears in error messages.
const LAYER_ARRAY: &str = "<pm_layer array>";

/// Build a network from the caller's layer array; every error names the layer index and the field.
///
/// # Safety
/// The pointer fields of each layer (`target_shape`, `inputs`) follow [`c_slice`]'s contract.
unsafe fn network_from_layers(layers: &[PmLayer], input_shape: &[i64], batch: usize) -> Result<Network, Failure> {
    let spec = |location: Location, message: String| Failure::from(Error::spec(location, message));
    if layers.is_empty() {
        return Err(spec(Location::file(LAYER_ARRAY).field("layers"), "a network needs at least one layer".into()));
    }
    if batch == 0 {
        return Err(Failure::invalid("argument 'batch' must be positive"));
    }
    let input_shape = input_shape
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<Shape>>()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            spec(
                Location::file(LAYER_ARRAY).field("input_shape"),
                format!("dimensions must be positive integers (and at least one), got {input_shape:?}"),
            )
        })?;
    let names: Vec<String> = (0..layers.len()).map(|i| format!("layer{i}")).collect();
    let mut net_layers = Vec::with_capacity(layers.len());
    for (i, layer) in layers.iter().enumerate() {
        let at = |e: LayerError| {
            let location = Location::file(LAYER_ARRAY).layer(names[i].clone(), i);
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
            .map_err(|f| at(LayerError::new(Some("inputs"), f.message)))?
            .iter()
            .map(|&j| match j {
                -1 => Ok(INPUT.to_string()),
                j if j >= 0 && (j as usize) < i => Ok(names[j as usize].clone()),
                j => Err(at(LayerError::new(
                    Some("inputs"),
                    format!("input index {j} must be -1 (the network input) or an earlier layer (0..{i})"),
                ))),
            })
            .collect::<Result<Vec<String>, Failure>>()?;
        net_layers.push(Layer { name: names[i].clone(), op, inputs });
    }
    Ok(Network { name: "pm_layers".into(), batch_size: batch, input_shape, layers: net_layers })
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
    let layer_type = usize::try_from(layer.layer_type)
        .ok()
        .and_then(|i| LayerType::ALL.get(i).copied())
        .filter(|&t| t != LayerType::Unsupported)
        .ok_or_else(|| {
            LayerError::new(
                Some("type"),
                format!(
                    "unknown pm_layer_type {} (0..{}: {}; unsupported layers need JSON)",
                    layer.layer_type,
                    LayerType::ALL.len() - 2,
                    LayerType::names_list()
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
        LayerType::Unsupported => unreachable!("filtered above"),
    };
    op.validate()?;
    Ok(op)
}

/// The message of the most recent `pm_*` call on this thread: empty when it succeeded. Never NULL; valid until
/// the next `pm_*` call on the same thread.
#[no_mangle]
pub extern "C" fn pm_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
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
