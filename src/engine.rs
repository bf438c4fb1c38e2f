//! Inference engines that execute workloads for measurement. The collector and `perfmodel bench` talk to an
//! engine only through [`Executor`] and [`Workload`], so engines other than tract can be added behind them.
//!
//! The tract engine loads models through ONNX ([`crate::onnx::export`]): an in-memory `ModelProto` handed to
//! `model_for_proto_model` is the stable route into tract, whose internal op structs change between versions.
//!
//! Threads: tract runs single-threaded unless tract-linalg is built with its `multithread-mm` feature and a
//! thread-pool executor is in scope. This build enables the feature; a [`TractExecutor`] with `threads > 1` owns
//! a rayon pool of that size and every run of its workloads happens inside `multithread_tract_scope`, so the
//! device profile's `threads` is what the measurement uses (and other executors in the process are unaffected).

mod bench;
pub mod onnxruntime;
pub mod packing;
pub mod rules;

pub use onnxruntime::{GraphOptimization, OrtExecutor};

pub use bench::{
    profile_network, profile_networks, profile_networks_between, profile_networks_observed, BenchObserver, BenchStep,
    LayerProfile, NetworkProfile, NodeMemory, RoundPlan, TotalProfile,
};

use crate::error::{Error, Result};
use crate::layer::LayerConfig;
use crate::network::Network;
use crate::onnx::{export_layer, export_network, Exported};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tract_onnx::prelude::*;

/// A built, optimised, ready-to-run model with its input already allocated.
pub trait Workload {
    /// Run one inference (the whole batch).
    fn run(&mut self) -> Result<()>;
}

/// Wall times (ms) of `workload` after `burn_in` untimed runs: at least `min_runs`, then more until `budget`
/// has passed, at most `max_runs` (for short microbenchmarks: roofline and zero-shot probes).
pub fn time_runs(
    workload: &mut dyn Workload,
    burn_in: usize,
    min_runs: usize,
    budget: std::time::Duration,
    max_runs: usize,
) -> Result<Vec<f64>> {
    for _ in 0..burn_in {
        workload.run()?;
    }
    let started = std::time::Instant::now();
    let mut times = Vec::with_capacity(min_runs);
    while times.len() < min_runs || (started.elapsed() < budget && times.len() < max_runs) {
        let t = std::time::Instant::now();
        workload.run()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(times)
}

pub trait Executor: Send + Sync {
    /// Engine name and version, recorded as provenance (e.g. `tract 0.23.9`).
    fn describe(&self) -> String;
    /// Threads one workload runs on.
    fn threads(&self) -> usize;
    /// Whether the engine allocates on the C heap (C++ engines), which only the binary's C-heap counter sees
    /// ([`crate::collect::alloc::counts_foreign_heap`]).
    fn allocates_outside_rust(&self) -> bool {
        false
    }
    /// The executor the machine-speed probe runs on ([`crate::collect::speed`]), when it is not this one. ONNX
    /// Runtime on several threads answers with itself on one thread: a session's intra-op threads sleep between
    /// the probe's readings (one per 250 ms at most), and a reading's few runs then measure how fast they wake,
    /// not the machine's speed.
    fn probe_executor(&self) -> Result<Option<Box<dyn Executor>>> {
        Ok(None)
    }
    /// Whether two live workloads of this executor slow each other down even when only one runs: ONNX Runtime on
    /// several spinning threads, whose pool keeps its cores busy after a run. `bench`, `validate` and `calibrate`
    /// then keep one workload alive at a time: networks one after another, each timed, then profiled.
    fn one_workload_at_a_time(&self) -> bool {
        false
    }
    /// Build a single-layer workload for a config.
    fn prepare_layer(&self, config: &LayerConfig) -> Result<Box<dyn Workload>>;
    /// Build a whole-network workload.
    fn prepare_network(&self, network: &Network) -> Result<Box<dyn Workload>>;
    /// Build `network` for `perfmodel bench`: its memory measured, built and warmed up, ready for timed and
    /// instrumented rounds.
    fn bench_network<'a>(
        &'a self,
        network: &'a Network,
        rounds: usize,
        warmup: usize,
    ) -> Result<Box<dyn NetworkBench + 'a>>;
}

/// One network being benchmarked by an engine (see [`profile_networks_observed`]): rounds accumulate until
/// [`NetworkBench::finish`].
pub trait NetworkBench {
    /// One timed whole-network run, without instrumentation.
    fn timed_run(&mut self) -> Result<()>;
    /// One run timed node by node, for the per-layer times.
    fn instrumented_run(&mut self) -> Result<()>;
    /// One plain run, not timed: what separates a timed run from whatever ran before it when the instrumented
    /// runs come after every timed one ([`Executor::one_workload_at_a_time`]).
    fn untimed_run(&mut self) -> Result<()>;
    /// The profile of the rounds run so far.
    fn finish(self: Box<Self>) -> Result<NetworkProfile>;
}

/// The executor a device profile asks for: its engine, threads and engine settings.
pub fn executor_for(profile: &crate::collect::DeviceProfile) -> Result<Box<dyn Executor>> {
    match profile.executor.as_str() {
        "onnxruntime" => {
            let optimization = profile.graph_optimization.unwrap_or_default();
            let executor =
                OrtExecutor::new(profile.threads, optimization)?.with_spinning(profile.spinning.unwrap_or(true));
            Ok(Box::new(executor))
        }
        _ => Ok(Box::new(TractExecutor::new(profile.threads)?)),
    }
}

/// Threads between 1 and [`MAX_THREADS`].
fn check_threads(threads: usize) -> Result<()> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(Error::Executor(format!(
            "threads must be between 1 and {MAX_THREADS}, got {threads} (set threads in the device profile)"
        )));
    }
    Ok(())
}

/// Refuse a layer too large for this process before anything is allocated: it would fail inside the allocator.
/// Against what the process could ever have, not what is free now: a collection records the refusal as a
/// failed sample for good.
fn check_layer_fits(config: &LayerConfig) -> Result<()> {
    if let (Ok(cost), Some(available)) = (config.cost(), bench::memory_limit_bytes()) {
        let needed = (cost.input_elems + cost.output_elems + cost.weight_elems).saturating_mul(4);
        if needed > available {
            return Err(Error::Executor(format!(
                "the {} layer needs at least {:.1} GiB (its inputs, output and weights), more than the {:.1} GiB \
                 this process may allocate here",
                config.layer_type(),
                needed as f64 / crate::units::GIB,
                available as f64 / crate::units::GIB
            )));
        }
    }
    Ok(())
}

/// The tract version this crate is built against (tract exposes none at run time; a test checks it against
/// Cargo.lock).
pub const TRACT_VERSION: &str = "0.23.9";

/// Runs workloads with tract on the CPU.
#[derive(Debug, Clone)]
pub struct TractExecutor {
    threads: usize,
    pool: tract_linalg::multithread::Executor,
}

/// More threads than this is a typo, not a machine.
const MAX_THREADS: usize = 1024;

impl TractExecutor {
    /// An executor running tract on `threads` threads (1 = tract's plain single-threaded path).
    pub fn new(threads: usize) -> Result<TractExecutor> {
        use tract_linalg::multithread::Executor as Pool;
        check_threads(threads)?;
        let pool = if threads == 1 {
            Pool::SingleThread
        } else {
            // tract's own constructor panics when the OS refuses the threads; build the pool ourselves instead.
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("perfmodel-tract-{i}"))
                .build()
                .map_err(|e| Error::Executor(format!("cannot start {threads} tract threads: {e}")))?;
            Pool::MultiThread(std::sync::Arc::new(pool))
        };
        let executor = TractExecutor { threads, pool };
        executor.initialise_engine_globals()?;
        Ok(executor)
    }

    /// tract builds process-wide tables (kernel dispatch, operator registries) on first use and keeps them. Run
    /// a tiny network once per process so that no measurement pays for them: otherwise the first network or
    /// layer measured in a process looks tens of KiB larger than the same one measured later.
    fn initialise_engine_globals(&self) -> Result<()> {
        static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        if DONE.get().is_some() {
            return Ok(());
        }
        use crate::layer::{Activation, Conv2d, Dense, Op as L, Pool2d};
        let mut net = Network::new("engine-warm-up", vec![3, 16, 16]);
        net.layers = vec![
            crate::network::Layer::new("conv", L::Conv2d(Conv2d::new(8, [3, 3]))),
            crate::network::Layer::new("pointwise", L::Conv2d(Conv2d::new(8, [1, 1]))),
            crate::network::Layer::new("pool", L::MaxPool2d(Pool2d::new([2, 2]))),
            crate::network::Layer::new("flatten", L::Flatten),
            crate::network::Layer::new(
                "dense",
                L::Dense(Dense { units: 10, use_bias: true, activation: Activation::Softmax }),
            ),
        ];
        self.network_workload(&net)?.run_outputs()?;
        let _ = DONE.set(());
        Ok(())
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The concrete tract workload of one layer config.
    pub fn layer_workload(&self, config: &LayerConfig) -> Result<TractWorkload> {
        check_layer_fits(config)?;
        let exported = export_layer(config)?;
        TractWorkload::build(&exported, &format!("{} layer", config.layer_type()), self.pool.clone())
    }

    /// The concrete tract workload of a whole network.
    pub fn network_workload(&self, network: &Network) -> Result<TractWorkload> {
        let exported = export_network(network)?;
        TractWorkload::build(&exported, &format!("network '{}'", network.name), self.pool.clone())
    }

    /// Heap bytes the built network holds before its first run (optimised plan, packed weights, plan tables,
    /// its input): what dropping the built workload gives back to the counting allocator, so tables that tract
    /// builds once per process or thread while building are left out. The counter is process-wide: other threads
    /// must not allocate meanwhile. `None` when that allocator is not installed (the library linked into
    /// another program). Includes perfmodel's own map from tract nodes to layers (about 100 bytes a node), as
    /// `bench`'s resident figure does.
    pub fn resident_bytes(&self, network: &Network) -> Result<Option<u64>> {
        use crate::collect::alloc;
        if !alloc::is_installed() {
            return Ok(None);
        }
        std::thread::scope(|scope| {
            let build = std::thread::Builder::new().name("perfmodel-resident".to_string());
            let handle = build
                .spawn_scoped(scope, || -> Result<Option<u64>> {
                    let workload = self.network_workload(network)?;
                    let held = alloc::current_bytes();
                    drop(workload);
                    Ok(Some(held.saturating_sub(alloc::current_bytes()) as u64))
                })
                .map_err(|e| Error::Executor(format!("network '{}': cannot start a thread: {e}", network.name)))?;
            handle.join().map_err(|_| Error::Executor(format!("network '{}': building it panicked", network.name)))?
        })
    }
}

impl Executor for TractExecutor {
    fn describe(&self) -> String {
        format!("tract {TRACT_VERSION}")
    }

    fn threads(&self) -> usize {
        self.threads
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
    ) -> Result<Box<dyn NetworkBench + 'a>> {
        Ok(Box::new(bench::TractNetworkBench::new(self, network, rounds, warmup)?))
    }
}

/// An optimised tract plan, its run state and random inputs.
pub struct TractWorkload {
    state: TypedSimpleState,
    inputs: TVec<TValue>,
    /// Owner layer of every exported ONNX node, for attributing per-node times.
    owners: std::collections::HashMap<String, String>,
    /// The executor's thread pool, in scope for every run.
    pool: tract_linalg::multithread::Executor,
}

impl TractWorkload {
    fn build(exported: &Exported, what: &str, pool: tract_linalg::multithread::Executor) -> Result<TractWorkload> {
        let fail = |stage: &str, e: TractError| Error::Executor(format!("{what}: tract failed to {stage}: {e:#}"));
        let model = tract_onnx::onnx().model_for_proto_model(&exported.model).map_err(|e| fail("load the model", e))?;
        let plan = model
            .into_optimized()
            .map_err(|e| fail("optimise the model", e))?
            .into_runnable()
            .map_err(|e| fail("plan the model", e))?;
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
        let mut inputs = TVec::new();
        for (i, outlet) in plan.model().input_outlets().map_err(|e| fail("list inputs", e))?.iter().enumerate() {
            let fact = plan.model().outlet_fact(*outlet).map_err(|e| fail("read an input", e))?;
            let shape = fact
                .shape
                .as_concrete()
                .ok_or_else(|| Error::Executor(format!("{what}: input #{i} has a symbolic shape {:?}", fact.shape)))?
                .to_vec();
            let data = tract_ndarray::ArrayD::from_shape_fn(shape, |_| rng.random_range(-1.0f32..1.0));
            inputs.push(data.into_tvalue());
        }
        let state = plan.spawn().map_err(|e| fail("create a run state", e))?;
        Ok(TractWorkload { state, inputs, owners: exported.owners.clone(), pool })
    }

    /// Run once and return the outputs.
    pub fn run_outputs(&mut self) -> Result<TVec<TValue>> {
        let (state, inputs) = (&mut self.state, self.inputs.clone());
        tract_linalg::multithread::multithread_tract_scope(self.pool.clone(), || state.run(inputs))
            .map_err(|e| Error::Executor(format!("inference failed: {e:#}")))
    }
}

impl Workload for TractWorkload {
    fn run(&mut self) -> Result<()> {
        self.run_outputs().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Activation, Conv2d, Dense, DepthwiseConv2d, ElementwiseFn, Op, Padding, Pool2d};

    fn executor() -> TractExecutor {
        TractExecutor::new(1).unwrap()
    }

    /// Build and run a config; the output must have the shape perfmodel predicts (batch in front).
    fn run_and_check(config: &LayerConfig) {
        let mut workload = executor()
            .layer_workload(config)
            .unwrap_or_else(|e| panic!("{:?} on {:?}: {e}", config.op, config.input_shapes));
        let outputs = workload.run_outputs().unwrap();
        let mut expected = vec![config.batch];
        expected.extend(config.output_shape().unwrap());
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].shape(), &expected[..], "{:?}", config.op);
        let values = outputs[0].to_plain_array_view::<f32>().unwrap();
        assert!(values.iter().all(|v| v.is_finite()), "{:?} produced non-finite values", config.op);
    }

    #[test]
    fn conv_and_dense_produce_the_predicted_shape() {
        let mut conv = Conv2d::new(16, [3, 3]);
        conv.strides = [2, 2];
        conv.padding = Padding::Same;
        conv.activation = Activation::Relu;
        run_and_check(&LayerConfig::new(Op::Conv2d(conv), vec![smallvec::smallvec![3, 17, 17]], 2));
        let dense = Dense { units: 10, use_bias: true, activation: Activation::Softmax };
        run_and_check(&LayerConfig::new(Op::Dense(dense), vec![smallvec::smallvec![64]], 3));
    }

    #[test]
    fn a_batch_norm_runs_as_a_trained_one_does_a_multiply_and_an_add_per_channel() {
        // With identity statistics tract would make it one multiply by a scalar and drop the add; perfmodel
        // exports per-channel statistics, so the layer tract runs reads a vector for each.
        let config = LayerConfig::new(Op::BatchNorm, vec![smallvec::smallvec![16, 8, 8]], 1);
        let workload = executor().layer_workload(&config).unwrap();
        let model = workload.state.model();
        let ops: Vec<String> = model.nodes().iter().map(|n| n.op().name().to_string()).collect();
        assert!(!ops.iter().any(|op| op.contains("ByScalar")), "{ops:?}");
        assert!(ops.iter().any(|op| op.contains("Mul") && op.contains("Add")), "{ops:?}");
        // The output is the input scaled and shifted per channel: channels differ.
        let input = workload.inputs[0].to_plain_array_view::<f32>().unwrap().to_owned();
        let mut workload = workload;
        let output = workload.run_outputs().unwrap()[0].to_plain_array_view::<f32>().unwrap().to_owned();
        let ratio = |c: usize| output[[0, c, 0, 0]] / input[[0, c, 0, 0]];
        assert!((0..16).any(|c| (ratio(c) - ratio(0)).abs() > 1e-3), "one scale for every channel");
    }

    #[test]
    fn several_threads_compute_what_one_thread_computes() {
        // Large enough that tract's matmul dispatcher actually splits the work across the pool.
        let config = LayerConfig::new(Op::Conv2d(Conv2d::new(128, [3, 3])), vec![smallvec::smallvec![64, 40, 40]], 2);
        let one = executor().layer_workload(&config).unwrap().run_outputs().unwrap();
        let pooled = TractExecutor::new(2).unwrap();
        assert_eq!(pooled.threads(), 2);
        let two = pooled.layer_workload(&config).unwrap().run_outputs().unwrap();
        let (a, b) = (one[0].to_plain_array_view::<f32>().unwrap(), two[0].to_plain_array_view::<f32>().unwrap());
        assert_eq!(a.shape(), b.shape());
        let max_diff = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(max_diff < 1e-3, "2-thread output differs from 1-thread output by {max_diff}");
    }

    #[test]
    fn every_op_kind_builds_and_runs() {
        let image: crate::layer::Shape = smallvec::smallvec![8, 9, 9];
        let mut grouped = Conv2d::new(8, [3, 3]);
        grouped.groups = 4;
        grouped.dilation = [2, 2];
        grouped.padding = Padding::Explicit([1, 0, 2, 1]);
        grouped.use_bias = false;
        let mut depthwise = DepthwiseConv2d::new([3, 3]);
        depthwise.depth_multiplier = 2;
        depthwise.strides = [2, 2];
        depthwise.padding = Padding::Same;
        depthwise.activation = Activation::Relu6;
        let same_pool = Pool2d { pool_size: [3, 3], strides: [2, 2], padding: Padding::Same };
        let mut configs = vec![
            LayerConfig::new(Op::Conv2d(grouped), vec![image.clone()], 1),
            LayerConfig::new(Op::DepthwiseConv2d(depthwise), vec![image.clone()], 2),
            LayerConfig::new(Op::MaxPool2d(same_pool.clone()), vec![image.clone()], 1),
            LayerConfig::new(Op::AvgPool2d(same_pool), vec![image.clone()], 1),
            LayerConfig::new(Op::AvgPool2d(Pool2d::new([2, 2])), vec![image.clone()], 1),
            LayerConfig::new(Op::GlobalAvgPool2d, vec![image.clone()], 2),
            LayerConfig::new(Op::GlobalMaxPool2d, vec![image.clone()], 1),
            LayerConfig::new(Op::Flatten, vec![image.clone()], 2),
            LayerConfig::new(Op::Reshape { target_shape: vec![-1, 81] }, vec![image.clone()], 2),
            LayerConfig::new(Op::Add, vec![image.clone(), image.clone()], 1),
            LayerConfig::new(Op::Add, vec![image.clone(), image.clone(), image.clone()], 1),
            LayerConfig::new(Op::Multiply, vec![image.clone(), smallvec::smallvec![8, 1, 1]], 2),
            LayerConfig::new(Op::Multiply, vec![image.clone(), smallvec::smallvec![9], image.clone()], 1),
            LayerConfig::new(Op::Concat { axis: 0 }, vec![image.clone(), smallvec::smallvec![4, 9, 9]], 2),
            LayerConfig::new(Op::Concat { axis: -1 }, vec![image.clone(), smallvec::smallvec![8, 9, 2]], 1),
            LayerConfig::new(Op::BatchNorm, vec![image.clone()], 2),
            LayerConfig::new(Op::BatchNorm, vec![smallvec::smallvec![32]], 2),
            LayerConfig::new(Op::ZeroPadding2d { padding: [1, 2, 0, 3] }, vec![image.clone()], 1),
            LayerConfig::new(Op::Cropping2d { cropping: [1, 2, 0, 3] }, vec![image.clone()], 2),
            LayerConfig::new(Op::Dropout { rate: 0.5 }, vec![image.clone()], 1),
            LayerConfig::new(Op::ChannelShuffle { groups: 4 }, vec![image.clone()], 2),
            LayerConfig::new(Op::ChannelSlice { start: 2, end: 6 }, vec![image.clone()], 1),
            // A transformer block's layers on 10 tokens of 16 features in 2 heads of 8.
            LayerConfig::new(Op::MatMul { units: Some(48), use_bias: true }, vec![smallvec::smallvec![10, 16]], 2),
            LayerConfig::new(Op::MatMul { units: Some(16), use_bias: false }, vec![smallvec::smallvec![16]], 1),
            LayerConfig::new(
                Op::MatMul { units: None, use_bias: false },
                vec![smallvec::smallvec![2, 10, 8], smallvec::smallvec![2, 8, 10]],
                2,
            ),
            LayerConfig::new(
                Op::MatMul { units: None, use_bias: false },
                vec![smallvec::smallvec![2, 10, 10], smallvec::smallvec![1, 10, 8]],
                1,
            ),
            LayerConfig::new(Op::LayerNorm { axis: -1, epsilon: 1e-6 }, vec![smallvec::smallvec![10, 16]], 2),
            LayerConfig::new(Op::LayerNorm { axis: 0, epsilon: 1e-5 }, vec![image.clone()], 1),
            LayerConfig::new(Op::Softmax { axis: -1 }, vec![smallvec::smallvec![2, 10, 10]], 2),
            LayerConfig::new(Op::Softmax { axis: 0 }, vec![image.clone()], 1),
            LayerConfig::new(Op::Transpose { perm: vec![1, 0, 2] }, vec![smallvec::smallvec![10, 2, 8]], 2),
            LayerConfig::new(Op::Transpose { perm: vec![0, 2, 1] }, vec![smallvec::smallvec![2, 10, 8]], 1),
            // Constants broadcast from the right: a scalar scale, a position embedding, a mask over the keys.
            LayerConfig::new(
                Op::Elementwise { function: ElementwiseFn::Mul, constant_shape: smallvec::smallvec![] },
                vec![smallvec::smallvec![2, 10, 10]],
                2,
            ),
            LayerConfig::new(
                Op::Elementwise { function: ElementwiseFn::Add, constant_shape: smallvec::smallvec![10, 16] },
                vec![smallvec::smallvec![10, 16]],
                1,
            ),
            LayerConfig::new(
                Op::Elementwise { function: ElementwiseFn::Sub, constant_shape: smallvec::smallvec![10] },
                vec![smallvec::smallvec![2, 10, 10]],
                2,
            ),
            LayerConfig::new(
                Op::Elementwise { function: ElementwiseFn::Div, constant_shape: smallvec::smallvec![10, 1] },
                vec![smallvec::smallvec![10, 16]],
                1,
            ),
            LayerConfig::new(Op::Embedding { vocab: 50, features: 16 }, vec![smallvec::smallvec![10]], 2),
        ];
        for a in Activation::ALL {
            configs.push(LayerConfig::new(Op::Activation(a), vec![smallvec::smallvec![10, 16]], 1));
            configs.push(LayerConfig::new(Op::Activation(a), vec![image.clone()], 2));
            let dense = Dense { units: 5, use_bias: false, activation: a };
            configs.push(LayerConfig::new(Op::Dense(dense), vec![smallvec::smallvec![12]], 1));
        }
        for config in &configs {
            run_and_check(config);
        }
    }

    #[test]
    fn unsupported_layers_and_threads_are_refused_clearly() {
        let op = Op::Unsupported { op_type: "LRN".into(), output_shape: smallvec::smallvec![8, 9, 9] };
        let err =
            executor().layer_workload(&LayerConfig::new(op, vec![smallvec::smallvec![8, 9, 9]], 1)).err().unwrap();
        assert!(err.to_string().contains("'LRN'"), "{err}");
        let err = TractExecutor::new(0).unwrap_err();
        assert!(err.to_string().contains("threads must be between 1"), "{err}");
    }

    #[test]
    fn describe_names_the_tract_version_in_cargo_lock() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
        let expected = format!("name = \"tract-onnx\"\nversion = \"{TRACT_VERSION}\"");
        assert!(lock.contains(&expected), "Cargo.lock does not pin tract-onnx {TRACT_VERSION}");
        assert_eq!(executor().describe(), format!("tract {TRACT_VERSION}"));
    }
}
