//! The candidate regressors. Extra-trees and boosting are perfmodel's own ([`crate::train::grow`]: smartcore's
//! were most of training's time); the decision tree and linear regression come from smartcore, and each fitted
//! smartcore model is converted right away into the flat form of
//! [`crate::train::model`] by reading its serde representation into the mirror types below (by field name, so a
//! changed layout fails loudly), so nothing of smartcore's object graph is kept.
//! kNN is written here: smartcore's query scans with a generic distance per row (~2 ms per query measured),
//! while the stored form needs to answer in microseconds, and fitting a kNN is only standardising and copying.
//!
//! Regressors follow the smartcore/linfa style: a parameter struct with `Default` and `with_*` builders, and
//! `fit(x, y)`.

use crate::error::{Error, Result};
use crate::train::grow;
use crate::train::model::{FlatForest, Forest, Knn, Linear, Model, Standardizer, LEAF};
use serde::Deserialize;
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::tree::decision_tree_regressor::{DecisionTreeRegressor, DecisionTreeRegressorParameters};

type Matrix = DenseMatrix<f64>;

fn matrix(x: &[Vec<f64>]) -> Result<Matrix> {
    DenseMatrix::from_2d_vec(&x.to_vec()).map_err(|e| Error::Invalid(format!("training matrix: {e}")))
}

fn failed(method: &str, e: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("fitting {method} failed: {e}"))
}

fn check_shapes(x: &[Vec<f64>], y: &[f64]) -> Result<()> {
    if x.is_empty() || x.len() != y.len() {
        return Err(Error::Invalid(format!("cannot fit on {} rows and {} targets", x.len(), y.len())));
    }
    Ok(())
}

/// `with_*` builders that each set one parameter (the smartcore/linfa style):
/// `with_setters!(T { with_x: x: usize })`.
macro_rules! with_setters {
    ($ty:ident { $($name:ident: $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                pub fn $name(mut self, value: $t) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}
pub(crate) use with_setters;

/// A way of fitting a [`Model`] to rows `x` and targets `y`.
pub trait Regressor: std::fmt::Debug + Send + Sync {
    /// Method family: `ert`, `xgb`, `tree`, `knn` or `linear`.
    fn method(&self) -> &'static str;
    /// Method with its hyperparameters, for reports (e.g. `ert(trees=48,min_leaf=2)`).
    fn describe(&self) -> String;
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model>;
    /// About how many values the fitted model holds, for `rows` training rows: what its store and its query
    /// cost grow with (selection prefers the smallest of equivalent candidates).
    fn size(&self, rows: usize) -> f64;
    /// Trees of an averaged forest (extra-trees), whose first trees make a smaller forest of the same kind.
    fn trees(&self) -> Option<usize> {
        None
    }
}

/// Extremely randomised trees (Geurts et al. 2006): random thresholds, no bootstrap, averaged.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraTrees {
    pub n_trees: usize,
    /// Features tried per split; `None` = all (scikit-learn's regression default; smartcore's is √features).
    pub max_features: Option<usize>,
    pub min_samples_leaf: usize,
    pub max_depth: Option<u16>,
    pub seed: u64,
}

impl Default for ExtraTrees {
    fn default() -> Self {
        ExtraTrees { n_trees: 48, max_features: None, min_samples_leaf: 1, max_depth: Some(24), seed: 0 }
    }
}

with_setters!(ExtraTrees {
    with_n_trees: n_trees: usize,
    with_max_features: max_features: Option<usize>,
    with_min_samples_leaf: min_samples_leaf: usize,
    with_max_depth: max_depth: Option<u16>,
    with_seed: seed: u64,
});

impl Regressor for ExtraTrees {
    fn method(&self) -> &'static str {
        "ert"
    }
    fn size(&self, rows: usize) -> f64 {
        // Grown until leaves hold min_samples_leaf rows: about 2 rows / min_leaf nodes a tree.
        (self.n_trees * 2 * rows / self.min_samples_leaf.max(1)) as f64
    }
    fn describe(&self) -> String {
        format!("ert(trees={},min_leaf={})", self.n_trees, self.min_samples_leaf)
    }
    fn trees(&self) -> Option<usize> {
        Some(self.n_trees)
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        let d = x[0].len();
        let forest = grow::extra_trees(
            x,
            y,
            grow::ExtraTreesParams {
                n_trees: self.n_trees,
                max_features: self.max_features.unwrap_or(d).clamp(1, d.max(1)),
                min_samples_leaf: self.min_samples_leaf,
                max_depth: self.max_depth.unwrap_or(u16::MAX),
                seed: self.seed,
            },
        );
        forest.into_model(d).map_err(|e| failed("ert", e))
    }
}

/// A single CART regression tree (best split over all features).
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionTree {
    pub min_samples_leaf: usize,
    pub max_depth: Option<u16>,
}

impl Default for DecisionTree {
    fn default() -> Self {
        DecisionTree { min_samples_leaf: 1, max_depth: Some(24) }
    }
}

with_setters!(DecisionTree {
    with_min_samples_leaf: min_samples_leaf: usize,
    with_max_depth: max_depth: Option<u16>,
});

impl Regressor for DecisionTree {
    fn method(&self) -> &'static str {
        "tree"
    }
    fn size(&self, rows: usize) -> f64 {
        (2 * rows / self.min_samples_leaf.max(1)) as f64
    }
    fn describe(&self) -> String {
        format!("tree(min_leaf={})", self.min_samples_leaf)
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        let mut params = DecisionTreeRegressorParameters::default()
            .with_min_samples_leaf(self.min_samples_leaf)
            .with_min_samples_split(2 * self.min_samples_leaf);
        if let Some(depth) = self.max_depth {
            params = params.with_max_depth(depth);
        }
        let fitted = DecisionTreeRegressor::fit(&matrix(x)?, &y.to_vec(), params).map_err(|e| failed("tree", e))?;
        let mirror: SmartDecisionTree = mirror(&fitted).map_err(|e| failed("tree", e))?;
        let tree = mirror.tree_regressor.ok_or_else(|| failed("tree", "unexpected smartcore tree layout"))?;
        let mut forest = FlatForest::empty(0.0, 1.0);
        forest.push_smartcore_tree(&tree).map_err(|e| failed("tree", e))?;
        forest.into_model(x[0].len()).map_err(|e| failed("tree", e))
    }
}

/// Gradient-boosted trees with second-order (XGBoost) split gains, squared error.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientBoosting {
    pub n_estimators: usize,
    pub learning_rate: f64,
    pub max_depth: u16,
    pub min_child_weight: usize,
    pub lambda: f64,
    pub subsample: f64,
    pub seed: u64,
}

impl Default for GradientBoosting {
    fn default() -> Self {
        GradientBoosting {
            n_estimators: 100,
            learning_rate: 0.2,
            max_depth: 6,
            min_child_weight: 1,
            lambda: 1.0,
            subsample: 1.0,
            seed: 0,
        }
    }
}

with_setters!(GradientBoosting {
    with_n_estimators: n_estimators: usize,
    with_learning_rate: learning_rate: f64,
    with_max_depth: max_depth: u16,
    with_min_child_weight: min_child_weight: usize,
    with_lambda: lambda: f64,
    with_subsample: subsample: f64,
    with_seed: seed: u64,
});

impl Regressor for GradientBoosting {
    fn method(&self) -> &'static str {
        "xgb"
    }
    fn size(&self, rows: usize) -> f64 {
        let per_tree = (1usize << (self.max_depth.min(20) + 1)).min(2 * rows.max(1));
        (self.n_estimators * per_tree) as f64
    }
    fn describe(&self) -> String {
        format!("xgb(rounds={},depth={},eta={})", self.n_estimators, self.max_depth, self.learning_rate)
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        let forest = grow::gradient_boosting(
            x,
            y,
            grow::BoostParams {
                n_estimators: self.n_estimators,
                learning_rate: self.learning_rate,
                max_depth: self.max_depth,
                min_child_weight: self.min_child_weight as f64,
                lambda: self.lambda,
                subsample: self.subsample,
                seed: self.seed,
            },
        );
        forest.into_model(x[0].len()).map_err(|e| failed("xgb", e))
    }
}

/// k nearest neighbours on standardised features, optionally weighted by inverse distance.
#[derive(Debug, Clone, PartialEq)]
pub struct NearestNeighbors {
    pub k: usize,
    pub distance_weighted: bool,
}

impl Default for NearestNeighbors {
    fn default() -> Self {
        NearestNeighbors { k: 3, distance_weighted: true }
    }
}

with_setters!(NearestNeighbors {
    with_k: k: usize,
    with_distance_weighted: distance_weighted: bool,
});

/// Indices of the columns that vary in `x` (constant columns carry no information and only cost time).
fn varying_columns(x: &[Vec<f64>]) -> Vec<usize> {
    let d = x.first().map_or(0, Vec::len);
    (0..d).filter(|&c| x.iter().any(|r| r[c] != x[0][c])).collect()
}

impl Regressor for NearestNeighbors {
    fn method(&self) -> &'static str {
        "knn"
    }
    fn size(&self, rows: usize) -> f64 {
        // Every row is kept, with its features: a query scans them all.
        (rows * 8) as f64
    }
    fn describe(&self) -> String {
        format!("knn(k={}{})", self.k, if self.distance_weighted { ",distance" } else { "" })
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        let columns = varying_columns(x);
        let kept: Vec<Vec<f64>> = x.iter().map(|r| columns.iter().map(|&c| r[c]).collect()).collect();
        let standardizer = Standardizer::fit(&kept);
        let points = kept.iter().flat_map(|r| standardizer.apply(r)).map(|v| v as f32).collect();
        Ok(Model::Knn(Knn {
            k: self.k.max(1),
            distance_weighted: self.distance_weighted,
            columns: columns.iter().map(|&c| c as u16).collect(),
            mean: standardizer.mean,
            scale: standardizer.scale,
            points,
            targets: y.to_vec(),
            by_feature: Default::default(),
        }))
    }
}

/// Ordinary least squares on standardised features ([`crate::train::lstsq`], constant columns dropped).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinearRegressor {}

impl Regressor for LinearRegressor {
    fn method(&self) -> &'static str {
        "linear"
    }
    fn size(&self, _rows: usize) -> f64 {
        1.0
    }
    fn describe(&self) -> String {
        "linear".to_string()
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        let d = x[0].len();
        let columns = varying_columns(x);
        let standardizer = Standardizer::fit(x);
        let mut coefficients = vec![0.0; d];
        let mut intercept = y.iter().sum::<f64>() / y.len() as f64;
        if !columns.is_empty() && x.len() > columns.len() {
            let rows: Vec<Vec<f64>> = x
                .iter()
                .map(|r| {
                    let z = standardizer.apply(r);
                    columns.iter().map(|&c| z[c]).collect()
                })
                .collect();
            let (fitted, b) = crate::train::lstsq::least_squares(&rows, y)
                .ok_or_else(|| failed("linear", "a feature or target is not finite, or fewer rows than unknowns"))?;
            for (&c, w) in columns.iter().zip(fitted) {
                coefficients[c] = w;
            }
            intercept = b;
        }
        if coefficients.iter().any(|c| !c.is_finite()) || !intercept.is_finite() {
            return Err(failed("linear", "the least-squares solution is not finite"));
        }
        Ok(Model::Linear(Linear { standardizer, coefficients, intercept }))
    }
}

/// The parts of smartcore's fitted models that are read (see the module's doc), as their serde form names them.
#[derive(Deserialize)]
struct SmartDecisionTree {
    tree_regressor: Option<SmartTree>,
}

/// A `BaseTree`: node 0 the root, `x <= split_value` → true child.
#[derive(Deserialize)]
struct SmartTree {
    nodes: Vec<SmartNode>,
}

#[derive(Deserialize)]
struct SmartNode {
    output: f64,
    split_feature: usize,
    split_value: Option<f64>,
    true_child: Option<usize>,
    false_child: Option<usize>,
}

/// `fitted`'s serde form read as the mirror type `T` (through JSON text: a typed read allocates per tree, not
/// per node field as a `serde_json::Value` would, which made the conversion a sixth of training's time).
fn mirror<T: for<'de> Deserialize<'de>>(fitted: &impl serde::Serialize) -> std::result::Result<T, String> {
    let text = serde_json::to_vec(fitted).map_err(|e| e.to_string())?;
    serde_json::from_slice(&text).map_err(|e| format!("unexpected smartcore layout: {e}"))
}

impl FlatForest {
    pub fn empty(base: f64, scale: f64) -> FlatForest {
        FlatForest { feature: vec![], value: vec![], right: vec![], roots: vec![], base, scale }
    }

    /// The stored form of the trees built, on rows of `features` values.
    fn into_model(self, features: usize) -> std::result::Result<Model, String> {
        Forest::from_flat(&self, features).map(Model::Forest)
    }

    /// Append a node (a split's right child is linked later, in `right`); returns its index.
    pub(crate) fn push_node(&mut self, feature: u16, value: f64) -> usize {
        self.feature.push(feature);
        self.value.push(value);
        self.right.push(0);
        self.feature.len() - 1
    }

    fn feature_index(split_feature: usize) -> std::result::Result<u16, String> {
        u16::try_from(split_feature)
            .ok()
            .filter(|&f| f < LEAF)
            .ok_or_else(|| format!("bad split feature {split_feature}"))
    }

    /// Append one smartcore `BaseTree`.
    fn push_smartcore_tree(&mut self, tree: &SmartTree) -> std::result::Result<(), String> {
        let nodes = &tree.nodes;
        if nodes.is_empty() {
            return Err("empty tree".into());
        }
        self.roots.push(self.feature.len() as u32);
        // Depth-first, left (true) child first, so that the left child lands right after its parent.
        let mut stack: Vec<(usize, Option<usize>)> = vec![(0, None)];
        while let Some((id, parent)) = stack.pop() {
            let node = nodes.get(id).ok_or_else(|| format!("node {id} out of range"))?;
            let here = self.feature.len();
            if let Some(p) = parent {
                self.right[p] = here as u32;
            }
            match ((node.true_child, node.false_child), node.split_value) {
                ((Some(t), Some(f)), Some(threshold)) if threshold.is_finite() => {
                    let at = self.push_node(Self::feature_index(node.split_feature)?, threshold);
                    // Right child is filled in when popped (it records its position into `right[at]`).
                    stack.push((f, Some(at)));
                    stack.push((t, None));
                }
                ((Some(_), Some(_)), _) => return Err(format!("node {id}: split without a finite threshold")),
                _ => {
                    self.push_node(LEAF, node.output);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::cv::scores;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Rows of (x1, x2, noise feature) with x in [1, 10), from a seeded generator.
    fn rows(n: usize, seed: u64) -> Vec<Vec<f64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| (0..3).map(|_| rng.random_range(1.0..10.0)).collect()).collect()
    }

    fn held_out_mape(estimator: &dyn Regressor, f: impl Fn(&[f64]) -> f64) -> f64 {
        let train = rows(1500, 1);
        let test = rows(300, 2);
        let y: Vec<f64> = train.iter().map(|r| f(r)).collect();
        let model = estimator.fit(&train, &y).unwrap();
        let measured: Vec<f64> = test.iter().map(|r| f(r)).collect();
        let predicted: Vec<f64> = test.iter().map(|r| model.predict_raw(r)).collect();
        let mape = scores(&measured, &predicted).mape;
        eprintln!("{}: held-out MAPE {mape:.3}%", estimator.describe());
        mape
    }

    fn product(r: &[f64]) -> f64 {
        3.0 * r[0] * r[1]
    }

    #[test]
    fn extra_trees_learn_a_product() {
        let mape = held_out_mape(&ExtraTrees::default(), product);
        assert!(mape < 2.5, "ERT MAPE {mape}");
    }

    #[test]
    fn boosting_learns_a_product() {
        let mape = held_out_mape(&GradientBoosting::default(), product);
        assert!(mape < 4.0, "XGB MAPE {mape}");
    }

    #[test]
    fn decision_tree_learns_a_product() {
        let mape = held_out_mape(&DecisionTree::default().with_min_samples_leaf(2), product);
        assert!(mape < 8.0, "tree MAPE {mape}");
    }

    #[test]
    fn knn_learns_a_product() {
        // The third column is noise that kNN cannot ignore; standardisation keeps it from dominating.
        let mape = held_out_mape(&NearestNeighbors::default(), product);
        assert!(mape < 9.0, "kNN MAPE {mape}");
    }

    #[test]
    fn knn_ranks_blocks_of_points_as_one_point_at_a_time() {
        // A query computes many points' distances together: the same neighbours and the same bits as the
        // plain walk over the points, one feature after another, over several blocks, ties and exact hits.
        let reference = |knn: &Knn, x: &[f64]| -> f64 {
            let d = knn.columns.len();
            let q: Vec<f32> =
                (0..d).map(|j| ((x[knn.columns[j] as usize] - knn.mean[j]) / knn.scale[j]) as f32).collect();
            let mut dist: Vec<(f32, usize)> = knn
                .points
                .chunks_exact(d)
                .enumerate()
                .map(|(row, p)| (p.iter().zip(&q).fold(0f32, |s, (a, b)| s + (a - b) * (a - b)), row))
                .collect();
            dist.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let best = &dist[..knn.k.min(dist.len())];
            if knn.distance_weighted {
                if let Some(&(_, exact)) = best.iter().find(|(d, _)| *d == 0.0) {
                    return knn.targets[exact];
                }
                let w: Vec<f64> = best.iter().map(|&(d, _)| 1.0 / (d as f64).sqrt()).collect();
                best.iter().zip(&w).map(|(&(_, r), w)| w * knn.targets[r]).sum::<f64>() / w.iter().sum::<f64>()
            } else {
                best.iter().map(|&(_, r)| knn.targets[r]).sum::<f64>() / best.len() as f64
            }
        };
        // Integer-valued features: many points at the same distance from a query. Three features (one pass of
        // the remainder) and seven (a pass of four, then three).
        for width in [3, 7] {
            let mut rng = ChaCha8Rng::seed_from_u64(width as u64);
            let mut draw = |n: usize, whole: bool| -> Vec<Vec<f64>> {
                (0..n)
                    .map(|_| {
                        (0..width)
                            .map(|_| {
                                let v: f64 = rng.random_range(1.0..10.0);
                                if whole {
                                    v.floor()
                                } else {
                                    v
                                }
                            })
                            .collect()
                    })
                    .collect()
            };
            let mut train = draw(700, true);
            train.extend(draw(300, false));
            let y: Vec<f64> = train.iter().map(|r| product(r)).collect();
            let mut queries = draw(200, false);
            queries.extend(train.iter().step_by(37).cloned());
            queries.extend(draw(100, true));
            for (k, distance_weighted) in [(1, false), (3, true), (5, false), (5, true)] {
                let Model::Knn(knn) = NearestNeighbors { k, distance_weighted }.fit(&train, &y).unwrap() else {
                    panic!("kNN fits a kNN")
                };
                assert_eq!(knn.columns.len(), width);
                for q in &queries {
                    assert_eq!(knn.predict(q).to_bits(), reference(&knn, q).to_bits(), "k = {k}, query {q:?}");
                }
            }
        }
    }

    #[test]
    fn a_knn_model_whose_points_do_not_match_its_targets_is_refused_when_read() {
        let x = rows(20, 3);
        let y: Vec<f64> = x.iter().map(|r| product(r)).collect();
        let Model::Knn(knn) = NearestNeighbors::default().fit(&x, &y).unwrap() else { panic!("kNN fits a kNN") };
        let config = bincode::config::standard();
        let decode = |knn: &Knn| {
            let bytes = bincode::serde::encode_to_vec(knn, config).unwrap();
            bincode::serde::decode_from_slice::<Knn, _>(&bytes, config).map(|(k, _)| k)
        };
        assert_eq!(decode(&knn).unwrap(), knn);
        let mut short = knn.clone();
        short.points.pop();
        assert!(decode(&short).unwrap_err().to_string().contains("point values"));
        let mut scales = knn.clone();
        scales.scale.push(1.0);
        assert!(decode(&scales).unwrap_err().to_string().contains("scales"));
    }

    #[test]
    fn linear_learns_a_linear_function() {
        let mape = held_out_mape(&LinearRegressor::default(), |r| 2.0 * r[0] - 0.5 * r[1] + 30.0);
        assert!(mape < 1e-6, "linear MAPE {mape}");
        // And is a poor fit for a product (so the test above can tell methods apart).
        assert!(held_out_mape(&LinearRegressor::default(), product) > 10.0);
        // On log features with a log target, a product is linear: ln y = ln 3 + ln x1 + ln x2.
        let x: Vec<Vec<f64>> = rows(500, 3).iter().map(|r| r.iter().map(|v| v.ln()).collect()).collect();
        let y: Vec<f64> = x.iter().map(|r| 3f64.ln() + r[0] + r[1]).collect();
        let model = LinearRegressor::default().fit(&x, &y).unwrap();
        for r in rows(50, 4) {
            let logs: Vec<f64> = r.iter().map(|v| v.ln()).collect();
            assert!((model.predict_raw(&logs).exp() - product(&r)).abs() < 1e-9 * product(&r));
        }
    }

    #[test]
    fn stored_trees_reproduce_smartcore_predictions() {
        // The stored form rounds thresholds and leaf values to f32: the same trees, within f32's precision.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
        let x = rows(300, 5);
        let y: Vec<f64> = x.iter().map(|r| product(r)).collect();
        let m = matrix(&x).unwrap();
        let params = DecisionTreeRegressorParameters::default().with_min_samples_leaf(2).with_min_samples_split(4);
        let reference = DecisionTreeRegressor::fit(&m, &y, params).unwrap().predict(&m).unwrap();
        let Model::Forest(forest) = DecisionTree::default().with_min_samples_leaf(2).fit(&x, &y).unwrap() else {
            panic!("a tree")
        };
        for (r, expected) in x.iter().zip(&reference) {
            assert!(close(forest.predict(r), *expected), "{} vs {expected}", forest.predict(r));
        }
    }

    #[test]
    fn an_extra_trees_forest_s_first_trees_are_the_smaller_forest_of_the_same_seed() {
        let x = rows(400, 5);
        let y: Vec<f64> = x.iter().map(|r| product(r)).collect();
        let fit = |trees: usize| match ExtraTrees::default().with_n_trees(trees).with_seed(7).fit(&x, &y).unwrap() {
            Model::Forest(f) => f,
            _ => panic!("a forest"),
        };
        let (whole, sixteen) = (fit(48), fit(16));
        let first = whole.first_trees(16).unwrap();
        assert_eq!((first.tree_count(), first.node_count()), (sixteen.tree_count(), sixteen.node_count()));
        for r in rows(60, 6) {
            let (a, b) = (first.predict(&r), sixteen.predict(&r));
            assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} vs {b}");
        }
        // Not more trees than it has, nor none.
        assert!(whole.first_trees(48).is_none() && whole.first_trees(0).is_none());
    }
}
