//! The candidate regressors. Trees come from smartcore (decision tree, extra trees, XGBoost-style boosting) and
//! linear regression too; each fitted smartcore model is converted right away into the flat form of
//! [`crate::train::model`] by walking its serde representation, so nothing of smartcore's object graph is kept.
//! kNN is written here: smartcore's query scans with a generic distance per row (~2 ms per query measured),
//! while the stored form needs to answer in microseconds, and fitting a kNN is only standardising and copying.
//!
//! Regressors follow the smartcore/linfa style: a parameter struct with `Default` and `with_*` builders, and
//! `fit(x, y)`.

use crate::error::{Error, Result};
use crate::train::model::{FlatForest, Knn, Linear, Model, Standardizer, LEAF};
use serde_json::Value;
use smartcore::ensemble::extra_trees_regressor::{ExtraTreesRegressor, ExtraTreesRegressorParameters};
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::linear::linear_regression::{LinearRegression, LinearRegressionParameters, LinearRegressionSolverName};
use smartcore::tree::decision_tree_regressor::{DecisionTreeRegressor, DecisionTreeRegressorParameters};
use smartcore::xgboost::xgb_regressor::{XGRegressor, XGRegressorParameters};

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
    fn describe(&self) -> String {
        format!("ert(trees={},min_leaf={})", self.n_trees, self.min_samples_leaf)
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        let d = x[0].len();
        let mut params = ExtraTreesRegressorParameters::default()
            .with_n_trees(self.n_trees)
            .with_min_samples_leaf(self.min_samples_leaf)
            .with_min_samples_split(2 * self.min_samples_leaf)
            .with_m(self.max_features.unwrap_or(d).clamp(1, d))
            .with_seed(self.seed)
            .with_keep_samples(false);
        if let Some(depth) = self.max_depth {
            params = params.with_max_depth(depth);
        }
        let fitted = ExtraTreesRegressor::fit(&matrix(x)?, &y.to_vec(), params).map_err(|e| failed("ert", e))?;
        let json = serde_json::to_value(&fitted).map_err(|e| failed("ert", e))?;
        let trees = json
            .pointer("/forest_regressor/trees")
            .and_then(Value::as_array)
            .ok_or_else(|| failed("ert", "unexpected smartcore forest layout"))?;
        let mut forest = FlatForest::empty(0.0, 1.0 / trees.len().max(1) as f64);
        for tree in trees {
            forest.push_smartcore_tree(tree).map_err(|e| failed("ert", e))?;
        }
        Ok(Model::Trees(forest))
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
        let json = serde_json::to_value(&fitted).map_err(|e| failed("tree", e))?;
        let tree = json.get("tree_regressor").ok_or_else(|| failed("tree", "unexpected smartcore tree layout"))?;
        let mut forest = FlatForest::empty(0.0, 1.0);
        forest.push_smartcore_tree(tree).map_err(|e| failed("tree", e))?;
        Ok(Model::Trees(forest))
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
    fn describe(&self) -> String {
        format!("xgb(rounds={},depth={},eta={})", self.n_estimators, self.max_depth, self.learning_rate)
    }
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Model> {
        check_shapes(x, y)?;
        // Start from the mean: smartcore's default base score of 0.5 is meaningless for milliseconds or MiB.
        let base = y.iter().sum::<f64>() / y.len() as f64;
        let params = XGRegressorParameters::default()
            .with_n_estimators(self.n_estimators)
            .with_learning_rate(self.learning_rate)
            .with_max_depth(self.max_depth)
            .with_min_child_weight(self.min_child_weight)
            .with_lambda(self.lambda)
            .with_subsample(self.subsample)
            .with_seed(self.seed)
            .with_base_score(base);
        let fitted = XGRegressor::fit(&matrix(x)?, &y.to_vec(), params).map_err(|e| failed("xgb", e))?;
        let json = serde_json::to_value(&fitted).map_err(|e| failed("xgb", e))?;
        let trees = json
            .get("regressors")
            .and_then(Value::as_array)
            .ok_or_else(|| failed("xgb", "unexpected smartcore booster layout"))?;
        let mut forest = FlatForest::empty(base, self.learning_rate);
        for tree in trees {
            forest.push_smartcore_boosted_tree(tree).map_err(|e| failed("xgb", e))?;
        }
        Ok(Model::Trees(forest))
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
        }))
    }
}

/// Ordinary least squares on standardised features (SVD solver, constant columns dropped).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinearRegressor {}

impl Regressor for LinearRegressor {
    fn method(&self) -> &'static str {
        "linear"
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
            let params = LinearRegressionParameters::default().with_solver(LinearRegressionSolverName::SVD);
            let fitted: LinearRegression<f64, f64, Matrix, Vec<f64>> =
                LinearRegression::fit(&matrix(&rows)?, &y.to_vec(), params).map_err(|e| failed("linear", e))?;
            use smartcore::linalg::basic::arrays::Array;
            for (i, &c) in columns.iter().enumerate() {
                coefficients[c] = *fitted.coefficients().get((i, 0));
            }
            intercept = *fitted.intercept();
        }
        if coefficients.iter().any(|c| !c.is_finite()) || !intercept.is_finite() {
            return Err(failed("linear", "the least-squares solution is not finite"));
        }
        Ok(Model::Linear(Linear { standardizer, coefficients, intercept }))
    }
}

impl FlatForest {
    pub fn empty(base: f64, scale: f64) -> FlatForest {
        FlatForest { feature: vec![], value: vec![], right: vec![], roots: vec![], base, scale }
    }

    fn push_node(&mut self, feature: u16, value: f64) -> usize {
        self.feature.push(feature);
        self.value.push(value);
        self.right.push(0);
        self.feature.len() - 1
    }

    fn feature_index(split_feature: &Value) -> std::result::Result<u16, String> {
        split_feature
            .as_u64()
            .filter(|&f| f < LEAF as u64)
            .map(|f| f as u16)
            .ok_or_else(|| format!("bad split feature {split_feature}"))
    }

    /// Append one smartcore `BaseTree` (serialised: `{"nodes": [{output, split_feature, split_value,
    /// true_child, false_child}, ...]}`, node 0 the root, `x <= split_value` → true child).
    fn push_smartcore_tree(&mut self, tree: &Value) -> std::result::Result<(), String> {
        let nodes = tree.get("nodes").and_then(Value::as_array).ok_or("tree without nodes")?;
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
            let children =
                (node.get("true_child").and_then(Value::as_u64), node.get("false_child").and_then(Value::as_u64));
            let split_value = node.get("split_value").and_then(Value::as_f64);
            match (children, split_value) {
                ((Some(t), Some(f)), Some(threshold)) => {
                    let feature = Self::feature_index(&node["split_feature"])?;
                    let at = self.push_node(feature, threshold);
                    // Right child is filled in when popped (it records its position into `right[at]`).
                    stack.push((f as usize, Some(at)));
                    stack.push((t as usize, None));
                }
                ((Some(_), Some(_)), None) => return Err(format!("node {id}: split without a finite threshold")),
                _ => {
                    let output = node.get("output").and_then(Value::as_f64).ok_or("leaf without output")?;
                    self.push_node(LEAF, output);
                }
            }
        }
        Ok(())
    }

    /// Append one smartcore boosted tree (serialised recursively: `{left, right, value, threshold,
    /// split_feature_idx}`, a leaf has no children, `x <= threshold` → left).
    fn push_smartcore_boosted_tree(&mut self, tree: &Value) -> std::result::Result<(), String> {
        self.roots.push(self.feature.len() as u32);
        let mut stack: Vec<(&Value, Option<usize>)> = vec![(tree, None)];
        while let Some((node, parent)) = stack.pop() {
            let here = self.feature.len();
            if let Some(p) = parent {
                self.right[p] = here as u32;
            }
            let left = node.get("left").filter(|v| !v.is_null());
            let right = node.get("right").filter(|v| !v.is_null());
            match (left, right) {
                (Some(l), Some(r)) => {
                    let feature = Self::feature_index(&node["split_feature_idx"])?;
                    let threshold = node.get("threshold").and_then(Value::as_f64).ok_or("split without threshold")?;
                    let at = self.push_node(feature, threshold);
                    stack.push((r, Some(at)));
                    stack.push((l, None));
                }
                _ => {
                    let value = node.get("value").and_then(Value::as_f64).ok_or("leaf without value")?;
                    self.push_node(LEAF, value);
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
    fn flat_forest_reproduces_smartcore_predictions() {
        let x = rows(300, 5);
        let y: Vec<f64> = x.iter().map(|r| product(r)).collect();
        let m = matrix(&x).unwrap();
        let params = DecisionTreeRegressorParameters::default().with_min_samples_leaf(2).with_min_samples_split(4);
        let reference = DecisionTreeRegressor::fit(&m, &y, params).unwrap().predict(&m).unwrap();
        let Model::Trees(flat) = DecisionTree::default().with_min_samples_leaf(2).fit(&x, &y).unwrap() else {
            panic!("a tree")
        };
        for (r, expected) in x.iter().zip(&reference) {
            assert_eq!(flat.predict(r), *expected);
        }
        let mean = y.iter().sum::<f64>() / y.len() as f64;
        let params = XGRegressorParameters::default().with_base_score(mean).with_learning_rate(0.2);
        let reference = XGRegressor::fit(&m, &y, params).unwrap().predict(&m).unwrap();
        let Model::Trees(flat) = GradientBoosting::default().fit(&x, &y).unwrap() else { panic!("trees") };
        assert_eq!(flat.roots.len(), 100);
        for (r, expected) in x.iter().zip(&reference) {
            // Same trees; only the order of summing the shrunken leaf values differs.
            assert!((flat.predict(r) - expected).abs() <= 1e-9 * expected.abs(), "{} vs {expected}", flat.predict(r));
        }
    }
}
