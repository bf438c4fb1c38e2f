//! Whole-network profiling (`perfmodel bench`): the truth that whole-network estimates are validated against.
//!
//! The network is exported to ONNX and run as one optimised tract plan, exactly as a user would deploy it.
//! Total latency is the median over rounds of plain runs (no instrumentation). Per-layer times come from
//! separate instrumented runs through tract's per-node evaluation hook (`run_plan_with_eval`, as tract's own
//! profiler does) and are mapped back to layers through the exported node names: tract keeps a node's name,
//! or extends it with `.suffix`, when it rewrites or fuses it, so a node is attributed to the layer owning the
//! longest exported name it starts with. Time in nodes that match no layer (the input source, tract-made glue)
//! is reported as `unattributed_ms`, never hidden.

use super::{Executor, NetworkBench, TractExecutor, TractWorkload};
use crate::collect::alloc;
use crate::cpu_clock::time_both;
use crate::error::{Error, Result};
use crate::layer::Op;
use crate::network::Network;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::stats::median;
use crate::units::{GIB, MIB};

/// Rounds whose room is reserved up front (more grow as they run): an absurd round count is not an allocation.
const PREALLOCATED_ROUNDS: usize = 1024;

/// Result of [`profile_network`]; serialised as `perfmodel bench --format json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetworkProfile {
    pub network: String,
    pub engine: String,
    pub threads: usize,
    pub batch_size: usize,
    pub rounds: usize,
    pub warmup: usize,
    pub total: TotalProfile,
    /// One entry per network layer, in network order.
    pub layers: Vec<LayerProfile>,
    /// Median time of engine nodes that belong to no layer.
    pub unattributed_ms: f64,
    /// The heap around every engine node of the first run, in plan order (empty without the counting
    /// allocator); not part of the JSON, written by `perfmodel bench --memory-trace`.
    #[serde(skip)]
    pub node_memory: Vec<NodeMemory>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TotalProfile {
    /// Median latency of one whole-network inference (whole batch).
    pub latency_ms: f64,
    pub latency_min_ms: f64,
    pub latency_max_ms: f64,
    /// Measured peak heap of an inference when the counting allocator is installed (the `perfmodel` binary),
    /// else the planned figure.
    pub peak_memory_mib: f64,
    /// How `peak_memory_mib` was obtained.
    pub memory_source: String,
    /// f32 weights plus the peak of live activation tensors in tract's plan (no scratch buffers).
    pub planned_memory_mib: f64,
    /// Heap the built model holds before it runs (plan, packed weights, input), above the heap before building;
    /// null without the counting allocator.
    #[serde(default)]
    pub resident_memory_mib: Option<f64>,
    /// Every timed round's latency, in the order they ran (the median of these is `latency_ms`).
    #[serde(default)]
    pub round_latency_ms: Vec<f64>,
    /// The same rounds on the calling thread's CPU clock ([`crate::cpu_clock`]): what they computed without the
    /// stretches the machine's hypervisor took the CPU away. Empty when the engine ran on a thread pool (the
    /// work then runs on other threads) or the clock could not be read.
    #[serde(default)]
    pub round_cpu_ms: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerProfile {
    pub name: String,
    /// Median over rounds of the time of the engine nodes attributed to this layer (0 when tract folded the
    /// layer away entirely, e.g. dropout).
    pub latency_ms: f64,
    /// Highest heap while this layer's engine nodes ran (first run), above the heap before building the model;
    /// null without the counting allocator or when tract folded the layer away.
    #[serde(default)]
    pub peak_memory_mib: Option<f64>,
}

/// Run `network` with tract: one run measuring memory, `warmup` untimed runs, then `rounds` timed runs and
/// `rounds` instrumented runs.
pub fn profile_network(network: &Network, threads: usize, rounds: usize, warmup: usize) -> Result<NetworkProfile> {
    Ok(profile_networks(std::slice::from_ref(network), &TractExecutor::new(threads)?, rounds, warmup, rounds)?
        .remove(0))
}

/// Profile several networks in turns: `block` rounds of the first network back to back, then `block` rounds
/// of the next, and so on, then the next `block` rounds of each, until every network has run `rounds` rounds.
/// A network's rounds within a turn follow each other as inference after inference does when it is deployed,
/// with its weights and activations in the caches; a small network timed right after a large one (or after
/// the speed probe) is not: interleaved round by round with the other holdout networks, mnist_cnn (2.0 ms on
/// its own) measured 2.75-2.80 ms. Several turns per network spread the machine's slow spells
/// over all networks instead of letting one land on whichever network runs in it (the same network's time
/// moves by 1.5x within seconds on a shared VM). All networks are built first and stay in memory.
pub fn profile_networks(
    networks: &[Network],
    executor: &dyn Executor,
    rounds: usize,
    warmup: usize,
    block: usize,
) -> Result<Vec<NetworkProfile>> {
    profile_networks_between(networks, executor, rounds, warmup, block, &mut |_| Ok(()))
}

/// Where [`profile_networks_between`] (or [`profile_networks_observed`]) is when it calls its hook: before
/// (`after` false) or right after (`after` true) the runs of round `round` of network `network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchStep {
    pub network: usize,
    pub round: usize,
    pub after: bool,
}

/// [`profile_networks`], calling `between` before and right after the runs of every round (the instrumented
/// per-node run, then the timed run): a side measurement taken in step with the networks (such as how fast
/// the machine runs) sees the same moments of the machine as each timed run, which it brackets.
pub fn profile_networks_between(
    networks: &[Network],
    executor: &dyn Executor,
    rounds: usize,
    warmup: usize,
    block: usize,
    between: &mut dyn FnMut(BenchStep) -> Result<()>,
) -> Result<Vec<NetworkProfile>> {
    struct Hook<'a>(&'a mut dyn FnMut(BenchStep) -> Result<()>);
    impl BenchObserver for Hook<'_> {
        fn step(&mut self, step: BenchStep) -> Result<()> {
            (self.0)(step)
        }
    }
    let plan = RoundPlan { rounds, max_rounds: rounds, block };
    profile_networks_observed(networks, executor, plan, warmup, &mut Hook(between))
}

/// How many rounds [`profile_networks_observed`] runs: `rounds` for every network in turns of `block`, then
/// more turns, up to `max_rounds`, for each network its observer wants more of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundPlan {
    pub rounds: usize,
    pub max_rounds: usize,
    pub block: usize,
}

/// What runs alongside [`profile_networks_observed`]: a side measurement at every step, and whether a network
/// needs more rounds than planned.
pub trait BenchObserver {
    /// Called before and right after the runs of every round.
    fn step(&mut self, step: BenchStep) -> Result<()>;
    /// Asked after the planned rounds, at every turn: whether `network` (with `rounds` rounds so far) should run
    /// another turn.
    fn wants_more(&self, _network: usize, _rounds: usize) -> bool {
        false
    }
}

/// [`profile_networks_between`] with extra turns for the networks `observer` wants more rounds of (at most
/// `plan.max_rounds` each): e.g. until enough rounds ran at the speed an estimate is for. The extra turns
/// keep the order and the block of the planned ones; a network that has enough sits them out.
pub fn profile_networks_observed(
    networks: &[Network],
    executor: &dyn Executor,
    plan: RoundPlan,
    warmup: usize,
    observer: &mut dyn BenchObserver,
) -> Result<Vec<NetworkProfile>> {
    let RoundPlan { rounds, max_rounds, block } = plan;
    if rounds == 0 {
        return Err(Error::Invalid("bench needs at least one round".into()));
    }
    if block == 0 {
        return Err(Error::Invalid("bench needs at least one round per turn".into()));
    }
    let max_rounds = max_rounds.max(rounds);
    if executor.one_workload_at_a_time() {
        return profile_one_at_a_time(networks, executor, (rounds, max_rounds), warmup, observer);
    }
    let mut benches = networks
        .iter()
        .map(|n| executor.bench_network(n, rounds, warmup))
        .collect::<Result<Vec<Box<dyn NetworkBench>>>>()?;
    let mut done = vec![0usize; networks.len()];
    let mut first = 0;
    while first < max_rounds {
        let planned = first < rounds;
        let end = first.saturating_add(block).min(if planned { rounds } else { max_rounds });
        let mut ran = false;
        for (network, bench) in benches.iter_mut().enumerate() {
            if !planned && (done[network] != first || !observer.wants_more(network, done[network])) {
                continue;
            }
            for round in first..end {
                // The instrumented run separates the timed run from whatever ran before it on this thread
                // (another network, the side measurement): the timed run then sees the steady state a network
                // run on its own (or deployed, inference after inference) sees. Timed right after the speed
                // probe, mnist_cnn measured 2.2-2.7 ms against 2.0 ms without the probe (40 rounds each).
                observer.step(BenchStep { network, round, after: false })?;
                bench.instrumented_run()?;
                bench.timed_run()?;
                observer.step(BenchStep { network, round, after: true })?;
                done[network] = round + 1;
                ran = true;
            }
        }
        if !planned && !ran {
            break;
        }
        first = end;
    }
    benches.into_iter().map(|b| b.finish()).collect()
}

/// [`profile_networks_observed`] for an executor whose live workloads take each other's cores
/// ([`Executor::one_workload_at_a_time`]): one network after another, each built only when the one before is
/// finished, its timed rounds (each after an untimed run, as the interleaved order puts an instrumented one
/// there) before its instrumented ones, which build their own session only once the timed one is gone. The
/// observer sees the same steps, network by network; extra rounds follow a network's planned ones, up to
/// `max_rounds` (at least `rounds`).
fn profile_one_at_a_time(
    networks: &[Network],
    executor: &dyn Executor,
    (rounds, max_rounds): (usize, usize),
    warmup: usize,
    observer: &mut dyn BenchObserver,
) -> Result<Vec<NetworkProfile>> {
    let mut profiles = Vec::with_capacity(networks.len());
    for (network, net) in networks.iter().enumerate() {
        let mut bench = executor.bench_network(net, rounds, warmup)?;
        let mut round = 0;
        while round < rounds || (round < max_rounds && observer.wants_more(network, round)) {
            observer.step(BenchStep { network, round, after: false })?;
            bench.untimed_run()?;
            bench.timed_run()?;
            observer.step(BenchStep { network, round, after: true })?;
            round += 1;
        }
        for _ in 0..round {
            bench.instrumented_run()?;
        }
        profiles.push(bench.finish()?);
    }
    Ok(profiles)
}

/// The timed whole-network runs of one network: the wall clock, and the calling thread's CPU clock as long as it
/// can be read.
pub(super) struct Rounds {
    wall: Vec<f64>,
    cpu: Vec<f64>,
    cpu_readable: bool,
}

impl Rounds {
    pub(super) fn new(rounds: usize) -> Rounds {
        let reserve = rounds.min(PREALLOCATED_ROUNDS);
        Rounds { wall: Vec::with_capacity(reserve), cpu: Vec::with_capacity(reserve), cpu_readable: true }
    }

    /// Time one run on both clocks.
    pub(super) fn time<T>(&mut self, run: impl FnOnce() -> Result<T>) -> Result<()> {
        let (ran, wall_ms, cpu_ms) = time_both(run);
        ran?;
        self.wall.push(wall_ms);
        match cpu_ms {
            Some(ms) if self.cpu_readable => self.cpu.push(ms),
            _ => {
                self.cpu_readable = false;
                self.cpu.clear();
            }
        }
        Ok(())
    }

    pub(super) fn len(&self) -> usize {
        self.wall.len()
    }

    /// The wall time of the last run.
    pub(super) fn last_ms(&self) -> Option<f64> {
        self.wall.last().copied()
    }

    /// The median wall time of the runs so far.
    pub(super) fn median_ms(&self) -> Option<f64> {
        median(&self.wall)
    }

    /// The latency fields of a profile (the memory fields left empty): median, fastest and slowest round, every
    /// round, and on the CPU clock only when the runs computed on this thread (`one_thread`: a pool computes
    /// on its own threads).
    pub(super) fn total(self, one_thread: bool) -> TotalProfile {
        TotalProfile {
            latency_ms: median(&self.wall).unwrap_or(0.0),
            latency_min_ms: self.wall.iter().copied().fold(f64::INFINITY, f64::min),
            latency_max_ms: self.wall.iter().copied().fold(0.0, f64::max),
            round_cpu_ms: if one_thread { self.cpu } else { Vec::new() },
            round_latency_ms: self.wall,
            ..TotalProfile::default()
        }
    }
}

/// The heap a network needs, from the counting allocator (all `None`/empty without it).
struct MemoryMeasurement {
    /// Peak heap of the first run, above the heap before building.
    measured_bytes: Option<u64>,
    /// Heap held after building, before the first run (plan, packed weights, input), above the pre-build heap.
    resident_bytes: Option<u64>,
    /// Highest heap while each layer's nodes ran in the first run, above the pre-build heap.
    layer_peak: Vec<Option<u64>>,
    node_memory: Vec<NodeMemory>,
}

/// Build `network` on this thread and trace the heap through its first run.
fn measure_memory(executor: &TractExecutor, network: &Network) -> Result<MemoryMeasurement> {
    let baseline = alloc::current_bytes();
    let mut workload = executor.network_workload(network)?;
    // Building allocates transiently; the network needs what stays (plan, packed weights, input) plus what a
    // run adds (activations, scratch).
    let resident = alloc::current_bytes();
    let trace = workload.run_memory_traced()?;
    let installed = alloc::is_installed();
    let attribution = Attribution::new(&workload, network);
    let mut layer_peak = vec![None; network.layers.len()];
    let mut node_memory = Vec::new();
    if installed {
        let model = workload.state.model();
        let mib = |b: usize| b.saturating_sub(baseline) as f64 / MIB;
        for &(node, before, peak, after) in &trace.steps {
            let layer = attribution.layer_of_node[node];
            let n = model.node(node);
            node_memory.push(NodeMemory {
                node: n.name.clone(),
                op: n.op().name().to_string(),
                layer: layer.map(|l| network.layers[l].name.clone()),
                before_mib: mib(before),
                peak_mib: mib(peak),
                after_mib: mib(after),
                id: node,
                inputs: n.inputs.iter().map(|i| i.node.to_string()).collect::<Vec<_>>().join(" "),
            });
            if let Some(layer) = layer {
                let bytes = peak.saturating_sub(baseline) as u64;
                let slot: &mut Option<u64> = &mut layer_peak[layer];
                *slot = Some(slot.map_or(bytes, |b| b.max(bytes)));
            }
        }
    }
    Ok(MemoryMeasurement {
        measured_bytes: installed.then(|| trace.peak.saturating_sub(baseline) as u64),
        resident_bytes: installed.then(|| resident.saturating_sub(baseline) as u64),
        layer_peak,
        node_memory,
    })
}

/// One network being profiled by tract: memory measured on a fresh thread, built, warmed up; rounds accumulate.
pub(super) struct TractNetworkBench<'a> {
    executor: &'a TractExecutor,
    network: &'a Network,
    warmup: usize,
    workload: TractWorkload,
    attribution: Attribution,
    memory: MemoryMeasurement,
    rounds: Rounds,
    per_layer: Vec<Vec<f64>>,
    unattributed: Vec<f64>,
}

impl<'a> TractNetworkBench<'a> {
    pub(super) fn new(
        executor: &'a TractExecutor,
        network: &'a Network,
        rounds: usize,
        warmup: usize,
    ) -> Result<TractNetworkBench<'a>> {
        check_fits_in_memory(network, available_memory_bytes())?;
        // tract keeps per-thread scratch (matmul tiles, element-wise buffers) that only grows: a network measured
        // on a thread where others already ran would not pay for its own. Each network's memory is measured on
        // a fresh thread, as a fresh deployment sees it; the timed workload is built again here. (With a
        // multi-threaded executor the pool's workers keep their scratch across networks.)
        let memory = std::thread::scope(|scope| scope.spawn(|| measure_memory(executor, network)).join())
            .map_err(|_| Error::Executor(format!("network '{}': the memory measurement panicked", network.name)))??;
        let mut workload = executor.network_workload(network)?;
        let attribution = Attribution::new(&workload, network);
        for _ in 0..=warmup {
            workload.run_outputs()?;
        }
        let reserve = rounds.min(PREALLOCATED_ROUNDS);
        Ok(TractNetworkBench {
            executor,
            network,
            warmup,
            workload,
            attribution,
            memory,
            rounds: Rounds::new(rounds),
            per_layer: vec![Vec::with_capacity(reserve); network.layers.len()],
            unattributed: Vec::with_capacity(reserve),
        })
    }
}

impl NetworkBench for TractNetworkBench<'_> {
    /// One timed whole-network run, on the wall clock and the calling thread's CPU clock.
    fn timed_run(&mut self) -> Result<()> {
        let workload = &mut self.workload;
        self.rounds.time(|| workload.run_outputs())
    }

    fn untimed_run(&mut self) -> Result<()> {
        self.workload.run_outputs().map(drop)
    }

    /// One run timed node by node (the per-layer times).
    fn instrumented_run(&mut self) -> Result<()> {
        let node_ms = self.workload.run_timed_nodes()?;
        let mut layer_ms = vec![0.0; self.network.layers.len()];
        let mut lost = 0.0;
        for (node, ms) in node_ms.iter().enumerate() {
            match self.attribution.layer_of_node[node] {
                Some(layer) => layer_ms[layer] += ms,
                None => lost += ms,
            }
        }
        for (samples, ms) in self.per_layer.iter_mut().zip(layer_ms) {
            samples.push(ms);
        }
        self.unattributed.push(lost);
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<NetworkProfile> {
        let (network, executor) = (self.network, self.executor);
        let weight_bytes: u64 = network.analyze()?.costs.iter().map(|c| c.weight_elems * 4).sum();
        let planned_bytes = weight_bytes + self.workload.planned_activation_peak_bytes()?;
        let rounds = self.rounds.len();
        Ok(NetworkProfile {
            network: network.name.clone(),
            engine: executor.describe(),
            threads: executor.threads(),
            batch_size: network.batch_size,
            rounds,
            warmup: self.warmup,
            total: TotalProfile {
                peak_memory_mib: self.memory.measured_bytes.unwrap_or(planned_bytes) as f64 / MIB,
                memory_source: if self.memory.measured_bytes.is_some() {
                    "measured: peak heap during the first run, above the heap before building the model".into()
                } else {
                    "planned (no counting allocator in this process)".into()
                },
                planned_memory_mib: planned_bytes as f64 / MIB,
                resident_memory_mib: self.memory.resident_bytes.map(|b| b as f64 / MIB),
                ..self.rounds.total(executor.threads() == 1)
            },
            layers: network
                .layers
                .iter()
                .zip(self.per_layer.iter())
                .zip(&self.memory.layer_peak)
                .map(|((l, samples), peak)| LayerProfile {
                    name: l.name.clone(),
                    latency_ms: median(samples).unwrap_or(0.0),
                    peak_memory_mib: peak.map(|b| b as f64 / MIB),
                })
                .collect(),
            unattributed_ms: median(&self.unattributed).unwrap_or(0.0),
            node_memory: std::mem::take(&mut self.memory.node_memory),
        })
    }
}

/// Refuse a network that cannot fit in the memory available (its weights plus the largest layer's input and
/// output, as f32: a lower bound), with a clear error instead of an allocation abort or the OOM killer mid-run.
pub(super) fn check_fits_in_memory(network: &Network, available_bytes: Option<u64>) -> Result<()> {
    let Some(available) = available_bytes else { return Ok(()) };
    let analysis = network.analyze()?;
    let weights: u64 = analysis.costs.iter().map(|c| c.weight_elems).sum();
    let largest_step = analysis.costs.iter().map(|c| c.input_elems + c.output_elems).max().unwrap_or(0);
    let needed = (weights + largest_step).saturating_mul(4);
    if needed <= available {
        return Ok(());
    }
    Err(Error::Executor(format!(
        "network '{}' (batch {}) needs at least {:.1} GiB (weights plus the largest layer's input and output), \
         only {:.1} GiB of memory is available here",
        network.name,
        network.batch_size,
        needed as f64 / GIB,
        available as f64 / GIB
    )))
}

/// What this process can still allocate: the machine's available memory, or less when the process runs under an
/// address-space limit (`ulimit -v`) or in a cgroup with a memory limit (a container's `--memory`, a systemd
/// slice), which a large network would otherwise hit inside the allocator or through the OOM killer. Changes
/// with what else runs: right for refusing a run now, not for recording a layer as impossible.
pub(super) fn available_memory_bytes() -> Option<u64> {
    let cgroup = cgroup_memory().map(|c| c.limit.saturating_sub(c.used));
    smaller(smaller(meminfo_bytes("MemAvailable:"), address_space_left_bytes()), cgroup)
}

/// What this process could ever allocate: the machine's memory, its address-space limit, or its cgroup's limit.
pub(super) fn memory_limit_bytes() -> Option<u64> {
    let cgroup = cgroup_memory().map(|c| c.limit);
    smaller(smaller(meminfo_bytes("MemTotal:"), address_space_left_bytes()), cgroup)
}

/// A cgroup's memory limit and what its processes use now, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CgroupMemory {
    limit: u64,
    used: u64,
}

fn cgroup_memory() -> Option<CgroupMemory> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_memory_in(Path::new("/sys/fs/cgroup"), &own)
}

/// The tightest memory limit over this process's cgroup and its ancestors (the one that leaves least room),
/// from `/proc/self/cgroup` (`own`) and the cgroup filesystem mounted at `root`: cgroup v2 (`memory.max`,
/// `memory.current` under `root`) or v1's memory controller (`memory.limit_in_bytes`, `memory.usage_in_bytes`
/// under `root/memory`). `None` without a limit, or where the files cannot be read (another mount namespace).
fn cgroup_memory_in(root: &Path, own: &str) -> Option<CgroupMemory> {
    // v1 writes "no limit" as the largest page count times the page size (about 2^63).
    const UNLIMITED: u64 = 1 << 60;
    let read = |path: PathBuf| -> Option<u64> {
        let text = std::fs::read_to_string(path).ok()?;
        text.trim().parse::<u64>().ok().filter(|&v| v < UNLIMITED)
    };
    let mut tightest: Option<CgroupMemory> = None;
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (base, limit_file, used_file, reclaimable) = if controllers.is_empty() {
            (root.to_path_buf(), "memory.max", "memory.current", "inactive_file")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        } else {
            continue;
        };
        // The usage counts the page cache of files read (the data, the models), which the kernel reclaims before
        // it fails an allocation: its inactive part is room, as `MemAvailable` counts it and `docker stats`
        // leaves it out.
        let inactive = |dir: &Path| -> u64 {
            let Ok(text) = std::fs::read_to_string(dir.join("memory.stat")) else { return 0 };
            text.lines()
                .find_map(|l| l.strip_prefix(reclaimable)?.strip_prefix(' ')?.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let mut at = base.join(path.trim_start_matches('/'));
        loop {
            if let Some(limit) = read(at.join(limit_file)) {
                let used = read(at.join(used_file)).unwrap_or(0).saturating_sub(inactive(&at));
                let here = CgroupMemory { limit, used };
                let room = |c: &CgroupMemory| c.limit.saturating_sub(c.used);
                if tightest.is_none_or(|t| room(&here) < room(&t)) {
                    tightest = Some(here);
                }
            }
            if at == base || !at.pop() || !at.starts_with(&base) {
                break;
            }
        }
    }
    tightest
}

fn smaller(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A `/proc` line's size in kB, as bytes.
fn kib_line(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib.saturating_mul(1024))
}

fn meminfo_bytes(key: &str) -> Option<u64> {
    kib_line(&std::fs::read_to_string("/proc/meminfo").ok()?, key)
}

/// What is left of the soft address-space limit (`RLIMIT_AS`), when there is one.
fn address_space_left_bytes() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let limited = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } == 0 && limit.rlim_cur != libc::RLIM_INFINITY;
    limited.then(|| {
        let used = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| kib_line(&s, "VmSize:"));
        // rlim_t is u64 here, narrower on 32-bit targets.
        #[allow(clippy::unnecessary_cast)]
        let limit = limit.rlim_cur as u64;
        limit.saturating_sub(used.unwrap_or(0))
    })
}

/// Heap around every node one run evaluated, in order: (node id, live bytes before, highest while it ran, live
/// bytes after), and the run's peak.
struct MemoryTrace {
    steps: Vec<(usize, usize, usize, usize)>,
    peak: usize,
}

/// The heap around one engine node of the first run (`perfmodel bench --memory-trace`), in MiB above the heap
/// before the model was built: where a network's peak comes from, node by node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeMemory {
    /// tract's node name and operator.
    pub node: String,
    pub op: String,
    /// The network layer the node is attributed to, if any.
    pub layer: Option<String>,
    /// Live heap before the node ran, the highest while it ran, and live heap when it returned (before tract
    /// freed the inputs nothing else needs).
    pub before_mib: f64,
    pub peak_mib: f64,
    pub after_mib: f64,
    /// tract's id of the node in its optimised model, and those of the nodes it reads (space-separated): the
    /// order its plan runs the nodes in follows the ids (`eval_order_opt_ram`: always the ready node of the
    /// lowest id), which the trace's own order shows.
    pub id: usize,
    pub inputs: String,
}

/// For every node of the optimised plan, the index of the network layer it belongs to.
///
/// tract names a matrix product that absorbed the following bias / batch norm / activation after the last op
/// it absorbed (`bn.mul.prefused`), so such a node goes to the weighted layer (conv, depthwise, dense) owning
/// one of its inputs (the packed activations `conv.einsum.pack_a`, or the kernel `conv.prep_kernel.pack`):
/// the product is that layer's work.
struct Attribution {
    layer_of_node: Vec<Option<usize>>,
}

impl Attribution {
    fn new(workload: &TractWorkload, network: &Network) -> Attribution {
        let index: HashMap<&str, usize> =
            network.layers.iter().enumerate().map(|(i, l)| (l.name.as_str(), i)).collect();
        let model = workload.state.model();
        let by_name = |name: &str| {
            owning_node(&workload.owners, name, &['.'])
                .and_then(|exported| workload.owners.get(exported))
                .and_then(|layer| index.get(layer.as_str()).copied())
        };
        let weighted =
            |layer: usize| matches!(network.layers[layer].op, Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::Dense(_));
        let layer_of_node = model
            .nodes()
            .iter()
            .map(|node| {
                let own = by_name(&node.name);
                if own.is_some_and(weighted) || !node.op().name().contains("MatMul") {
                    return own;
                }
                node.inputs.iter().filter_map(|i| by_name(&model.node(i.node).name)).find(|&l| weighted(l)).or(own)
            })
            .collect();
        Attribution { layer_of_node }
    }
}

/// The exported node name an engine's node descends from: its own name, or its longest prefix ending before one
/// of `separators` that was exported (tract extends names with `.suffix`; ONNX Runtime also with `_`, `/`, `:`).
pub(super) fn owning_node<'a>(owners: &HashMap<String, String>, name: &'a str, separators: &[char]) -> Option<&'a str> {
    let mut name = name;
    loop {
        if owners.contains_key(name) {
            return Some(name);
        }
        name = &name[..name.rfind(separators)?];
    }
}

impl TractWorkload {
    /// Run once through tract's per-node evaluation hook, recording the heap (counting allocator) around every
    /// node: live bytes before it, the highest while it ran, and live bytes after it (before tract frees the
    /// inputs it no longer needs).
    fn run_memory_traced(&mut self) -> Result<MemoryTrace> {
        let mut steps: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(self.state.model().nodes().len());
        alloc::reset_peak();
        let mut peak = 0usize;
        let (state, inputs) = (&mut self.state, self.inputs.clone());
        tract_linalg::multithread::multithread_tract_scope(self.pool.clone(), || {
            state.run_plan_with_eval(inputs, |ctx, op_state, node, inputs| {
                peak = peak.max(alloc::peak_bytes());
                let before = alloc::reset_peak();
                let outputs = tract_onnx::tract_core::plan::eval(ctx, op_state, node, inputs);
                let node_peak = alloc::peak_bytes();
                peak = peak.max(node_peak);
                steps.push((node.id, before, node_peak, alloc::current_bytes()));
                outputs
            })
        })
        .map_err(|e| Error::Executor(format!("inference failed: {e:#}")))?;
        peak = peak.max(alloc::peak_bytes());
        // The trace itself is on the heap for the whole run: not the network's.
        let own = steps.capacity() * std::mem::size_of::<(usize, usize, usize, usize)>();
        for step in &mut steps {
            step.1 = step.1.saturating_sub(own);
            step.2 = step.2.saturating_sub(own);
            step.3 = step.3.saturating_sub(own);
        }
        Ok(MemoryTrace { steps, peak: peak.saturating_sub(own) })
    }

    /// Run once through tract's per-node evaluation hook; milliseconds spent in each node (by node id).
    fn run_timed_nodes(&mut self) -> Result<Vec<f64>> {
        let mut node_ms = vec![0.0; self.state.model().nodes().len()];
        let (state, inputs) = (&mut self.state, self.inputs.clone());
        tract_linalg::multithread::multithread_tract_scope(self.pool.clone(), || {
            state.run_plan_with_eval(inputs, |ctx, op_state, node, inputs| {
                let start = Instant::now();
                let outputs = tract_onnx::tract_core::plan::eval(ctx, op_state, node, inputs);
                node_ms[node.id] += start.elapsed().as_secs_f64() * 1e3;
                outputs
            })
        })
        .map_err(|e| Error::Executor(format!("inference failed: {e:#}")))?;
        Ok(node_ms)
    }

    /// Largest set of activation tensors alive at once when nodes run in plan order and each tensor is freed
    /// after its last consumer (tract's own flushing rule). Constants are left out: tract keeps most weights
    /// packed inside its matmul ops, not as graph constants, so they are counted from the network instead.
    fn planned_activation_peak_bytes(&self) -> Result<u64> {
        let plan = self.state.plan();
        let model = plan.model();
        let order = plan.order_without_consts();
        let position: HashMap<usize, usize> = order.iter().enumerate().map(|(step, &n)| (n, step)).collect();
        // Step after which each computed tensor can be freed (model outputs live to the end).
        let mut last_use: Vec<usize> = (0..order.len()).collect();
        for (step, &n) in order.iter().enumerate() {
            for input in &model.node(n).inputs {
                if let Some(&producer) = position.get(&input.node) {
                    last_use[producer] = last_use[producer].max(step);
                }
            }
        }
        let outputs = model.output_outlets().map_err(|e| Error::Executor(format!("{e:#}")))?;
        for output in outputs {
            if let Some(&step) = position.get(&output.node) {
                last_use[step] = order.len();
            }
        }
        let (mut live, mut peak) = (0u64, 0u64);
        let mut frees: Vec<u64> = vec![0; order.len() + 1];
        for (step, &n) in order.iter().enumerate() {
            let node = model.node(n);
            let mut size = 0u64;
            for output in &node.outputs {
                let bytes = output
                    .fact
                    .mem_size()
                    .to_i64()
                    .map_err(|e| Error::Executor(format!("node '{}' has a symbolic size: {e}", node.name)))?;
                size += bytes as u64;
            }
            live += size;
            peak = peak.max(live);
            frees[last_use[step]] += size;
            live -= frees[step];
        }
        Ok(peak)
    }
}

#[cfg(test)]
mod cgroup_tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn the_tightest_cgroup_memory_limit_over_the_ancestors_is_read_for_v1_and_v2() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        // v2: a container's own cgroup limited to 2 GiB with 0.5 GiB in use, its parent to 8 GiB with 7.8 in use
        // (less room), the root unlimited.
        write(root, "memory.max", "max\n");
        write(root, "kubepods/memory.max", "8589934592\n");
        write(root, "kubepods/memory.current", "8375186227\n");
        write(root, "kubepods/pod1/memory.max", "2147483648\n");
        write(root, "kubepods/pod1/memory.current", "536870912\n");
        let own = "0::/kubepods/pod1\n";
        assert_eq!(cgroup_memory_in(root, own), Some(CgroupMemory { limit: 8589934592, used: 8375186227 }));
        // Most of the parent's use is page cache it can drop: the pod's own limit is then the tighter one.
        write(root, "kubepods/memory.stat", "anon 1000000000\nfile 7000000000\ninactive_file 7000000000\n");
        assert_eq!(cgroup_memory_in(root, own), Some(CgroupMemory { limit: 2147483648, used: 536870912 }));
        write(root, "kubepods/memory.max", "max\n");
        assert_eq!(cgroup_memory_in(root, own), Some(CgroupMemory { limit: 2147483648, used: 536870912 }));
        // v1's memory controller, with its "unlimited" value at the root.
        write(root, "memory/memory.limit_in_bytes", "9223372036854771712\n");
        write(root, "memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
        write(root, "memory/docker/abc/memory.usage_in_bytes", "104857600\n");
        write(root, "memory/docker/abc/memory.stat", "cache 50000000\ninactive_file 1\ntotal_inactive_file 4857600\n");
        let own = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n";
        assert_eq!(cgroup_memory_in(root, own), Some(CgroupMemory { limit: 1073741824, used: 100000000 }));
        // No limit anywhere, or a path this mount does not have: none.
        assert_eq!(cgroup_memory_in(root, "4:memory:/\n"), None);
        assert_eq!(cgroup_memory_in(root, "0::/elsewhere\n4:memory:/other\n"), None);
        assert_eq!(cgroup_memory_in(root, "garbage\n"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Activation, Conv2d, Dense, Op, Padding};
    use crate::network::Layer;

    fn residual() -> Network {
        let mut conv = Conv2d::new(8, [3, 3]);
        conv.padding = Padding::Same;
        conv.activation = Activation::Relu;
        let mut net = Network::new("residual", vec![8, 12, 12]);
        net.layers = vec![
            Layer::new("c1", Op::Conv2d(conv.clone())),
            Layer::new("c2", Op::Conv2d(conv)),
            Layer::new("sum", Op::Add).with_inputs(&["input", "c2"]),
            Layer::new("drop", Op::Dropout { rate: 0.2 }),
            Layer::new("gap", Op::GlobalAvgPool2d),
            Layer::new("fc", Op::Dense(Dense { units: 4, use_bias: true, activation: Activation::Softmax })),
        ];
        net
    }

    /// Records every step; network 0 wants more rounds until it has `until`, the others never.
    struct Wanting {
        steps: Vec<BenchStep>,
        until: usize,
    }

    impl BenchObserver for Wanting {
        fn step(&mut self, step: BenchStep) -> Result<()> {
            self.steps.push(step);
            Ok(())
        }
        fn wants_more(&self, network: usize, rounds: usize) -> bool {
            network == 0 && rounds < self.until
        }
    }

    #[test]
    fn profile_attributes_time_to_layers_and_plans_memory() {
        let net = residual();
        let profile = profile_network(&net, 1, 3, 1).unwrap();
        assert_eq!(profile.layers.len(), net.layers.len());
        assert!(profile.total.latency_ms > 0.0);
        for name in ["c1", "c2", "fc"] {
            let layer = profile.layers.iter().find(|l| l.name == name).unwrap();
            assert!(layer.latency_ms > 0.0, "{name} got no time: {profile:?}");
        }
        // At least the conv weights and one activation tensor of 8x12x12 floats.
        let weights = 2 * (8 * 8 * 9 + 8) * 4;
        assert!(profile.total.planned_memory_mib * 1048576.0 >= (weights + 8 * 144 * 4) as f64, "{profile:?}");
    }

    #[test]
    fn extra_turns_run_only_for_the_networks_that_want_them() {
        // Network 0 wants more until it has 11 rounds (7 planned in turns of 3, at most 12); network 1 never.
        let nets = [residual(), residual()];
        let executor = TractExecutor::new(1).unwrap();
        let mut observer = Wanting { steps: Vec::new(), until: 11 };
        let plan = RoundPlan { rounds: 7, max_rounds: 12, block: 3 };
        let profiles = profile_networks_observed(&nets, &executor, plan, 0, &mut observer).unwrap();
        // Planned turns 0-2, 3-5, 6 for both, then turns 7-9 and 10-11 for network 0 only.
        assert_eq!((profiles[0].rounds, profiles[1].rounds), (12, 7));
        assert_eq!(profiles[0].total.round_latency_ms.len(), 12);
        let order: Vec<(usize, usize)> =
            observer.steps.iter().filter(|s| !s.after).map(|s| (s.network, s.round)).collect();
        let turn = |network, rounds: std::ops::Range<usize>| rounds.map(move |r| (network, r));
        let want: Vec<(usize, usize)> = turn(0, 0..3)
            .chain(turn(1, 0..3))
            .chain(turn(0, 3..6))
            .chain(turn(1, 3..6))
            .chain(turn(0, 6..7))
            .chain(turn(1, 6..7))
            .chain(turn(0, 7..12))
            .collect();
        assert_eq!(order, want);
        assert_eq!(observer.steps.len(), 2 * want.len());
        // Nothing wanted: the planned rounds only.
        let plain = profile_networks_between(&nets, &executor, 4, 0, 3, &mut |_| Ok(())).unwrap();
        assert_eq!((plain[0].rounds, plain[1].rounds), (4, 4));
    }

    #[test]
    fn an_executor_whose_workloads_contend_keeps_one_alive_at_a_time() {
        // tract, told its workloads contend: every event of every network's bench, in order.
        use std::sync::{Arc, Mutex};
        type Log = Arc<Mutex<Vec<String>>>;
        struct Contending(TractExecutor, Log);
        struct Logged<'a>(Box<dyn NetworkBench + 'a>, Log, String);
        impl NetworkBench for Logged<'_> {
            fn timed_run(&mut self) -> Result<()> {
                self.1.lock().unwrap().push(format!("{} timed", self.2));
                self.0.timed_run()
            }
            fn instrumented_run(&mut self) -> Result<()> {
                self.1.lock().unwrap().push(format!("{} instrumented", self.2));
                self.0.instrumented_run()
            }
            fn untimed_run(&mut self) -> Result<()> {
                self.1.lock().unwrap().push(format!("{} untimed", self.2));
                self.0.untimed_run()
            }
            fn finish(self: Box<Self>) -> Result<NetworkProfile> {
                self.1.lock().unwrap().push(format!("{} finish", self.2));
                self.0.finish()
            }
        }
        impl Executor for Contending {
            fn describe(&self) -> String {
                self.0.describe()
            }
            fn threads(&self) -> usize {
                1
            }
            fn one_workload_at_a_time(&self) -> bool {
                true
            }
            fn prepare_layer(&self, config: &crate::layer::LayerConfig) -> Result<Box<dyn super::super::Workload>> {
                self.0.prepare_layer(config)
            }
            fn prepare_network(&self, network: &Network) -> Result<Box<dyn super::super::Workload>> {
                self.0.prepare_network(network)
            }
            fn bench_network<'a>(
                &'a self,
                network: &'a Network,
                rounds: usize,
                warmup: usize,
            ) -> Result<Box<dyn NetworkBench + 'a>> {
                self.1.lock().unwrap().push(format!("{} build", network.name));
                let inner = self.0.bench_network(network, rounds, warmup)?;
                Ok(Box::new(Logged(inner, self.1.clone(), network.name.clone())))
            }
        }
        let mut second = residual();
        second.name = "second".into();
        let nets = [residual(), second];
        let log = Log::default();
        let executor = Contending(TractExecutor::new(1).unwrap(), log.clone());
        let mut observer = Wanting { steps: Vec::new(), until: 4 };
        let plan = RoundPlan { rounds: 2, max_rounds: 5, block: 1 };
        let profiles = profile_networks_observed(&nets, &executor, plan, 0, &mut observer).unwrap();
        // Network 0 runs its 2 planned rounds and the 2 more it wants, network 1 its 2; each is built after the
        // one before it finished, and profiled only after its last timed run.
        assert_eq!((profiles[0].rounds, profiles[1].rounds), (4, 2));
        let events = |name: &str, rounds: usize| {
            let mut e = vec![format!("{name} build")];
            for _ in 0..rounds {
                e.extend([format!("{name} untimed"), format!("{name} timed")]);
            }
            e.extend((0..rounds).map(|_| format!("{name} instrumented")));
            e.push(format!("{name} finish"));
            e
        };
        let want: Vec<String> = events("residual", 4).into_iter().chain(events("second", 2)).collect();
        assert_eq!(*log.lock().unwrap(), want);
        let steps: Vec<(usize, usize, bool)> = observer.steps.iter().map(|s| (s.network, s.round, s.after)).collect();
        let rounds = |network, n| (0..n).flat_map(move |r| [(network, r, false), (network, r, true)]);
        assert_eq!(steps, rounds(0, 4).chain(rounds(1, 2)).collect::<Vec<_>>());
        assert!(profiles.iter().all(|p| p.layers.iter().any(|l| l.latency_ms > 0.0)), "{profiles:?}");
    }

    #[test]
    fn networks_larger_than_memory_are_refused_before_running() {
        let net = residual();
        let err = check_fits_in_memory(&net, Some(1000)).unwrap_err().to_string();
        assert!(err.contains(&format!("network '{}'", net.name)) && err.contains("GiB"), "{err}");
        check_fits_in_memory(&net, Some(1 << 30)).unwrap();
        check_fits_in_memory(&net, None).unwrap();
    }

    #[test]
    fn owning_node_strips_tract_suffixes() {
        let owners: HashMap<String, String> = [("conv1", "conv1"), ("conv1/relu", "conv1"), ("conv10", "conv10")]
            .map(|(a, b)| (a.into(), b.into()))
            .into();
        assert_eq!(owning_node(&owners, "conv1", &['.']), Some("conv1"));
        assert_eq!(owning_node(&owners, "conv1.pack.matmul", &['.']), Some("conv1"));
        assert_eq!(owning_node(&owners, "conv1/relu.fused", &['.']), Some("conv1/relu"));
        assert_eq!(owning_node(&owners, "conv10.im2col", &['.']), Some("conv10"));
        assert_eq!(owning_node(&owners, "input", &['.']), None);
    }
}
