//! `perfmodel bench` with ONNX Runtime: total latency from plain runs of one session, per-layer times from ONNX
//! Runtime's own per-node profiling in a second, identical session, and memory from the allocator counters.
//!
//! Attribution goes through the optimised graph ONNX Runtime saves (`optimized_model_filepath`): its optimiser
//! renames what it rewrites (an NCHWc convolution is named after the tensor it writes, `<tensor>_nchwc`; a
//! fusion keeps the name of one of its nodes), so an optimised node belongs to the layer owning its name, else
//! the layer owning one of its outputs. A product (convolution, matrix product) named after a layer the optimiser
//! folds into products (a batch norm, an activation, an add: the fused node is named after the tensor it writes)
//! is the work of the product that layer follows ([`product_owner`]). A node the engine inserted belongs to the layer whose
//! tensor it converts: the NCHWc `ReorderInput` to the layer that reads its output, `ReorderOutput` to the one
//! that wrote its input. What still matches no layer is reported as unattributed.
//!
//! Memory: the counting allocator sees Rust's allocations, and the binary also counts the C and C++ heap
//! (malloc, `operator new`) where ONNX Runtime allocates its tensors, arena and packed weights
//! ([`crate::collect::alloc::counts_foreign_heap`]). Without that, the figure is the planned lower bound.

use super::{OrtExecutor, OrtWorkload};
use crate::collect::alloc;
use crate::engine::bench::{available_memory_bytes, check_fits_in_memory, owning_node, Rounds};
use crate::engine::{LayerProfile, NetworkBench, NetworkProfile, TotalProfile};
use crate::error::{Error, Result};
use crate::network::{Network, Sources};
use crate::onnx::export_network;
use crate::stats::median;
use crate::units::MIB;
use prost::Message;
use std::collections::HashMap;
use tract_onnx::pb::ModelProto;

/// One network benchmarked with ONNX Runtime.
pub(in crate::engine) struct OrtNetworkBench<'a> {
    executor: &'a OrtExecutor,
    network: &'a Network,
    exported: crate::onnx::Exported,
    warmup: usize,
    /// The plain session; gone once the profiled one is built when sessions are kept one at a time.
    timed: Option<OrtWorkload>,
    profiled: Option<Profiled>,
    /// Keeps the profile file and the optimised graph until `finish` has read them.
    scratch: tempfile::TempDir,
    memory: Memory,
    rounds: Rounds,
    /// Every run of the profiled session after its build, in order: whether it is one of the instrumented runs
    /// (`finish` keeps those) or a warm-up run before one.
    profiled_runs: Vec<bool>,
    /// The last run of each session, in ms: how much warm-up the next one needs ([`settle`]).
    timed_last_ms: f64,
    profiled_last_ms: f64,
}

/// How long a session runs back to back, warm-up and counted run together, before a run that counts: after
/// another network's turn (or the speed probe) ONNX Runtime takes 1.2-1.4 ms of its own runs to come back to
/// its steady state on a sub-ms network (MNIST CNN 2.9x slower on the first run, within 5% from the sixth;
/// an MLP of 0.04 ms 6.9x, within 5% after 20 runs), against one run for tract. The profiled session is a
/// second copy of the weights, so its run does not warm the timed one. A network of 3 ms or more needs none.
const SETTLE_MS: f64 = 3.0;

/// Most untimed runs [`settle`] makes at once (a clock that reads 0 ms would otherwise never let it stop).
const SETTLE_MAX_RUNS: usize = 10_000;

/// Run `workload` untimed until these runs and the one that counts next (taken to last as long as `last_ms`,
/// the time of its last run, kept up to date) take [`SETTLE_MS`]. Returns how many runs it made.
fn settle(workload: &mut OrtWorkload, last_ms: &mut f64) -> Result<usize> {
    let begun = std::time::Instant::now();
    let mut runs = 0;
    while begun.elapsed().as_secs_f64() * 1e3 + *last_ms < SETTLE_MS && runs < SETTLE_MAX_RUNS {
        *last_ms = plain_run_ms(workload)?;
        runs += 1;
    }
    Ok(runs)
}

/// One plain run of `workload`, and how long it took in ms.
fn plain_run_ms(workload: &mut OrtWorkload) -> Result<f64> {
    let start = std::time::Instant::now();
    crate::engine::Workload::run(workload)?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// Run `workload` `runs + 1` times and return the time of the last run, a plain one as [`settle`] times.
fn warm_up(workload: &mut OrtWorkload, runs: usize) -> Result<f64> {
    for _ in 0..runs {
        workload.run_outputs()?;
    }
    plain_run_ms(workload)
}

/// The session that profiles node by node, and where its nodes' time goes.
struct Profiled {
    workload: OrtWorkload,
    /// Layer index of every node of the optimised graph, by node name.
    layer_of_node: HashMap<String, Option<usize>>,
}

/// Heap figures above the heap before the session was built (None without the foreign-heap counter).
struct Memory {
    peak_bytes: Option<u64>,
    resident_bytes: Option<u64>,
}

impl<'a> OrtNetworkBench<'a> {
    /// Measure the network's memory, then build and warm up its sessions: both, the profiled one first, when
    /// they may be alive together; else only the timed one (the profiled one replaces it at the first
    /// instrumented run).
    pub(in crate::engine) fn new(
        executor: &'a OrtExecutor,
        network: &'a Network,
        rounds: usize,
        warmup: usize,
    ) -> Result<OrtNetworkBench<'a>> {
        check_fits_in_memory(network, available_memory_bytes())?;
        let exported = export_network(network)?;
        let memory = measure_memory(executor, network)?;
        let scratch = tempfile::Builder::new().prefix("perfmodel-ort-").tempdir().map_err(|e| {
            Error::Executor(format!(
                "network '{}': cannot make a directory for ONNX Runtime's profile: {e}",
                network.name
            ))
        })?;
        let mut bench = OrtNetworkBench {
            executor,
            network,
            exported,
            warmup,
            timed: None,
            profiled: None,
            scratch,
            memory,
            rounds: Rounds::new(rounds),
            profiled_runs: Vec::new(),
            timed_last_ms: 0.0,
            profiled_last_ms: 0.0,
        };
        if !executor.spins() {
            bench.build_profiled()?;
        }
        bench.build_timed()?;
        Ok(bench)
    }

    fn what(&self) -> String {
        format!("network '{}'", self.network.name)
    }

    /// The plain session, warmed up.
    fn build_timed(&mut self) -> Result<()> {
        let mut timed = self.executor.network_workload(self.network)?;
        self.timed_last_ms = warm_up(&mut timed, self.warmup)?;
        self.timed = Some(timed);
        Ok(())
    }

    /// The profiled session, warmed up as the timed one is (`finish` keeps only the instrumented runs), and the
    /// attribution of the optimised graph it saved.
    #[allow(clippy::result_large_err)] // ort's builder errors, turned into ours by `OrtWorkload::build`
    fn build_profiled(&mut self) -> Result<()> {
        let what = self.what();
        let optimized = self.scratch.path().join("optimized.onnx");
        let prefix = self.scratch.path().join("profile");
        let mut workload = OrtWorkload::build(self.executor, &self.exported, &what, |b| {
            b.with_optimized_model_path(&optimized)?.with_profiling(&prefix)
        })?;
        self.profiled_last_ms = warm_up(&mut workload, self.warmup)?;
        let graph = read_optimized(&optimized, &what)?;
        let layer_of_node = attribute(&graph, &self.exported.owners, self.network);
        self.profiled = Some(Profiled { workload, layer_of_node });
        Ok(())
    }

    /// A run of the timed session asked for after it made way for the profiled one.
    fn no_timed_session(&self) -> Error {
        Error::Executor(format!("{}: a plain run was asked for after the profiled runs had begun", self.what()))
    }
}

/// Build the network's session and run it once, counting the heap: what the built session holds, and the peak
/// of its first run.
fn measure_memory(executor: &OrtExecutor, network: &Network) -> Result<Memory> {
    if !alloc::counts_foreign_heap() {
        return Ok(Memory { peak_bytes: None, resident_bytes: None });
    }
    let baseline = alloc::current_bytes();
    let mut workload = executor.network_workload(network)?;
    let resident = alloc::current_bytes();
    alloc::reset_peak();
    workload.run_outputs().map(drop)?;
    let peak = alloc::peak_bytes();
    drop(workload);
    Ok(Memory {
        peak_bytes: Some(peak.saturating_sub(baseline) as u64),
        resident_bytes: Some(resident.saturating_sub(baseline) as u64),
    })
}

fn read_optimized(path: &std::path::Path, what: &str) -> Result<ModelProto> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::Executor(format!("{what}: ONNX Runtime did not save its optimised graph: {e}")))?;
    ModelProto::decode(&bytes[..])
        .map_err(|e| Error::Executor(format!("{what}: cannot read ONNX Runtime's optimised graph: {e}")))
}

/// What ONNX Runtime appends to the names of the nodes and tensors it rewrites (`conv1_nchwc`, `conv1/relu_output_0`).
const ORT_SEPARATORS: [char; 4] = ['_', '.', '/', ':'];

/// Operators that compute a convolution or matrix product, possibly with what the optimiser fused into them.
const PRODUCTS: [&str; 7] = ["Conv", "FusedConv", "NhwcConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul"];

/// The layer whose product a product node named after layer `named` computes. A fused node takes the name of
/// the tensor it writes: a convolution with its batch norm folded in is named after the batch norm, one that
/// took a residual add after the add. So resolve `named` back through what the optimiser folds into a product:
/// an activation or dropout to what it follows, a batch norm to the linear convolution before it (else the batch
/// norm itself, which runs as a 1x1 convolution), an add to the convolution the rules fuse it into
/// (`fused_adds`, [`crate::engine::rules::OnnxRuntime`]: its first input's when that one can take it), else to
/// the later of the products feeding it; `named` itself when that leads to no product.
fn product_owner(network: &Network, sources: &[Sources], fused_adds: &[Option<usize>], named: usize) -> usize {
    use crate::layer::{Activation, Op};
    use crate::network::Source;
    fn resolve(
        network: &Network,
        sources: &[Sources],
        fused_adds: &[Option<usize>],
        layer: usize,
        depth: usize,
    ) -> Option<usize> {
        if depth > network.layers.len() {
            return None;
        }
        let inputs = sources.get(layer).map(|s| s.as_slice()).unwrap_or(&[]);
        let first = inputs.iter().find_map(|s| match s {
            Source::Layer(l) => Some(*l),
            Source::Input => None,
        });
        match &network.layers[layer].op {
            Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::Dense(_) => Some(layer),
            Op::BatchNorm => match first.map(|p| (p, &network.layers[p].op)) {
                Some((p, Op::Conv2d(c))) if c.activation == Activation::Linear => Some(p),
                Some((p, Op::DepthwiseConv2d(c))) if c.activation == Activation::Linear => Some(p),
                _ => Some(layer),
            },
            Op::Activation(_) | Op::Dropout { .. } => {
                first.and_then(|p| resolve(network, sources, fused_adds, p, depth + 1))
            }
            Op::Add => fused_adds.get(layer).copied().flatten().or_else(|| {
                inputs
                    .iter()
                    .filter_map(|s| match s {
                        Source::Layer(l) => resolve(network, sources, fused_adds, *l, depth + 1),
                        Source::Input => None,
                    })
                    .max()
            }),
            _ => None,
        }
    }
    resolve(network, sources, fused_adds, named, 0).unwrap_or(named)
}

/// The layer index of every node of ONNX Runtime's optimised graph (see the module docs).
pub(crate) fn attribute(
    graph: &ModelProto,
    owners: &HashMap<String, String>,
    network: &Network,
) -> HashMap<String, Option<usize>> {
    let index: HashMap<&str, usize> = network.layers.iter().enumerate().map(|(i, l)| (l.name.as_str(), i)).collect();
    // A node without a name (ONNX Runtime inlines a function such as `HardSwish` into unnamed nodes) is
    // attributed by its tensors.
    let layer_of = |name: &str| {
        (!name.is_empty())
            .then(|| owning_node(owners, name, &ORT_SEPARATORS))
            .flatten()
            .and_then(|o| owners.get(o))
            .and_then(|l| index.get(l.as_str()).copied())
    };
    let Some(graph) = graph.graph.as_ref() else { return HashMap::new() };
    let analysis = network.analyze().ok();
    let sources = analysis.as_ref().map(|a| a.sources.clone()).unwrap_or_default();
    // The convolution each add is fused into at `all` (at lower levels no product is named after an add).
    let fused_adds: Vec<Option<usize>> = analysis
        .as_ref()
        .map(|a| {
            use crate::engine::rules::EngineRules;
            let rules =
                crate::engine::rules::OnnxRuntime { level: crate::engine::GraphOptimization::All, nchwc_block: 0 };
            let consumers = crate::engine::rules::consumers(&a.sources, network.layers.len());
            rules.residual_adds(network, a, &consumers).into_iter().map(|f| f.map(|(conv, _)| conv)).collect()
        })
        .unwrap_or_default();
    let mut own: Vec<Option<usize>> = graph
        .node
        .iter()
        .map(|n| {
            if n.op_type.starts_with("Reorder") {
                return None;
            }
            let named = layer_of(&n.name).or_else(|| n.output.iter().find_map(|o| layer_of(o)));
            if PRODUCTS.contains(&n.op_type.as_str()) {
                named.map(|l| product_owner(network, &sources, &fused_adds, l))
            } else {
                named
            }
        })
        .collect();
    let producer: HashMap<&str, usize> =
        graph.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i))).collect();
    // Inserted nodes: the layer whose tensor they convert. Chains of them resolve in one pass per link.
    for _ in 0..graph.node.len() {
        let mut changed = false;
        for (i, node) in graph.node.iter().enumerate() {
            if own[i].is_some() {
                continue;
            }
            let from_input = || node.input.iter().filter_map(|t| producer.get(t.as_str())).find_map(|&p| own[p]);
            let from_output = || {
                graph
                    .node
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.input.iter().any(|t| node.output.contains(t)))
                    .find_map(|(c, _)| own[c])
            };
            own[i] = if node.op_type == "ReorderInput" {
                from_output().or_else(from_input)
            } else {
                from_input().or_else(from_output)
            };
            changed |= own[i].is_some();
        }
        if !changed {
            break;
        }
    }
    graph.node.iter().zip(own).map(|(n, l)| (node_key(n), l)).collect()
}

/// What [`attribute`] knows a node by: its name, or for an unnamed one (ONNX Runtime's inlined functions) its
/// first output's name after a `#`.
fn node_key(node: &tract_onnx::pb::NodeProto) -> String {
    if node.name.is_empty() {
        format!("#{}", node.output.first().map(String::as_str).unwrap_or_default())
    } else {
        node.name.clone()
    }
}

/// The graph ONNX Runtime optimises `network` into, and the layer each of its nodes belongs to ([`attribute`]).
#[cfg(test)]
#[allow(clippy::result_large_err)]
fn optimized_and_attributed(
    executor: &OrtExecutor,
    network: &Network,
) -> Result<(ModelProto, HashMap<String, Option<usize>>)> {
    let exported = export_network(network)?;
    let what = format!("network '{}'", network.name);
    let scratch = tempfile::Builder::new()
        .prefix("perfmodel-ort-")
        .tempdir()
        .map_err(|e| Error::Executor(format!("{what}: cannot make a directory for the optimised graph: {e}")))?;
    let path = scratch.path().join("optimized.onnx");
    executor.session(&exported, &what, |b| b.with_optimized_model_path(&path))?;
    let graph = read_optimized(&path, &what)?;
    let layer_of_node = attribute(&graph, &exported.owners, network);
    Ok((graph, layer_of_node))
}

/// For every layer of `network`, whether ONNX Runtime's optimised graph converts its input into the blocked
/// layout (a `ReorderInput` feeding it) and its output back (a `ReorderOutput` reading it): what the rules'
/// layout credits are checked against.
#[cfg(test)]
#[allow(clippy::result_large_err)]
pub(crate) fn reorders_per_layer(executor: &OrtExecutor, network: &Network) -> Result<Vec<(bool, bool)>> {
    let (graph, layer_of_node) = optimized_and_attributed(executor, network)?;
    let mut per_layer = vec![(false, false); network.layers.len()];
    for node in graph.graph.iter().flat_map(|g| &g.node) {
        if let Some(Some(layer)) = layer_of_node.get(&node_key(node)) {
            match node.op_type.as_str() {
                "ReorderInput" => per_layer[*layer].0 = true,
                "ReorderOutput" => per_layer[*layer].1 = true,
                _ => {}
            }
        }
    }
    Ok(per_layer)
}

/// For every layer of `network`, the operators of the nodes ONNX Runtime's optimiser leaves for it (the layout
/// reorders it inserts left out; operators working on blocked-layout tensors as `nchwc.Conv`, `nchwc.Concat`):
/// what the engine rules are checked against.
#[cfg(test)]
#[allow(clippy::result_large_err)] // ort's builder errors, turned into ours by `OrtExecutor::session`
pub(crate) fn optimized_nodes_per_layer(executor: &OrtExecutor, network: &Network) -> Result<Vec<Vec<String>>> {
    let (graph, layer_of_node) = optimized_and_attributed(executor, network)?;
    let mut per_layer = vec![Vec::new(); network.layers.len()];
    // Tensors in the blocked layout: written by a blocked-layout operator (other than ReorderOutput), or by a
    // plain element-wise operator or concat reading one (they work on blocked tensors as they are).
    let mut blocked_tensors: std::collections::HashSet<&str> = std::collections::HashSet::new();
    const LAYOUT_FREE: [&str; 9] = ["Concat", "Add", "Sum", "Mul", "Relu", "Sigmoid", "Tanh", "QuickGelu", "Gelu"];
    for node in graph.graph.iter().flat_map(|g| &g.node) {
        let nchwc_domain = node.domain == "com.microsoft.nchwc";
        let blocked = (nchwc_domain && node.op_type != "ReorderOutput")
            || (LAYOUT_FREE.contains(&node.op_type.as_str())
                && node.input.iter().any(|t| blocked_tensors.contains(t.as_str())));
        if blocked {
            blocked_tensors.extend(node.output.iter().map(String::as_str));
        }
        if node.op_type.starts_with("Reorder") {
            continue;
        }
        if let Some(Some(layer)) = layer_of_node.get(&node_key(node)) {
            per_layer[*layer].push(if blocked { format!("nchwc.{}", node.op_type) } else { node.op_type.clone() });
        }
    }
    Ok(per_layer)
}

/// Per-node times of ONNX Runtime's profile (a Chrome trace): for every `model_run`, microseconds per node name.
fn runs_in_profile(trace: &serde_json::Value) -> Vec<HashMap<String, f64>> {
    let events = trace.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let field = |e: &serde_json::Value, k: &str| e.get(k).and_then(|v| v.as_f64());
    let mut runs: Vec<(f64, f64, HashMap<String, f64>)> = events
        .iter()
        .filter(|e| e.get("cat").and_then(|c| c.as_str()) == Some("Session"))
        .filter(|e| e.get("name").and_then(|c| c.as_str()) == Some("model_run"))
        .filter_map(|e| Some((field(e, "ts")?, field(e, "dur")?, HashMap::new())))
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    for e in events {
        if e.get("cat").and_then(|c| c.as_str()) != Some("Node") {
            continue;
        }
        let Some(node) = e.get("name").and_then(|n| n.as_str()).and_then(|n| n.strip_suffix("_kernel_time")) else {
            continue;
        };
        let (Some(ts), Some(dur)) = (field(e, "ts"), field(e, "dur")) else { continue };
        if let Some(run) = runs.iter_mut().find(|(start, len, _)| ts >= *start && ts <= start + len) {
            *run.2.entry(node.to_string()).or_insert(0.0) += dur;
        }
    }
    runs.into_iter().map(|(_, _, nodes)| nodes).collect()
}

/// The instrumented runs among the profile's `runs` (in order): the profile holds the build's `built` warm-up
/// runs (the first pays for the session's first allocations), then one run per entry of `kinds` (true for an
/// instrumented run, false for a warm-up run before one). Matched from the front: a profiler that stops
/// recording (ONNX Runtime's keeps at most a million events) loses the last runs, not the first.
fn instrumented<'r>(runs: &'r [HashMap<String, f64>], built: usize, kinds: &[bool]) -> Vec<&'r HashMap<String, f64>> {
    runs.iter().skip(built).zip(kinds).filter(|(_, &counted)| counted).map(|(run, _)| run).collect()
}

impl NetworkBench for OrtNetworkBench<'_> {
    fn timed_run(&mut self) -> Result<()> {
        let Some(timed) = self.timed.as_mut() else { return Err(self.no_timed_session()) };
        self.rounds.time(|| crate::engine::Workload::run(timed))?;
        self.timed_last_ms = self.rounds.last_ms().unwrap_or(self.timed_last_ms);
        Ok(())
    }

    /// At least one plain run, and as many as [`settle`] needs.
    fn untimed_run(&mut self) -> Result<()> {
        let Some(timed) = self.timed.as_mut() else { return Err(self.no_timed_session()) };
        if settle(timed, &mut self.timed_last_ms)? == 0 {
            crate::engine::Workload::run(timed)?;
        }
        Ok(())
    }

    /// The profiled session settled ([`settle`]: its warm-up runs are profiled too and left out by `finish`)
    /// and run once, then the timed session settled for the timed run that follows.
    fn instrumented_run(&mut self) -> Result<()> {
        if self.profiled.is_none() {
            // Kept one at a time: the timed session's threads go before the profiled session's come.
            self.timed = None;
            self.build_profiled()?;
        }
        let what = self.what();
        let profiled =
            self.profiled.as_mut().ok_or_else(|| Error::Executor(format!("{what}: no profiled session was built")))?;
        let warm = settle(&mut profiled.workload, &mut self.profiled_last_ms)?;
        self.profiled_runs.extend(std::iter::repeat_n(false, warm));
        self.profiled_last_ms = plain_run_ms(&mut profiled.workload)?;
        self.profiled_runs.push(true);
        if let Some(timed) = self.timed.as_mut() {
            settle(timed, &mut self.timed_last_ms)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<NetworkProfile> {
        let network = self.network;
        let what = self.what();
        let threads = crate::engine::Executor::threads(self.executor);
        let runs = match self.profiled.as_mut() {
            Some(profiled) => {
                let file =
                    profiled.workload.session.end_profiling().map_err(|e| {
                        Error::Executor(format!("{what}: ONNX Runtime could not write its profile: {e}"))
                    })?;
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| Error::Executor(format!("{what}: cannot read ONNX Runtime's profile {file}: {e}")))?;
                let trace: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| Error::Executor(format!("{what}: ONNX Runtime's profile {file} is not JSON: {e}")))?;
                runs_in_profile(&trace)
            }
            None => Vec::new(),
        };
        let runs = instrumented(&runs, self.warmup + 1, &self.profiled_runs);
        let layer_of_node = self.profiled.as_ref().map(|p| &p.layer_of_node);
        // On several threads a run profiled node by node takes longer than a plain one (each node's end is
        // waited for and written down while the pool waits): MobileNetV3-small on 2 threads, 2.21 ms profiled, its
        // nodes summing to 1.77, against 1.09 plain. The nodes' shares are what the profile tells; each profiled
        // run is scaled to the plain runs' median. One thread's profiles are kept as measured.
        let plain_ms = if threads > 1 { self.rounds.median_ms() } else { None };
        let mut per_layer = vec![Vec::with_capacity(runs.len()); network.layers.len()];
        let mut unattributed = Vec::with_capacity(runs.len());
        for run in runs {
            let mut layer_ms = vec![0.0; network.layers.len()];
            let mut lost = 0.0;
            for (node, us) in run {
                match layer_of_node.and_then(|l| l.get(node).copied().flatten()) {
                    Some(layer) => layer_ms[layer] += us / 1e3,
                    None => lost += us / 1e3,
                }
            }
            let profiled_ms = layer_ms.iter().sum::<f64>() + lost;
            let scale = match plain_ms {
                Some(plain) if profiled_ms > 0.0 => plain / profiled_ms,
                _ => 1.0,
            };
            for (samples, ms) in per_layer.iter_mut().zip(layer_ms) {
                samples.push(ms * scale);
            }
            unattributed.push(lost * scale);
        }
        let analysis = network.analyze()?;
        let weight_bytes: u64 = analysis.costs.iter().map(|c| c.weight_elems * 4).sum();
        let largest_step: u64 = analysis.costs.iter().map(|c| (c.input_elems + c.output_elems) * 4).max().unwrap_or(0);
        let planned_bytes = weight_bytes + largest_step;
        Ok(NetworkProfile {
            network: network.name.clone(),
            engine: crate::engine::Executor::describe(self.executor),
            threads,
            batch_size: network.batch_size,
            rounds: self.rounds.len(),
            warmup: self.warmup,
            total: TotalProfile {
                peak_memory_mib: self.memory.peak_bytes.unwrap_or(planned_bytes) as f64 / MIB,
                memory_source: if self.memory.peak_bytes.is_some() {
                    "measured: peak heap (Rust and C/C++ allocations) during the first run, above the heap before \
                     building the session"
                        .into()
                } else {
                    "planned lower bound: weights plus the largest layer's input and output (this process does not \
                     count ONNX Runtime's C++ allocations)"
                        .into()
                },
                planned_memory_mib: planned_bytes as f64 / MIB,
                resident_memory_mib: self.memory.resident_bytes.map(|b| b as f64 / MIB),
                ..self.rounds.total(threads == 1)
            },
            layers: network
                .layers
                .iter()
                .zip(&per_layer)
                .map(|(l, samples)| LayerProfile {
                    name: l.name.clone(),
                    latency_ms: median(samples).unwrap_or(0.0),
                    peak_memory_mib: None,
                })
                .collect(),
            unattributed_ms: median(&unattributed).unwrap_or(0.0),
            node_memory: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_instrumented_runs_of_a_profile_count() {
        let run = |ms: f64| HashMap::from([("conv".to_string(), ms)]);
        // Two build warm-up runs, then warm-up, counted, warm-up, warm-up, counted.
        let runs: Vec<_> = [9.0, 8.0, 7.0, 1.0, 6.0, 5.0, 2.0].into_iter().map(run).collect();
        let kinds = [false, true, false, false, true];
        let kept: Vec<f64> = instrumented(&runs, 2, &kinds).iter().map(|r| r["conv"]).collect();
        assert_eq!(kept, [1.0, 2.0]);
        // A profile that stopped recording: the runs it has are the first ones.
        let kept: Vec<f64> = instrumented(&runs[..5], 2, &kinds).iter().map(|r| r["conv"]).collect();
        assert_eq!(kept, [1.0]);
        assert!(instrumented(&[], 2, &kinds).is_empty());
    }

    #[test]
    fn a_product_named_after_an_add_is_the_convolution_the_add_is_fused_into() {
        use crate::engine::rules::{consumers, EngineRules, OnnxRuntime};
        // A MobileNetV2 block: the add's first input is the block's input, the previous projection, which the
        // expansion reads too, so ONNX Runtime fuses the add into the second input's projection.
        let net = Network::from_json_str(
            r#"{"name": "block", "input_shape": [16, 8, 8], "layers": [
              {"name": "p1", "type": "conv2d", "filters": 16, "kernel": [1, 1]},
              {"name": "e", "type": "conv2d", "filters": 32, "kernel": [1, 1], "activation": "relu"},
              {"name": "p2", "type": "conv2d", "filters": 16, "kernel": [1, 1]},
              {"name": "add", "type": "add", "inputs": ["p1", "p2"]}]}"#,
            "block.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let rules = OnnxRuntime { level: crate::engine::GraphOptimization::All, nchwc_block: 16 };
        let fused: Vec<Option<usize>> = rules
            .residual_adds(&net, &analysis, &consumers(&analysis.sources, 4))
            .into_iter()
            .map(|f| f.map(|(conv, _)| conv))
            .collect();
        assert_eq!(fused[3], Some(2));
        assert_eq!(product_owner(&net, &analysis.sources, &fused, 3), 2);
        // Named after a convolution: that convolution.
        assert_eq!(product_owner(&net, &analysis.sources, &fused, 0), 0);
    }

    #[test]
    fn names_are_owned_by_their_longest_exported_prefix() {
        let owners: HashMap<String, String> =
            [("conv1", "conv1"), ("conv1/relu", "conv1"), ("b/conv", "b")].map(|(a, b)| (a.into(), b.into())).into();
        assert_eq!(owning_node(&owners, "conv1_nchwc", &ORT_SEPARATORS), Some("conv1"));
        assert_eq!(owning_node(&owners, "conv1/relu_output_0_nchwc", &ORT_SEPARATORS), Some("conv1/relu"));
        assert_eq!(owning_node(&owners, "b/conv", &ORT_SEPARATORS), Some("b/conv"));
        assert_eq!(owning_node(&owners, "conv10", &ORT_SEPARATORS), None);
        assert_eq!(owning_node(&owners, "ReorderOutput_token_7", &ORT_SEPARATORS), None);
    }

    #[test]
    fn profile_node_times_are_grouped_by_run() {
        let trace = serde_json::json!([
            {"cat": "Session", "name": "model_run", "ts": 100, "dur": 50},
            {"cat": "Node", "name": "a_kernel_time", "ts": 110, "dur": 20},
            {"cat": "Node", "name": "a_fence_before", "ts": 109, "dur": 0},
            {"cat": "Node", "name": "b_kernel_time", "ts": 131, "dur": 10},
            {"cat": "Session", "name": "model_run", "ts": 200, "dur": 50},
            {"cat": "Node", "name": "a_kernel_time", "ts": 205, "dur": 7},
        ]);
        let runs = runs_in_profile(&trace);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0]["a"], 20.0);
        assert_eq!(runs[0]["b"], 10.0);
        assert_eq!(runs[1]["a"], 7.0);
        assert!(!runs[1].contains_key("b"));
    }
}
