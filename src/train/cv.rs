//! Cross-validation and model selection: every candidate (method × hyperparameters × optional log target) is
//! scored on the same seeded folds by predictions of its stored (flat) form, the best by the chosen criterion
//! wins and is refitted on all rows.

use crate::error::{Error, Result};
use crate::train::fit::{DecisionTree, Estimator, ExtraTrees, GradientBoosting, LinearRegressor, NearestNeighbors};
use crate::train::model::Predictor;
use crate::train::store::Scores;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// Regression metrics of predictions against measurements. MAPE is in percent and skips rows measured as 0.
pub fn scores(measured: &[f64], predicted: &[f64]) -> Scores {
    let n = measured.len();
    if n == 0 {
        return Scores::default();
    }
    let errors: Vec<f64> = measured.iter().zip(predicted).map(|(y, p)| (y - p).abs()).collect();
    let mean = measured.iter().sum::<f64>() / n as f64;
    let ss_tot: f64 = measured.iter().map(|y| (y - mean).powi(2)).sum();
    let ss_res: f64 = errors.iter().map(|e| e * e).sum();
    let mut sorted = errors.clone();
    sorted.sort_by(f64::total_cmp);
    let medae = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
    let relative: Vec<f64> =
        measured.iter().zip(&errors).filter(|(y, _)| **y != 0.0).map(|(y, e)| e / y.abs()).collect();
    Scores {
        r2: if ss_tot > 0.0 { 1.0 - ss_res / ss_tot } else if ss_res == 0.0 { 1.0 } else { 0.0 },
        mae: errors.iter().sum::<f64>() / n as f64,
        medae,
        mape: if relative.is_empty() { 0.0 } else { 100.0 * relative.iter().sum::<f64>() / relative.len() as f64 },
        maxe: sorted[n - 1],
    }
}

/// What selection minimises (or, for R², maximises).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelectBy {
    #[default]
    Mape,
    Mae,
    R2,
}

impl SelectBy {
    pub fn parse(s: &str) -> Option<SelectBy> {
        match s {
            "mape" => Some(SelectBy::Mape),
            "mae" => Some(SelectBy::Mae),
            "r2" => Some(SelectBy::R2),
            _ => None,
        }
    }

    /// Lower is better.
    fn loss(self, s: &Scores) -> f64 {
        let v = match self {
            SelectBy::Mape => s.mape,
            SelectBy::Mae => s.mae,
            SelectBy::R2 => -s.r2,
        };
        if v.is_nan() {
            f64::INFINITY
        } else {
            v
        }
    }
}

/// One thing to try: an estimator and whether to fit it on ln(target).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub estimator: Arc<dyn Estimator>,
    pub log_target: bool,
}

impl Candidate {
    pub fn label(&self) -> String {
        format!("{}{}", self.estimator.describe(), if self.log_target { "+log" } else { "" })
    }

    /// Fit on rows `x` (targets `y` in the metric's unit) and return the stored-form predictor.
    pub fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Predictor> {
        let model = if self.log_target {
            let logs: Vec<f64> = y.iter().map(|v| v.ln()).collect();
            self.estimator.fit(x, &logs)?
        } else {
            self.estimator.fit(x, y)?
        };
        let method = format!("{}{}", self.estimator.method(), if self.log_target { "+log" } else { "" });
        Ok(Predictor::new(method, self.log_target, model))
    }
}

/// Method families of [`default_candidates`].
pub const METHODS: [&str; 5] = ["ert", "xgb", "tree", "knn", "linear"];

/// The default search space: each method with a few tree-size bounds, with and without a log target. Ensemble
/// sizes are kept small on purpose: a prediction walks every tree, and estimation wants a single-layer prediction
/// in microseconds and a store of a few megabytes; the minimum leaf sizes bound the trees' size and depth.
/// `seed` makes the randomised methods reproducible.
pub fn default_candidates(seed: u64) -> Vec<Candidate> {
    let ert = ExtraTrees::default().with_n_trees(24).with_seed(seed);
    let estimators: Vec<Arc<dyn Estimator>> = vec![
        Arc::new(ert.clone().with_min_samples_leaf(1)),
        Arc::new(ert.with_min_samples_leaf(4)),
        Arc::new(GradientBoosting::default().with_n_estimators(60).with_max_depth(5).with_learning_rate(0.25).with_seed(seed)),
        Arc::new(DecisionTree::default().with_min_samples_leaf(1)),
        Arc::new(DecisionTree::default().with_min_samples_leaf(4)),
        Arc::new(NearestNeighbors::default()),
        Arc::new(NearestNeighbors::default().with_k(5)),
        Arc::new(LinearRegressor::default()),
        Arc::new(LinearRegressor::default().with_log_features(true)),
    ];
    estimators
        .into_iter()
        .flat_map(|e| [false, true].map(|log_target| Candidate { estimator: e.clone(), log_target }))
        .collect()
}

/// Seeded k-fold split: `folds[i]` lists the validation rows of fold i (rows shuffled, then dealt round-robin).
pub fn fold_assignment(n: usize, k: usize, seed: u64) -> Vec<Vec<usize>> {
    let k = k.clamp(2, n.max(2));
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut folds = vec![Vec::new(); k];
    for (i, row) in order.into_iter().enumerate() {
        folds[i % k].push(row);
    }
    for f in &mut folds {
        f.sort_unstable();
    }
    folds
}

/// Out-of-fold predictions of one candidate (prediction for row i made by the model that did not see it).
pub fn cross_val_predict(candidate: &Candidate, x: &[Vec<f64>], y: &[f64], folds: &[Vec<usize>]) -> Result<Vec<f64>> {
    let mut predicted = vec![f64::NAN; x.len()];
    let mut held_out = vec![false; x.len()];
    for fold in folds {
        held_out.iter_mut().for_each(|h| *h = false);
        fold.iter().for_each(|&i| held_out[i] = true);
        let train: Vec<usize> = (0..x.len()).filter(|&i| !held_out[i]).collect();
        if train.is_empty() || fold.is_empty() {
            continue;
        }
        let tx: Vec<Vec<f64>> = train.iter().map(|&i| x[i].clone()).collect();
        let ty: Vec<f64> = train.iter().map(|&i| y[i]).collect();
        let predictor = candidate.fit(&tx, &ty)?;
        for &i in fold {
            predicted[i] = predictor.predict(&x[i]);
        }
    }
    Ok(predicted)
}

/// Cross-validated result of one candidate.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub label: String,
    pub scores: Scores,
    /// Out-of-fold predictions, row order of the input.
    pub predicted: Vec<f64>,
    /// Wall time of fitting and predicting all folds.
    pub seconds: f64,
}

/// The outcome of selection for one data set.
#[derive(Debug, Clone)]
pub struct Selection {
    pub evaluations: Vec<Evaluation>,
    /// Index into `evaluations` (and into the candidate list) of the winner.
    pub best: usize,
}

/// Score every candidate on the same folds and pick the best by `select_by`. Candidates that cannot apply (a log
/// target with values ≤ 0, more features than rows for linear) or fail to fit are skipped, with their reason in
/// the label; an error only if none works.
pub fn select(
    candidates: &[Candidate],
    x: &[Vec<f64>],
    y: &[f64],
    folds: usize,
    seed: u64,
    select_by: SelectBy,
    mut progress: impl FnMut(&str),
) -> Result<Selection> {
    let assignment = fold_assignment(x.len(), folds, seed);
    let positive = y.iter().all(|v| *v > 0.0);
    let mut evaluations = Vec::with_capacity(candidates.len());
    let mut best: Option<(usize, f64)> = None;
    for candidate in candidates {
        let label = candidate.label();
        progress(&label);
        let started = std::time::Instant::now();
        let outcome = if candidate.log_target && !positive {
            Err("skipped: log target needs positive values".to_string())
        } else {
            cross_val_predict(candidate, x, y, &assignment).map_err(|e| format!("skipped: {e}"))
        };
        match outcome {
            Ok(predicted) => {
                let s = scores(y, &predicted);
                let loss = select_by.loss(&s);
                if best.is_none_or(|(_, b)| loss < b) {
                    best = Some((evaluations.len(), loss));
                }
                evaluations.push(Evaluation { label, scores: s, predicted, seconds: started.elapsed().as_secs_f64() });
            }
            Err(reason) => evaluations.push(Evaluation {
                label: format!("{label} ({reason})"),
                scores: Scores { r2: f64::NAN, mae: f64::NAN, medae: f64::NAN, mape: f64::NAN, maxe: f64::NAN },
                predicted: vec![],
                seconds: started.elapsed().as_secs_f64(),
            }),
        }
    }
    match best {
        Some((best, _)) => Ok(Selection { evaluations, best }),
        None => Err(Error::Invalid(format!(
            "no candidate could be fitted on {} rows: {}",
            x.len(),
            evaluations.iter().map(|e| e.label.as_str()).collect::<Vec<_>>().join("; ")
        ))),
    }
}
