//! ONNX Runtime as an engine, through the `ort` crate with dynamic loading: nothing is downloaded or linked at
//! build time. The library is found at run time, first from `ORT_DYLIB_PATH`, then from an installed
//! `onnxruntime` Python package (its wheel ships `capi/libonnxruntime.so.*`), so `pip install onnxruntime` is
//! all a user needs. Without it, every command that needs the engine fails with [`Error::EngineUnavailable`],
//! which says how to install it; commands that do not need it never load it.
//!
//! Workloads are the same exported ONNX models tract runs ([`crate::onnx::export`]), handed to ONNX Runtime as
//! bytes, so both engines measure the same graph. A session runs on `threads` intra-op threads (1: on the
//! calling thread, no pool) at the profile's graph-optimisation level, as a deployment configures it.

mod bench;

#[cfg(test)]
pub(crate) use bench::{optimized_nodes_per_layer, reorders_per_layer};

use super::{Executor, Workload};
use crate::error::{Error, Result};
use crate::layer::LayerConfig;
use crate::network::Network;
use crate::onnx::{export_layer, export_network, Exported};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::DynValue;
use prost::Message;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// ONNX Runtime's graph-optimisation levels (`SessionOptions.graph_optimization_level`), by the names of its
/// Python API without the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GraphOptimization {
    /// `ORT_DISABLE_ALL`: the graph runs as exported.
    Disable,
    /// `ORT_ENABLE_BASIC`: constant folding, redundant-node removal, batch-norm and bias folding into convolutions.
    Basic,
    /// `ORT_ENABLE_EXTENDED`: plus activation fusions (Conv+Add+Relu, Gemm+activation, GELU, LayerNorm, attention).
    Extended,
    /// `ORT_ENABLE_ALL`, ONNX Runtime's default: plus layout transforms (NCHWc blocked convolutions with reorder
    /// nodes on x86).
    #[default]
    All,
}

impl GraphOptimization {
    pub const ALL: [GraphOptimization; 4] =
        [GraphOptimization::Disable, GraphOptimization::Basic, GraphOptimization::Extended, GraphOptimization::All];

    pub fn name(self) -> &'static str {
        match self {
            GraphOptimization::Disable => "disable",
            GraphOptimization::Basic => "basic",
            GraphOptimization::Extended => "extended",
            GraphOptimization::All => "all",
        }
    }

    fn level(self) -> GraphOptimizationLevel {
        match self {
            GraphOptimization::Disable => GraphOptimizationLevel::Disable,
            GraphOptimization::Basic => GraphOptimizationLevel::Level1,
            GraphOptimization::Extended => GraphOptimizationLevel::Level2,
            GraphOptimization::All => GraphOptimizationLevel::All,
        }
    }
}

impl std::str::FromStr for GraphOptimization {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        GraphOptimization::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| {
            let known: Vec<&str> = GraphOptimization::ALL.iter().map(|o| o.name()).collect();
            format!("unknown graph optimisation '{s}' (known: {})", known.join(", "))
        })
    }
}

/// How to get the library, said by every error that could not load it.
pub const INSTALL_HINT: &str = "install it with `pip install onnxruntime` (its wheel ships libonnxruntime.so, \
     which perfmodel finds through `python3`), or set ORT_DYLIB_PATH to a libonnxruntime.so of version 1.17 or later";

/// The loaded library: where it came from and its version.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub library: PathBuf,
    pub version: String,
    environment: ort::environment::Environment,
}

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// Load ONNX Runtime once per process (the first call decides; later calls return the same library or error).
pub fn runtime() -> Result<&'static Runtime> {
    RUNTIME.get_or_init(load).as_ref().map_err(|e| Error::EngineUnavailable(e.clone()))
}

fn load() -> std::result::Result<Runtime, String> {
    let library = locate_library()?;
    // Every block ONNX Runtime allocates, from loading on, is counted (where the binary can count the C heap).
    crate::collect::alloc::start_counting_c_heap();
    let fail =
        |e: &dyn std::fmt::Display| format!("ONNX Runtime: cannot load {}: {e}; {INSTALL_HINT}", library.display());
    let builder = ort::init_from(&library).map_err(|e| fail(&e))?;
    let environment = builder.with_name("perfmodel").build().map_err(|e| fail(&e))?;
    let version = version_of(ort::info()).or_else(|| version_from_file_name(&library)).unwrap_or_else(|| "?".into());
    Ok(Runtime { library, version, environment })
}

/// `rel-1.32.0` in ONNX Runtime's build string (`ORT Build Info: git-branch=rel-1.32.0, ...`).
fn version_of(build_info: &str) -> Option<String> {
    let branch = build_info.split("git-branch=").nth(1)?.split([',', ' ']).next()?;
    let version = branch.strip_prefix("rel-")?;
    version.chars().next()?.is_ascii_digit().then(|| version.to_string())
}

/// `1.32.0` in `libonnxruntime.so.1.32.0`.
fn version_from_file_name(library: &Path) -> Option<String> {
    let name = library.file_name()?.to_str()?;
    let version = name.split_once(".so.")?.1;
    version.chars().next()?.is_ascii_digit().then(|| version.to_string())
}

/// `ORT_DYLIB_PATH`, else the library inside the `onnxruntime` Python package.
fn locate_library() -> std::result::Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "ONNX Runtime: ORT_DYLIB_PATH is {}, which is not a file; point it at libonnxruntime.so, or unset it \
                 and install the library with `pip install onnxruntime`",
                path.display()
            ))
        };
    }
    let mut tried = Vec::new();
    for python in ["python3", "python"] {
        match python_package_dir(python) {
            Ok(Some(dir)) => match library_in(&dir.join("capi")) {
                Some(lib) => return Ok(lib),
                None => {
                    tried.push(format!("{python}'s onnxruntime package at {} has no libonnxruntime.so", dir.display()))
                }
            },
            Ok(None) => tried.push(format!("{python} has no onnxruntime package")),
            Err(why) => tried.push(format!("{python}: {why}")),
        }
    }
    Err(format!("ONNX Runtime is not installed ({}); {INSTALL_HINT}", tried.join("; ")))
}

/// The directory of `python`'s `onnxruntime` package, found without importing it.
fn python_package_dir(python: &str) -> std::result::Result<Option<PathBuf>, String> {
    // Not from the current directory (`-c` puts it first on the path): an `onnxruntime/` folder there is not
    // an installed package.
    const FIND: &str = "import sys\nsys.path = [p for p in sys.path if p not in ('', '.')]\n\
                        import importlib.util as u\ns = u.find_spec('onnxruntime')\n\
                        print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')";
    let output = std::process::Command::new(python)
        .args(["-c", FIND])
        .current_dir(std::env::temp_dir())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run it ({e})"))?;
    if !output.status.success() {
        return Err(format!("it failed ({})", output.status));
    }
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Ok((!dir.is_empty()).then(|| PathBuf::from(dir)))
}

/// `libonnxruntime.so` or `libonnxruntime.so.X.Y.Z` in `dir` (not the providers' libraries).
fn library_in(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "libonnxruntime.so" || n.starts_with("libonnxruntime.so."))
        })
        .collect();
    found.sort();
    found.pop()
}

/// Runs workloads with ONNX Runtime's CPU execution provider.
#[derive(Debug, Clone)]
pub struct OrtExecutor {
    threads: usize,
    optimization: GraphOptimization,
    /// Whether the intra-op threads spin after a run (ONNX Runtime's default); only matters on several threads.
    spinning: bool,
    runtime: &'static Runtime,
}

impl OrtExecutor {
    /// An executor on `threads` intra-op threads at `optimization`; loads the library on first use.
    pub fn new(threads: usize, optimization: GraphOptimization) -> Result<OrtExecutor> {
        super::check_threads(threads)?;
        Ok(OrtExecutor { threads, optimization, spinning: true, runtime: runtime()? })
    }

    /// The same executor with its intra-op threads spinning after a run (ONNX Runtime's default, `true`) or
    /// sleeping (`false`: the device profile's `spinning`).
    pub fn with_spinning(self, spinning: bool) -> OrtExecutor {
        OrtExecutor { spinning, ..self }
    }

    /// Whether several threads spin after a run: then two live sessions take each other's cores.
    pub fn spins(&self) -> bool {
        self.spinning && self.threads > 1
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn optimization(&self) -> GraphOptimization {
        self.optimization
    }

    pub fn runtime(&self) -> &'static Runtime {
        self.runtime
    }

    /// A session for `exported` with this executor's settings; `configure` adds options (profiling, saving the
    /// optimised graph).
    #[allow(clippy::result_large_err)] // ort's builder errors carry the builder back; they are turned into ours here
    pub(crate) fn session(
        &self,
        exported: &Exported,
        what: &str,
        configure: impl FnOnce(ort::session::builder::SessionBuilder) -> ort::session::builder::BuilderResult,
    ) -> Result<Session> {
        let fail = |stage: &str, e: &dyn std::fmt::Display| {
            Error::Executor(format!("{what}: ONNX Runtime failed to {stage}: {e}"))
        };
        let bytes = exported.model.encode_to_vec();
        let builder = Session::builder(&self.runtime.environment).map_err(|e| fail("create a session", &e))?;
        // Each session has a pool of its own whose threads, by default, spin after a run waiting for more work:
        // two live sessions then take each other's cores (ResNet-18 on 2 threads of a 2-vCPU host: 42.9 ms,
        // 31.6-74.4, with other sessions alive, against 17.1 ms alone), so a spinning executor's sessions are
        // measured one at a time ([`Executor::one_workload_at_a_time`]). Sleeping threads cost a network of small
        // layers much more than a deployment pays: MobileNetV3-small 2.03 ms against 1.09 spinning.
        let sleeping = self.threads > 1 && !self.spinning;
        let builder = builder
            .with_intra_threads(self.threads)
            .and_then(|b| b.with_inter_threads(1))
            .and_then(|b| if sleeping { b.with_intra_op_spinning(false) } else { Ok(b) })
            .and_then(|b| b.with_optimization_level(self.optimization.level()))
            .and_then(configure)
            .map_err(|e| fail("configure a session", &e))?;
        let mut builder = builder;
        builder.commit_from_memory(&bytes).map_err(|e| fail("load the model", &e))
    }

    /// The concrete workload of one layer config.
    pub fn layer_workload(&self, config: &LayerConfig) -> Result<OrtWorkload> {
        super::check_layer_fits(config)?;
        let exported = export_layer(config)?;
        OrtWorkload::build(self, &exported, &format!("{} layer", config.layer_type()), Ok)
    }

    /// The concrete workload of a whole network.
    pub fn network_workload(&self, network: &Network) -> Result<OrtWorkload> {
        let exported = export_network(network)?;
        OrtWorkload::build(self, &exported, &format!("network '{}'", network.name), Ok)
    }
}

/// Opset domain of ONNX Runtime's blocked-layout operators.
const NCHWC_DOMAIN: &str = "com.microsoft.nchwc";

/// A model that converts a `[1, channels, side, side]` tensor into ONNX Runtime's blocked layout and back
/// (`ReorderInput`, `ReorderOutput`): the two conversions a blocked layer measured alone runs around itself.
fn reorder_pair(channels: usize, side: usize) -> Exported {
    use tract_onnx::pb::{
        attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto, AttributeProto,
        GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };
    let info = |name: &str| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto {
                    dim: [1, channels, side, side]
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            denotation: String::new(),
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                        })
                        .collect(),
                }),
            })),
        }),
        doc_string: String::new(),
    };
    let node = |name: &str, op: &str, input: &str, output: &str, attribute: Vec<AttributeProto>| NodeProto {
        name: name.into(),
        op_type: op.into(),
        domain: NCHWC_DOMAIN.into(),
        input: vec![input.into()],
        output: vec![output.into()],
        attribute,
        ..Default::default()
    };
    let channels_attr = AttributeProto {
        name: "channels".into(),
        r#type: AttributeType::Int as i32,
        i: channels as i64,
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![
            node("to_blocked", "ReorderInput", "x", "blocked", vec![]),
            node("from_blocked", "ReorderOutput", "blocked", "y", vec![channels_attr]),
        ],
        name: "reorder".into(),
        input: vec![info("x")],
        output: vec![info("y")],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: 7,
        opset_import: vec![
            OperatorSetIdProto { domain: String::new(), version: crate::onnx::export::OPSET },
            OperatorSetIdProto { domain: NCHWC_DOMAIN.into(), version: 1 },
        ],
        producer_name: "perfmodel".into(),
        graph: Some(graph),
        ..Default::default()
    };
    Exported { model, owners: HashMap::new() }
}

impl OrtExecutor {
    /// What one layout conversion into or out of ONNX Runtime's blocked layout costs here, in ms per MiB of
    /// the tensor converted: the slope of the time of a conversion pair over tensors of 64 channels from 16x16
    /// to 128x128 (0.06-4 MiB), halved. A blocked layer measured alone pays two conversions that it does not
    /// pay inside a blocked region of a network (see `engine::rules::OnnxRuntime`).
    pub fn reorder_ms_per_mib(&self) -> Result<f64> {
        let mut points = Vec::new();
        for side in [16usize, 32, 64, 96, 128] {
            let exported = reorder_pair(64, side);
            let mut workload = OrtWorkload::build(self, &exported, "layout conversion pair", Ok)?;
            let times = super::time_runs(&mut workload, 3, 15, std::time::Duration::from_millis(150), 400)?;
            let ms = crate::stats::median(&times).unwrap_or(0.0);
            points.push(((64 * side * side * 4) as f64 / crate::units::MIB, ms));
        }
        let n = points.len() as f64;
        let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        Ok((sxy / sxx / 2.0).max(0.0))
    }
}

impl Executor for OrtExecutor {
    fn describe(&self) -> String {
        format!("onnxruntime {} (optimisation {})", self.runtime.version, self.optimization.name())
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn allocates_outside_rust(&self) -> bool {
        true
    }

    fn probe_executor(&self) -> Result<Option<Box<dyn Executor>>> {
        if self.threads == 1 {
            return Ok(None);
        }
        Ok(Some(Box::new(OrtExecutor::new(1, self.optimization)?)))
    }

    fn one_workload_at_a_time(&self) -> bool {
        self.spins()
    }

    fn prepare_layer(&self, config: &LayerConfig) -> Result<Box<dyn Workload>> {
        Ok(Box::new(self.layer_workload(config)?))
    }

    fn prepare_network(&self, network: &Network) -> Result<Box<dyn Workload>> {
        Ok(Box::new(self.network_workload(network)?))
    }

    fn bench_network<'a>(
        &'a self,
        network: &'a Network,
        rounds: usize,
        warmup: usize,
    ) -> Result<Box<dyn super::NetworkBench + 'a>> {
        Ok(Box::new(bench::OrtNetworkBench::new(self, network, rounds, warmup)?))
    }
}

/// A committed session and its random inputs.
pub struct OrtWorkload {
    pub(crate) session: Session,
    inputs: Vec<(String, DynValue)>,
}

impl OrtWorkload {
    pub(crate) fn build(
        executor: &OrtExecutor,
        exported: &Exported,
        what: &str,
        configure: impl FnOnce(ort::session::builder::SessionBuilder) -> ort::session::builder::BuilderResult,
    ) -> Result<OrtWorkload> {
        let session = executor.session(exported, what, configure)?;
        let graph = exported.model.graph.as_ref().ok_or_else(|| Error::Executor(format!("{what}: no graph")))?;
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
        let mut inputs = Vec::with_capacity(graph.input.len());
        for input in &graph.input {
            let shape = crate::onnx::value_info_shape(input)
                .ok_or_else(|| Error::Executor(format!("{what}: input '{}' has no static shape", input.name)))?;
            let elems: usize = shape.iter().map(|&d| d as usize).product();
            let data: Vec<f32> = (0..elems).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let tensor = ort::value::Tensor::from_array((shape, data))
                .map_err(|e| Error::Executor(format!("{what}: cannot make input '{}': {e}", input.name)))?;
            inputs.push((input.name.clone(), tensor.into_dyn()));
        }
        Ok(OrtWorkload { session, inputs })
    }

    /// Run once; the outputs as (shape, values).
    pub fn run_outputs(&mut self) -> Result<Vec<(Vec<i64>, Vec<f32>)>> {
        let inputs: Vec<(&str, &DynValue)> = self.inputs.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let outputs = self.session.run(inputs).map_err(|e| Error::Executor(format!("inference failed: {e}")))?;
        let mut result = Vec::with_capacity(outputs.len());
        for (_, value) in outputs.iter() {
            let (shape, data) = value
                .try_extract_tensor::<f32>()
                .map_err(|e| Error::Executor(format!("reading an output failed: {e}")))?;
            result.push((shape.to_vec(), data.to_vec()));
        }
        Ok(result)
    }
}

impl Workload for OrtWorkload {
    fn run(&mut self) -> Result<()> {
        let inputs: Vec<(&str, &DynValue)> = self.inputs.iter().map(|(n, v)| (n.as_str(), v)).collect();
        self.session.run(inputs).map(drop).map_err(|e| Error::Executor(format!("inference failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::TractExecutor;
    use crate::layer::{Activation, Conv2d, Dense, Op, Padding};

    fn executor(optimization: GraphOptimization) -> OrtExecutor {
        OrtExecutor::new(1, optimization).unwrap_or_else(|e| panic!("the ONNX Runtime tests need the library: {e}"))
    }

    /// ONNX Runtime and tract run the same exported model (same weights, same inputs): same outputs.
    fn same_as_tract(config: &LayerConfig, optimization: GraphOptimization) {
        let ours = executor(optimization).layer_workload(config).unwrap().run_outputs().unwrap();
        let theirs = TractExecutor::new(1).unwrap().layer_workload(config).unwrap().run_outputs().unwrap();
        assert_eq!(ours.len(), 1);
        let mut expected: Vec<i64> = vec![config.batch as i64];
        expected.extend(config.output_shape().unwrap().iter().map(|&d| d as i64));
        assert_eq!(ours[0].0, expected, "{:?}", config.op);
        let theirs = theirs[0].to_plain_array_view::<f32>().unwrap();
        let max_diff = ours[0].1.iter().zip(theirs.iter()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(max_diff < 1e-3, "{:?} at {optimization:?}: outputs differ from tract's by {max_diff}", config.op);
    }

    #[test]
    fn layers_compute_what_tract_computes_at_every_optimisation_level() {
        let mut conv = Conv2d::new(16, [3, 3]);
        conv.strides = [2, 2];
        conv.padding = Padding::Same;
        conv.activation = Activation::Relu;
        let dense = Dense { units: 10, use_bias: true, activation: Activation::Softmax };
        for optimization in GraphOptimization::ALL {
            same_as_tract(
                &LayerConfig::new(Op::Conv2d(conv.clone()), vec![smallvec::smallvec![8, 17, 17]], 2),
                optimization,
            );
            same_as_tract(&LayerConfig::new(Op::Dense(dense.clone()), vec![smallvec::smallvec![64]], 3), optimization);
            same_as_tract(&LayerConfig::new(Op::BatchNorm, vec![smallvec::smallvec![16, 8, 8]], 1), optimization);
        }
    }

    #[test]
    fn a_network_runs_and_describes_its_engine() {
        let mut net = Network::new("small", vec![3, 16, 16]);
        use crate::network::Layer;
        net.layers = vec![
            Layer::new("conv", Op::Conv2d(Conv2d::new(8, [3, 3]))),
            Layer::new("gap", Op::GlobalAvgPool2d),
            Layer::new("fc", Op::Dense(Dense { units: 4, use_bias: true, activation: Activation::Softmax })),
        ];
        let ort = executor(GraphOptimization::All);
        let outputs = ort.network_workload(&net).unwrap().run_outputs().unwrap();
        assert_eq!(outputs[0].0, vec![1, 4]);
        let sum: f32 = outputs[0].1.iter().sum();
        assert!((sum - 1.0).abs() < 1e-4, "softmax sums to {sum}");
        let described = Executor::describe(&ort);
        assert!(described.starts_with("onnxruntime 1.") && described.ends_with("(optimisation all)"), "{described}");
        assert!(OrtExecutor::new(0, GraphOptimization::All).unwrap_err().to_string().contains("threads"));
        // The speed probe runs on one thread: its own executor for a threaded device, this one otherwise.
        assert!(ort.probe_executor().unwrap().is_none());
        let threaded = OrtExecutor::new(2, GraphOptimization::Extended).unwrap();
        let probe = threaded.probe_executor().unwrap().expect("a one-thread probe executor");
        assert_eq!(probe.threads(), 1);
        assert_eq!(probe.describe(), Executor::describe(&threaded));
    }

    #[test]
    fn versions_are_read_from_the_build_string_or_the_file_name() {
        let info = "ORT Build Info: git-branch=rel-1.32.0, git-commit-id=abc, build type=Release";
        assert_eq!(version_of(info).as_deref(), Some("1.32.0"));
        assert_eq!(version_of("ORT Build Info: git-branch=main, x").as_deref(), None);
        let lib = Path::new("/x/capi/libonnxruntime.so.1.32.0");
        assert_eq!(version_from_file_name(lib).as_deref(), Some("1.32.0"));
        assert_eq!(version_from_file_name(Path::new("/x/libonnxruntime.so")), None);
    }

    #[test]
    fn a_layout_conversion_pair_gives_its_input_back_and_has_a_cost() {
        let ort = executor(GraphOptimization::All);
        let mut workload = OrtWorkload::build(&ort, &reorder_pair(24, 7), "pair", Ok).unwrap();
        let input = workload.inputs[0].1.try_extract_tensor::<f32>().unwrap().1.to_vec();
        let output = workload.run_outputs().unwrap();
        assert_eq!(output[0].0, vec![1, 24, 7, 7]);
        assert_eq!(output[0].1, input, "blocked and back is the identity");
        let rate = ort.reorder_ms_per_mib().unwrap();
        assert!(rate.is_finite() && rate > 0.0, "{rate} ms per MiB");
    }

    #[test]
    fn optimisation_levels_parse_by_name() {
        for level in GraphOptimization::ALL {
            assert_eq!(level.name().parse::<GraphOptimization>().unwrap(), level);
        }
        assert!("fast".parse::<GraphOptimization>().unwrap_err().contains("known: disable, basic"));
    }
}
