//! Cross-validation and model selection: every candidate (method × hyperparameters × optional log target) is
//! scored on the same seeded folds by predictions of its stored (flat) form, the best by the chosen criterion
//! wins and is refitted on all rows.

use crate::error::{Error, Result};
use crate::train::fit::{DecisionTree, ExtraTrees, GradientBoosting, LinearRegressor, NearestNeighbors, Regressor};
use crate::train::model::{log_feature, unit_count, EngineFeatures, KnownPart, Predictor, TransferMode, MIN_PRIOR};
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
        r2: if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else if ss_res == 0.0 {
            1.0
        } else {
            0.0
        },
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

    /// One row's share of the loss, lower is better (`None` for a row the loss ignores: MAPE of a zero):
    /// percent error, absolute error, squared error (R²'s residual).
    pub fn row_loss(self, measured: f64, predicted: f64) -> Option<f64> {
        let e = (measured - predicted).abs();
        match self {
            SelectBy::Mape => (measured != 0.0).then(|| 100.0 * e / measured.abs()),
            SelectBy::Mae => Some(e),
            SelectBy::R2 => Some(e * e),
        }
    }

    /// Lower is better.
    pub fn loss(self, s: &Scores) -> f64 {
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

/// One thing to try: an estimator, whether it sees `ln(1 + feature)`, whether it is fitted on ln(target), and
/// whether it learns only what a [`KnownPart`] of the target leaves over.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub estimator: Arc<dyn Regressor>,
    pub log_features: bool,
    pub log_target: bool,
    pub known: Option<KnownPart>,
    /// Features appended from the engine's own decisions (see [`EngineFeatures`]).
    pub engine_features: Option<EngineFeatures>,
    /// Index of a feature the target is learned per unit of (latency per FLOP: the inverse of throughput, which
    /// varies over a few times where latency varies over six orders of magnitude).
    pub per_unit: Option<u16>,
    /// Another device's model of the same triplet to build on (transfer); `None` trains from scratch.
    pub prior: Option<Arc<Prior>>,
    /// Keep only the first this many trees of the fitted forest (an averaged forest: [`Regressor::trees`]). Its
    /// cross-validation comes from the whole forest's fits ([`select`]): the trees a smaller forest would cost
    /// nothing to try.
    pub trees: Option<usize>,
}

/// A source device's trained predictor, as a candidate's prior knowledge (see [`TransferMode`]).
#[derive(Debug, Clone)]
pub struct Prior {
    pub source_device: String,
    pub predictor: Predictor,
    pub mode: TransferMode,
}

fn suffix(log_features: bool, log_target: bool) -> &'static str {
    match (log_features, log_target) {
        (false, false) => "",
        (false, true) => "+log",
        (true, false) => "+logx",
        (true, true) => "+logx+log",
    }
}

impl Candidate {
    /// `estimator` on the layer's features alone (log-transformed when `log_features`), fitted on the whole
    /// target (its log when `log_target`); the `with_*` builders add the rest.
    pub fn new(estimator: Arc<dyn Regressor>, log_features: bool, log_target: bool) -> Candidate {
        Candidate {
            estimator,
            log_features,
            log_target,
            known: None,
            engine_features: None,
            per_unit: None,
            prior: None,
            trees: None,
        }
    }

    pub fn label(&self) -> String {
        let described = self.estimator.describe();
        let described = match (self.trees, self.estimator.trees()) {
            (Some(k), Some(n)) => described.replacen(&format!("trees={n}"), &format!("trees={k} of {n}"), 1),
            _ => described,
        };
        format!("{described}{}", self.suffix())
    }

    /// The same candidate keeping the first `k` trees of its forest (see [`Candidate::trees`]).
    pub fn with_first_trees(mut self, k: Option<usize>) -> Candidate {
        self.trees = k;
        self
    }

    /// About how many values its fitted model holds for `rows` training rows ([`Regressor::size`]), the trees
    /// it keeps counted.
    pub fn size(&self, rows: usize) -> f64 {
        let full = self.estimator.size(rows);
        match (self.trees, self.estimator.trees()) {
            (Some(k), Some(n)) if n > 0 => full * k.min(n) as f64 / n as f64,
            _ => full,
        }
    }

    fn suffix(&self) -> String {
        let rest = if self.known.is_some() { "+rest" } else { "" };
        let engine = if self.engine_features.is_some() { "+engine" } else { "" };
        let per_unit = if self.per_unit.is_some() { "+perunit" } else { "" };
        let prior = match &self.prior {
            Some(p) => format!("+from:{}:{}", p.source_device, p.mode.as_str()),
            None => String::new(),
        };
        format!("{engine}{per_unit}{rest}{}{prior}", suffix(self.log_features, self.log_target))
    }

    /// The same candidate building on another device's model (see [`Prior`]).
    pub fn with_prior(mut self, prior: Option<Arc<Prior>>) -> Candidate {
        self.prior = prior;
        self
    }

    /// Whether the candidate builds on another device's model.
    pub fn is_transfer(&self) -> bool {
        self.prior.is_some()
    }

    /// The same candidate learning only the target minus `known`.
    pub fn with_known_part(mut self, known: Option<KnownPart>) -> Candidate {
        self.known = known;
        self
    }

    /// The same candidate seeing the engine's features too.
    pub fn with_engine_features(mut self, engine: Option<EngineFeatures>) -> Candidate {
        self.engine_features = engine;
        self
    }

    /// The same candidate learning the target per unit of feature `feature` (see [`Candidate::per_unit`]).
    pub fn with_per_unit(mut self, feature: Option<u16>) -> Candidate {
        self.per_unit = feature;
        self
    }

    /// Fit on rows `x` (targets `y` in the metric's unit) and return the stored-form predictor.
    pub fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> Result<Predictor> {
        if let Some(prior) = &self.prior {
            let scratch = Candidate { prior: None, ..self.clone() };
            let source: Vec<f64> = x.iter().map(|row| prior.predictor.predict(row)).collect();
            let correction = match prior.mode {
                TransferMode::Ratio => {
                    if self.known.is_some() || self.per_unit.is_some() {
                        return Err(Error::Invalid(format!(
                            "{}: a ratio to the source's prediction is not learned with a known part or per unit",
                            self.label()
                        )));
                    }
                    let ratio: Vec<f64> = y.iter().zip(&source).map(|(v, p)| v / p.max(MIN_PRIOR)).collect();
                    scratch.fit(x, &ratio)?
                }
                TransferMode::Feature => {
                    let extended: Vec<Vec<f64>> = x
                        .iter()
                        .zip(&source)
                        .map(|(row, p)| row.iter().copied().chain(std::iter::once(*p)).collect())
                        .collect();
                    scratch.fit(&extended, y)?
                }
            };
            return Ok(Predictor::transfer(&prior.source_device, prior.mode, prior.predictor.clone(), correction));
        }
        if self.per_unit.is_some() && self.known.is_some() {
            // The known part's log shift is on the target's scale, not per unit: the two do not compose.
            return Err(Error::Invalid(format!(
                "{}: a per-unit target with a known part is not supported",
                self.label()
            )));
        }
        let raw_x = x;
        let extended: Vec<Vec<f64>>;
        let x = match &self.engine_features {
            Some(engine) => {
                extended = x.iter().map(|r| engine.extend(r)).collect();
                &extended
            }
            None => x,
        };
        let transformed: Vec<Vec<f64>>;
        let x = if self.log_features {
            transformed = x.iter().map(|r| r.iter().map(|&v| log_feature(v)).collect()).collect();
            &transformed
        } else {
            x
        };
        let rest: Vec<f64>;
        let mut shift = 0.0;
        let y = match &self.known {
            Some(known) => {
                // Features are still raw in `raw_x`; the known part is defined on them.
                rest = raw_x.iter().zip(y).map(|(row, v)| v - known.value(row)).collect();
                if self.log_target {
                    // The rest may be ≤ 0 (an engine that works in place needs less than inputs + outputs):
                    // shift it just above 0, by a thousandth of the typical target, so its log exists.
                    let lowest = rest.iter().copied().fold(f64::INFINITY, f64::min);
                    let typical = y.iter().map(|v| v.abs()).sum::<f64>() / y.len().max(1) as f64;
                    if lowest <= 0.0 {
                        shift = -lowest + 1e-3 * typical.max(f64::MIN_POSITIVE);
                    }
                }
                &rest
            }
            None => y,
        };
        let per_unit: Vec<f64>;
        let y = match self.per_unit {
            Some(feature) => {
                per_unit = raw_x.iter().zip(y).map(|(row, v)| v / unit_count(row, feature)).collect();
                &per_unit
            }
            None => y,
        };
        let model = if self.log_target {
            let logs: Vec<f64> = y.iter().map(|v| (v + shift).ln()).collect();
            self.estimator.fit(x, &logs)?
        } else {
            self.estimator.fit(x, y)?
        };
        let method = format!("{}{}", self.estimator.method(), self.suffix());
        let predictor = Predictor::new(method, self.log_target, model)
            .with_log_features(self.log_features)
            .with_engine_features(self.engine_features.clone())
            .with_per_unit(self.per_unit);
        let predictor = match &self.known {
            Some(known) => predictor.with_known_part(known.clone(), shift),
            None => predictor,
        };
        match self.trees {
            Some(k) => predictor.with_first_trees(k).ok_or_else(|| {
                Error::Invalid(format!("{}: the fitted model has no forest of more than {k} trees", self.label()))
            }),
            None => Ok(predictor),
        }
    }
}

/// Method families of [`default_candidates`].
pub const METHODS: [&str; 5] = ["ert", "xgb", "tree", "knn", "linear"];

/// Trees of the fully grown extra-trees candidates.
pub const ERT_TREES: usize = 48;

/// The smaller forests tried from the fully grown extra-trees' first trees (see [`Candidate::trees`]): a
/// prediction walks every tree, so where cross-validation cannot tell them from the whole forest, fewer trees
/// answer a query faster from a smaller store.
pub const FIRST_TREES: [usize; 3] = [16, 24, 32];

/// The default search space: each method with a few tree-size bounds, on raw and (where the method is not
/// invariant to it) log features, each with and without a log target. Ensemble sizes are kept small on purpose:
/// a prediction walks every tree, and estimation wants a single-layer prediction in microseconds and a store of
/// tens of megabytes; the minimum leaf sizes bound the trees' size and depth (the fully grown extra-trees have
/// [`ERT_TREES`] trees, whose first [`FIRST_TREES`] are candidates too, the others 16). Best-split trees and
/// boosting choose
/// the same splits on log features, so they are tried on raw features only. `seed` makes the randomised methods
/// reproducible.
pub fn default_candidates(seed: u64) -> Vec<Candidate> {
    let ert = ExtraTrees::default().with_n_trees(16).with_seed(seed);
    let both = [false, true];
    let raw = [false];
    let estimators: Vec<(Arc<dyn Regressor>, &[bool])> = vec![
        // Fully grown random trees vary a lot one from the next: with 16 of them, retraining zen5's conv2d
        // latency model with seeds 1-3 moved a holdout layer's prediction over 0.31-0.39 ms.
        (Arc::new(ert.clone().with_n_trees(ERT_TREES).with_min_samples_leaf(1)), &both),
        (Arc::new(ert.with_min_samples_leaf(4)), &both),
        (
            Arc::new(
                GradientBoosting::default()
                    .with_n_estimators(60)
                    .with_max_depth(5)
                    .with_learning_rate(0.25)
                    .with_seed(seed),
            ),
            &raw,
        ),
        (Arc::new(DecisionTree::default().with_min_samples_leaf(1)), &raw),
        (Arc::new(DecisionTree::default().with_min_samples_leaf(4)), &raw),
        (Arc::new(NearestNeighbors::default()), &both),
        (Arc::new(NearestNeighbors::default().with_k(5)), &both),
        (Arc::new(LinearRegressor::default()), &both),
    ];
    let mut candidates = Vec::new();
    for (estimator, feature_spaces) in estimators {
        let smaller: &[usize] = if estimator.trees() == Some(ERT_TREES) { &FIRST_TREES } else { &[] };
        for &log_features in feature_spaces {
            for log_target in [false, true] {
                let candidate = Candidate::new(estimator.clone(), log_features, log_target);
                candidates.push(candidate.clone());
                candidates.extend(smaller.iter().map(|&k| candidate.clone().with_first_trees(Some(k))));
            }
        }
    }
    candidates
}

/// MAPE (percentage points) below which two candidates' difference does not matter: the memory models' rest
/// is a few KiB on layers of megabytes, where every candidate scores 0.00%.
const MAPE_FLOOR: f64 = 0.01;

/// The smallest candidate ([`Regressor::size`]) that cross-validation cannot tell from the best: the rows'
/// mean loss difference to the best, paired row by row on the same folds, within one standard error of that
/// difference (Breiman's one-standard-error rule, on paired differences), or below a floor that does not
/// matter ([`MAPE_FLOOR`]; a thousandth of the best's loss for MAE and R²). A smaller model is a smaller store
/// and a faster query; where it loses anything measurable, the best stays. Transfer candidates count their
/// source's model as well, so a scratch model of the same size wins.
///
/// Only the best's own family (fewer or shallower trees of the same kind) and linear models qualify: the rows
/// cross-validation sees are not all a network holds, and a lone tree or a few neighbours answer a layer unlike
/// any row far worse than an averaged ensemble or a plane. On one device a single tree that tied an extra-trees
/// depthwise memory model at 0.08% against 0.07% put PyTorch's padded stride-2 depthwise layers at 3.3 MiB
/// instead of 1.0, and five networks' peak memory 4-15% higher.
fn simplest_equivalent(
    candidates: &[Candidate],
    evaluations: &[Evaluation],
    y: &[f64],
    best: usize,
    select_by: SelectBy,
) -> usize {
    let rows = y.len();
    let losses = |e: &Evaluation| -> Vec<Option<f64>> {
        y.iter().zip(&e.predicted).map(|(&m, &p)| select_by.row_loss(m, p)).collect()
    };
    let reference = losses(&evaluations[best]);
    // The rows the loss counts (MAPE skips zeros): a candidate is compared on all of them or not at all.
    let counted = reference.iter().flatten().count();
    let mean_best = reference.iter().flatten().sum::<f64>() / counted.max(1) as f64;
    let floor = match select_by {
        SelectBy::Mape => MAPE_FLOOR,
        SelectBy::Mae | SelectBy::R2 => 1e-3 * mean_best,
    };
    let size = |i: usize| {
        let c = &candidates[i];
        c.size(rows) + if c.is_transfer() { 1e12 } else { 0.0 }
    };
    let mut chosen = best;
    for (i, e) in evaluations.iter().enumerate() {
        let family = candidates[i].estimator.method();
        let eligible = family == candidates[best].estimator.method() || family == "linear";
        if i == best || !eligible || e.predicted.len() != rows || size(i) >= size(chosen) {
            continue;
        }
        let d: Vec<f64> = losses(e)
            .iter()
            .zip(&reference)
            .filter_map(|(a, b)| Some((*a)? - (*b)?))
            .filter(|v| v.is_finite())
            .collect();
        if d.len() < 2 || d.len() < counted {
            continue;
        }
        let n = d.len() as f64;
        let mean = d.iter().sum::<f64>() / n;
        let var = d.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let se = (var / n).sqrt();
        if mean <= se.max(floor) {
            chosen = i;
        }
    }
    chosen
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
    Ok(cross_val_predict_first_trees(candidate, x, y, folds, &[])?.0)
}

/// Out-of-fold predictions of a candidate, and of each smaller forest of its first trees (or why there is none).
pub type FirstTreesPredictions = (Vec<f64>, Vec<Result<Vec<f64>>>);

/// [`cross_val_predict`], and from the same fits the out-of-fold predictions of the first `trees[j]` trees of
/// each fold's forest (see [`Candidate::trees`]); an error for those when the fitted model has no such forest.
pub fn cross_val_predict_first_trees(
    candidate: &Candidate,
    x: &[Vec<f64>],
    y: &[f64],
    folds: &[Vec<usize>],
    trees: &[usize],
) -> Result<FirstTreesPredictions> {
    let mut predicted = vec![f64::NAN; x.len()];
    let mut smaller: Vec<Result<Vec<f64>>> = trees.iter().map(|_| Ok(vec![f64::NAN; x.len()])).collect();
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
        for (&k, out) in trees.iter().zip(&mut smaller) {
            let Ok(values) = out else { continue };
            match predictor.with_first_trees(k) {
                Some(first) => fold.iter().for_each(|&i| values[i] = first.predict(&x[i])),
                None => {
                    *out = Err(Error::Invalid(format!("the fitted model has no forest of more than {k} trees")));
                }
            }
        }
    }
    Ok((predicted, smaller))
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

/// Score one candidate on the folds, and from the same fits each of `smaller` (the same candidate keeping fewer
/// of its trees: [`Candidate::trees`]); a skipped one carries why in its label.
fn evaluate(
    candidate: &Candidate,
    smaller: &[&Candidate],
    x: &[Vec<f64>],
    y: &[f64],
    folds: &[Vec<usize>],
) -> (Evaluation, Vec<Evaluation>) {
    let started = std::time::Instant::now();
    let trees: Vec<usize> = smaller.iter().filter_map(|c| c.trees).collect();
    // With a known part the rest is shifted positive at fit time; without, the log of y itself must exist.
    let outcome = if candidate.log_target && candidate.known.is_none() && y.iter().any(|v| *v <= 0.0) {
        Err("skipped: log target needs positive values".to_string())
    } else if trees.len() != smaller.len() {
        Err("skipped: a smaller forest without its tree count".to_string())
    } else {
        cross_val_predict_first_trees(candidate, x, y, folds, &trees).map_err(|e| format!("skipped: {e}"))
    };
    let seconds = started.elapsed().as_secs_f64();
    let evaluation = |label: String, outcome: std::result::Result<Vec<f64>, String>| match outcome {
        Ok(predicted) => Evaluation { label, scores: scores(y, &predicted), predicted, seconds },
        Err(reason) => Evaluation {
            label: format!("{label} ({reason})"),
            scores: Scores { r2: f64::NAN, mae: f64::NAN, medae: f64::NAN, mape: f64::NAN, maxe: f64::NAN },
            predicted: vec![],
            seconds,
        },
    };
    match outcome {
        Ok((predicted, first)) => (
            evaluation(candidate.label(), Ok(predicted)),
            smaller
                .iter()
                .zip(first)
                .map(|(c, p)| evaluation(c.label(), p.map_err(|e| format!("skipped: {e}"))))
                .collect(),
        ),
        Err(reason) => (
            evaluation(candidate.label(), Err(reason.clone())),
            smaller.iter().map(|c| evaluation(c.label(), Err(reason.clone()))).collect(),
        ),
    }
}

/// Score every candidate on the same folds and pick the best by `select_by`. Candidates that cannot apply (a log
/// target with values ≤ 0) or fail to fit are kept with their reason in the label; an error only if none works.
/// Candidates are spread over `jobs` threads (0 = one per core); each is computed independently of the others
/// (one keeping its forest's first trees together with that forest, whose fits it shares, and whose time it
/// reports), so the result does not depend on `jobs`. `progress` is called (on this thread) with each fitted
/// candidate's label as it starts.
#[allow(clippy::too_many_arguments)]
pub fn select(
    candidates: &[Candidate],
    x: &[Vec<f64>],
    y: &[f64],
    folds: usize,
    seed: u64,
    select_by: SelectBy,
    jobs: usize,
    mut progress: impl FnMut(&str),
) -> Result<Selection> {
    let assignment = fold_assignment(x.len(), folds, seed);
    let jobs = if jobs == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { jobs };
    // A candidate keeping fewer trees is scored from its whole forest's fits, when that one is a candidate too:
    // the same estimator (not only an equal label) and otherwise the same.
    let whole = |c: &Candidate| Candidate { trees: None, ..c.clone() }.label();
    let parent: Vec<Option<usize>> = candidates
        .iter()
        .map(|c| {
            c.trees.and_then(|_| {
                candidates
                    .iter()
                    .position(|p| p.trees.is_none() && Arc::ptr_eq(&p.estimator, &c.estimator) && whole(p) == whole(c))
            })
        })
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Evaluation>>> = candidates.iter().map(|_| Default::default()).collect();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<String>();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, candidates.len().max(1)) {
            let started_tx = started_tx.clone();
            let (next, slots, assignment, parent) = (&next, &slots, &assignment, &parent);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(candidate) = candidates.get(i) else { break };
                if parent[i].is_some() {
                    continue;
                }
                let _ = started_tx.send(candidate.label());
                let children: Vec<usize> = (0..candidates.len()).filter(|&j| parent[j] == Some(i)).collect();
                let smaller: Vec<&Candidate> = children.iter().map(|&j| &candidates[j]).collect();
                let (evaluation, smaller) = evaluate(candidate, &smaller, x, y, assignment);
                for (j, evaluation) in
                    std::iter::once(i).chain(children).zip(std::iter::once(evaluation).chain(smaller))
                {
                    if let Ok(mut slot) = slots[j].lock() {
                        *slot = Some(evaluation);
                    }
                }
            });
        }
        drop(started_tx);
        for label in started_rx {
            progress(&label);
        }
    });
    let evaluations: Vec<Evaluation> = slots
        .into_iter()
        .zip(candidates)
        .map(|(slot, c)| {
            slot.into_inner().ok().flatten().ok_or_else(|| Error::Invalid(format!("evaluating {} failed", c.label())))
        })
        .collect::<Result<_>>()?;
    let best = evaluations
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.predicted.is_empty())
        .map(|(i, e)| (i, select_by.loss(&e.scores)))
        .fold(None, |best: Option<(usize, f64)>, (i, loss)| match best {
            Some((_, b)) if b <= loss => best,
            _ => Some((i, loss)),
        });
    match best {
        Some((best, _)) => {
            let best = simplest_equivalent(candidates, &evaluations, y, best, select_by);
            Ok(Selection { evaluations, best })
        }
        None => Err(Error::Invalid(format!(
            "no candidate could be fitted on {} rows: {}",
            x.len(),
            evaluations.iter().map(|e| e.label.as_str()).collect::<Vec<_>>().join("; ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> (Vec<Vec<f64>>, Vec<f64>) {
        let x: Vec<Vec<f64>> =
            (0..150).map(|i| vec![(i % 13) as f64 + 1.0, (i % 7) as f64 + 1.0, (i % 3) as f64]).collect();
        let y = x.iter().map(|r| 3.0 * r[0] * r[1]).collect();
        (x, y)
    }

    #[test]
    fn a_smaller_forest_is_scored_from_its_whole_forest_s_fits_as_if_fitted_alone() {
        let (x, y) = data();
        let whole = Candidate::new(Arc::new(ExtraTrees::default().with_n_trees(48).with_seed(3)), false, true);
        let first = whole.clone().with_first_trees(Some(16));
        assert_eq!(first.label(), "ert(trees=16 of 48,min_leaf=1)+log");
        assert!((first.size(150) - whole.size(150) / 3.0).abs() < 1e-9);
        let selection = select(&[whole.clone(), first.clone()], &x, &y, 5, 11, SelectBy::Mape, 2, |_| {}).unwrap();
        let folds = fold_assignment(x.len(), 5, 11);
        // Its own fits, truncated: the same out-of-fold predictions.
        assert_eq!(selection.evaluations[1].predicted, cross_val_predict(&first, &x, &y, &folds).unwrap());
        assert_eq!(selection.evaluations[0].predicted, cross_val_predict(&whole, &x, &y, &folds).unwrap());
        // The fitted candidate keeps 16 trees.
        let predictor = first.fit(&x, &y).unwrap();
        match &predictor.model {
            crate::train::model::Model::Forest(f) => assert_eq!(f.tree_count(), 16),
            other => panic!("a forest, not {other:?}"),
        }
    }

    #[test]
    fn folds_partition_the_rows_and_depend_only_on_the_seed() {
        let a = fold_assignment(103, 5, 9);
        assert_eq!(a, fold_assignment(103, 5, 9));
        assert_ne!(a, fold_assignment(103, 5, 10));
        let mut all: Vec<usize> = a.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..103).collect::<Vec<_>>());
        assert!(a.iter().all(|f| f.len() == 20 || f.len() == 21));
    }

    #[test]
    fn cross_validation_is_deterministic_for_a_seed() {
        let (x, y) = data();
        let run =
            |seed, jobs| select(&default_candidates(seed), &x, &y, 5, seed, SelectBy::Mape, jobs, |_| {}).unwrap();
        // One thread or several: the same result.
        let (a, b) = (run(3, 1), run(3, 2));
        assert_eq!(a.best, b.best);
        for (ea, eb) in a.evaluations.iter().zip(&b.evaluations) {
            assert_eq!(ea.label, eb.label);
            assert_eq!(
                ea.predicted.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                eb.predicted.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
        // A product is learned far better by the trees than by a straight line.
        let best = &a.evaluations[a.best];
        assert!(best.scores.mape < 5.0, "{} {:?}", best.label, best.scores);
        let linear = a.evaluations.iter().find(|e| e.label == "linear").unwrap();
        assert!(linear.scores.mape > 2.0 * best.scores.mape);
    }

    #[test]
    fn engine_features_are_appended_when_fitting_and_predicting() {
        use crate::layer::{Conv2d, LayerConfig, Op, Padding};
        use crate::train::store::ModelFile;
        use crate::{LayerType, Metric};
        let names = LayerType::Conv2d.feature_names();
        let engine = EngineFeatures::for_layer(LayerType::Conv2d, &names).unwrap();
        assert!(engine.applies());
        let dense = EngineFeatures::for_layer(LayerType::Dense, &LayerType::Dense.feature_names()).unwrap();
        assert_eq!(dense.width(), 3);
        assert!(EngineFeatures::for_layer(LayerType::MaxPool2d, &LayerType::MaxPool2d.feature_names()).is_none());
        // 3x3 convolutions on 13x13 whose speed the engine's tile walk decides; the target is the number of
        // times each B panel is gathered, which only the appended features carry.
        let mut x = Vec::new();
        for in_channels in [64, 128, 192, 256, 320, 384] {
            for filters in [64, 128, 192, 240, 256, 320, 384, 512] {
                let mut conv = Conv2d::new(filters, [3, 3]);
                conv.padding = Padding::Same;
                x.push(
                    LayerConfig::new(Op::Conv2d(conv), vec![smallvec::smallvec![in_channels, 13, 13]], 1)
                        .features()
                        .unwrap(),
                );
            }
        }
        let y: Vec<f64> = x.iter().map(|row| 1.0 + engine.values(row)[1]).collect();
        assert!(y.iter().any(|&v| v > 2.0 + 1.0), "some shapes re-gather B panels: {y:?}");
        let candidate = Candidate::new(Arc::new(DecisionTree::default().with_min_samples_leaf(1)), false, false)
            .with_engine_features(Some(engine.clone()));
        assert!(candidate.label().contains("+engine"), "{}", candidate.label());
        let predictor = candidate.fit(&x, &y).unwrap();
        assert_eq!(predictor.engine_features(), Some(&engine));
        for (row, target) in x.iter().zip(&y) {
            // Trees store f32 values.
            let got = predictor.predict(row);
            assert!((got - target).abs() <= 1e-6 * target, "predict() appends the features fit() appended: {got}");
        }
        // Stored and read back, the predictor still appends them.
        let file = ModelFile::new(LayerType::Conv2d, Metric::Latency, predictor.clone());
        let bytes = file.encode().unwrap();
        let read =
            ModelFile::decode(std::path::Path::new("conv2d/latency.bin"), &bytes, LayerType::Conv2d, Metric::Latency)
                .unwrap();
        assert_eq!(read.predictor, predictor);
        // Host-engine training tries conv2d latency with and without them; other triplets are unchanged.
        use crate::train::pipeline::HostEngine::{Layouts, LayoutsAndTiles as Full, Off};
        let base = default_candidates(1);
        let conv_latency = crate::train::pipeline::candidates_for(&base, LayerType::Conv2d, Metric::Latency, Full);
        assert_eq!(conv_latency.len(), 3 * base.len());
        assert_eq!(conv_latency.iter().filter(|c| c.engine_features.is_some()).count(), 2 * base.len());
        assert_eq!(conv_latency.iter().filter(|c| c.per_unit.is_some()).count(), base.len());
        for (layer_type, metric, host) in [
            (LayerType::Conv2d, Metric::Latency, Off),
            (LayerType::Conv2d, Metric::Latency, Layouts),
            (LayerType::Conv2d, Metric::Memory, Full),
            (LayerType::Dense, Metric::Memory, Full),
            (LayerType::MaxPool2d, Metric::Latency, Full),
        ] {
            let candidates = crate::train::pipeline::candidates_for(&base, layer_type, metric, host);
            assert!(candidates.iter().all(|c| c.engine_features.is_none()), "{layer_type:?} {metric:?} {host:?}");
        }
        // Off the host, conv2d latency is still tried per FLOP; pooling and element-wise latency per input
        // element; memory, and layers without a sliding window or an element-wise rate, never per unit.
        let off_host = crate::train::pipeline::candidates_for(&base, LayerType::Conv2d, Metric::Latency, Off);
        assert_eq!(off_host.iter().filter(|c| c.per_unit.is_some()).count(), base.len());
        let names = LayerType::Conv2d.feature_names();
        let flops = names.iter().position(|n| n == "flops").unwrap() as u16;
        assert!(off_host.iter().filter_map(|c| c.per_unit).all(|u| u == flops));
        for layer_type in [LayerType::MaxPool2d, LayerType::AvgPool2d, LayerType::Activation, LayerType::BatchNorm] {
            let candidates = crate::train::pipeline::candidates_for(&base, layer_type, Metric::Latency, Full);
            let input_elems = layer_type.feature_names().iter().position(|n| n == "input_elems").unwrap() as u16;
            let units: Vec<u16> = candidates.iter().filter_map(|c| c.per_unit).collect();
            assert!(units.len() == base.len() && units.iter().all(|&u| u == input_elems), "{layer_type:?}");
        }
        for (layer_type, metric) in [
            (LayerType::MaxPool2d, Metric::Memory),
            (LayerType::Conv2d, Metric::Memory),
            (LayerType::Concat, Metric::Latency),
        ] {
            let candidates = crate::train::pipeline::candidates_for(&base, layer_type, metric, Full);
            assert!(candidates.iter().all(|c| c.per_unit.is_none()), "{layer_type:?} {metric:?}");
        }
    }

    #[test]
    fn a_target_learned_per_unit_is_multiplied_back() {
        // Time = FLOPs / throughput, with the throughput set by a second feature: per FLOP, one split suffices.
        let x: Vec<Vec<f64>> =
            (0..60).map(|i| vec![(1000 * (1 + i % 20)) as f64 * 10f64.powi(i % 3), (i % 2) as f64]).collect();
        let y: Vec<f64> = x.iter().map(|r| r[0] / if r[1] > 0.5 { 4e3 } else { 1e3 }).collect();
        let candidate = Candidate::new(Arc::new(DecisionTree::default().with_min_samples_leaf(5)), false, true)
            .with_per_unit(Some(0));
        assert!(candidate.label().contains("+perunit"), "{}", candidate.label());
        let predictor = candidate.fit(&x, &y).unwrap();
        for (row, target) in x.iter().zip(&y) {
            // Trees store f32 values (the log of the time per unit here).
            assert!((predictor.predict(row) - target).abs() < 1e-6 * target, "{row:?}");
        }
        // Beyond the FLOPs it saw, the prediction scales with them.
        assert!((predictor.predict(&[1e9, 1.0]) - 1e9 / 4e3).abs() < 1e-6 * (1e9 / 4e3));
        // A known part is learned on the target's own scale: no per-unit candidate has one.
        let names: Vec<String> =
            ["input_elems", "weight_elems", "output_elems"].iter().map(|s| s.to_string()).collect();
        let with_known = candidate.clone().with_known_part(KnownPart::tensor_mib(&names));
        assert!(with_known.fit(&x, &y).is_err());
        assert_eq!(unit_count(&[0.0], 0), 1.0);
    }

    #[test]
    fn a_known_part_is_added_back_and_only_the_rest_is_learned() {
        let names: Vec<String> =
            ["kernel", "input_elems", "weight_elems", "output_elems", "flops"].iter().map(|s| s.to_string()).collect();
        let known = KnownPart::tensor_mib(&names).unwrap();
        assert_eq!(known.features, vec![1, 2, 3]);
        assert!(KnownPart::tensor_mib(&names[..3]).is_none());
        // Tensors of 0.04 to ~10 MiB plus a rest of a few KiB that is negative for small kernels (in-place work);
        // the totals stay positive (a prediction is never below 0).
        let x: Vec<Vec<f64>> = (0..120)
            .map(|i| {
                let k = (i % 6) as f64;
                vec![k, ((i + 1) * 10_000) as f64, ((i % 7) * 300_000) as f64, (i * 500) as f64, 0.0]
            })
            .collect();
        let rest = |k: f64| 0.004 * (k - 1.5);
        let y: Vec<f64> = x.iter().map(|r| known.value(r) + rest(r[0])).collect();
        for log_target in [false, true] {
            let candidate =
                Candidate::new(Arc::new(DecisionTree::default().with_min_samples_leaf(1)), false, log_target)
                    .with_known_part(Some(known.clone()));
            assert!(candidate.label().contains("+rest"), "{}", candidate.label());
            let predictor = candidate.fit(&x, &y).unwrap();
            assert_eq!(predictor.known_part(), Some(&known));
            for (row, want) in x.iter().zip(&y) {
                let got = predictor.predict(row);
                // Trees store f32 values.
                assert!((got - want).abs() < 1e-6 * want, "log target {log_target}: {got} vs {want} for {row:?}");
            }
        }
    }

    #[test]
    fn the_smallest_candidate_wins_where_cross_validation_cannot_tell_them_apart() {
        use crate::train::fit::{ExtraTrees, LinearRegressor};
        let big = Candidate::new(Arc::new(ExtraTrees::default()), false, false);
        let small = Candidate::new(Arc::new(LinearRegressor::default()), false, false);
        assert!(small.estimator.size(1000) < big.estimator.size(1000));
        let y: Vec<f64> = (0..400).map(|i| 10.0 + (i % 17) as f64).collect();
        // Percent errors that alternate in sign around each row's: the big model's errors, then the small one's
        // shifted by `shift` percent on average with a spread of 2 percent row to row.
        let evaluation = |label: &str, shift: f64, seed: usize| {
            let predicted: Vec<f64> = y
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let noise = if (i * 7 + seed).is_multiple_of(2) { 2.0 } else { -2.0 };
                    v * (1.0 + (5.0 + shift + if seed == 0 { 0.0 } else { noise }) / 100.0)
                })
                .collect();
            Evaluation { label: label.into(), scores: scores(&y, &predicted), predicted, seconds: 0.0 }
        };
        let candidates = vec![big.clone(), small.clone()];
        // Within one standard error (2 / sqrt(400) = 0.1 point): the small model.
        let tied = vec![evaluation("big", 0.0, 0), evaluation("small", 0.05, 1)];
        assert!(tied[1].scores.mape > tied[0].scores.mape);
        assert_eq!(simplest_equivalent(&candidates, &tied, &y, 0, SelectBy::Mape), 1);
        // Worse by 0.5 point, five standard errors: the best stays.
        let worse = vec![evaluation("big", 0.0, 0), evaluation("small", 0.5, 1)];
        assert_eq!(simplest_equivalent(&candidates, &worse, &y, 0, SelectBy::Mape), 0);
        // A bigger candidate never replaces a smaller best, however close.
        let reversed = vec![small, big.clone()];
        assert_eq!(simplest_equivalent(&reversed, &tied, &y, 0, SelectBy::Mape), 0);
        // Below the floor, identical models of the rest: the small one.
        let exact = vec![evaluation("big", 0.0, 0), evaluation("small", MAPE_FLOOR / 2.0, 0)];
        assert_eq!(simplest_equivalent(&candidates, &exact, &y, 0, SelectBy::Mape), 1);
        // Fewer, shallower trees of the same kind qualify; a lone tree does not, however close.
        let fewer =
            Candidate::new(Arc::new(ExtraTrees::default().with_n_trees(16).with_min_samples_leaf(4)), false, false);
        let lone = Candidate::new(Arc::new(crate::train::fit::DecisionTree::default()), false, false);
        assert_eq!(simplest_equivalent(&[big.clone(), fewer], &tied, &y, 0, SelectBy::Mape), 1);
        assert_eq!(simplest_equivalent(&[big, lone], &tied, &y, 0, SelectBy::Mape), 0);
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        let s = scores(&[1.0, 2.0, 4.0, 0.0], &[1.5, 2.0, 3.0, 1.0]);
        assert_eq!(s.mae, (0.5 + 0.0 + 1.0 + 1.0) / 4.0);
        assert_eq!(s.medae, 0.75);
        assert_eq!(s.maxe, 1.0);
        // The zero measurement is left out of MAPE: (50% + 0% + 25%) / 3.
        assert!((s.mape - 25.0).abs() < 1e-12);
        let mean = 7.0 / 4.0;
        let ss_tot: f64 = [1.0f64, 2.0, 4.0, 0.0].iter().map(|y| (y - mean) * (y - mean)).sum();
        assert!((s.r2 - (1.0 - 2.25 / ss_tot)).abs() < 1e-12);
    }
}
