//! How many bytes tract keeps for a weighted layer's packed weights, asked of tract-linalg's own kernel dispatch.
//!
//! tract packs a matmul's weights (m × k) into panels of the chosen kernel's `mr` rows. Which kernel it picks
//! depends on m, k and n (a 128×1 GEMV kernel for n = 1, an 80×2 or 16×12 tile otherwise on AVX-512), so the
//! resident weights are not the f32 weights: a dense layer of 129 units at batch 1 holds 256 rows of packed
//! weights, twice its f32 size, and 145 rows at batch 8. No regressor on (units, batch) recovers that
//! staircase from a few thousand samples, but the engine answers it exactly and in microseconds.
//!
//! The same questions decide speed: which kernel tile a product gets, how a convolution is lowered, and how
//! tract's cache-blocked tile walk ([`TileWalk`]) revisits a lazy im2col's input. Latency models on the machine
//! the data was measured on see those answers as features ([`ConvShape::engine_features`],
//! [`dense_engine_features`]), because the hyperparameters imply them only through thresholds on cache and
//! tile sizes that a few thousand samples do not pin down.

use crate::layer::{LayerConfig, LayerType, Op};
use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::hash::Hash;
use std::sync::OnceLock;
use std::thread::LocalKey;
use tract_linalg::mmm::{MMMInputFormat, Query};
use tract_linalg::MmmDispatch;
use tract_onnx::prelude::{DatumType, TDim};

/// The instruction set tract-linalg dispatches kernels on here, with the tract version: models that count
/// packed weights record it, because another CPU picks other kernels and packs differently.
pub fn host_isa() -> &'static str {
    static ISA: OnceLock<String> = OnceLock::new();
    ISA.get_or_init(|| format!("tract-linalg 0.23.9 {:?}", tract_linalg::isa::native()))
}

/// The cache sizes tract-linalg blocks its tile walk by here ([`TileWalk`]): models that see the walk record
/// them, because another L2 or last-level cache gives other block edges on the same instruction set.
pub fn host_caches() -> &'static str {
    static CACHES: OnceLock<String> = OnceLock::new();
    CACHES.get_or_init(|| {
        let info = tract_linalg::cache::cache_info();
        let llc = tract_linalg::cache::last_level_cache()
            .map_or("none".to_string(), |(bytes, kind)| format!("{bytes} B {kind:?}"));
        format!("L2 {} B (shared by {}), last level {llc}", info.l2, info.l2_sharers_or_one())
    })
}

/// The L2 cache size tract-linalg reports for this machine, bytes (`None` when it reports none).
pub fn host_l2_bytes() -> Option<u64> {
    let l2 = tract_linalg::cache::cache_info().l2;
    (l2 > 0).then_some(l2 as u64)
}

/// What tract-linalg's kernel dispatch answers for one f32 matmul shape: the packed weights' bytes and the
/// chosen kernel's tile (`mr` rows by `nr` columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelPick {
    /// The left operand (`m` × `k`) packed in the kernel's row panels.
    pub packed_bytes: u64,
    /// The right operand (`k` × `n`) packed in its column panels.
    pub right_packed_bytes: u64,
    pub mr: usize,
    pub nr: usize,
}

/// The kernel tract-linalg picks here for an f32 matmul of `m` output rows, reduction `k` and `n` columns, with
/// the bytes of its packed weights; `None` if no kernel fits (never for f32 on supported CPUs) or a size is 0.
/// Answers are cached: kernel dispatch allocates, and a NAS loop asks the same shapes over and over.
pub fn kernel_pick(m: usize, k: usize, n: usize) -> Option<KernelPick> {
    thread_local! {
        static PICKS: RefCell<HashMap<(usize, usize, usize), Option<KernelPick>>> = RefCell::new(HashMap::default());
    }
    if m == 0 || k == 0 || n == 0 {
        return None;
    }
    cached(&PICKS, &(m, k, n), CACHE_LIMIT, || dispatch(m, k, n))
}

/// Entries a per-thread cache holds before it starts over: a NAS loop can ask for new shapes forever.
const CACHE_LIMIT: usize = 1 << 16;

/// `compute()`, remembered in a per-thread cache of at most `limit` entries (then it starts over): no lock on
/// the prediction path of an estimator shared by several threads, at the price of each thread computing once
/// per key. The key is looked up borrowed (a slice built on the stack, say) and owned only for a new entry.
pub(crate) fn cached<K, Q, V>(
    cache: &'static LocalKey<RefCell<HashMap<K, V>>>,
    key: &Q,
    limit: usize,
    compute: impl FnOnce() -> V,
) -> V
where
    K: std::borrow::Borrow<Q> + Hash + Eq + 'static,
    Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
    V: Copy + 'static,
{
    if let Some(known) = cache.with(|c| c.borrow().get(key).copied()) {
        return known;
    }
    let value = compute();
    cache.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= limit {
            c.clear();
        }
        c.insert(key.to_owned(), value);
    });
    value
}

/// Bytes of the weights of an f32 matmul once packed for the kernel tract-linalg picks on this machine
/// ([`kernel_pick`]); 0 for an empty matrix.
pub fn packed_weight_bytes(m: usize, k: usize, n: usize) -> Option<u64> {
    if m == 0 || k == 0 || n == 0 {
        return Some(0);
    }
    kernel_pick(m, k, n).map(|p| p.packed_bytes)
}

fn dispatch(m: usize, k: usize, n: usize) -> Option<KernelPick> {
    let query = Query::plain(DatumType::F32, Some(m), Some(k), Some(n));
    let (kernel, packing, _) = MmmDispatch::native().pick(&query)?;
    let (left, right) = kernel.packings().get(packing)?;
    let bytes = |format: &dyn MMMInputFormat, mn: usize| {
        format.mem_size(TDim::from(k), TDim::from(mn)).to_i64().ok().and_then(|b| u64::try_from(b).ok())
    };
    Some(KernelPick {
        packed_bytes: bytes(&**left, m)?,
        right_packed_bytes: bytes(&**right, n)?,
        mr: kernel.mr(),
        nr: kernel.nr(),
    })
}

/// The order in which tract-linalg 0.23.9 walks the output tiles of one matmul on one thread
/// (`run_blocked` in `frame/mmm/mod.rs`): naive when the operand it re-streams fits L2, otherwise in blocks of
/// `blk` panels sized to a third of L2, inside super-blocks of `blk_outer` panels when the whole working set
/// spills the last-level cache. Which panel of B is loaded when matters for a lazy im2col, whose B panels are
/// gathered from the input each time the walk comes back to them: a 3×3 convolution of 256 channels to 256
/// filters on 13×13 runs at a third of the speed of one with 384 input channels, because its weights just
/// exceed L2 and the blocks it is walked in are two panels wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileWalk {
    pub m_panels: usize,
    pub n_panels: usize,
    /// Columns outer (A re-streamed for each column of B); tract prefers it when only A is packed ahead.
    pub col_outer: bool,
    /// Inner block edge in panels, `usize::MAX` for the naive walk.
    pub blk: usize,
    /// Outer (last-level cache) block edge, `usize::MAX` for none.
    pub blk_outer: usize,
}

/// tract-linalg's `BLK_MAX` and `BLK_L3_MAX`.
const INNER_BLOCK_CAP: usize = 16;
const OUTER_BLOCK_CAP: usize = 64;

/// tract-linalg's `block_edge_for`: as many panel pairs as fit the budget at this `k`, within `1..=cap`.
fn block_edge(budget: usize, mr: usize, nr: usize, k: usize, cap: usize) -> usize {
    if k == 0 {
        return cap;
    }
    let per_block = (mr.saturating_add(nr)).saturating_mul(k).saturating_mul(4).max(1);
    (budget / per_block).clamp(1, cap)
}

/// tract-linalg's `tier_budget_bytes`.
fn tier_budget(cache_bytes: usize, num: usize, den: usize, fallback: usize) -> usize {
    if cache_bytes == 0 {
        fallback
    } else {
        (cache_bytes * num / den).clamp(64 * 1024, 64 * 1024 * 1024)
    }
}

impl TileWalk {
    /// The walk of an `m × k × n` f32 product with an `mr × nr` kernel on one thread, from the cache sizes
    /// tract-linalg detects on this machine.
    pub fn new(mr: usize, nr: usize, m: usize, k: usize, n: usize, col_outer: bool) -> TileWalk {
        let caches = tract_linalg::cache::cache_info();
        let llc = tract_linalg::cache::last_level_cache().map(|(bytes, kind)| {
            let budget = match kind {
                tract_linalg::cache::LlcKind::Dedicated => tier_budget(bytes, 1, 2, 0),
                tract_linalg::cache::LlcKind::SystemLevel => tier_budget(bytes, 1, 4, 0),
            };
            (bytes, budget)
        });
        Self::with_caches(mr, nr, m, k, n, col_outer, caches.l2, llc)
    }

    /// [`TileWalk::new`] for given cache sizes: `l2` bytes (one walker's share) and the last-level cache's
    /// bytes with the budget tract gives its outer tier.
    #[allow(clippy::too_many_arguments)]
    pub fn with_caches(
        mr: usize,
        nr: usize,
        m: usize,
        k: usize,
        n: usize,
        col_outer: bool,
        l2: usize,
        llc: Option<(usize, usize)>,
    ) -> TileWalk {
        let (mr, nr) = (mr.max(1), nr.max(1));
        let (m_panels, n_panels) = (m.div_ceil(mr), n.div_ceil(nr));
        let (panels, r) = if col_outer { (m_panels, mr) } else { (n_panels, nr) };
        let streamed = panels.saturating_mul(r).saturating_mul(k).saturating_mul(4);
        let blk = if l2 > 0 && streamed > l2 {
            block_edge(tier_budget(l2, 1, 3, 256 * 1024), mr, nr, k, INNER_BLOCK_CAP)
        } else {
            usize::MAX
        };
        let working_set =
            m_panels.saturating_mul(mr).saturating_add(n_panels.saturating_mul(nr)).saturating_mul(k).saturating_mul(4);
        let blk_outer = match llc {
            Some((bytes, budget)) if bytes > 0 && working_set > bytes => {
                block_edge(budget, mr, nr, k, OUTER_BLOCK_CAP).max(blk)
            }
            _ => usize::MAX,
        };
        TileWalk { m_panels, n_panels, col_outer, blk, blk_outer }
    }

    /// How many times the walk loads a B panel (tract keeps the last one loaded, so a tile that reuses it
    /// loads nothing), in closed form: a few operations whatever the layer's size.
    pub fn b_panel_loads(&self) -> u64 {
        let (mp, np) = (self.m_panels as u64, self.n_panels as u64);
        if mp == 0 || np == 0 {
            return 0;
        }
        let blk = (self.blk.max(1) as u64).min(np.max(mp));
        let outer = (self.blk_outer.max(self.blk).max(1) as u64).min(np.max(mp));
        // Loads of one inner column block `bn` wide over `h` rows of panels, inside one super-block.
        let column_block = |bn: u64, h: u64| -> u64 {
            match (bn, self.col_outer) {
                // One column: loaded once, kept over every row block.
                (1, _) => 1,
                // for ib { for ia }: each column once per row block.
                (_, true) => bn * h.div_ceil(blk),
                // for ia { for ib }: every tile moves to another column.
                (_, false) => bn * h,
            }
        };
        // One super-block `w` columns by `h` rows: its column blocks of `blk`.
        let super_block = |w: u64, h: u64| -> u64 {
            let full = w / blk;
            let rest = w % blk;
            full * column_block(blk, h) + if rest > 0 { column_block(rest, h) } else { 0 }
        };
        // Super-blocks of `outer` (the last ones narrower); a super-column one panel wide keeps its column
        // loaded from one super-row to the next.
        let splits = |len: u64| -> [(u64, u64); 2] {
            [(len / outer, outer), (u64::from(!len.is_multiple_of(outer)), len % outer)]
        };
        let mut loads = 0u64;
        for (columns, w) in splits(np) {
            if columns == 0 {
                continue;
            }
            let per_column = if w == 1 {
                1
            } else {
                splits(mp).iter().map(|&(rows, h)| rows.saturating_mul(super_block(w, h))).sum::<u64>()
            };
            loads = loads.saturating_add(columns.saturating_mul(per_column));
        }
        loads
    }
}

/// Feature `i` of `x` as a count (0 for anything not finite and positive); `None` when `x` is too short.
fn count(x: &[f64], i: u16) -> Option<usize> {
    x.get(i as usize).map(|&v| if v.is_finite() && v > 0.0 { v as usize } else { 0 })
}

/// A dense layer: `units` rows of `k` inputs, `batch` columns, plus the f32 bias.
fn dense_bytes(k: usize, units: usize, batch: usize, bias: bool) -> Option<u64> {
    Some(packed_weight_bytes(units, k, batch)? + if bias { 4 * units as u64 } else { 0 })
}

/// A convolution's sizes as tract's lowering sees them (one batch item's output is `out_h × out_w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvShape {
    pub batch: usize,
    pub in_channels: usize,
    pub in_width: usize,
    pub filters: usize,
    pub kernel: [usize; 2],
    pub groups: usize,
    pub out: [usize; 2],
    pub use_bias: bool,
}

/// How tract 0.23.9 runs a convolution on this machine, in the order its conv codegen tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvLowering {
    /// 1×1: a matrix product over a packed copy of the (strided) input (`pack_a` / `Im2col`).
    Pointwise,
    /// `DirectSpatialConv`: f32, one group, 2+ taps, at most 576 inputs per output point, rows of 128+.
    DirectSpatial,
    /// `LazyIm2col` + matrix product (batch 1: 6+ taps, a patch matrix of 4 MiB or more, or one row panel).
    Lazy,
    /// `DepthWise`: one filter per channel.
    DepthWise,
    /// An explicit im2col matrix + matrix product.
    Im2col,
}

impl ConvShape {
    fn kernel_volume(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    fn pixels(&self) -> usize {
        self.out[0].saturating_mul(self.out[1])
    }

    /// Rows, reduction and columns of one group's matrix product.
    fn matmul(&self) -> (usize, usize, usize) {
        let groups = self.groups.max(1);
        (self.filters / groups, (self.in_channels / groups).saturating_mul(self.kernel_volume()), self.pixels())
    }

    /// Mirrors tract-core 0.23.9's `Conv::codegen` (`can_direct_spatial`, `should_use_lazy`), asking tract-linalg
    /// the same questions it asks (routines present, the preferred kernel's rows). 1×1 convolutions are turned
    /// into products earlier by tract's declutter, with the input packed.
    pub fn lowering(&self) -> ConvLowering {
        let kernel_volume = self.kernel_volume();
        if kernel_volume == 1 {
            return ConvLowering::Pointwise;
        }
        let depthwise = self.groups > 1 && self.groups == self.in_channels && self.groups == self.filters;
        let direct = self.groups == 1
            && self.in_channels.saturating_mul(kernel_volume) <= 576
            && tract_linalg::routines::conv_w4_f32().is_some()
            && (self.filters.is_multiple_of(4) || tract_linalg::routines::depthwise_w_f32().is_some())
            && self.in_width >= 128
            && self.out[1] >= 128;
        if direct {
            return ConvLowering::DirectSpatial;
        }
        if !depthwise && self.batch == 1 {
            let (m, k, n) = self.matmul();
            let eager_bytes = k.saturating_mul(n).saturating_mul(4);
            let one_panel = || {
                let mr = MmmDispatch::native()
                    .preferred_kernel(DatumType::F32, Some(m.max(1)), Some(k), Some(n))
                    .map_or(1, |kernel| kernel.mr());
                m.max(1) <= mr
            };
            if kernel_volume >= 6 || eager_bytes >= 4 << 20 || one_panel() {
                return ConvLowering::Lazy;
            }
        }
        if depthwise {
            return ConvLowering::DepthWise;
        }
        ConvLowering::Im2col
    }

    /// How tract runs this convolution here, as numbers a latency model can split on (see
    /// [`CONV_ENGINE_FEATURES`]): the lowering (0 pointwise, 1 direct spatial, 2 lazy im2col, 3 depthwise,
    /// 4 explicit im2col), how many times a lazy im2col gathers each B panel from the input as its tile walk
    /// comes back to it (1 for the naive walk, see [`TileWalk`]; 0 for other lowerings), the walk's inner
    /// block edge in panels (0 for the naive walk), the kernel tile of one group's product ([`tile`]), and that
    /// product's rows, depth and columns (tract runs a grouped convolution as one product per group).
    /// Matrix-product features are 0 for the direct and depthwise kernels. Cached per shape.
    pub fn engine_features(&self) -> [f64; ENGINE_FEATURES_MAX] {
        thread_local! {
            static FEATURES: RefCell<HashMap<ConvShape, [f64; ENGINE_FEATURES_MAX]>> = RefCell::new(HashMap::default());
        }
        cached(&FEATURES, self, CACHE_LIMIT, || self.compute_engine_features())
    }

    fn compute_engine_features(&self) -> [f64; ENGINE_FEATURES_MAX] {
        let lowering = self.lowering();
        let code = match lowering {
            ConvLowering::Pointwise => 0.0,
            ConvLowering::DirectSpatial => 1.0,
            ConvLowering::Lazy => 2.0,
            ConvLowering::DepthWise => 3.0,
            ConvLowering::Im2col => 4.0,
        };
        let mut features = [0.0; ENGINE_FEATURES_MAX];
        features[0] = code;
        if matches!(lowering, ConvLowering::DirectSpatial | ConvLowering::DepthWise) {
            return features;
        }
        let (m, k, n) = self.matmul();
        let Some(pick) = kernel_pick(m, k, n) else { return features };
        // Only A (the weights) is packed ahead for a lazy im2col, so tract walks columns outer; otherwise both
        // operands are packed and it walks rows outer.
        let lazy = lowering == ConvLowering::Lazy;
        let walk = TileWalk::new(pick.mr, pick.nr, m, k, n, lazy);
        // Trees split on a ratio at one threshold for every size; a count would need one per size.
        features[1] = if lazy { walk.b_panel_loads() as f64 / walk.n_panels.max(1) as f64 } else { 0.0 };
        features[2] = if walk.blk == usize::MAX { 0.0 } else { walk.blk as f64 };
        features[3..6].copy_from_slice(&tile(pick, m, n));
        features[6..9].copy_from_slice(&[m as f64, k as f64, n as f64]);
        features
    }

    /// Bytes of the weights and bias tract holds: packed for the matrix product, plain f32 for the direct and
    /// depthwise kernels.
    pub fn weight_bytes(&self) -> Option<u64> {
        let bias = if self.use_bias { 4 * self.filters as u64 } else { 0 };
        let (m, k, n) = self.matmul();
        let groups = self.groups.max(1) as u64;
        let weights = match self.lowering() {
            ConvLowering::DirectSpatial | ConvLowering::DepthWise => {
                4u64.saturating_mul(groups).saturating_mul(m as u64).saturating_mul(k as u64)
            }
            _ => groups.saturating_mul(packed_weight_bytes(m, k, n)?),
        };
        Some(weights.saturating_add(bias))
    }

    /// Bytes the lowering's plan keeps for the whole run beyond the weights: a lazy im2col's offset tables,
    /// built when tract makes the plan (tract-core 0.23.9 `Conv::wire_as_lazy_im2col`: one `isize` per output
    /// pixel and one per input channel of a group and kernel tap). The other lowerings keep tables of the
    /// kernel's size only. Measured alone, a layer's memory includes them; in a network they stay resident
    /// while every other layer runs, like weights: ShuffleNet's 3×3 stem on 224×224 keeps 0.096 MiB.
    pub fn plan_bytes(&self) -> u64 {
        match self.lowering() {
            ConvLowering::Lazy => {
                let (_, k, n) = self.matmul();
                8u64.saturating_mul(n as u64).saturating_add(8u64.saturating_mul(k as u64))
            }
            _ => 0,
        }
    }

    /// The scratch the lowering needs while it runs, beyond inputs, weights and outputs. The collected samples
    /// follow it: beyond those, 1×1 convolutions hold a median 2.0× the input copy, explicit im2col 1.05× the
    /// patch matrix, lazy ones 0.23× of what the patch matrix would be (their offset tables).
    pub fn workspace_bytes(&self) -> u64 {
        let patches = 4u64
            .saturating_mul(self.batch as u64)
            .saturating_mul(self.in_channels as u64)
            .saturating_mul(self.kernel_volume() as u64)
            .saturating_mul(self.pixels() as u64);
        match self.lowering() {
            ConvLowering::Pointwise => patches.saturating_mul(2),
            ConvLowering::Im2col => patches,
            ConvLowering::DirectSpatial | ConvLowering::Lazy | ConvLowering::DepthWise => 0,
        }
    }
}

/// Bytes tract holds for a layer's parameters on this machine: the packed weights of a dense layer or a
/// convolution (plain for the direct and depthwise kernels) plus its f32 bias; `None` for other layers (their
/// parameters stay plain f32) or when a shape does not validate.
pub fn tract_weight_bytes(config: &LayerConfig) -> Option<u64> {
    match &config.op {
        Op::Dense(d) => dense_bytes(*config.input_shapes.first()?.last()?, d.units, config.batch, d.use_bias),
        Op::Conv2d(_) => conv_shape(config)?.weight_bytes(),
        Op::MatMul { units: Some(units), use_bias } => {
            let input = config.input_shapes.first()?;
            let (depth, leading) = input.split_last()?;
            let n = leading.iter().product::<usize>().checked_mul(config.batch)?;
            dense_bytes(*depth, *units, n, *use_bias)
        }
        _ => None,
    }
}

/// Bytes tract holds for the weights and bias of a product with a constant weight whose rows (tokens times the
/// batch) are at least its units: `EinSumMatMul::codegen` (tract-core 0.23.9) swaps a product's operands only
/// when its left one has fewer rows than the right one has columns, so such a product keeps the weights as its
/// right operand, packed in the column panels of the kernel picked for it, and packs the tokens at run time.
/// `None` for any other layer, whose weights [`tract_weight_bytes`] counts.
pub fn right_operand_weight_bytes(config: &LayerConfig) -> Option<u64> {
    let Op::MatMul { units: Some(units), use_bias } = &config.op else { return None };
    let (&k, leading) = config.input_shapes.first()?.split_last()?;
    let rows = leading.iter().try_fold(config.batch, |rows, &d| rows.checked_mul(d))?;
    if rows < *units {
        return None;
    }
    let packed = kernel_pick(rows, k, *units)?.right_packed_bytes;
    Some(packed + if *use_bias { 4 * *units as u64 } else { 0 })
}

/// Bytes of the packed copy of its input that tract makes while a 1×1 convolution runs (stride 1, one group,
/// batch 1: its `pack_a`/`pack_b` node), `None` for other layers. tract's `EinSumMatMul::codegen` makes the
/// larger of the filters and the pixels the product's rows: over more pixels than filters the input is the
/// product's left operand, packed in the kernel's row panels, otherwise its right one. A panel holds `k + 1`
/// records (tract-linalg's end padding) and left panels are aligned to 512 bytes on AVX-512, so the copy is
/// not the input's size: traced in DenseNet-121, 224 channels on 56×56 packed into 3.06 MiB (1.14x the input),
/// 16 channels on 112×112 in MnasNet into 2x. The memory models learn a layer measured alone, where the input is
/// the caller's and tract first copies it to reshape it: a median 2.0x the input ([`ConvShape::workspace_bytes`]).
pub fn packed_input_bytes(config: &LayerConfig) -> Option<u64> {
    if !is_plain_product(config) || config.batch != 1 {
        return None;
    }
    let (m, k, n) = conv_shape(config)?.matmul();
    if m == 0 || k == 0 || n == 0 {
        return None;
    }
    thread_local! {
        static PACKED: RefCell<HashMap<(usize, usize, usize), Option<u64>>> = RefCell::new(HashMap::default());
    }
    cached(&PACKED, &(m, k, n), CACHE_LIMIT, || {
        let (rows, cols) = if m < n { (n, m) } else { (m, n) };
        let query = Query::plain(DatumType::F32, Some(rows), Some(k), Some(cols));
        let (kernel, packing, _) = MmmDispatch::native().pick(&query)?;
        let (left, right) = kernel.packings().get(packing)?;
        let bytes = if m < n {
            left.mem_size(TDim::from(k), TDim::from(n))
        } else {
            right.mem_size(TDim::from(k), TDim::from(n))
        };
        bytes.to_i64().ok().and_then(|b| u64::try_from(b).ok())
    })
}

/// A 1×1 convolution that tract's declutter turns into a plain matrix product over its input (an einsum):
/// one group, stride 1, no dilation, no padding (tract-core 0.23.9 `Conv::declutter_as_einsum`, which wants the computed
/// padding zero and the dilation 1).
pub fn is_plain_product(config: &LayerConfig) -> bool {
    let Op::Conv2d(c) = &config.op else { return false };
    let Some(&[_, h, w]) = config.input_shapes.first().map(|s| s.as_slice()) else { return false };
    c.kernel == [1, 1]
        && c.groups == 1
        && c.strides == [1, 1]
        && c.dilation == [1, 1]
        && c.padding.resolve([h, w], c.kernel, c.strides, c.dilation) == [0; 4]
}

/// A convolution layer's output shape (filters, height, width), from the per-thread cache of
/// [`ConvShape`]s: the same as [`LayerConfig::output_shape`] for a config that validates, `None` otherwise.
pub fn conv_output_shape(config: &LayerConfig) -> Option<[usize; 3]> {
    conv_shape(config).map(|s| [s.filters, s.out[0], s.out[1]])
}

/// Bytes tract builds with a layer's plan and keeps for the whole run besides its weights
/// ([`ConvShape::plan_bytes`]); 0 for layers without such tables or shapes that do not validate.
pub fn tract_plan_bytes(config: &LayerConfig) -> u64 {
    conv_shape(config).map_or(0, |shape| shape.plan_bytes())
}

/// How tract lowers a convolution layer here ([`ConvShape::lowering`]); `None` for other layers or a shape that
/// does not validate. Cached per thread: some shapes ask tract-linalg's kernel dispatch, which allocates.
pub fn conv_lowering(config: &LayerConfig) -> Option<ConvLowering> {
    thread_local! {
        static LOWERINGS: RefCell<HashMap<ConvShape, ConvLowering>> = RefCell::new(HashMap::default());
    }
    let shape = conv_shape(config)?;
    Some(cached(&LOWERINGS, &shape, CACHE_LIMIT, || shape.lowering()))
}

/// What a convolution's [`ConvShape`] depends on: the op's fields, a rank-3 input, the batch and how many
/// inputs the config has (which validation checks).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct ConvKey {
    conv: (usize, [usize; 2], [usize; 2], [usize; 2], usize, crate::layer::Padding, bool, crate::layer::Activation),
    input: [usize; 3],
    batch: usize,
    inputs: usize,
}

/// [`ConvShape`] of a convolution layer, `None` for other layers and configs that do not validate. Cached per
/// thread: an estimate asks it of every convolution several times (lowering, tables, packing, structure kind),
/// and validating the config and inferring its output shape each time was a fifth of a NAS candidate's estimate.
fn conv_shape(config: &LayerConfig) -> Option<ConvShape> {
    let Op::Conv2d(c) = &config.op else { return None };
    let Some(&[channels, height, width]) = config.input_shapes.first().map(|s| s.as_slice()) else {
        return conv_shape_of(config);
    };
    thread_local! {
        static SHAPES: RefCell<HashMap<ConvKey, Option<ConvShape>>> = RefCell::new(HashMap::default());
    }
    // Every field of the op: one added later fails to compile here rather than go missing from the key.
    let crate::layer::Conv2d { filters, kernel, strides, dilation, groups, padding, use_bias, activation } = *c;
    let key = ConvKey {
        conv: (filters, kernel, strides, dilation, groups, padding, use_bias, activation),
        input: [channels, height, width],
        batch: config.batch,
        inputs: config.input_shapes.len(),
    };
    // The rules ask about one convolution several times in a row: the last answer is compared, not hashed.
    thread_local! {
        static LAST: std::cell::Cell<Option<(ConvKey, Option<ConvShape>)>> = const { std::cell::Cell::new(None) };
    }
    if let Some((last, shape)) = LAST.get() {
        if last == key {
            return shape;
        }
    }
    let shape = cached(&SHAPES, &key, CACHE_LIMIT, || conv_shape_of(config));
    LAST.set(Some((key, shape)));
    shape
}

fn conv_shape_of(config: &LayerConfig) -> Option<ConvShape> {
    let Op::Conv2d(c) = &config.op else { return None };
    let input = config.input_shapes.first()?;
    let out = config.output_shape().ok()?;
    Some(ConvShape {
        batch: config.batch,
        in_channels: *input.first()?,
        in_width: *input.get(2)?,
        filters: c.filters,
        kernel: c.kernel,
        groups: c.groups,
        out: [out[1], out[2]],
        use_bias: c.use_bias,
    })
}

/// The most features [`PackedShape::engine_features`] gives.
pub const ENGINE_FEATURES_MAX: usize = 9;

/// Names of [`ConvShape::engine_features`], in order. Models record the names they were trained with and read
/// that many values, so a name appended here leaves earlier models as they were: the last three came after
/// RegNetX-400MF's 3×3 convolutions of 25 groups of 16 on 7×7 stayed 12% low on the `zen4` host with rows of 42
/// and 49 such groups beside them (tract runs each group's product on its own, at about 19 µs a group there,
/// and no feature gave a group's size).
pub const CONV_ENGINE_FEATURES: [&str; 9] = [
    "engine_lowering",
    "engine_gathers_per_panel",
    "engine_block_panels",
    "engine_kernel_rows",
    "engine_kernel_cols",
    "engine_tile_fill",
    "engine_group_rows",
    "engine_group_depth",
    "engine_group_cols",
];

/// Names of [`dense_engine_features`], in order.
pub const DENSE_ENGINE_FEATURES: [&str; 3] = ["engine_kernel_rows", "engine_kernel_cols", "engine_tile_fill"];

/// The kernel tile tract computes an `m × n` output with: its rows `mr`, columns `nr`, and the share of the
/// padded tiles the output fills. On this AVX-512 machine a 1×1 convolution on 28×28 in 3 groups of 20 filters
/// over 80 inputs gets a 24×4 kernel (4.5 GFLOP/s measured), 3 groups of 72 filters over 20 inputs a 40×2 one
/// (3.1 GFLOP/s), and 3 groups of 40 filters over 80 inputs a 16×12 one (15.6 GFLOP/s).
fn tile(pick: KernelPick, m: usize, n: usize) -> [f64; 3] {
    let (mr, nr) = (pick.mr.max(1) as f64, pick.nr.max(1) as f64);
    let padded = (m as f64 / mr).ceil() * mr * (n as f64 / nr).ceil() * nr;
    let fill = if padded > 0.0 { m as f64 * n as f64 / padded } else { 0.0 };
    [pick.mr as f64, pick.nr as f64, fill]
}

/// The kernel tile of a dense layer of `units` outputs over `k` inputs at `batch` ([`tile`]); zeros when no
/// kernel fits.
pub fn dense_engine_features(k: usize, units: usize, batch: usize) -> [f64; 3] {
    kernel_pick(units, k, batch).map_or([0.0; 3], |pick| tile(pick, units, batch))
}

/// Where, in a layer type's feature vector, the sizes that decide the packing are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PackedShape {
    Dense {
        batch: u16,
        in_features: u16,
        units: u16,
        use_bias: u16,
    },
    Conv2d {
        batch: u16,
        in_channels: u16,
        in_width: u16,
        filters: u16,
        kernel: [u16; 2],
        groups: u16,
        out: [u16; 2],
        use_bias: u16,
    },
    /// A matrix product of `leading` x `rows` x `depth` by `depth` x `cols`: with a constant weight, tract packs
    /// the weight as a dense layer's (`cols` units over `depth` inputs, the other sizes its batch); a product of
    /// two tensors holds no weights.
    MatMul {
        batch: u16,
        leading: u16,
        rows: u16,
        depth: u16,
        cols: u16,
        constant_weight: u16,
        use_bias: u16,
    },
    /// A convolution as ONNX Runtime runs it on a machine with NCHWc blocks of `nchwc_block` channels (0: no
    /// blocked layout), for [`crate::engine::rules::conv_engine_features`]. Its answers follow from the shape and
    /// the recorded block alone, so they are the same on every machine. (Last: stores written before it decode.)
    OnnxRuntimeConv2d {
        in_channels: u16,
        filters: u16,
        groups: u16,
        kernel: [u16; 2],
        strides: [u16; 2],
        pads: [u16; 4],
        nchwc_block: u16,
    },
    /// A depthwise convolution as ONNX Runtime runs it (a convolution of as many groups as input channels,
    /// `depth_multiplier` filters each), for the same features. (After [`Self::OnnxRuntimeConv2d`]: stores
    /// written before it decode.)
    OnnxRuntimeDepthwise {
        in_channels: u16,
        depth_multiplier: u16,
        kernel: [u16; 2],
        strides: [u16; 2],
        pads: [u16; 4],
        nchwc_block: u16,
    },
}

impl PackedShape {
    /// For dense and conv2d (from their [`LayerType::feature_names`]); `None` for other types.
    pub fn for_layer(layer_type: LayerType, names: &[String]) -> Option<PackedShape> {
        let at = |name: &str| names.iter().position(|f| f == name).and_then(|i| u16::try_from(i).ok());
        match layer_type {
            LayerType::Dense => Some(PackedShape::Dense {
                batch: at("batch")?,
                in_features: at("in_features")?,
                units: at("units")?,
                use_bias: at("use_bias")?,
            }),
            LayerType::Conv2d => Some(PackedShape::Conv2d {
                batch: at("batch")?,
                in_channels: at("in_channels")?,
                in_width: at("in_width")?,
                filters: at("filters")?,
                kernel: [at("kernel_h")?, at("kernel_w")?],
                groups: at("groups")?,
                out: [at("out_height")?, at("out_width")?],
                use_bias: at("use_bias")?,
            }),
            LayerType::MatMul => Some(PackedShape::MatMul {
                batch: at("batch")?,
                leading: at("leading")?,
                rows: at("rows")?,
                depth: at("depth")?,
                cols: at("cols")?,
                constant_weight: at("constant_weight")?,
                use_bias: at("use_bias")?,
            }),
            _ => None,
        }
    }

    /// For conv2d and depthwise conv2d as ONNX Runtime runs them with NCHWc blocks of `nchwc_block` channels (0:
    /// none); `None` for other types.
    pub fn for_onnxruntime(layer_type: LayerType, names: &[String], nchwc_block: usize) -> Option<PackedShape> {
        let at = |name: &str| names.iter().position(|f| f == name).and_then(|i| u16::try_from(i).ok());
        match layer_type {
            LayerType::DepthwiseConv2d => Some(PackedShape::OnnxRuntimeDepthwise {
                in_channels: at("in_channels")?,
                depth_multiplier: at("depth_multiplier")?,
                kernel: [at("kernel_h")?, at("kernel_w")?],
                strides: [at("stride_h")?, at("stride_w")?],
                pads: [at("pad_top")?, at("pad_bottom")?, at("pad_left")?, at("pad_right")?],
                nchwc_block: u16::try_from(nchwc_block).ok()?,
            }),
            LayerType::Conv2d => Some(PackedShape::OnnxRuntimeConv2d {
                in_channels: at("in_channels")?,
                filters: at("filters")?,
                groups: at("groups")?,
                kernel: [at("kernel_h")?, at("kernel_w")?],
                strides: [at("stride_h")?, at("stride_w")?],
                pads: [at("pad_top")?, at("pad_bottom")?, at("pad_left")?, at("pad_right")?],
                nchwc_block: u16::try_from(nchwc_block).ok()?,
            }),
            _ => None,
        }
    }

    /// Whether the answers are tract's on the machine it runs on (so they hold only where the models were
    /// trained), rather than a function of the shape and what the variant records.
    pub fn asks_tract(&self) -> bool {
        !matches!(self, PackedShape::OnnxRuntimeConv2d { .. } | PackedShape::OnnxRuntimeDepthwise { .. })
    }

    /// A product's sizes from a feature vector: (weight rows or `m`, `k`, `n`, a constant weight, a bias); the
    /// rows of every leading axis and batch item are the columns a constant weight is applied to.
    fn product(&self, x: &[f64]) -> Option<(usize, usize, usize, bool, bool)> {
        let get = |i| count(x, i);
        let PackedShape::MatMul { batch, leading, rows, depth, cols, constant_weight, use_bias } = *self else {
            return None;
        };
        let (rows, depth, cols, bias) = (get(rows)?, get(depth)?, get(cols)?, get(use_bias)? > 0);
        if get(constant_weight)? > 0 {
            let n = get(batch)?.checked_mul(get(leading)?)?.checked_mul(rows)?;
            Some((cols, depth, n, true, bias))
        } else {
            Some((rows, depth, cols, false, bias))
        }
    }

    /// The convolution's sizes from a feature vector (`None` for dense layers or unreadable features).
    fn conv(&self, x: &[f64]) -> Option<ConvShape> {
        let get = |i| count(x, i);
        match *self {
            PackedShape::Dense { .. }
            | PackedShape::MatMul { .. }
            | PackedShape::OnnxRuntimeConv2d { .. }
            | PackedShape::OnnxRuntimeDepthwise { .. } => None,
            PackedShape::Conv2d { batch, in_channels, in_width, filters, kernel, groups, out, use_bias } => {
                Some(ConvShape {
                    batch: get(batch)?,
                    in_channels: get(in_channels)?,
                    in_width: get(in_width)?,
                    filters: get(filters)?,
                    kernel: [get(kernel[0])?, get(kernel[1])?],
                    groups: get(groups)?,
                    out: [get(out[0])?, get(out[1])?],
                    use_bias: get(use_bias)? > 0,
                })
            }
        }
    }

    /// The scratch a convolution's lowering needs while it runs ([`ConvShape::workspace_bytes`]); 0 for dense.
    pub fn lowering_workspace_bytes(&self, x: &[f64]) -> Option<u64> {
        match self {
            PackedShape::Dense { .. } | PackedShape::MatMul { .. } => Some(0),
            PackedShape::Conv2d { .. } => self.conv(x).map(|c| c.workspace_bytes()),
            PackedShape::OnnxRuntimeConv2d { .. } | PackedShape::OnnxRuntimeDepthwise { .. } => None,
        }
    }

    /// How tract runs the layer here ([`ConvShape::engine_features`], [`dense_engine_features`] in the first
    /// [`DENSE_ENGINE_FEATURES`]`.len()` places) from a feature vector; `None` for unreadable features.
    pub fn engine_features(&self, x: &[f64]) -> Option<[f64; ENGINE_FEATURES_MAX]> {
        match *self {
            PackedShape::Dense { batch, in_features, units, .. } => {
                let mut features = [0.0; ENGINE_FEATURES_MAX];
                let dense = dense_engine_features(count(x, in_features)?, count(x, units)?, count(x, batch)?);
                features[..dense.len()].copy_from_slice(&dense);
                Some(features)
            }
            PackedShape::Conv2d { .. } => self.conv(x).map(|c| c.engine_features()),
            PackedShape::MatMul { .. } => {
                let (m, k, n, _, _) = self.product(x)?;
                let mut features = [0.0; ENGINE_FEATURES_MAX];
                let tile = kernel_pick(m, k, n).map_or([0.0; 3], |pick| tile(pick, m, n));
                features[..tile.len()].copy_from_slice(&tile);
                Some(features)
            }
            PackedShape::OnnxRuntimeConv2d { .. } | PackedShape::OnnxRuntimeDepthwise { .. } => {
                let ort = self.onnxruntime_conv_features(x)?;
                let mut features = [0.0; ENGINE_FEATURES_MAX];
                features[..ort.len()].copy_from_slice(&ort);
                Some(features)
            }
        }
    }

    /// ONNX Runtime's decisions for a convolution ([`crate::engine::rules::conv_engine_features`]), a depthwise
    /// one being a convolution of as many groups as input channels; `None` for other variants.
    fn onnxruntime_conv_features(&self, x: &[f64]) -> Option<[f64; 6]> {
        let get = |i| count(x, i);
        let (in_c, out_c, groups, kernel, strides, pads, block) = match *self {
            PackedShape::OnnxRuntimeConv2d { in_channels, filters, groups, kernel, strides, pads, nchwc_block } => {
                (get(in_channels)?, get(filters)?, get(groups)?, kernel, strides, pads, nchwc_block)
            }
            PackedShape::OnnxRuntimeDepthwise { in_channels, depth_multiplier, kernel, strides, pads, nchwc_block } => {
                let channels = get(in_channels)?;
                (channels, channels.checked_mul(get(depth_multiplier)?)?, channels, kernel, strides, pads, nchwc_block)
            }
            _ => return None,
        };
        let padded = pads.iter().map(|&p| get(p)).collect::<Option<Vec<_>>>()?.iter().any(|&p| p > 0);
        Some(crate::engine::rules::conv_engine_features(
            usize::from(block),
            in_c,
            out_c,
            groups,
            [get(kernel[0])?, get(kernel[1])?],
            [get(strides[0])?, get(strides[1])?],
            padded,
        ))
    }

    /// The names of [`Self::engine_features`].
    pub fn engine_feature_names(&self) -> &'static [&'static str] {
        match self {
            PackedShape::Dense { .. } | PackedShape::MatMul { .. } => &DENSE_ENGINE_FEATURES,
            PackedShape::Conv2d { .. } => &CONV_ENGINE_FEATURES,
            PackedShape::OnnxRuntimeConv2d { .. } | PackedShape::OnnxRuntimeDepthwise { .. } => {
                &crate::engine::rules::ORT_CONV_ENGINE_FEATURES
            }
        }
    }

    /// Weight and bias bytes as tract holds them, from a feature vector.
    pub fn packed_bytes(&self, x: &[f64]) -> Option<u64> {
        let get = |i| count(x, i);
        match *self {
            PackedShape::Dense { batch, in_features, units, use_bias } => {
                dense_bytes(get(in_features)?, get(units)?, get(batch)?, get(use_bias)? > 0)
            }
            PackedShape::Conv2d { .. } => self.conv(x)?.weight_bytes(),
            PackedShape::MatMul { .. } => match self.product(x)? {
                (units, k, n, true, bias) => dense_bytes(k, units, n, bias),
                _ => Some(0),
            },
            PackedShape::OnnxRuntimeConv2d { .. } | PackedShape::OnnxRuntimeDepthwise { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Activation, Conv2d, Dense, Padding};

    #[test]
    fn only_a_lazy_im2col_keeps_offset_tables() {
        // ShuffleNet's stem: 3x3 stride 2 on 3x224x224 to 24x112x112, batch 1: lazy, 12544 pixels and 27 taps.
        let stem = ConvShape {
            batch: 1,
            in_channels: 3,
            in_width: 224,
            filters: 24,
            kernel: [3, 3],
            groups: 1,
            out: [112, 112],
            use_bias: false,
        };
        assert_eq!(stem.lowering(), ConvLowering::Lazy);
        assert_eq!(stem.plan_bytes(), 8 * (12544 + 27));
        // At batch 2 tract builds an explicit im2col instead, and a 1x1 convolution packs its input: no tables.
        assert_eq!(ConvShape { batch: 2, ..stem }.plan_bytes(), 0);
        assert_eq!(ConvShape { kernel: [1, 1], ..stem }.plan_bytes(), 0);
    }

    #[test]
    fn packed_weights_cover_at_least_the_f32_weights() {
        for (m, k, n) in [(10, 1000, 1), (129, 4000, 1), (129, 4000, 2), (129, 4000, 8), (1822, 2054, 1)] {
            let bytes = packed_weight_bytes(m, k, n).unwrap();
            assert!(bytes >= (m * k * 4) as u64, "{m}x{k}x{n}: {bytes}");
            // Panels pad m to the kernel's rows, at most doubling a 129-row matrix.
            assert!(bytes <= (2 * m.next_multiple_of(128) * k * 4) as u64, "{m}x{k}x{n}: {bytes}");
            assert_eq!(packed_weight_bytes(m, k, n), Some(bytes), "cached answer");
        }
        assert_eq!(packed_weight_bytes(0, 10, 1), Some(0));
    }

    #[test]
    fn features_and_configs_give_the_same_packed_size() {
        let dense = LayerConfig::new(
            Op::Dense(Dense { units: 129, use_bias: true, activation: Activation::Relu }),
            vec![smallvec::smallvec![300]],
            2,
        );
        let mut grouped = Conv2d::new(60, [3, 3]);
        grouped.groups = 3;
        grouped.padding = Padding::Same;
        let conv = LayerConfig::new(Op::Conv2d(grouped), vec![smallvec::smallvec![24, 14, 14]], 1);
        // A transformer's linear layer: the weight packed as a dense layer's over 2 x 197 tokens.
        let linear =
            LayerConfig::new(Op::MatMul { units: Some(129), use_bias: true }, vec![smallvec::smallvec![197, 300]], 2);
        for config in [dense, conv, linear] {
            let layer_type = config.layer_type();
            let shape = PackedShape::for_layer(layer_type, &layer_type.feature_names()).unwrap();
            let from_features = shape.packed_bytes(&config.features().unwrap()).unwrap();
            assert_eq!(Some(from_features), tract_weight_bytes(&config), "{layer_type:?}");
            assert!(from_features >= config.cost().unwrap().weight_elems * 4);
        }
        // A product of two tensors holds no weights.
        let product = LayerConfig::new(
            Op::MatMul { units: None, use_bias: false },
            vec![smallvec::smallvec![3, 197, 64], smallvec::smallvec![3, 64, 197]],
            1,
        );
        let shape = PackedShape::for_layer(LayerType::MatMul, &LayerType::MatMul.feature_names()).unwrap();
        assert_eq!(shape.packed_bytes(&product.features().unwrap()), Some(0));
        assert!(PackedShape::for_layer(LayerType::MaxPool2d, &LayerType::MaxPool2d.feature_names()).is_none());
    }

    #[test]
    fn convolutions_are_lowered_in_tracts_order() {
        let conv = |batch, in_channels, width, filters, k: usize, groups| ConvShape {
            batch,
            in_channels,
            in_width: width,
            filters,
            kernel: [k, k],
            groups,
            out: [width, width],
            use_bias: false,
        };
        assert_eq!(conv(1, 64, 56, 256, 1, 1).lowering(), ConvLowering::Pointwise);
        // 3x3 on 13x13: lazy gathering at batch 1, an explicit patch matrix at batch 2 (lazy needs one item).
        assert_eq!(conv(1, 256, 13, 256, 3, 1).lowering(), ConvLowering::Lazy);
        let batch2 = conv(2, 256, 13, 256, 3, 1);
        assert_eq!(batch2.lowering(), ConvLowering::Im2col);
        assert_eq!(batch2.workspace_bytes(), 4 * 2 * 256 * 9 * 13 * 13);
        // A depthwise convolution written as conv2d: plain weights, no patch matrix.
        let depthwise = conv(2, 32, 28, 32, 3, 32);
        assert_eq!(depthwise.lowering(), ConvLowering::DepthWise);
        assert_eq!(depthwise.weight_bytes(), Some(4 * 32 * 9));
        assert_eq!(depthwise.workspace_bytes(), 0);
        // VGG's second convolution (64 -> 64 on 224x224) runs direct where tract has the kernels for it.
        if tract_linalg::routines::conv_w4_f32().is_some() {
            let direct = conv(8, 64, 224, 64, 3, 1);
            assert_eq!(direct.lowering(), ConvLowering::DirectSpatial);
            assert_eq!(direct.workspace_bytes(), 0);
            assert_eq!(direct.weight_bytes(), Some(4 * 64 * 64 * 9));
        }
    }

    #[test]
    fn tile_walk_follows_tracts_blocking() {
        const L2: usize = 2 << 20;
        let llc = Some((105 << 20, 52 << 20));
        // 3x3 conv, 256 -> 256 channels on 13x13 (k = 2304, n = 169) with a 16x12 kernel: the weights (2.36 MB)
        // spill L2, so tract walks blocks of 2 panels and comes back to every B panel once per block row.
        let walk = TileWalk::with_caches(16, 12, 256, 2304, 169, true, L2, llc);
        assert_eq!((walk.m_panels, walk.n_panels, walk.blk, walk.blk_outer), (16, 15, 2, usize::MAX));
        // 7 two-column blocks loaded in each of 8 block rows, then the last column once.
        assert_eq!(walk.b_panel_loads(), 7 * 8 * 2 + 1);
        // 192 filters fit L2: the naive walk loads each column once.
        let fits = TileWalk::with_caches(16, 12, 192, 2304, 169, true, L2, llc);
        assert_eq!((fits.blk, fits.b_panel_loads()), (usize::MAX, 15));
        // 384 -> 384 channels: blocks of one panel, which keep the column across block rows.
        let single = TileWalk::with_caches(16, 12, 384, 3456, 169, true, L2, llc);
        assert_eq!((single.blk, single.b_panel_loads()), (1, 15));
        // Rows outer (both operands packed ahead): B is re-streamed, blocks of several columns reload per tile.
        let rows = TileWalk::with_caches(16, 12, 64, 2304, 12 * 100, false, L2, llc);
        assert_eq!(rows.blk, 2);
        // 50 two-column blocks in each of 2 block rows, each tile of a block on another column than the last.
        assert_eq!(rows.b_panel_loads(), 50 * 2 * 4);
        // A working set beyond the last-level cache adds super-blocks, never narrower than the inner blocks.
        let huge = TileWalk::with_caches(16, 12, 4096, 4608, 12 * 2000, true, L2, llc);
        assert!(huge.blk_outer >= huge.blk && huge.blk_outer != usize::MAX);
        assert!(huge.b_panel_loads() >= huge.n_panels as u64);
        // The closed form counts what walking every tile in tract's order counts.
        let walked = |w: &TileWalk| {
            let (blk, outer) = (w.blk.max(1), w.blk_outer.max(w.blk).max(1));
            let (mut loads, mut last) = (0u64, None);
            let mut visit = |ib: usize| {
                if last != Some(ib) {
                    loads += 1;
                    last = Some(ib);
                }
            };
            for jb3 in (0..w.n_panels).step_by(outer.min(w.n_panels.max(1))) {
                let jb3_end = jb3.saturating_add(outer).min(w.n_panels);
                for ja3 in (0..w.m_panels).step_by(outer.min(w.m_panels.max(1))) {
                    let ja3_end = ja3.saturating_add(outer).min(w.m_panels);
                    for jb in (jb3..jb3_end).step_by(blk.min(jb3_end - jb3)) {
                        let jb_end = jb.saturating_add(blk).min(jb3_end);
                        for ja in (ja3..ja3_end).step_by(blk.min(ja3_end - ja3)) {
                            let ja_end = ja.saturating_add(blk).min(ja3_end);
                            for a in 0..(ja_end - ja) * (jb_end - jb) {
                                let (ia_step, ib_step) = if w.col_outer {
                                    (a % (ja_end - ja), a / (ja_end - ja))
                                } else {
                                    (a / (jb_end - jb), a % (jb_end - jb))
                                };
                                let _ = ia_step;
                                visit(jb + ib_step);
                            }
                        }
                    }
                }
            }
            loads
        };
        for (m_panels, n_panels) in [(16, 15), (7, 1), (1, 9), (33, 65), (5, 200)] {
            for col_outer in [true, false] {
                for blk in [1, 2, 3, 16, usize::MAX] {
                    for blk_outer in [usize::MAX, 4, 64] {
                        let w = TileWalk { m_panels, n_panels, col_outer, blk, blk_outer: blk_outer.max(blk) };
                        assert_eq!(w.b_panel_loads(), walked(&w), "{w:?}");
                    }
                }
            }
        }
        // Unknown caches: the naive walk.
        let unknown = TileWalk::with_caches(16, 12, 256, 2304, 169, true, 0, None);
        assert_eq!(unknown.b_panel_loads(), 15);
    }

    #[test]
    fn engine_features_tell_the_lowerings_apart() {
        let conv = |batch, in_channels, width, filters, k: usize| ConvShape {
            batch,
            in_channels,
            in_width: width,
            filters,
            kernel: [k, k],
            groups: 1,
            out: [width, width],
            use_bias: true,
        };
        let lazy = conv(1, 256, 13, 256, 3).engine_features();
        assert_eq!(lazy[0], 2.0);
        // Every B panel is gathered at least once.
        assert!(lazy[1] >= 1.0, "{lazy:?}");
        assert_eq!(conv(2, 256, 13, 256, 3).engine_features()[..2], [4.0, 0.0]);
        let pointwise = conv(1, 64, 56, 256, 1).engine_features();
        assert_eq!(pointwise[..2], [0.0, 0.0]);
        // A kernel tile with rows and columns, filled at most fully.
        assert!(pointwise[3] >= 1.0 && pointwise[4] >= 1.0 && pointwise[5] > 0.0 && pointwise[5] <= 1.0);
        assert_eq!(conv(1, 256, 13, 256, 3).engine_features(), lazy, "cached answer");
        // The direct kernels have no matrix product.
        if tract_linalg::routines::conv_w4_f32().is_some() {
            assert_eq!(conv(1, 16, 208, 32, 3).engine_features(), [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        }
        // A grouped convolution's tile is that of one group's product.
        let grouped = ConvShape { groups: 3, ..conv(1, 240, 28, 60, 1) }.engine_features();
        let pick = kernel_pick(20, 80, 28 * 28).unwrap();
        assert_eq!(grouped[3..5], [pick.mr as f64, pick.nr as f64]);
        assert_eq!(
            grouped[5],
            20.0 / (20usize.div_ceil(pick.mr) * pick.mr) as f64 * 784.0 / (784usize.div_ceil(pick.nr) * pick.nr) as f64
        );
        // And its size: rows, depth and columns of one group's product.
        assert_eq!(grouped[6..9], [20.0, 80.0, 784.0]);
        let regnet = ConvShape { groups: 25, ..conv(1, 400, 7, 400, 3) }.engine_features();
        assert_eq!(regnet[6..9], [16.0, 144.0, 49.0]);
        let dense = dense_engine_features(4096, 1000, 1);
        assert!(dense[0] >= 1.0 && dense[1] >= 1.0 && dense[2] > 0.0 && dense[2] <= 1.0, "{dense:?}");
    }
}
