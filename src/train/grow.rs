//! perfmodel's own tree learners, grown straight into the stored form ([`FlatForest`], then
//! [`crate::train::model::Forest`]): extremely randomised trees and gradient-boosted trees on histograms.
//!
//! Why not smartcore's, which perfmodel used before: its extra-trees sort each feature's values at every node,
//! although a randomised split needs only the node's range and one pass to score a random threshold, and its
//! booster searches exact splits (sorting again at every node) and reads every element through a generic
//! matrix accessor. Those two were 89% of the CPU time of `perfmodel train`, and made training slower than
//! scikit-learn + xgboost doing the same cross-validation (docs/budgets.md). No maintained Rust crate offers
//! either method in a form that could be flattened into perfmodel's trees.
//!
//! Both learners compare rows in `f32`, as the stored trees do: every threshold is an `f32` value, and a
//! training row goes to the side the shipped model sends it.

use crate::train::model::{FlatForest, LEAF};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The training rows in `f32`, row-major.
struct Rows {
    d: usize,
    values: Vec<f32>,
}

impl Rows {
    fn new(x: &[Vec<f64>]) -> Rows {
        let d = x.first().map_or(0, Vec::len);
        Rows { d, values: x.iter().flat_map(|r| r.iter().map(|&v| v as f32)).collect() }
    }

    fn row(&self, i: u32) -> &[f32] {
        let start = i as usize * self.d;
        &self.values[start..start + self.d]
    }
}

/// Reorder `index` so that the rows `goes_left` are first; returns how many they are.
fn partition(index: &mut [u32], mut goes_left: impl FnMut(u32) -> bool) -> usize {
    let mut left = 0;
    for j in 0..index.len() {
        if goes_left(index[j]) {
            index.swap(left, j);
            left += 1;
        }
    }
    left
}

/// Settings of [`extra_trees`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtraTreesParams {
    pub n_trees: usize,
    /// Features drawn per split (among those not constant in the node).
    pub max_features: usize,
    pub min_samples_leaf: usize,
    pub max_depth: u16,
    pub seed: u64,
}

/// Extremely randomised trees (Geurts, Ernst & Wehenkel 2006, as scikit-learn's `ExtraTreesRegressor`): no
/// bootstrap; at each node, for up to `max_features` features that vary in the node (in a random order), one
/// threshold drawn uniformly between the node's smallest and largest value; the split with the largest
/// variance reduction whose sides both keep `min_samples_leaf` rows wins. A node of fewer than
/// `2 * min_samples_leaf` rows, of equal targets, at `max_depth`, or without a valid split is a leaf holding
/// its mean. The trees are averaged.
pub fn extra_trees(x: &[Vec<f64>], y: &[f64], p: ExtraTreesParams) -> FlatForest {
    let rows = Rows::new(x);
    let n_trees = p.n_trees.max(1);
    let mut forest = FlatForest::empty(0.0, 1.0 / n_trees as f64);
    let mut grower = ExtraTreeGrower {
        rows: &rows,
        y,
        p,
        rng: ChaCha8Rng::seed_from_u64(p.seed),
        lo: vec![0.0; rows.d],
        hi: vec![0.0; rows.d],
        order: (0..rows.d).collect(),
        threshold: vec![f32::NAN; rows.d],
        sum_left: vec![0.0; rows.d],
        count_left: vec![0.0; rows.d],
    };
    let mut index: Vec<u32> = Vec::with_capacity(y.len());
    for _ in 0..n_trees {
        index.clear();
        index.extend(0..y.len() as u32);
        forest.roots.push(forest.feature.len() as u32);
        grower.grow(&mut forest, &mut index, 0);
    }
    forest
}

struct ExtraTreeGrower<'a> {
    rows: &'a Rows,
    y: &'a [f64],
    p: ExtraTreesParams,
    rng: ChaCha8Rng,
    // Scratch of one node, free again before its children are grown.
    lo: Vec<f32>,
    hi: Vec<f32>,
    order: Vec<usize>,
    /// The threshold drawn per feature, NaN for a feature not drawn.
    threshold: Vec<f32>,
    /// Sum of targets and rows on the left of each feature's threshold.
    sum_left: Vec<f64>,
    count_left: Vec<f64>,
}

impl ExtraTreeGrower<'_> {
    fn grow(&mut self, forest: &mut FlatForest, index: &mut [u32], depth: u16) {
        let n = index.len();
        let (mut sum, mut y_lo, mut y_hi) = (0.0, f64::INFINITY, f64::NEG_INFINITY);
        for &i in index.iter() {
            let v = self.y[i as usize];
            sum += v;
            y_lo = y_lo.min(v);
            y_hi = y_hi.max(v);
        }
        let mean = sum / n as f64;
        let min_leaf = self.p.min_samples_leaf.max(1);
        if n < 2 * min_leaf || depth >= self.p.max_depth || y_lo >= y_hi {
            forest.push_node(LEAF, mean);
            return;
        }
        let Some((feature, threshold)) = self.best_split(index, sum, min_leaf) else {
            forest.push_node(LEAF, mean);
            return;
        };
        let rows = self.rows;
        let left = partition(index, |i| rows.row(i)[feature] <= threshold);
        let at = forest.push_node(feature as u16, threshold as f64);
        let (l, r) = index.split_at_mut(left);
        self.grow(forest, l, depth + 1);
        forest.right[at] = forest.feature.len() as u32;
        self.grow(forest, r, depth + 1);
    }

    /// The drawn split with the largest variance reduction, `None` when no feature varies or no draw keeps
    /// `min_leaf` rows on both sides. Both passes over the node's rows run over all features at once (a row is
    /// contiguous), with a NaN threshold for a feature not drawn, which sends no row left.
    fn best_split(&mut self, index: &[u32], sum: f64, min_leaf: usize) -> Option<(usize, f32)> {
        ranges(self.rows, index, &mut self.lo, &mut self.hi);
        // A random order even when every feature is drawn: it breaks ties between features that split the rows
        // alike (a layer's size in elements and in bytes), and trees that always chose the first of them were
        // less diverse: on xeon480's depthwise memory rows, CV MAPE 0.12% against 0.07% with the shuffle.
        self.order.shuffle(&mut self.rng);
        self.threshold.fill(f32::NAN);
        let mut drawn = 0;
        for &f in &self.order {
            let (lo, hi) = (self.lo[f], self.hi[f]);
            if !matches!(hi.partial_cmp(&lo), Some(std::cmp::Ordering::Greater)) {
                continue;
            }
            // Uniform in [lo, hi), rounded to an f32 that still leaves the node's largest value on the right.
            let mut t = (lo as f64 + self.rng.random::<f64>() * (hi as f64 - lo as f64)) as f32;
            if t >= hi {
                t = hi.next_down();
            }
            self.threshold[f] = t.max(lo);
            drawn += 1;
            if drawn == self.p.max_features.max(1) {
                break;
            }
        }
        if drawn == 0 {
            return None;
        }
        left_sums(self.rows, self.y, index, &self.threshold, &mut self.sum_left, &mut self.count_left);
        let n = index.len() as f64;
        let min_leaf = min_leaf as f64;
        let mut best: Option<(f64, usize)> = None;
        for &f in &self.order {
            if self.threshold[f].is_nan() {
                continue;
            }
            let (sum_left, n_left) = (self.sum_left[f], self.count_left[f]);
            let n_right = n - n_left;
            if n_left < min_leaf || n_right < min_leaf {
                continue;
            }
            let score = sum_left * sum_left / n_left + (sum - sum_left).powi(2) / n_right;
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, f));
            }
        }
        best.map(|(_, f)| (f, self.threshold[f]))
    }
}

/// Each feature's smallest and largest value over the rows of `index`.
///
/// This pass and [`left_sums`] are most of the time of growing extra-trees, and they vectorise across features
/// (a row is contiguous): with AVX2 where the CPU has it. Each feature's running minimum, maximum and sums take
/// the same operations in the same order in either build, so the trees are the same bits.
fn ranges(rows: &Rows, index: &[u32], lo: &mut [f32], hi: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { ranges_avx2(rows, index, lo, hi) };
    }
    ranges_portable(rows, index, lo, hi)
}

/// [`ranges`] in whatever registers the build targets; always inlined, so that the AVX2 copy compiles its own body.
#[inline(always)]
fn ranges_portable(rows: &Rows, index: &[u32], lo: &mut [f32], hi: &mut [f32]) {
    lo.fill(f32::INFINITY);
    hi.fill(f32::NEG_INFINITY);
    for &i in index {
        for ((lo, hi), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(rows.row(i)) {
            *lo = lo.min(v);
            *hi = hi.max(v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn ranges_avx2(rows: &Rows, index: &[u32], lo: &mut [f32], hi: &mut [f32]) {
    ranges_portable(rows, index, lo, hi)
}

/// Per feature, the sum of the targets and the count of the rows of `index` that go left of its threshold
/// (none for a NaN threshold).
fn left_sums(rows: &Rows, y: &[f64], index: &[u32], threshold: &[f32], sum: &mut [f64], count: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { left_sums_avx2(rows, y, index, threshold, sum, count) };
    }
    left_sums_portable(rows, y, index, threshold, sum, count)
}

#[inline(always)]
fn left_sums_portable(rows: &Rows, y: &[f64], index: &[u32], threshold: &[f32], sum: &mut [f64], count: &mut [f64]) {
    sum.fill(0.0);
    count.fill(0.0);
    for &i in index {
        let v = y[i as usize];
        let row = rows.row(i);
        for (((s, c), &x), &t) in sum.iter_mut().zip(count.iter_mut()).zip(row).zip(threshold) {
            let left = (x <= t) as u8 as f64;
            *s += v * left;
            *c += left;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn left_sums_avx2(rows: &Rows, y: &[f64], index: &[u32], threshold: &[f32], sum: &mut [f64], count: &mut [f64]) {
    left_sums_portable(rows, y, index, threshold, sum, count)
}

/// Settings of [`gradient_boosting`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoostParams {
    pub n_estimators: usize,
    pub learning_rate: f64,
    pub max_depth: u16,
    /// Smallest number of rows (the hessian of squared error) on each side of a split.
    pub min_child_weight: f64,
    /// L2 penalty on leaf weights.
    pub lambda: f64,
    /// Fraction of the rows each tree is grown on (1 = all).
    pub subsample: f64,
    pub seed: u64,
}

/// Bins of a feature at most.
pub const MAX_BINS: usize = 1024;

/// A feature's values in at most [`MAX_BINS`] bins: bin `b` holds the values in `(cuts[b - 1], cuts[b]]`.
/// With fewer distinct values than bins, each is a bin of its own (the exact splits); otherwise the cuts are
/// quantiles of the rows, as xgboost's `hist` method and LightGBM bin.
struct Bins {
    cuts: Vec<f32>,
    /// The threshold of a split after bin `b`: halfway between the largest value of bin `b` and the smallest
    /// of bin `b + 1` (as XGBoost's exact method places it), so that a value between two training values goes
    /// to the nearer one. The last entry is unused.
    thresholds: Vec<f32>,
}

fn bins_of(values: &mut [f32]) -> Bins {
    values.sort_by(f32::total_cmp);
    let n = values.len();
    let mut cuts: Vec<f32> = values.to_vec();
    cuts.dedup();
    if cuts.len() > MAX_BINS {
        cuts = (1..MAX_BINS).map(|k| values[k * n / MAX_BINS - 1]).collect();
        cuts.push(values[n - 1]);
        cuts.dedup();
    }
    let thresholds = cuts
        .iter()
        .enumerate()
        .map(|(b, &cut)| {
            // The smallest value above the cut: the next bin's first.
            let next = values[values.partition_point(|&v| v <= cut).min(n - 1)];
            let mid = ((cut as f64 + next as f64) / 2.0) as f32;
            if cut <= mid && mid < next || b + 1 == cuts.len() {
                mid.max(cut)
            } else {
                cut
            }
        })
        .collect();
    Bins { cuts, thresholds }
}

/// Gradient-boosted regression trees with XGBoost's second-order split gain and leaf weights on squared error
/// (Chen & Guestrin 2016), split candidates from per-feature histograms ([`Bins`]): start from the mean
/// target; each round fits a tree of depth `max_depth` to the residuals, and a split is taken only where it
/// gains and leaves `min_child_weight` rows on both sides. Leaf weights are rounded to `f32` before the
/// residuals are updated, so the rounds fit the stored model's own errors.
pub fn gradient_boosting(x: &[Vec<f64>], y: &[f64], p: BoostParams) -> FlatForest {
    let n = y.len();
    let d = x.first().map_or(0, Vec::len);
    let base = y.iter().sum::<f64>() / n.max(1) as f64;
    let mut forest = FlatForest::empty(base, p.learning_rate);
    let mut features: Vec<Bins> = Vec::with_capacity(d);
    let mut bins: Vec<Vec<u16>> = Vec::with_capacity(d);
    let mut column: Vec<f32> = Vec::with_capacity(n);
    for f in 0..d {
        column.clear();
        column.extend(x.iter().map(|r| r[f] as f32));
        let b = bins_of(&mut column.clone());
        bins.push(column.iter().map(|&v| b.cuts.partition_point(|&cut| cut < v) as u16).collect());
        features.push(b);
    }
    let mut grower = BoostGrower {
        bins: &bins,
        features: &features,
        p,
        gradient: vec![0.0; n],
        prediction: vec![base; n],
        histogram: vec![(0.0, 0); d * MAX_BINS],
        sampled: p.subsample < 1.0,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let mut index: Vec<u32> = Vec::with_capacity(n);
    for _ in 0..p.n_estimators {
        for ((g, pred), &target) in grower.gradient.iter_mut().zip(&grower.prediction).zip(y) {
            *g = pred - target;
        }
        index.clear();
        if grower.sampled {
            index.extend((0..n as u32).filter(|_| rng.random::<f64>() < p.subsample));
        }
        if index.is_empty() {
            index.extend(0..n as u32);
        }
        forest.roots.push(forest.feature.len() as u32);
        grower.grow(&mut forest, &mut index, 0);
        if grower.sampled {
            // Rows left out of this tree still move with it.
            grower.refresh_prediction(&forest, x);
        }
    }
    forest
}

struct BoostGrower<'a> {
    bins: &'a [Vec<u16>],
    features: &'a [Bins],
    p: BoostParams,
    gradient: Vec<f64>,
    prediction: Vec<f64>,
    /// (sum of gradients, rows) per (feature, bin) of one node; free again before its children are grown.
    histogram: Vec<(f64, u32)>,
    /// Whether trees grow on a subsample of the rows (then the rows are moved after each tree, not at its
    /// leaves).
    sampled: bool,
}

impl BoostGrower<'_> {
    fn grow(&mut self, forest: &mut FlatForest, index: &mut [u32], depth: u16) {
        let g: f64 = index.iter().map(|&i| self.gradient[i as usize]).sum();
        let h = index.len() as f64;
        let split = if depth < self.p.max_depth && index.len() >= 2 { self.best_split(index, g, h) } else { None };
        let Some((feature, bin)) = split else {
            let weight = (-g / (h + self.p.lambda)) as f32 as f64;
            forest.push_node(LEAF, weight);
            if !self.sampled {
                for &i in index.iter() {
                    self.prediction[i as usize] += self.p.learning_rate * weight;
                }
            }
            return;
        };
        let column = &self.bins[feature];
        let left = partition(index, |i| column[i as usize] <= bin);
        let at = forest.push_node(feature as u16, self.features[feature].thresholds[bin as usize] as f64);
        let (l, r) = index.split_at_mut(left);
        self.grow(forest, l, depth + 1);
        forest.right[at] = forest.feature.len() as u32;
        self.grow(forest, r, depth + 1);
    }

    /// The (feature, last bin on the left) of the largest gain, `None` when no split gains.
    fn best_split(&mut self, index: &[u32], g: f64, h: f64) -> Option<(usize, u16)> {
        let lambda = self.p.lambda;
        let parent = g * g / (h + lambda);
        let mut best: Option<(f64, usize, u16)> = None;
        for (f, column) in self.bins.iter().enumerate() {
            let nbins = self.features[f].cuts.len();
            if nbins < 2 {
                continue;
            }
            let hist = &mut self.histogram[f * MAX_BINS..f * MAX_BINS + nbins];
            hist.iter_mut().for_each(|s| *s = (0.0, 0));
            for &i in index {
                let s = &mut hist[column[i as usize] as usize];
                s.0 += self.gradient[i as usize];
                s.1 += 1;
            }
            let (mut gl, mut hl) = (0.0, 0.0);
            for (b, &(gb, hb)) in hist[..nbins - 1].iter().enumerate() {
                gl += gb;
                hl += hb as f64;
                let (gr, hr) = (g - gl, h - hl);
                // At least one row a side whatever min_child_weight says: an empty side has no leaf value.
                if hl < self.p.min_child_weight.max(1.0) || hr < self.p.min_child_weight.max(1.0) {
                    continue;
                }
                let gain = gl * gl / (hl + lambda) + gr * gr / (hr + lambda) - parent;
                if gain > 0.0 && best.is_none_or(|(best_gain, _, _)| gain > best_gain) {
                    best = Some((gain, f, b as u16));
                }
            }
        }
        best.map(|(_, f, b)| (f, b))
    }

    /// Move every row's prediction by the tree just grown (after a tree grown on a subsample, whose leaves
    /// moved none).
    fn refresh_prediction(&mut self, forest: &FlatForest, x: &[Vec<f64>]) {
        let root = *forest.roots.last().expect("a tree was just grown") as usize;
        for (pred, row) in self.prediction.iter_mut().zip(x) {
            let mut i = root;
            while forest.feature[i] != LEAF {
                let f = forest.feature[i] as usize;
                i = if row[f] as f32 <= forest.value[i] as f32 { i + 1 } else { forest.right[i] as usize };
            }
            *pred += self.p.learning_rate * forest.value[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
        let x: Vec<Vec<f64>> =
            (0..n).map(|i| vec![(i % 17) as f64, (i * 7 % 31) as f64 * 0.5, 3.0, (i % 5) as f64]).collect();
        let y = x.iter().map(|r| 2.0 * r[0] + r[1] * r[1] + if r[3] > 2.0 { 10.0 } else { 0.0 }).collect();
        (x, y)
    }

    #[test]
    fn the_vectorised_node_passes_give_the_portable_passes_bits() {
        use rand::Rng;
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // Widths below, at and past a vector register's lanes; targets of both signs and mixed magnitudes.
        for d in [1, 3, 4, 8, 9, 17, 45] {
            let x: Vec<Vec<f64>> =
                (0..301).map(|_| (0..d).map(|_| rng.random_range(-50..50) as f64 * 0.37).collect()).collect();
            let y: Vec<f64> =
                (0..301).map(|_| rng.random_range(-1e3..1e3) * 10f64.powi(rng.random_range(-6..6))).collect();
            let rows = Rows::new(&x);
            let index: Vec<u32> = (0..301u32).filter(|i| i % 3 != 1).collect();
            let threshold: Vec<f32> =
                (0..d).map(|f| if f % 4 == 2 { f32::NAN } else { rng.random_range(-20..20) as f32 * 0.37 }).collect();
            let (mut lo, mut hi, mut lo2, mut hi2) = (vec![0.0; d], vec![0.0; d], vec![0.0; d], vec![0.0; d]);
            ranges(&rows, &index, &mut lo, &mut hi);
            ranges_portable(&rows, &index, &mut lo2, &mut hi2);
            assert_eq!((&lo, &hi), (&lo2, &hi2), "{d} features");
            let (mut s, mut c, mut s2, mut c2) = (vec![0.0; d], vec![0.0; d], vec![0.0; d], vec![0.0; d]);
            left_sums(&rows, &y, &index, &threshold, &mut s, &mut c);
            left_sums_portable(&rows, &y, &index, &threshold, &mut s2, &mut c2);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!((bits(&s), bits(&c)), (bits(&s2), bits(&c2)), "{d} features");
            assert!(c.iter().zip(&threshold).all(|(&c, t)| !t.is_nan() || c == 0.0));
        }
    }

    #[test]
    fn fully_grown_extra_trees_reproduce_their_training_rows() {
        let (x, y) = data(200);
        let p = ExtraTreesParams { n_trees: 4, max_features: 4, min_samples_leaf: 1, max_depth: 40, seed: 1 };
        let forest = extra_trees(&x, &y, p);
        assert_eq!(forest.roots.len(), 4);
        for (r, &t) in x.iter().zip(&y) {
            // Distinct rows end in leaves of their own (duplicates of a row share its target here).
            assert!((forest.predict(r) - t).abs() < 1e-4 * t.abs().max(1.0), "{r:?}: {} vs {t}", forest.predict(r));
        }
        // The constant feature is never split on.
        assert!(forest.feature.iter().all(|&f| f != 2));
    }

    #[test]
    fn extra_trees_respect_min_leaf_and_depth_and_are_seeded() {
        let (x, y) = data(300);
        let p = ExtraTreesParams { n_trees: 3, max_features: 4, min_samples_leaf: 5, max_depth: 6, seed: 9 };
        let a = extra_trees(&x, &y, p);
        assert_eq!(a, extra_trees(&x, &y, p));
        assert_ne!(a, extra_trees(&x, &y, ExtraTreesParams { seed: 10, ..p }));
        // Every leaf holds at least 5 rows, and no path is deeper than 6.
        for &root in &a.roots {
            let mut counts = std::collections::HashMap::new();
            for r in &x {
                let (mut i, mut depth) = (root as usize, 0);
                while a.feature[i] != LEAF {
                    i = if r[a.feature[i] as usize] as f32 <= a.value[i] as f32 { i + 1 } else { a.right[i] as usize };
                    depth += 1;
                }
                assert!(depth <= 6);
                *counts.entry(i).or_insert(0) += 1;
            }
            assert!(counts.values().all(|&c| c >= 5), "{counts:?}");
        }
    }

    #[test]
    fn boosting_fits_and_its_bins_split_where_the_rows_do() {
        let (x, y) = data(400);
        let p = BoostParams {
            n_estimators: 60,
            learning_rate: 0.25,
            max_depth: 5,
            min_child_weight: 1.0,
            lambda: 1.0,
            subsample: 1.0,
            seed: 0,
        };
        let forest = gradient_boosting(&x, &y, p);
        assert_eq!(forest.roots.len(), 60);
        let mean = y.iter().sum::<f64>() / y.len() as f64;
        let sse: f64 = x.iter().zip(&y).map(|(r, t)| (forest.predict(r) - t).powi(2)).sum();
        let sst: f64 = y.iter().map(|t| (t - mean).powi(2)).sum();
        assert!(sse < 1e-3 * sst, "R² {}", 1.0 - sse / sst);
        // Thresholds lie halfway between two values the feature takes (each distinct value is a bin here).
        for (i, &f) in forest.feature.iter().enumerate() {
            if f != LEAF {
                let t = forest.value[i] as f32;
                let below = x.iter().map(|r| r[f as usize] as f32).filter(|&v| v <= t).fold(f32::MIN, f32::max);
                let above = x.iter().map(|r| r[f as usize] as f32).filter(|&v| v > t).fold(f32::MAX, f32::min);
                assert_eq!(t, ((below as f64 + above as f64) / 2.0) as f32);
            }
        }
    }

    #[test]
    fn many_distinct_values_get_quantile_bins_and_thresholds_between_them() {
        let mut values: Vec<f32> = (0..10_000).map(|i| (i as f32).sqrt()).collect();
        let bins = bins_of(&mut values);
        let cuts = &bins.cuts;
        assert!(cuts.len() <= MAX_BINS && cuts.len() > MAX_BINS / 2, "{}", cuts.len());
        assert!(cuts.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*cuts.last().unwrap(), (9_999f32).sqrt());
        // A threshold splits between the bins: every value of a bin on its left, every value of the next on
        // its right.
        for (b, &t) in bins.thresholds[..cuts.len() - 1].iter().enumerate() {
            assert!(cuts[b] <= t && t < cuts[b + 1], "{b}: {} {t} {}", cuts[b], cuts[b + 1]);
            let next = values.iter().copied().find(|&v| v > cuts[b]).unwrap();
            assert!(t < next);
        }
    }
}
