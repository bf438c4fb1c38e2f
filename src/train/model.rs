//! The trained models in the form they are stored and evaluated: flat arrays, no pointers, no library types.
//!
//! Training libraries keep trees as nested structs that serialise to hundreds of megabytes of JSON; estimation
//! needs microsecond queries and a store of a few megabytes. So every fitted model is converted once into one of
//! the plain forms below, and cross-validation scores that same form, so the model that was validated is exactly
//! the model that is shipped.

use serde::{Deserialize, Serialize};

/// Marks a leaf in [`FlatForest::feature`].
pub const LEAF: u16 = u16::MAX;

/// A forest of binary regression trees in contiguous arrays (preorder layout: the left child of node `i` is
/// `i + 1`, the right child is `right[i]`). A node is a leaf when `feature[i] == LEAF`; its value is then
/// `value[i]`. Otherwise a row goes left when `x[feature[i]] <= value[i]`.
/// The prediction is `base + scale * Σ_trees leaf` (mean of the trees for a random forest, shrunken sum for
/// boosting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlatForest {
    pub feature: Vec<u16>,
    pub value: Vec<f64>,
    pub right: Vec<u32>,
    pub roots: Vec<u32>,
    pub base: f64,
    pub scale: f64,
}

impl FlatForest {
    pub fn predict(&self, x: &[f64]) -> f64 {
        // Plain slices, not `Vec`s, in the loop: indexing a slice is a built-in operation even in an unoptimised
        // build, indexing a `Vec` is a call through `Index`.
        let (feature, value, right, roots) = (&self.feature[..], &self.value[..], &self.right[..], &self.roots[..]);
        let mut sum = 0.0;
        let mut t = 0;
        while t < roots.len() {
            let mut i = roots[t] as usize;
            let mut f = feature[i];
            while f != LEAF {
                i = if x[f as usize] <= value[i] { i + 1 } else { right[i] as usize };
                f = feature[i];
            }
            sum += value[i];
            t += 1;
        }
        self.base + self.scale * sum
    }

    pub fn node_count(&self) -> usize {
        self.feature.len()
    }

    /// Deepest root-to-leaf path over all trees (a root alone has depth 0).
    pub fn max_depth(&self) -> usize {
        let mut deepest = 0;
        for &root in &self.roots {
            let mut stack = vec![(root as usize, 0usize)];
            while let Some((i, depth)) = stack.pop() {
                if self.feature[i] == LEAF {
                    deepest = deepest.max(depth);
                } else {
                    stack.push((i + 1, depth + 1));
                    stack.push((self.right[i] as usize, depth + 1));
                }
            }
        }
        deepest
    }
}

/// A forest in the form training writes and estimation walks: 8-byte nodes (an `f32` threshold or leaf value and
/// one link word), one array for every tree, stored as about 5.5 bytes a node. [`FlatForest`] (f64 values in
/// three arrays, about 12 bytes a node stored) stays readable for stores written before.
///
/// Thresholds are rounded to `f32` when a forest is built from a fitted one; cross-validation scores the rounded
/// form, so the model that was validated is the one shipped.
///
/// A walk visits one node per level of each tree, and below the first levels each visit misses the caches:
/// [`Forest::predict`] walks [`LANES`] trees in lockstep, so that their misses overlap instead of queueing. A
/// leaf links to itself (its feature slot holds NaN, so the comparison sends it "right" by 0), which lets
/// every lane take the same number of steps, the group's depth, without a branch per lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ForestRepr", into = "ForestRepr")]
pub struct Forest {
    nodes: Vec<Node>,
    /// First node of each tree, increasing.
    roots: Vec<u32>,
    /// Deepest leaf of each group of [`LANES`] trees: how many steps the group's walk takes.
    group_depth: Vec<u16>,
    /// Feature count the trees split on; slot `features` of the walk's row holds the leaves' NaN.
    features: u16,
    base: f64,
    scale: f64,
}

/// Trees walked together by [`Forest::predict`].
pub const LANES: usize = 8;

/// One node of a [`Forest`]: `value` is the threshold (a row goes left, to the next node, when
/// `x[feature] <= value`) or the leaf value; `link` holds the feature in its top 8 bits and the distance to
/// the right child in the low 24 (0 for a leaf, whose feature is [`Forest::features`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct Node {
    value: f32,
    link: u32,
}

const OFFSET_BITS: u32 = 24;
const OFFSET_MASK: u32 = (1 << OFFSET_BITS) - 1;

impl Node {
    fn feature(self) -> usize {
        (self.link >> OFFSET_BITS) as usize
    }
    fn offset(self) -> usize {
        (self.link & OFFSET_MASK) as usize
    }
}

/// How a [`Forest`] is stored: per node its feature (`u8`, [`ForestRepr::LEAF`] for a leaf) and value, and the
/// right-child distance of the split nodes only, in preorder (varints in the store, mostly one or two bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ForestRepr {
    features: u16,
    feature: Vec<u8>,
    value: Vec<f32>,
    right: Vec<u32>,
    roots: Vec<u32>,
    base: f64,
    scale: f64,
}

impl ForestRepr {
    const LEAF: u8 = u8::MAX;
}

impl From<Forest> for ForestRepr {
    fn from(f: Forest) -> ForestRepr {
        let leaf = f.features as usize;
        let mut repr = ForestRepr {
            features: f.features,
            feature: Vec::with_capacity(f.nodes.len()),
            value: Vec::with_capacity(f.nodes.len()),
            right: Vec::new(),
            roots: f.roots,
            base: f.base,
            scale: f.scale,
        };
        for n in &f.nodes {
            repr.value.push(n.value);
            if n.feature() == leaf {
                repr.feature.push(ForestRepr::LEAF);
            } else {
                repr.feature.push(n.feature() as u8);
                repr.right.push(n.offset() as u32);
            }
        }
        repr
    }
}

impl TryFrom<ForestRepr> for Forest {
    type Error = String;

    /// Checks everything a walk relies on, so that a damaged or crafted store is refused when opened instead of
    /// indexing out of bounds or looping: each tree is a preorder binary tree inside its own range.
    fn try_from(r: ForestRepr) -> std::result::Result<Forest, String> {
        let n = r.feature.len();
        if r.value.len() != n {
            return Err(format!("{} node features but {} node values", n, r.value.len()));
        }
        if r.features as usize >= ForestRepr::LEAF as usize {
            return Err(format!("{} features (at most {})", r.features, ForestRepr::LEAF - 1));
        }
        if r.roots.is_empty() || r.roots[0] != 0 || r.roots.windows(2).any(|w| w[0] >= w[1]) {
            return Err("tree roots not increasing from node 0".into());
        }
        if *r.roots.last().unwrap_or(&0) as usize >= n {
            return Err("a tree root past the last node".into());
        }
        // The vector walk indexes nodes with i32s.
        if n > i32::MAX as usize {
            return Err(format!("{n} nodes (at most {})", i32::MAX));
        }
        let mut nodes = Vec::with_capacity(n);
        let mut right = r.right.iter();
        for (i, (&feature, &value)) in r.feature.iter().zip(&r.value).enumerate() {
            let link = if feature == ForestRepr::LEAF {
                (r.features as u32) << OFFSET_BITS
            } else {
                if feature as u16 >= r.features {
                    return Err(format!("node {i} splits on feature {feature} of {}", r.features));
                }
                let offset = *right.next().ok_or("fewer right links than split nodes")?;
                if !(2..=OFFSET_MASK).contains(&offset) {
                    return Err(format!("node {i}: right child at distance {offset}"));
                }
                if !value.is_finite() {
                    return Err(format!("node {i}: threshold {value}"));
                }
                ((feature as u32) << OFFSET_BITS) | offset
            };
            nodes.push(Node { value, link });
        }
        if right.next().is_some() {
            return Err("more right links than split nodes".into());
        }
        let ends: Vec<usize> = r.roots.iter().skip(1).map(|&e| e as usize).chain([n]).collect();
        let mut depths = Vec::with_capacity(r.roots.len());
        for (&root, &end) in r.roots.iter().zip(&ends) {
            depths.push(tree_depth(&nodes, root as usize, end, r.features as usize)?);
        }
        let group_depth = depths.chunks(LANES).map(|d| d.iter().copied().max().unwrap_or(0)).collect();
        Ok(Forest { nodes, roots: r.roots, group_depth, features: r.features, base: r.base, scale: r.scale })
    }
}

/// Depth of the tree in `nodes[root..end]`, checking that it is a preorder binary tree filling exactly that
/// range (every child inside it, the left one next, every node reached once).
fn tree_depth(nodes: &[Node], root: usize, end: usize, leaf: usize) -> std::result::Result<u16, String> {
    let mut deepest = 0u16;
    // Preorder: the next node expected is always the one after the last visited.
    let mut next = root;
    let mut stack = vec![(root, 0u16)];
    while let Some((i, depth)) = stack.pop() {
        if i != next || i >= end {
            return Err(format!("node {i} is not where a preorder tree puts it"));
        }
        next += 1;
        if depth > u16::MAX - 1 {
            return Err("tree too deep".into());
        }
        deepest = deepest.max(depth);
        let node = nodes[i];
        if node.feature() != leaf {
            stack.push((i + node.offset(), depth + 1));
            stack.push((i + 1, depth + 1));
        }
    }
    if next != end {
        return Err(format!("nodes {next}..{end} belong to no tree"));
    }
    Ok(deepest)
}

impl Forest {
    /// The forest of `flat` with values rounded to `f32`, splitting on rows of `features` values.
    pub fn from_flat(flat: &FlatForest, features: usize) -> std::result::Result<Forest, String> {
        let features = u16::try_from(features)
            .ok()
            .filter(|&f| f < ForestRepr::LEAF as u16)
            .ok_or_else(|| format!("{features} features (a forest splits on at most 254)"))?;
        let mut repr = ForestRepr {
            features,
            feature: Vec::with_capacity(flat.feature.len()),
            value: flat.value.iter().map(|&v| v as f32).collect(),
            right: Vec::new(),
            roots: flat.roots.clone(),
            base: flat.base,
            scale: flat.scale,
        };
        for (i, &f) in flat.feature.iter().enumerate() {
            if f == LEAF {
                repr.feature.push(ForestRepr::LEAF);
            } else {
                repr.feature.push(u8::try_from(f).map_err(|_| format!("split on feature {f}"))?);
                repr.right.push(
                    (flat.right[i] as usize)
                        .checked_sub(i)
                        .and_then(|d| u32::try_from(d).ok())
                        .ok_or("bad right child")?,
                );
            }
        }
        Forest::try_from(repr)
    }

    pub fn predict(&self, x: &[f64]) -> f64 {
        let features = self.features as usize;
        // The row the walk reads, in f32 like the thresholds (rounding is monotonic, so a row goes the way it went
        // in f64 unless it rounds onto the threshold itself), then the leaves' NaN (a leaf compares false and
        // stays put).
        let mut buffer = [0.0f32; 64];
        let mut heap = Vec::new();
        let row: &mut [f32] = if features < buffer.len() {
            &mut buffer[..=features]
        } else {
            heap.resize(features + 1, 0.0);
            &mut heap
        };
        for (r, &v) in row.iter_mut().zip(&x[..x.len().min(features)]) {
            *r = v as f32;
        }
        row[features] = f32::NAN;
        let row = &*row;
        #[cfg(target_arch = "x86_64")]
        if gather::available() {
            // SAFETY: the CPU has the instructions (checked above); `row` holds `features + 1` values; the
            // forest was checked when built (`try_from`): every walk stays inside its tree and node indices fit
            // in an i32.
            let sum = unsafe { gather::sum_trees(self, row) };
            return self.base + self.scale * sum;
        }
        self.base + self.scale * self.sum_trees(row)
    }

    /// Σ over trees of the leaf `row` reaches, one scalar lane per tree, [`LANES`] trees in lockstep.
    fn sum_trees(&self, row: &[f32]) -> f64 {
        let features = self.features as usize;
        let nodes = &self.nodes[..];
        let mut sum = 0.0;
        for (group, &depth) in self.roots.chunks(LANES).zip(&self.group_depth) {
            let mut at = [0usize; LANES];
            for (a, &root) in at.iter_mut().zip(group) {
                *a = root as usize;
            }
            // A short last group walks its missing lanes on its first tree's nodes and ignores them.
            for a in at.iter_mut().skip(group.len()) {
                *a = group[0] as usize;
            }
            for step in 0..depth {
                // Most paths end well above the group's deepest leaf: stop once every lane sits on a leaf
                // (checked every fourth step, where the nodes are still in L1).
                if step % 4 == 0 && step > 0 && at.iter().all(|&a| nodes[a].feature() == features) {
                    break;
                }
                for a in at.iter_mut() {
                    let node = nodes[*a];
                    // Which way a row goes is a coin toss to the branch predictor: a conditional move, not a jump.
                    let left = row[node.feature()] <= node.value;
                    *a += std::hint::select_unpredictable(left, 1, node.offset());
                }
            }
            for &a in at.iter().take(group.len()) {
                sum += nodes[a].value as f64;
            }
        }
        sum
    }

    pub fn tree_count(&self) -> usize {
        self.roots.len()
    }

    /// The forest of its first `k` trees, for a forest whose prediction is the mean of its trees (extra-trees):
    /// the trees it keeps are averaged over `k`. `None` unless it has more than `k > 0` trees.
    pub fn first_trees(&self, k: usize) -> Option<Forest> {
        let n = self.roots.len();
        if k == 0 || k >= n {
            return None;
        }
        let end = self.roots[k] as usize;
        let nodes = self.nodes[..end].to_vec();
        let roots = self.roots[..k].to_vec();
        let ends = roots.iter().skip(1).map(|&e| e as usize).chain([end]);
        let leaf = self.features as usize;
        let depths: Vec<u16> = roots
            .iter()
            .zip(ends)
            .map(|(&r, e)| tree_depth(&nodes, r as usize, e, leaf))
            .collect::<Result<_, _>>()
            .ok()?;
        let group_depth = depths.chunks(LANES).map(|d| d.iter().copied().max().unwrap_or(0)).collect();
        let scale = self.scale * n as f64 / k as f64;
        Some(Forest { nodes, roots, group_depth, features: self.features, base: self.base, scale })
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn max_depth(&self) -> usize {
        self.group_depth.iter().copied().max().unwrap_or(0) as usize
    }
}

/// [`Forest::predict`]'s walk with AVX-512 gathers: eight trees in one vector register, one gather of their
/// nodes and one of the row's values per level, and up to [`GROUPS`] such registers interleaved so that their
/// gathers overlap (two registers answered the 50-layer benchmark in 145 µs, four in 124 µs, six or eight in
/// 98 µs, the scalar walk in 131 µs). Each lane does what the scalar walk does (the same `<=` in f32, the same
/// leaf self-links) and the leaves are summed in the same order in f64, so both walks give the same bits.
#[cfg(target_arch = "x86_64")]
mod gather {
    use super::{Forest, LANES};
    use std::arch::x86_64::*;

    /// Registers of [`LANES`] trees walked together.
    const GROUPS: usize = 8;

    /// Whether the CPU has the instructions.
    pub(super) fn capable() -> bool {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vl")
    }

    /// Whether predictions take this walk: the CPU has the instructions and the walk is the faster one here.
    /// Gathers cost what the core makes them cost: on an Intel Xeon host the vector walk answered the 50-layer
    /// benchmark in 98 µs against the scalar walk's 131, on an AMD Zen 4 host in 254-264 µs against 168-180.
    /// So the two are timed once, on a forest of the stored models' shape, and the faster is kept
    /// (`PERFMODEL_TREE_WALK=scalar` or `vector` decides instead). Both give the same bits.
    pub(super) fn available() -> bool {
        static CHOSEN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            capable()
                && match std::env::var("PERFMODEL_TREE_WALK").as_deref() {
                    Ok("scalar") => false,
                    Ok("vector") => true,
                    _ => vector_walk_is_faster(),
                }
        })
    }

    /// Times both walks on a forest like a stored latency model (48 trees, about 3 MB of nodes, more than a
    /// core's own cache) over the same rows, alternately, and compares their best rounds. About 10 ms.
    fn vector_walk_is_faster() -> bool {
        if !capable() {
            return false;
        }
        const FEATURES: usize = 16;
        const DEPTH: usize = 12;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut flat = super::FlatForest {
            feature: Vec::new(),
            value: Vec::new(),
            right: Vec::new(),
            roots: Vec::new(),
            base: 0.0,
            scale: 1.0,
        };
        // Full trees in preorder: a node at depth d is followed by its left subtree of 2^(DEPTH - d) - 1 nodes.
        for _ in 0..48 {
            flat.roots.push(flat.feature.len() as u32);
            let mut stack = vec![0usize];
            while let Some(depth) = stack.pop() {
                let at = flat.feature.len();
                if depth == DEPTH {
                    flat.feature.push(super::LEAF);
                    flat.value.push((next() % 1000) as f64);
                    flat.right.push(0);
                } else {
                    flat.feature.push((next() % FEATURES as u64) as u16);
                    flat.value.push((next() % 1000) as f64);
                    flat.right.push((at + (1usize << (DEPTH - depth))) as u32);
                    stack.push(depth + 1);
                    stack.push(depth + 1);
                }
            }
        }
        let Ok(forest) = Forest::from_flat(&flat, FEATURES) else { return false };
        let rows: Vec<Vec<f32>> = (0..64)
            .map(|_| {
                let mut row: Vec<f32> = (0..FEATURES).map(|_| (next() % 1000) as f32).collect();
                row.push(f32::NAN);
                row
            })
            .collect();
        let mut best = [f64::INFINITY; 2];
        for _ in 0..3 {
            for (k, best) in best.iter_mut().enumerate() {
                let start = std::time::Instant::now();
                let mut sum = 0.0;
                for row in &rows {
                    // SAFETY: `capable()` held; each row holds FEATURES + 1 values; the forest passed its checks.
                    sum += if k == 1 { unsafe { sum_trees(&forest, row) } } else { forest.sum_trees(row) };
                }
                std::hint::black_box(sum);
                *best = best.min(start.elapsed().as_secs_f64());
            }
        }
        best[1] < best[0]
    }

    /// Σ over trees of the leaf `row` reaches.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512VL; `row.len() > forest.features`; `forest` passed `Forest::try_from`'s
    /// checks (every path stays inside its tree, every feature index is at most `features`, node indices fit
    /// in an `i32`).
    #[target_feature(enable = "avx512f,avx512vl")]
    pub(super) unsafe fn sum_trees(forest: &Forest, row: &[f32]) -> f64 {
        debug_assert!(row.len() > forest.features as usize);
        let groups = forest.roots.len().div_ceil(LANES);
        let mut sum = 0.0;
        let mut first = 0;
        while first < groups {
            let count = (groups - first).min(GROUPS);
            // SAFETY: as this function's.
            sum = unsafe {
                match count {
                    8 => walk::<8>(forest, row, first, sum),
                    7 => walk::<7>(forest, row, first, sum),
                    6 => walk::<6>(forest, row, first, sum),
                    5 => walk::<5>(forest, row, first, sum),
                    4 => walk::<4>(forest, row, first, sum),
                    3 => walk::<3>(forest, row, first, sum),
                    2 => walk::<2>(forest, row, first, sum),
                    _ => walk::<1>(forest, row, first, sum),
                }
            };
            first += count;
        }
        sum
    }

    /// `sum` plus the leaves of groups `first..first + G` of [`LANES`] trees, added one at a time in tree order.
    #[target_feature(enable = "avx512f,avx512vl")]
    #[inline]
    unsafe fn walk<const G: usize>(forest: &Forest, row: &[f32], first: usize, mut sum: f64) -> f64 {
        let nodes = forest.nodes.as_ptr() as *const i64;
        let leaf = _mm256_set1_epi32(forest.features as i32);
        let offset_mask = _mm256_set1_epi32(super::OFFSET_MASK as i32);
        let one = _mm256_set1_epi32(1);
        let mut at = [_mm256_setzero_si256(); G];
        let mut depth = 0;
        let mut lanes = [0usize; G];
        for (g, a) in at.iter_mut().enumerate() {
            let roots = &forest.roots[(first + g) * LANES..];
            let roots = &roots[..roots.len().min(LANES)];
            lanes[g] = roots.len();
            // A short group walks its missing lanes on its first tree and ignores them, as the scalar walk.
            let mut start = [roots[0] as i32; LANES];
            for (s, &r) in start.iter_mut().zip(roots) {
                *s = r as i32;
            }
            // SAFETY: an 8-lane i32 array is 32 bytes.
            *a = unsafe { _mm256_loadu_si256(start.as_ptr() as *const __m256i) };
            depth = depth.max(forest.group_depth[first + g]);
        }
        for _ in 0..depth {
            let mut on_leaves = true;
            let mut next = at;
            for (a, n) in at.iter().zip(next.iter_mut()) {
                // SAFETY: every lane's index is a node of its tree.
                let node = unsafe { _mm512_i32gather_epi64::<8>(*a, nodes) };
                let value = _mm256_castsi256_ps(_mm512_cvtepi64_epi32(node));
                let link = _mm512_cvtepi64_epi32(_mm512_srli_epi64::<32>(node));
                let feature = _mm256_srli_epi32::<{ super::OFFSET_BITS as i32 }>(link);
                on_leaves &= _mm256_cmpeq_epi32_mask(feature, leaf) == 0xff;
                // SAFETY: a feature index is at most `features`, and `row` holds `features + 1` values.
                let x = unsafe { _mm256_i32gather_ps::<4>(row.as_ptr(), feature) };
                let left = _mm256_cmp_ps_mask::<_CMP_LE_OQ>(x, value);
                let offset = _mm256_and_si256(link, offset_mask);
                *n = _mm256_add_epi32(*a, _mm256_mask_blend_epi32(left, offset, one));
            }
            // Most paths end well above the deepest leaf: stop once every lane sits on a leaf (a leaf links to
            // itself, so further steps would change nothing).
            if on_leaves {
                break;
            }
            at = next;
        }
        for (a, &lanes) in at.iter().zip(&lanes) {
            // SAFETY: as in the walk.
            let node = unsafe { _mm512_i32gather_epi64::<8>(*a, nodes) };
            let mut values = [0.0f32; LANES];
            // SAFETY: an 8-lane f32 array is 32 bytes.
            unsafe { _mm256_storeu_ps(values.as_mut_ptr(), _mm256_castsi256_ps(_mm512_cvtepi64_epi32(node))) };
            for &v in &values[..lanes] {
                sum += v as f64;
            }
        }
        sum
    }
}

/// Per-feature standardisation `(x - mean) / scale`; constant features get scale 1 and contribute nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standardizer {
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Standardizer {
    pub fn fit(rows: &[Vec<f64>]) -> Standardizer {
        let d = rows.first().map_or(0, Vec::len);
        let n = rows.len().max(1) as f64;
        let mut mean = vec![0.0; d];
        for r in rows {
            for (m, v) in mean.iter_mut().zip(r) {
                *m += v / n;
            }
        }
        let mut var = vec![0.0; d];
        for r in rows {
            for ((s, v), m) in var.iter_mut().zip(r).zip(&mean) {
                *s += (v - m) * (v - m) / n;
            }
        }
        let scale = var.iter().map(|v| if *v > 0.0 { v.sqrt() } else { 1.0 }).collect();
        Standardizer { mean, scale }
    }

    pub fn apply(&self, x: &[f64]) -> Vec<f64> {
        x.iter().zip(&self.mean).zip(&self.scale).map(|((v, m), s)| (v - m) / s).collect()
    }
}

/// k nearest neighbours on standardised features: the training points (f32, row-major) and their targets.
/// Constant features are dropped (`columns` lists the kept ones) so they cost no time per query. A model is
/// not changed once it has answered a query (its points are then also held feature by feature).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "KnnRepr", into = "KnnRepr")]
pub struct Knn {
    pub k: usize,
    pub distance_weighted: bool,
    pub columns: Vec<u16>,
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
    pub points: Vec<f32>,
    pub targets: Vec<f64>,
    /// `points` feature by feature, built on the first query.
    pub by_feature: FeatureMajor,
}

/// How a [`Knn`] is stored: its fields but the derived one, checked when read (a point per target, a value
/// per kept feature for each).
#[derive(Serialize, Deserialize)]
struct KnnRepr {
    k: usize,
    distance_weighted: bool,
    columns: Vec<u16>,
    mean: Vec<f64>,
    scale: Vec<f64>,
    points: Vec<f32>,
    targets: Vec<f64>,
}

impl TryFrom<KnnRepr> for Knn {
    type Error = String;
    fn try_from(r: KnnRepr) -> Result<Knn, String> {
        let d = r.columns.len();
        if r.mean.len() != d || r.scale.len() != d {
            return Err(format!("kNN model: {d} features but {} means and {} scales", r.mean.len(), r.scale.len()));
        }
        if Some(r.points.len()) != r.targets.len().checked_mul(d) {
            return Err(format!(
                "kNN model: {} point values for {} targets of {d} features",
                r.points.len(),
                r.targets.len()
            ));
        }
        let KnnRepr { k, distance_weighted, columns, mean, scale, points, targets } = r;
        Ok(Knn { k, distance_weighted, columns, mean, scale, points, targets, by_feature: FeatureMajor::default() })
    }
}

impl From<Knn> for KnnRepr {
    fn from(m: Knn) -> KnnRepr {
        let Knn { k, distance_weighted, columns, mean, scale, points, targets, by_feature: _ } = m;
        KnnRepr { k, distance_weighted, columns, mean, scale, points, targets }
    }
}

/// A [`Knn`]'s points transposed, one feature's values for every point together, so that a query computes the
/// distances of many points at once in vector registers. Point by point, each distance is a chain of dependent
/// additions, one feature after another, and a model of a few hundred points took a third of a 50-layer
/// estimate that way ([budgets](../../docs/budgets.md)). It is derived from `points` and never stored, so any
/// two are equal.
#[derive(Clone, Default)]
pub struct FeatureMajor(std::sync::OnceLock<Vec<f32>>);

impl PartialEq for FeatureMajor {
    fn eq(&self, _: &FeatureMajor) -> bool {
        true
    }
}

impl std::fmt::Debug for FeatureMajor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() { "FeatureMajor(built)" } else { "FeatureMajor(not built)" })
    }
}

/// Points whose distances [`Knn::predict`] computes together before it ranks them.
const KNN_BLOCK: usize = 128;

/// Adds to each of `dist` the squared differences of its point from `q`, feature by feature in order, as a
/// point-by-point loop would (the same bits for a query of finite features). The points are `start..start +
/// dist.len()` of the `n` held feature by feature in `by_feature`; AVX2's 8-lane registers when the CPU has them.
fn add_squared_distances(dist: &mut [f32], by_feature: &[f32], n: usize, start: usize, q: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { add_squared_distances_avx2(dist, by_feature, n, start, q) };
    }
    add_squared_distances_portable(dist, by_feature, n, start, q)
}

/// [`add_squared_distances`] in whatever registers the build targets. Four features a pass, so that the sums go
/// through memory a quarter as often. Always inlined, so that the AVX2 copy compiles its own body.
#[inline(always)]
fn add_squared_distances_portable(dist: &mut [f32], by_feature: &[f32], n: usize, start: usize, q: &[f32]) {
    let len = dist.len();
    let column = |j: usize| &by_feature[j * n + start..j * n + start + len];
    let mut quads = q.chunks_exact(4);
    let mut j = 0;
    for quad in &mut quads {
        let (c0, c1, c2, c3) = (column(j), column(j + 1), column(j + 2), column(j + 3));
        for (r, acc) in dist.iter_mut().enumerate() {
            let (d0, d1, d2, d3) = (c0[r] - quad[0], c1[r] - quad[1], c2[r] - quad[2], c3[r] - quad[3]);
            *acc = *acc + d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3;
        }
        j += 4;
    }
    for &qj in quads.remainder() {
        for (acc, &p) in dist.iter_mut().zip(column(j)) {
            let diff = p - qj;
            *acc += diff * diff;
        }
        j += 1;
    }
}

/// [`add_squared_distances_portable`] in 8-lane registers: the same operations in the same order (no fused
/// multiply-adds), so the same bits.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_squared_distances_avx2(dist: &mut [f32], by_feature: &[f32], n: usize, start: usize, q: &[f32]) {
    add_squared_distances_portable(dist, by_feature, n, start, q)
}

impl Knn {
    pub fn predict(&self, x: &[f64]) -> f64 {
        let (columns, mean, scale) = (&self.columns[..], &self.mean[..], &self.scale[..]);
        let targets = &self.targets[..];
        let d = columns.len();
        let n = targets.len();
        if d == 0 || n == 0 || self.points.len() != n * d {
            // No feature varied in training: every point is equally near. (Points that do not match the targets
            // are refused when a model is read; one built in memory that way answers the same.)
            return targets.iter().sum::<f64>() / n.max(1) as f64;
        }
        let mut query = vec![0f32; d];
        let q = &mut query[..];
        let mut j = 0;
        while j < d {
            q[j] = ((x[columns[j] as usize] - mean[j]) / scale[j]) as f32;
            j += 1;
        }
        let by_feature = &self.by_feature.0.get_or_init(|| {
            let mut t = vec![0f32; n * d];
            for (row, point) in self.points.chunks_exact(d).enumerate() {
                for (j, &v) in point.iter().enumerate() {
                    t[j * n + row] = v;
                }
            }
            t
        })[..];
        // The k best (squared distance, row) so far, sorted ascending; k is small.
        let k = self.k.min(n).max(1);
        let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
        let mut worst = f32::INFINITY;
        let mut dist = [0f32; KNN_BLOCK];
        let mut start = 0;
        while start < n {
            let len = KNN_BLOCK.min(n - start);
            let dist = &mut dist[..len];
            dist.fill(0.0);
            add_squared_distances(dist, by_feature, n, start, q);
            for (r, &dist) in dist.iter().enumerate() {
                if dist < worst || best.len() < k {
                    let at = best.partition_point(|(b, _)| *b <= dist);
                    best.insert(at, (dist, start + r));
                    best.truncate(k);
                    if best.len() == k {
                        worst = best[k - 1].0;
                    }
                }
            }
            start += len;
        }
        if self.distance_weighted {
            if let Some(&(_, exact)) = best.iter().find(|(dist, _)| *dist == 0.0) {
                return targets[exact];
            }
            let (mut num, mut den) = (0.0, 0.0);
            for &(dist, row) in &best {
                let w = 1.0 / (dist as f64).sqrt();
                num += w * targets[row];
                den += w;
            }
            num / den
        } else {
            best.iter().map(|&(_, row)| targets[row]).sum::<f64>() / best.len() as f64
        }
    }
}

/// A linear function of standardised features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    pub standardizer: Standardizer,
    pub coefficients: Vec<f64>,
    pub intercept: f64,
}

impl Linear {
    pub fn predict(&self, x: &[f64]) -> f64 {
        let (mean, scale, coefficients) =
            (&self.standardizer.mean[..], &self.standardizer.scale[..], &self.coefficients[..]);
        let mut y = self.intercept;
        let mut j = 0;
        while j < coefficients.len() {
            y += coefficients[j] * (x[j] - mean[j]) / scale[j];
            j += 1;
        }
        y
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Model {
    Trees(FlatForest),
    Knn(Knn),
    Linear(Linear),
    /// Another device's model of the same triplet with a correction learned on this device's rows
    /// ([`Transfer`]). Last, so stores written before it decode unchanged.
    Transfer(Box<Transfer>),
    /// Trees as training writes them now ([`Forest`]); [`Model::Trees`] is read from older stores.
    Forest(Forest),
}

/// How a transferred model uses the source device's prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferMode {
    /// The correction learns the target as a multiple of the source's prediction (a new machine is mostly a
    /// per-layer speed ratio of a known one).
    Ratio,
    /// The source's prediction is one more feature of the correction, which may use or ignore it.
    Feature,
}

impl TransferMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferMode::Ratio => "ratio",
            TransferMode::Feature => "feature",
        }
    }
}

/// `f` of `features` followed by `appended`, built on the stack for the usual feature counts: no allocation per
/// prediction.
fn with_appended<R>(features: &[f64], appended: &[f64], f: impl FnOnce(&mut [f64]) -> R) -> R {
    let width = features.len() + appended.len();
    let mut buffer = [0.0f64; 64];
    let mut heap = Vec::new();
    let input: &mut [f64] = if width <= buffer.len() {
        &mut buffer[..width]
    } else {
        heap.resize(width, 0.0);
        &mut heap
    };
    input[..features.len()].copy_from_slice(features);
    input[features.len()..].copy_from_slice(appended);
    f(input)
}

/// Smallest source prediction a ratio is taken of (ms, W or MiB): a layer the source predicts at 0 still has
/// a time here.
pub const MIN_PRIOR: f64 = 1e-6;

/// A model of one device built on another's: the source device's predictor, copied so that the store stays
/// self-contained, and the correction trained on this device's rows (see [`TransferMode`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub source_device: String,
    pub mode: TransferMode,
    pub source: Predictor,
    pub correction: Predictor,
}

impl Transfer {
    pub fn predict(&self, features: &[f64]) -> f64 {
        let prior = self.source.predict(features);
        match self.mode {
            TransferMode::Ratio => self.correction.predict(features) * prior.max(MIN_PRIOR),
            TransferMode::Feature => with_appended(features, &[prior], |input| self.correction.predict(input)),
        }
    }
}

impl Model {
    /// How big the stored model is, for reports (tree size is what bounds prediction time).
    pub fn size_summary(&self) -> String {
        match self {
            Model::Trees(f) => {
                format!("{} trees, {} nodes, depth ≤ {}", f.roots.len(), f.node_count(), f.max_depth())
            }
            Model::Forest(f) => {
                format!("{} trees, {} nodes, depth ≤ {}", f.tree_count(), f.node_count(), f.max_depth())
            }
            Model::Knn(k) => format!("{} points × {} features, k = {}", k.targets.len(), k.columns.len(), k.k),
            Model::Linear(l) => {
                format!("{} non-zero coefficients", l.coefficients.iter().filter(|c| **c != 0.0).count())
            }
            Model::Transfer(t) => format!(
                "{}'s model ({}) and a correction ({})",
                t.source_device,
                t.source.model.size_summary(),
                t.correction.model.size_summary()
            ),
        }
    }

    /// The prediction in the space the model was fitted in (log space when the target was log-transformed).
    pub fn predict_raw(&self, x: &[f64]) -> f64 {
        match self {
            Model::Trees(f) => f.predict(x),
            Model::Forest(f) => f.predict(x),
            Model::Knn(k) => k.predict(x),
            Model::Linear(l) => l.predict(x),
            // A transfer needs the layer's own features ([`Predictor::predict`] handles it); in the fitted space
            // its correction's model is the one that was fitted.
            Model::Transfer(t) => t.correction.model.predict_raw(x),
        }
    }
}

/// A part of the target that follows from the features and is added to the model's output instead of being
/// learned: the model only learns the rest. A layer's memory is mostly its f32 inputs, weights and outputs,
/// known exactly; learning the whole sum turns a few percent of model error into megabytes on weight-heavy
/// layers, while the part the engine adds (scratch such as im2col buffers, fixed overhead) is small and smooth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnownPart {
    /// Indices of the (raw, untransformed) features that are summed.
    pub features: Vec<u16>,
    /// Multiplier of the sum.
    pub scale: f64,
    /// When set, the weights count as the engine holds them (packed for its kernels) instead of as f32.
    #[serde(default)]
    pub engine_weights: Option<EngineWeights>,
}

/// Weights as tract packs them for this machine's kernels ([`crate::engine::packing`]), replacing the f32
/// `weight_elems` term of a [`KnownPart`], plus the scratch a convolution's lowering needs
/// ([`crate::engine::packing::PackedShape::lowering_workspace_bytes`]). The packing depends on the instruction set tract dispatches on, so
/// it is recorded: on a machine with another one, the f32 weights are used instead (see [`Self::applies`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineWeights {
    /// tract's kernel instruction set where the models were trained (`tract_linalg::isa::native()`).
    pub isa: String,
    /// Index of `weight_elems`, the term replaced.
    pub weight_feature: u16,
    /// The feature indices the packed size is computed from, in [`crate::engine::packing::PackedShape`] order.
    pub shape: crate::engine::packing::PackedShape,
}

impl EngineWeights {
    /// For a dense, conv2d or matmul layer; `None` for other types (their weights stay plain f32 in tract).
    pub fn for_layer(layer_type: crate::LayerType, feature_names: &[String]) -> Option<EngineWeights> {
        let weight_feature =
            feature_names.iter().position(|f| f == "weight_elems").and_then(|i| u16::try_from(i).ok())?;
        Some(EngineWeights {
            isa: crate::engine::packing::host_isa().to_string(),
            weight_feature,
            shape: crate::engine::packing::PackedShape::for_layer(layer_type, feature_names)?,
        })
    }

    /// Whether the packing computed here is the one the models were trained with.
    pub fn applies(&self) -> bool {
        self.isa == crate::engine::packing::host_isa()
    }

    /// Bytes tract holds for the layer's weights and bias, from its features.
    pub fn bytes(&self, x: &[f64]) -> Option<u64> {
        self.shape.packed_bytes(x)
    }
}

/// Features a model sees beyond the layer's own: how the engine runs the layer on this machine, asked of the
/// engine itself ([`crate::engine::packing::ConvShape::engine_features`]: a convolution's lowering, how often a
/// lazy im2col re-gathers its input as tract walks the tiles, the walk's block edge, the kernel tile;
/// [`crate::engine::packing::dense_engine_features`]: a dense layer's kernel tile). The hyperparameters only
/// imply these through tract's decisions and the caches' sizes, as thresholds no few thousand samples pin down:
/// a 3×3 convolution of 256 channels runs at a third of the speed of one with 384.
/// Like [`EngineWeights`], they describe the machine the models were trained on (`isa`, `caches`); elsewhere
/// they are computed with that machine's answers replaced by this one's, which [`Self::applies`] tells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineFeatures {
    /// tract's kernel instruction set where the models were trained.
    pub isa: String,
    /// The cache sizes tract's tile walk was blocked by there ([`crate::engine::packing::host_caches`]).
    pub caches: String,
    /// Where the layer's sizes are in its feature vector.
    pub shape: crate::engine::packing::PackedShape,
    /// Names of the appended features.
    pub names: Vec<String>,
}

impl EngineFeatures {
    /// For conv2d, dense and matmul layers; `None` for other types.
    pub fn for_layer(layer_type: crate::LayerType, feature_names: &[String]) -> Option<EngineFeatures> {
        let shape = crate::engine::packing::PackedShape::for_layer(layer_type, feature_names)?;
        Some(EngineFeatures {
            isa: crate::engine::packing::host_isa().to_string(),
            caches: crate::engine::packing::host_caches().to_string(),
            names: shape.engine_feature_names().iter().map(|n| n.to_string()).collect(),
            shape,
        })
    }

    /// ONNX Runtime's decisions for a conv2d with NCHWc blocks of `nchwc_block` channels (0: none), the block the
    /// models' machine uses ([`crate::engine::rules::conv_engine_features`]); `None` for other types.
    pub fn onnxruntime(
        layer_type: crate::LayerType,
        feature_names: &[String],
        nchwc_block: usize,
    ) -> Option<EngineFeatures> {
        let shape = crate::engine::packing::PackedShape::for_onnxruntime(layer_type, feature_names, nchwc_block)?;
        Some(EngineFeatures {
            isa: format!("onnxruntime NCHWc block {nchwc_block}"),
            caches: String::new(),
            names: shape.engine_feature_names().iter().map(|n| n.to_string()).collect(),
            shape,
        })
    }

    /// Whether the engine answers here as where the models were trained: same kernels, same cache sizes (always
    /// for ONNX Runtime's, which follow from the shape and the recorded block alone).
    pub fn applies(&self) -> bool {
        !self.shape.asks_tract()
            || (self.isa == crate::engine::packing::host_isa() && self.caches == crate::engine::packing::host_caches())
    }

    /// What the models were trained on, as a note says it.
    pub fn machine(&self) -> String {
        format!("{}, {}", self.isa, self.caches)
    }

    /// The appended values (the first `names.len()`); zeros when the features do not describe a valid layer
    /// (never fewer values: the model indexes them).
    pub fn values(&self, x: &[f64]) -> [f64; crate::engine::packing::ENGINE_FEATURES_MAX] {
        self.shape.engine_features(x).unwrap_or([0.0; crate::engine::packing::ENGINE_FEATURES_MAX])
    }

    /// How many values are appended.
    pub fn width(&self) -> usize {
        self.names.len().min(crate::engine::packing::ENGINE_FEATURES_MAX)
    }

    /// `x` followed by the appended values.
    pub fn extend(&self, x: &[f64]) -> Vec<f64> {
        let mut row = x.to_vec();
        row.extend_from_slice(&self.values(x)[..self.width()]);
        row
    }
}

use crate::units::MIB;

impl KnownPart {
    /// The f32 inputs, weights and outputs of a layer in MiB, from the features named `input_elems`,
    /// `weight_elems` and `output_elems` (every layer type has them); `None` when a name is missing.
    pub fn tensor_mib(feature_names: &[String]) -> Option<KnownPart> {
        let features = ["input_elems", "weight_elems", "output_elems"]
            .iter()
            .map(|name| feature_names.iter().position(|f| f == name).and_then(|i| u16::try_from(i).ok()))
            .collect::<Option<Vec<u16>>>()?;
        Some(KnownPart { features, scale: 4.0 / MIB, engine_weights: None })
    }

    /// Count the weights as tract packs them on this machine (dense, conv2d and matmul; no change for other types).
    pub fn with_engine_weights(mut self, layer_type: crate::LayerType, feature_names: &[String]) -> KnownPart {
        self.engine_weights = EngineWeights::for_layer(layer_type, feature_names);
        self
    }

    pub fn value(&self, x: &[f64]) -> f64 {
        let feature = |f: u16| x.get(f as usize).copied().unwrap_or(0.0);
        let plain = || self.scale * self.features.iter().map(|&f| feature(f)).sum::<f64>();
        let Some(engine) = &self.engine_weights else { return plain() };
        // The lowering's scratch was left out of what the model learned: it is added wherever the model is used
        // (on a machine with another instruction set, with this machine's answer to tract's questions).
        let workspace = engine.shape.lowering_workspace_bytes(x).unwrap_or(0) as f64 / MIB;
        match self.engine_weight_bytes(x) {
            Some((replaced, bytes)) => {
                let rest: f64 = self.features.iter().filter(|&&f| f != replaced).map(|&f| feature(f)).sum();
                self.scale * rest + bytes as f64 / MIB + workspace
            }
            None => plain() + workspace,
        }
    }

    /// The replaced feature and the bytes the engine holds for the weights, when engine weights apply here.
    fn engine_weight_bytes(&self, x: &[f64]) -> Option<(u16, u64)> {
        let engine = self.engine_weights.as_ref().filter(|e| e.applies())?;
        Some((engine.weight_feature, engine.bytes(x)?))
    }

    /// Count the weights as tract packs them on this machine, whatever machine the model was trained on: for a
    /// model brought to this machine (zero-shot), whose estimates are of this machine's memory. What the model
    /// learned besides the packed weights does not depend on the instruction set.
    pub(crate) fn pack_for_this_machine(&mut self) {
        if let Some(engine) = &mut self.engine_weights {
            engine.isa = crate::engine::packing::host_isa().to_string();
        }
    }

    /// Whether the models were trained on tract's packed weights, on any machine: they describe tract as the
    /// executor, whose graph rewrites do not depend on the instruction set (the packing itself applies only on
    /// a machine with the training one's, see [`EngineWeights::applies`]).
    pub fn knows_tract(&self) -> bool {
        self.engine_weights.is_some()
    }

    /// Bytes the engine keeps resident for the layer's weights, when this part knows them (engine weights that
    /// apply on this machine); `None` means: count the f32 weights.
    pub fn resident_weight_bytes(&self, x: &[f64]) -> Option<u64> {
        self.engine_weight_bytes(x).map(|(_, bytes)| bytes)
    }
}

/// One trained predictor: the model, the method that produced it (for reports and estimate output), whether the
/// target was log-transformed and whether the model sees `ln(1 + feature)` instead of the raw features (sizes
/// and FLOPs span many orders of magnitude; on a log scale distances and random thresholds spread evenly, and a
/// linear model becomes a power law).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predictor {
    pub(crate) method: String,
    pub(crate) log_target: bool,
    pub(crate) log_features: bool,
    pub(crate) model: Model,
    /// Added to the model's output (the model learned the target minus this part).
    pub(crate) known: Option<KnownPart>,
    /// Subtracted from the model's output: the rest was shifted to be positive for a log target.
    pub(crate) shift: f64,
    /// Appended to the layer's features before the model sees them.
    pub(crate) engine_features: Option<EngineFeatures>,
    /// The model learned the target per unit of this feature ([`unit_count`]); its output is multiplied back.
    pub(crate) per_unit: Option<u16>,
}

/// Feature `feature` of `row` as a divisor of the target: at least 1 (a layer of 0 FLOPs still takes time).
pub fn unit_count(row: &[f64], feature: u16) -> f64 {
    row.get(feature as usize).copied().filter(|v| v.is_finite()).unwrap_or(0.0).max(1.0)
}

/// The feature transform of log-feature models (features are non-negative counts and sizes).
///
/// Most features are small whole numbers (one-hot activations, kernel sizes, strides, pads, batch): their
/// logs come from a table of `ln_1p`'s own answers, the same bits at a fraction of the cost of computing them
/// (the logs were 9% of a 50-layer estimate).
pub fn log_feature(v: f64) -> f64 {
    let v = v.max(0.0);
    // `as` truncates (and saturates); `f64::trunc` is a call into libm on baseline x86-64.
    let whole = v as usize;
    if whole <= SMALL_WHOLE && whole as f64 == v {
        return SMALL_WHOLE_LOGS[whole];
    }
    v.ln_1p()
}

/// The largest whole number [`log_feature`] looks up.
const SMALL_WHOLE: usize = 64;

static SMALL_WHOLE_LOGS: std::sync::LazyLock<[f64; SMALL_WHOLE + 1]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|i| (i as f64).ln_1p()));

impl Predictor {
    /// The same predictor keeping the first `k` trees of its extra-trees forest (see [`Forest::first_trees`]);
    /// `None` for another method, a transferred model, or a forest of at most `k` trees.
    pub fn with_first_trees(&self, k: usize) -> Option<Predictor> {
        if !self.method.starts_with("ert") {
            return None;
        }
        let Model::Forest(forest) = &self.model else { return None };
        // Field by field: `..self.clone()` would copy the whole forest first.
        Some(Predictor {
            method: self.method.clone(),
            log_target: self.log_target,
            log_features: self.log_features,
            model: Model::Forest(forest.first_trees(k)?),
            known: self.known.clone(),
            shift: self.shift,
            engine_features: self.engine_features.clone(),
            per_unit: self.per_unit,
        })
    }

    /// See [`KnownPart::pack_for_this_machine`].
    pub(crate) fn pack_for_this_machine(&mut self) {
        if let Some(known) = &mut self.known {
            known.pack_for_this_machine();
        }
    }

    pub fn new(method: impl Into<String>, log_target: bool, model: Model) -> Predictor {
        Predictor {
            method: method.into(),
            log_target,
            log_features: false,
            model,
            known: None,
            shift: 0.0,
            engine_features: None,
            per_unit: None,
        }
    }

    /// The model was fitted on `target - known.value(x) + shift` (in log space when the target is logged).
    pub fn with_known_part(mut self, known: KnownPart, shift: f64) -> Predictor {
        self.known = Some(known);
        self.shift = shift;
        self
    }

    /// The model was fitted on the features followed by `engine`'s.
    pub fn with_engine_features(mut self, engine: Option<EngineFeatures>) -> Predictor {
        self.engine_features = engine;
        self
    }

    /// The model learned the target per unit of feature `feature`.
    pub fn with_per_unit(mut self, feature: Option<u16>) -> Predictor {
        self.per_unit = feature;
        self
    }

    /// The model was fitted on [`log_feature`]-transformed features.
    pub fn with_log_features(mut self, log_features: bool) -> Predictor {
        self.log_features = log_features;
        self
    }

    /// Predicted metric value for one layer's features (in [`crate::LayerType::feature_names`] order). Never
    /// negative: latency, power and memory cannot be.
    pub fn predict(&self, features: &[f64]) -> f64 {
        if let Model::Transfer(t) = &self.model {
            return t.predict(features);
        }
        let extra = self.engine_features.as_ref().map(|e| (e.values(features), e.width()));
        let raw = if self.log_features || extra.is_some() {
            let appended = extra.as_ref().map_or(&[][..], |(values, width)| &values[..*width]);
            with_appended(features, appended, |input| {
                if self.log_features {
                    let mut j = 0;
                    while j < input.len() {
                        input[j] = log_feature(input[j]);
                        j += 1;
                    }
                }
                self.model.predict_raw(input)
            })
        } else {
            self.model.predict_raw(features)
        };
        let mut y = if self.log_target { raw.exp() } else { raw };
        if let Some(feature) = self.per_unit {
            y *= unit_count(features, feature);
        }
        if let Some(known) = &self.known {
            y += known.value(features) - self.shift;
        }
        if y.is_nan() {
            0.0
        } else {
            y.clamp(0.0, f64::MAX)
        }
    }

    /// Short name of the method, e.g. `ert`, `knn`, `xgb`, `tree`, `linear`, with `+logx` for log features and
    /// `+log` for a log target.
    pub fn method(&self) -> &str {
        &self.method
    }

    pub fn log_target(&self) -> bool {
        self.log_target
    }

    pub fn log_features(&self) -> bool {
        self.log_features
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn known_part(&self) -> Option<&KnownPart> {
        match &self.model {
            Model::Transfer(t) => t.correction.known_part(),
            _ => self.known.as_ref(),
        }
    }

    /// The engine features of the model trained on this device's rows (a transfer's correction: its source's
    /// describe the source's machine).
    pub fn engine_features(&self) -> Option<&EngineFeatures> {
        match &self.model {
            Model::Transfer(t) => t.correction.engine_features(),
            _ => self.engine_features.as_ref(),
        }
    }

    /// A model built on `source_device`'s `source` predictor with `correction` trained here.
    pub fn transfer(source_device: &str, mode: TransferMode, source: Predictor, correction: Predictor) -> Predictor {
        let method = format!("transfer:{source_device}:{}:{}", mode.as_str(), correction.method);
        let log_target = correction.log_target;
        let transfer = Transfer { source_device: source_device.to_string(), mode, source, correction };
        Predictor::new(method, log_target, Model::Transfer(Box::new(transfer)))
    }

    /// The source device and mode when this predictor is a transfer.
    pub fn transfer_source(&self) -> Option<(&str, TransferMode)> {
        match &self.model {
            Model::Transfer(t) => Some((t.source_device.as_str(), t.mode)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn weights_packed_on_another_machine_count_as_f32_unless_the_model_is_brought_here() {
        let names = crate::LayerType::Dense.feature_names();
        let config = crate::layer::LayerConfig::new(
            crate::layer::Op::Dense(crate::layer::Dense {
                units: 1000,
                use_bias: true,
                activation: crate::layer::Activation::Linear,
            }),
            vec![smallvec::smallvec![1280]],
            1,
        );
        let x = config.features().unwrap();
        let here = KnownPart::tensor_mib(&names).unwrap().with_engine_weights(crate::LayerType::Dense, &names);
        let mut elsewhere = here.clone();
        elsewhere.engine_weights.as_mut().unwrap().isa = "tract-linalg 0.23.9 another machine".into();
        let f32_weights = 4.0 * (1280.0 * 1000.0 + 1000.0) / MIB;
        let tensors = 4.0 * (1280.0 + 1000.0) / MIB;
        assert!((elsewhere.value(&x) - (tensors + f32_weights)).abs() < 1e-9, "{}", elsewhere.value(&x));
        assert_eq!(elsewhere.resident_weight_bytes(&x), None);
        let packed = here.resident_weight_bytes(&x).expect("packed here");
        assert!(packed as f64 >= 4.0 * 1280.0 * 1000.0, "{packed}");
        elsewhere.pack_for_this_machine();
        assert_eq!(elsewhere.resident_weight_bytes(&x), Some(packed));
        assert!((elsewhere.value(&x) - here.value(&x)).abs() < 1e-12);
    }

    /// A random preorder tree of up to `depth` levels over 4 features, values exact in f32.
    fn random_tree(flat: &mut FlatForest, rng: &mut ChaCha8Rng, depth: usize) {
        if depth == 0 || rng.random_bool(0.25) {
            flat.feature.push(LEAF);
            // Leaves exact in f32 but of very different magnitudes: summed in another order, they give other bits.
            flat.value.push(rng.random_range(-1000..1000) as f64 / 8.0 * 2f64.powi(rng.random_range(-30..30)));
            flat.right.push(0);
            return;
        }
        let at = flat.feature.len();
        flat.feature.push(rng.random_range(0..4));
        flat.value.push(rng.random_range(0..64) as f64 / 4.0);
        flat.right.push(0);
        random_tree(flat, rng, depth - 1);
        flat.right[at] = flat.feature.len() as u32;
        random_tree(flat, rng, depth - 1);
    }

    fn random_forest(trees: usize, seed: u64) -> FlatForest {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut flat =
            FlatForest { feature: vec![], value: vec![], right: vec![], roots: vec![], base: 0.5, scale: 0.25 };
        for t in 0..trees {
            flat.roots.push(flat.feature.len() as u32);
            random_tree(&mut flat, &mut rng, t % 13);
        }
        flat
    }

    #[test]
    fn the_lockstep_walk_answers_as_a_walk_of_one_tree_at_a_time() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        // Tree counts below, at and above the lanes, trees of different depths in one group.
        for trees in [1, 3, LANES, LANES + 5, 48] {
            let flat = random_forest(trees, trees as u64);
            let forest = Forest::from_flat(&flat, 4).unwrap();
            assert_eq!(forest.tree_count(), trees);
            assert_eq!(forest.node_count(), flat.node_count());
            assert_eq!(forest.max_depth(), flat.max_depth());
            for _ in 0..500 {
                // Values on the thresholds' grid too, where `<=` decides.
                let x: Vec<f64> = (0..4).map(|_| rng.random_range(-2..70) as f64 / 4.0).collect();
                assert_eq!(forest.predict(&x), flat.predict(&x), "{trees} trees at {x:?}");
            }
            // Stored and read back: the same forest.
            let repr = ForestRepr::from(forest.clone());
            assert_eq!(Forest::try_from(repr).unwrap(), forest);
        }
    }

    #[test]
    fn the_vector_walk_gives_the_scalar_walk_s_bits() {
        #[cfg(target_arch = "x86_64")]
        if gather::capable() {
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            // Every count of groups and of trees in the last group, up to more groups than one vector pass takes.
            for trees in (1..=3 * LANES + 1).chain([4 * LANES, 5 * LANES - 1, 48, 100]) {
                let forest = Forest::from_flat(&random_forest(trees, 100 + trees as u64), 4).unwrap();
                for _ in 0..200 {
                    let mut row: Vec<f32> = (0..4).map(|_| rng.random_range(-2..70) as f32 / 4.0).collect();
                    row.push(f32::NAN);
                    // SAFETY: checked above that the CPU has the instructions; `row` holds features + 1 values.
                    let vector = unsafe { gather::sum_trees(&forest, &row) };
                    assert_eq!(vector.to_bits(), forest.sum_trees(&row).to_bits(), "{trees} trees at {row:?}");
                }
            }
        }
    }

    #[test]
    fn log_features_of_small_whole_numbers_are_ln_1p_s_own_bits() {
        for v in (0..=SMALL_WHOLE + 3).map(|i| i as f64).chain([-3.0, -0.0, 0.5, 1.5, 63.999, 1e9, f64::NAN]) {
            assert_eq!(log_feature(v).to_bits(), v.max(0.0).ln_1p().to_bits(), "{v}");
        }
    }

    #[test]
    fn a_damaged_forest_is_refused_when_read() {
        let good = ForestRepr::from(Forest::from_flat(&random_forest(10, 1), 4).unwrap());
        assert!(Forest::try_from(good.clone()).is_ok());
        let split = good.feature.iter().position(|&f| f != ForestRepr::LEAF).unwrap();
        type Damage = Box<dyn Fn(&mut ForestRepr)>;
        let damaged: Vec<(&str, Damage)> = vec![
            ("right child past the tree", Box::new(|r| r.right[0] = 1 << 20)),
            ("right child next to its parent", Box::new(|r| r.right[0] = 1)),
            ("feature out of range", Box::new(move |r| r.feature[split] = 4)),
            (
                "a value missing",
                Box::new(|r| {
                    r.value.pop();
                }),
            ),
            (
                "a right link missing",
                Box::new(|r| {
                    r.right.pop();
                }),
            ),
            ("a right link too many", Box::new(|r| r.right.push(2))),
            ("roots out of order", Box::new(|r| r.roots.swap(1, 2))),
            ("a root past the end", Box::new(|r| *r.roots.last_mut().unwrap() = u32::MAX)),
            ("no trees", Box::new(|r| r.roots.clear())),
            ("a split turned leaf", Box::new(move |r| r.feature[split] = ForestRepr::LEAF)),
            ("a NaN threshold", Box::new(move |r| r.value[split] = f32::NAN)),
            ("too many features", Box::new(|r| r.features = 300)),
        ];
        for (what, damage) in damaged {
            let mut r = good.clone();
            damage(&mut r);
            assert!(Forest::try_from(r).is_err(), "{what} was accepted");
        }
    }
}
