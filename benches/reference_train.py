#!/usr/bin/env python3
"""scikit-learn + xgboost reference for the training time of `perfmodel train`.

Purpose
-------
`perfmodel train --device D` picks one regressor per (layer type, metric) "triplet" by 5-fold
cross-validation over a fixed candidate set, then refits the winner on all rows. This script does
the same work with the standard Python stack (scikit-learn, xgboost, joblib), on the same rows and
with the same candidates, and prints the wall time of every triplet and of the whole run, so that
perfmodel's times (printed by `perfmodel train` as "train s" and kept in models/<D>/report.md) can be
put side by side with what the usual tools take for the same job on the same machine.

Usage
-----
    pip install scikit-learn xgboost          # numpy, scipy and joblib come with them
    python3 benches/reference_train.py --device xeon480
    python3 benches/reference_train.py --device xeon480 --layers dropout,add --jobs 1
    python3 benches/reference_train.py --device zen5 --data-dir ./data --engine-copy no --candidates

Options: --device NAME (required), --data-dir DIR (default ./data), --jobs N (default 2),
--layers a,b,c (default: every layer type with a data file), --metrics (default latency,power,memory),
--folds (5), --seed (42), --contamination (0.02), --backend loky|threading (default loky),
--engine-copy auto|yes|no (see below), --collectors DIR (default ./collectors, for --engine-copy auto),
--candidates (also print every candidate's CV MAPE and seconds).

What it replicates (from src/train/{pipeline,cv,fit,isolation}.rs)
------------------------------------------------------------------
* Rows: data/<D>/<layer_type>.csv; features are the columns between `config` and `latency_ms` (the
  names of LayerType::feature_names). A row counts for a metric when its status is not `failed`
  (perfmodel's Sample::metric: `ok` and `unstable` rows) and the metric's column (`latency_ms`,
  `power_w`, `memory_mib`) holds a finite number. A triplet with fewer than max(10, folds) rows is
  skipped (power is empty on these devices, so it is always skipped). Latency of conv2d, depthwise,
  dense, max/avg pooling is brought to the device's nominal speed as perfmodel does
  (latency / (speed_ref_ms / nominal)^0.7, nominal = median speed_ref_ms over all latency rows of the
  device).
* Outliers: round(2 %) of the rows with the lowest sklearn IsolationForest scores (100 trees, 256-row
  subsamples, random_state=seed; contamination=0.02) on sign(v)*log1p(|v|) of features and target,
  are removed, as perfmodel's own isolation forest removes exactly round(contamination * n) rows.
* Folds: 5, rows shuffled with a seeded generator and dealt round-robin (same sizes as perfmodel's).
* Candidates (26 base, in perfmodel's order), each scored on every fold, with a log target fitted on
  ln(y) and predictions clamped at 0 as perfmodel's Predictor does:
    - ExtraTreesRegressor(48 trees, min_samples_leaf=1, min_samples_split=2, max_features=all,
      max_depth=24) and (16 trees, min_samples_leaf=4, min_samples_split=8, max_depth=24):
      raw and log1p features x raw and log target (8)
    - XGBRegressor(n_estimators=60, max_depth=5, learning_rate=0.25, tree_method="hist", max_bin=1024,
      base_score=mean(y), min_child_weight=1, reg_lambda=1): raw features x raw/log target (2)
    - DecisionTreeRegressor(min_samples_leaf 1 and 4, min_samples_split=2*leaf, max_depth=24):
      raw features x raw/log target (4)
    - StandardScaler + KNeighborsRegressor(k=3 and k=5, weights="distance"): raw/log1p features
      x raw/log target (8)
    - StandardScaler + LinearRegression: raw/log1p features x raw/log target (4)
  Latency of conv2d, depthwise_conv2d and dense also tries the whole set per FLOP (target / max(flops,1),
  multiplied back), and of max_pool2d, avg_pool2d, activation and batch_norm per input element
  (column `input_elems`). Latency of conv2d, dense and matmul, on a device whose profile lets perfmodel ask the
  engine (host = true, executor tract, 1 thread, measured on this very machine: perfmodel's
  HostEngine::LayoutsAndTiles), also tries the set with the engine's features, and the per-FLOP copy
  is then the one with the engine's features: 26, 52 or 78 candidates per triplet. Memory learns only
  the rest, target - (input_elems + weight_elems + output_elems) * 4 / 2^20 MiB; with a log target the
  rest is shifted just above 0 exactly as perfmodel does (by -min(rest) + 1e-3 * mean(|y|) when
  min(rest) <= 0) and the shift undone at prediction.
  A log-target candidate on a target with a value <= 0 is skipped, as in perfmodel.
* Selection: MAPE of the out-of-fold predictions (rows measured as 0 left out); the best, then
  perfmodel's one-standard-error rule (the smallest model whose paired row-by-row MAPE difference to the
  best is within one standard error, or under 0.01 points) with perfmodel's model-size estimates;
  the chosen candidate is refitted on all rows. The refit counts in the triplet's time.
* Timing: a triplet's time runs from the outlier removal through the refit, as perfmodel's
  `train_seconds` does (reading the CSV files is outside it, in both). The total is the wall time of
  the whole loop over triplets (data reading included); the joblib worker pool is started and warmed
  (libraries imported) before the clock starts.
* Parallelism: the candidates of one triplet are spread over --jobs workers with joblib (one candidate,
  all its folds, per task, handed out one at a time in perfmodel's order), each model with n_jobs=1 and
  BLAS/OpenMP limited to 1 thread: perfmodel's one-candidate-per-thread scheme. The default `loky`
  backend runs worker processes (sklearn's usual setting; the GIL would serialise part of the work
  under threads); `--backend threading` is also offered. The refit runs in the main process.

What it does not replicate
--------------------------
* The engine features (tract's lowering, tile walk and kernel tile, computed in Rust) do not exist in
  Python: their copy of the candidate set is emulated with the plain features (the same candidates fitted
  a second time; perfmodel fits on 1-3 more columns), so its cost is about right but its accuracy is not.
  Likewise a host-engine device's memory known part counts weights as tract packs them; here they are
  always f32 tensor sizes.
* The random streams differ (perfmodel uses ChaCha8): folds, outlier forest and extra-trees draws are
  not the same rows/thresholds, only the same sizes and the same algorithms, so CV MAPE and even the
  chosen candidate can differ a little from perfmodel's.
* The learners are not the same code: perfmodel's trees and boosting come from smartcore (converted to a
  flat f32 form), its kNN is a brute-force scan written in perfmodel; sklearn's KNeighborsRegressor
  chooses its own search structure (algorithm="auto"), and xgboost's exact greedy learner is the
  reference for perfmodel's XGBoost-style booster.
* perfmodel's training also writes the model store, report and prediction benchmark; only the
  training (outliers, CV, refit) is timed here. Transfer (--transfer-from), --learning-curve,
  --methods and --select-by other than MAPE are not replicated.
"""

import os

# One thread per model, as perfmodel's candidates each run on one thread: set before numpy is imported
# (joblib's loky workers inherit it and limit themselves to one thread too).
for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ[_var] = "1"

import argparse
import csv
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

try:
    import joblib
    import numpy as np
    import scipy
    import sklearn
    import xgboost
    from joblib import Parallel, delayed
    from sklearn.ensemble import ExtraTreesRegressor, IsolationForest
    from sklearn.linear_model import LinearRegression
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeRegressor
    from xgboost import XGBRegressor
except ImportError as e:  # pragma: no cover
    sys.exit(f"reference_train.py needs scikit-learn and xgboost: pip install scikit-learn xgboost ({e})")

# LayerType::ALL order (src/layer/mod.rs): perfmodel trains layer types in this order.
LAYER_TYPES = [
    "conv2d", "depthwise_conv2d", "dense", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
    "global_max_pool2d", "flatten", "reshape", "add", "multiply", "concat", "activation", "batch_norm",
    "zero_padding2d", "cropping2d", "dropout", "unsupported", "channel_shuffle", "channel_slice",
    "matmul", "layer_norm", "softmax", "transpose", "elementwise", "embedding",
]
# Metric::ALL order and each metric's column.
METRIC_COLUMNS = {"latency": "latency_ms", "power": "power_w", "memory": "memory_mib"}
MIN_ROWS = 10
# speed::follows_probe and speed::PROBE_ELASTICITY.
FOLLOWS_PROBE = {"conv2d", "depthwise_conv2d", "dense", "max_pool2d", "avg_pool2d"}
PROBE_ELASTICITY = 0.7
# candidates_for: what latency is tried per unit of, and which layers get the engine's features.
PER_UNIT = {
    "conv2d": "flops", "depthwise_conv2d": "flops", "dense": "flops",
    "max_pool2d": "input_elems", "avg_pool2d": "input_elems", "activation": "input_elems",
    "batch_norm": "input_elems",
}
ENGINE_LAYERS = {"conv2d", "dense", "matmul"}
KNOWN_COLUMNS = ("input_elems", "weight_elems", "output_elems")
MIB = float(1 << 20)
MAPE_FLOOR = 0.01


# ---------------------------------------------------------------------------------------------------------
# Candidates


class Candidate:
    """One thing to try, as perfmodel's cv::Candidate: an estimator spec and the transforms around it."""

    def __init__(self, kind, params, log_features, log_target):
        self.kind = kind  # "ert" | "xgb" | "tree" | "knn" | "linear"
        self.params = params
        self.log_features = log_features
        self.log_target = log_target
        self.known = None  # column indices of input/weight/output elems (memory's known part)
        self.engine = False  # emulated: the same features again
        self.per_unit = None  # column index

    def copy(self, **changes):
        c = Candidate(self.kind, self.params, self.log_features, self.log_target)
        c.known, c.engine, c.per_unit = self.known, self.engine, self.per_unit
        for k, v in changes.items():
            setattr(c, k, v)
        return c

    def describe(self):
        p = self.params
        if self.kind == "ert":
            return f"ert(trees={p['n_trees']},min_leaf={p['min_leaf']})"
        if self.kind == "xgb":
            return f"xgb(rounds={p['rounds']},depth={p['depth']},eta={p['eta']})"
        if self.kind == "tree":
            return f"tree(min_leaf={p['min_leaf']})"
        if self.kind == "knn":
            return f"knn(k={p['k']},distance)"
        return "linear"

    def label(self):
        s = self.describe()
        s += "+engine" if self.engine else ""
        s += "+perunit" if self.per_unit is not None else ""
        s += "+rest" if self.known is not None else ""
        s += {(False, False): "", (False, True): "+log", (True, False): "+logx", (True, True): "+logx+log"}[
            (self.log_features, self.log_target)
        ]
        return s

    def size(self, rows):
        """Regressor::size: what selection's one-standard-error rule prefers the smallest of."""
        p = self.params
        if self.kind == "ert":
            return float(p["n_trees"] * 2 * rows // max(p["min_leaf"], 1))
        if self.kind == "tree":
            return float(2 * rows // max(p["min_leaf"], 1))
        if self.kind == "xgb":
            return float(p["rounds"] * min(1 << (min(p["depth"], 20) + 1), 2 * max(rows, 1)))
        if self.kind == "knn":
            return float(rows * 8)
        return 1.0

    def estimator(self, y, seed):
        p = self.params
        if self.kind == "ert":
            return ExtraTreesRegressor(
                n_estimators=p["n_trees"], min_samples_leaf=p["min_leaf"], min_samples_split=2 * p["min_leaf"],
                max_features=None, max_depth=24, bootstrap=False, random_state=seed, n_jobs=1,
            )
        if self.kind == "xgb":
            return XGBRegressor(
                n_estimators=p["rounds"], max_depth=p["depth"], learning_rate=p["eta"], tree_method="hist",
                max_bin=1024, base_score=float(np.mean(y)), min_child_weight=1, reg_lambda=1.0, subsample=1.0,
                random_state=seed, n_jobs=1,
            )
        if self.kind == "tree":
            return DecisionTreeRegressor(
                min_samples_leaf=p["min_leaf"], min_samples_split=2 * p["min_leaf"], max_depth=24,
                random_state=seed,
            )
        if self.kind == "knn":
            return make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=p["k"], weights="distance", n_jobs=1))
        return make_pipeline(StandardScaler(), LinearRegression())


def default_candidates():
    """cv::default_candidates: 26 in perfmodel's order."""
    both, raw = (False, True), (False,)
    estimators = [
        ("ert", {"n_trees": 48, "min_leaf": 1}, both),
        ("ert", {"n_trees": 16, "min_leaf": 4}, both),
        ("xgb", {"rounds": 60, "depth": 5, "eta": 0.25}, raw),
        ("tree", {"min_leaf": 1}, raw),
        ("tree", {"min_leaf": 4}, raw),
        ("knn", {"k": 3}, both),
        ("knn", {"k": 5}, both),
        ("linear", {}, both),
    ]
    out = []
    for kind, params, spaces in estimators:
        for log_features in spaces:
            for log_target in (False, True):
                out.append(Candidate(kind, params, log_features, log_target))
    return out


def candidates_for(base, layer_type, metric, names, engine_copy):
    """pipeline::candidates_for."""
    if metric == "memory":
        known = [names.index(c) for c in KNOWN_COLUMNS] if all(c in names for c in KNOWN_COLUMNS) else None
        return [c.copy(known=known) for c in base]
    plain = [c.copy() for c in base]
    if metric != "latency":
        return plain
    engine = engine_copy and layer_type in ENGINE_LAYERS
    unit = PER_UNIT.get(layer_type)
    unit = names.index(unit) if unit in names else None
    out = list(plain)
    if engine:
        out += [c.copy(engine=True) for c in plain]
    if unit is not None:
        out += [c.copy(engine=engine, per_unit=unit) for c in plain]
    return out


# ---------------------------------------------------------------------------------------------------------
# Fitting and predicting one candidate (Candidate::fit and Predictor::predict)


def known_value(c, x):
    return x[:, c.known].sum(axis=1) * (4.0 / MIB)


def unit_count(c, x):
    u = x[:, c.per_unit]
    u = np.where(np.isfinite(u), u, 0.0)
    return np.maximum(u, 1.0)


def model_input(c, x):
    # Engine features are emulated by the plain features (see the module's doc).
    return np.log1p(np.maximum(x, 0.0)) if c.log_features else x


def fit_candidate(c, x, y, seed):
    target = y
    shift = 0.0
    if c.known is not None:
        target = y - known_value(c, x)
        if c.log_target:
            lowest = float(np.min(target))
            typical = float(np.mean(np.abs(y))) if len(y) else 0.0
            if lowest <= 0.0:
                shift = -lowest + 1e-3 * max(typical, sys.float_info.min)
    if c.per_unit is not None:
        target = target / unit_count(c, x)
    if c.log_target:
        with np.errstate(divide="ignore", invalid="ignore"):
            target = np.log(target + shift)
    xi = model_input(c, x)
    if c.kind == "linear" and (x.shape[0] <= np.count_nonzero(np.ptp(x, axis=0))):
        # perfmodel's linear fit keeps only the intercept when there are no more rows than varying columns.
        return ("mean", float(np.mean(target)), shift)
    model = c.estimator(target, seed).fit(xi, target)
    return (model, None, shift)


def predict_candidate(c, fitted, x):
    model, constant, shift = fitted
    raw = np.full(x.shape[0], constant) if model == "mean" else model.predict(model_input(c, x))
    raw = np.asarray(raw, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.exp(raw) if c.log_target else raw
        if c.per_unit is not None:
            y = y * unit_count(c, x)
        if c.known is not None:
            y = y + known_value(c, x) - shift
    y = np.where(np.isnan(y), 0.0, y)
    return np.clip(y, 0.0, sys.float_info.max)


def evaluate(c, x, y, folds, seed):
    """cv::evaluate: out-of-fold predictions of one candidate, or the reason it was skipped; and seconds."""
    started = time.perf_counter()
    if c.log_target and c.known is None and np.any(y <= 0.0):
        return None, "skipped: log target needs positive values", time.perf_counter() - started
    predicted = np.full(len(y), np.nan)
    held_out = np.zeros(len(y), dtype=bool)
    try:
        for fold in folds:
            held_out[:] = False
            held_out[fold] = True
            train = np.flatnonzero(~held_out)
            if len(train) == 0 or len(fold) == 0:
                continue
            fitted = fit_candidate(c, x[train], y[train], seed)
            predicted[fold] = predict_candidate(c, fitted, x[fold])
    except Exception as e:  # a candidate that cannot be fitted is reported, as in perfmodel
        return None, f"skipped: {type(e).__name__}: {e}", time.perf_counter() - started
    return predicted, None, time.perf_counter() - started


def warm_up(_):
    # Import the learners in a worker before the clock starts (loky starts processes lazily).
    import sklearn.ensemble  # noqa: F401
    import xgboost  # noqa: F401

    return os.getpid()


# ---------------------------------------------------------------------------------------------------------
# Selection (cv::scores, cv::select, cv::simplest_equivalent)


def mape(y, p):
    keep = y != 0.0
    if not np.any(keep):
        return 0.0
    return float(100.0 * np.mean(np.abs(y[keep] - p[keep]) / np.abs(y[keep])))


def row_losses(y, p):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y != 0.0, 100.0 * np.abs(y - p) / np.abs(y), np.nan)  # NaN = ignored (measured 0)


def simplest_equivalent(candidates, predictions, y, best):
    rows = len(y)
    reference = row_losses(y, predictions[best])
    kept = reference[~np.isnan(reference)]
    floor = MAPE_FLOOR  # perfmodel's floor for MAPE (the MAE/R² floors are not needed here)
    chosen = best
    for i, p in enumerate(predictions):
        if i == best or p is None or len(p) != rows or candidates[i].size(rows) >= candidates[chosen].size(rows):
            continue
        mine = row_losses(y, p)
        both = ~np.isnan(mine) & ~np.isnan(reference)
        d = mine[both] - reference[both]
        d = d[np.isfinite(d)]
        if len(d) < 2 or len(d) < len(kept):
            continue
        n = float(len(d))
        mean = float(d.sum() / n)
        var = float(((d - mean) ** 2).sum() / (n - 1.0))
        se = math.sqrt(var / n)
        if mean <= max(se, floor):
            chosen = i
    return chosen


def fold_assignment(n, k, seed):
    k = min(max(k, 2), max(n, 2))
    order = np.random.RandomState(seed).permutation(n)
    folds = [np.sort(order[i::k]) for i in range(k)]
    return folds


def isolation_outliers(x, y, contamination, seed):
    """Indices of the round(contamination * n) rows sklearn's isolation forest finds most anomalous."""
    n = len(y)
    count = int(math.floor(min(max(contamination, 0.0), 0.5) * n + 0.5))
    if count == 0:
        return np.array([], dtype=int)
    space = np.column_stack([x, y])
    space = np.sign(space) * np.log1p(np.abs(space))
    forest = IsolationForest(
        n_estimators=100, max_samples=min(256, n), contamination=contamination if contamination > 0 else "auto",
        random_state=seed, n_jobs=1,
    ).fit(space)
    scores = forest.score_samples(space)  # lower = more anomalous
    order = np.argsort(scores, kind="stable")
    return np.sort(order[:count])


# ---------------------------------------------------------------------------------------------------------
# Data


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [r for r in reader if r]
    return header, rows


def parse_float(s):
    if s == "":
        return None
    try:
        return float(s)
    except ValueError:
        return None


def nominal_speed(device_dir):
    """pipeline::nominal_speed: median probe reading over the latency rows of every layer type."""
    readings = []
    for layer_type in LAYER_TYPES:
        path = device_dir / f"{layer_type}.csv"
        if not path.exists():
            continue
        header, rows = read_csv(path)
        if "speed_ref_ms" not in header:
            continue
        il, ip = header.index("latency_ms"), header.index("speed_ref_ms")
        for r in rows:
            if parse_float(r[il]) is None:
                continue
            v = parse_float(r[ip])
            if v is not None and math.isfinite(v) and v > 0.0:
                readings.append(v)
    return float(np.median(readings)) if readings else None


def dataset(header, rows, layer_type, metric, nominal):
    """Dataset::from_samples: feature rows and targets of one metric."""
    ic, il = header.index("config"), header.index("latency_ms")
    names = header[ic + 1 : il]
    im, ist = header.index(METRIC_COLUMNS[metric]), header.index("status")
    ip = header.index("speed_ref_ms") if "speed_ref_ms" in header else None
    x, y = [], []
    for r in rows:
        if r[ist] == "failed":
            continue
        v = parse_float(r[im])
        if v is None or not math.isfinite(v):
            continue
        if metric == "latency" and nominal is not None and layer_type in FOLLOWS_PROBE and ip is not None:
            probe = parse_float(r[ip])
            if probe is not None:
                v = v / (probe / nominal) ** PROBE_ELASTICITY
        x.append([float(s) for s in r[ic + 1 : il]])
        y.append(v)
    x = np.asarray(x, dtype=np.float64).reshape(len(y), len(names))
    return names, x, np.asarray(y, dtype=np.float64)


# ---------------------------------------------------------------------------------------------------------
# Host facts


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpuinfo().get("model name", platform.processor() or "unknown")


def cpuinfo():
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                info.setdefault(k, v)
    except OSError:
        pass
    return info


def engine_copy_auto(collectors, device):
    """Whether perfmodel would train conv2d/dense/matmul latency with the engine's features (HostEngine::LayoutsAndTiles):
    the device's profile says host = true, executor tract, 1 thread, and its fingerprint is this machine's."""
    path = collectors / f"{device}.toml"
    if not path.exists():
        return False, f"no profile {path}"
    try:
        import tomllib

        profile = tomllib.loads(path.read_text())
    except Exception as e:  # noqa: BLE001
        return False, f"unreadable profile {path}: {e}"
    if not (profile.get("host") is True and profile.get("executor") == "tract" and profile.get("threads") == 1):
        return False, f"{path}: not a 1-thread tract host profile"
    fp = profile.get("fingerprint") or {}
    info = cpuinfo()
    here = {
        "arch": platform.machine(),
        "vendor": info.get("vendor_id"),
        "family": int(info["cpu family"]) if info.get("cpu family", "").isdigit() else None,
        "model": int(info["model"]) if info.get("model", "").isdigit() else None,
        "model_name": info.get("model name"),
    }
    for field, value in here.items():
        if field in fp and value is not None and fp[field] != value:
            return False, f"{path}: measured on another machine ({field} {fp[field]!r} here {value!r})"
    return True, f"{path}: 1-thread tract profile of this machine"


# ---------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", required=True)
    ap.add_argument("--data-dir", default="./data")
    ap.add_argument("--jobs", type=int, default=2, help="candidates fitted at once (default 2)")
    ap.add_argument("--layers", default="", help="comma-separated layer types (default: all with data)")
    ap.add_argument("--metrics", default="latency,power,memory")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--contamination", type=float, default=0.02)
    ap.add_argument("--backend", choices=["loky", "threading"], default="loky")
    ap.add_argument("--engine-copy", choices=["auto", "yes", "no"], default="auto")
    ap.add_argument("--collectors", default="./collectors", help="device profiles, for --engine-copy auto")
    ap.add_argument("--candidates", action="store_true", help="also print every candidate's CV MAPE and seconds")
    args = ap.parse_args()

    device_dir = Path(args.data_dir) / args.device
    if not device_dir.is_dir():
        sys.exit(f"no data directory {device_dir}")
    if args.layers:
        layers = [s.strip() for s in args.layers.split(",") if s.strip()]
        unknown = [l for l in layers if l not in LAYER_TYPES]
        if unknown:
            sys.exit(f"--layers: unknown layer type(s) {unknown} (known: {', '.join(LAYER_TYPES)})")
    else:
        layers = [l for l in LAYER_TYPES if (device_dir / f"{l}.csv").exists()]
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if any(m not in METRIC_COLUMNS for m in metrics):
        sys.exit(f"--metrics: expected some of {', '.join(METRIC_COLUMNS)}")
    if args.engine_copy == "auto":
        engine_copy, why = engine_copy_auto(Path(args.collectors), args.device)
    else:
        engine_copy, why = args.engine_copy == "yes", "--engine-copy " + args.engine_copy
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)

    print(f"cpu: {cpu_model()} ({os.cpu_count()} CPUs visible)")
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"scikit-learn {sklearn.__version__}, xgboost {xgboost.__version__}, joblib {joblib.__version__}"
    )
    print(
        f"device {args.device} ({device_dir}), {args.folds} folds, seed {args.seed}, contamination "
        f"{args.contamination}, selected by mape"
    )
    print(
        f"parallelism: {jobs} joblib worker(s), backend {args.backend if jobs > 1 else 'sequential (in-process)'}, "
        f"one candidate (all folds) per task, each model n_jobs=1, BLAS/OpenMP threads 1"
    )
    print(
        f"engine-feature copy of conv2d/dense/matmul latency: {'yes (emulated with the plain features)' if engine_copy else 'no'}"
        f" [{why}]"
    )
    sys.stdout.flush()

    base = default_candidates()
    results, skipped = [], []
    with Parallel(n_jobs=jobs, backend=args.backend, batch_size=1, pre_dispatch="2*n_jobs") as parallel:
        if jobs > 1:
            parallel(delayed(warm_up)(i) for i in range(jobs))
        total_started = time.perf_counter()
        nominal = nominal_speed(device_dir)
        for layer_type in layers:
            path = device_dir / f"{layer_type}.csv"
            if not path.exists():
                for metric in metrics:
                    skipped.append((layer_type, metric, f"no data file {path}"))
                continue
            header, rows = read_csv(path)
            for metric in metrics:
                names, x_all, y_all = dataset(header, rows, layer_type, metric, nominal)
                need = max(MIN_ROWS, args.folds)
                if len(y_all) < need:
                    skipped.append(
                        (layer_type, metric,
                         f"{len(y_all)} of {len(rows)} rows have a measured {METRIC_COLUMNS[metric]} (at least {need} needed)")
                    )
                    continue
                candidates = candidates_for(base, layer_type, metric, names, engine_copy)
                started = time.perf_counter()
                flagged = isolation_outliers(x_all, y_all, args.contamination, args.seed)
                keep = np.setdiff1d(np.arange(len(y_all)), flagged)
                x, y = x_all[keep], y_all[keep]
                folds = fold_assignment(len(y), args.folds, args.seed)
                evaluations = parallel(delayed(evaluate)(c, x, y, folds, args.seed) for c in candidates)
                losses = []
                for predicted, reason, _ in evaluations:
                    m = mape(y, predicted) if predicted is not None else float("nan")
                    losses.append(m if math.isfinite(m) else float("inf"))
                ok = [i for i, (p, _, _) in enumerate(evaluations) if p is not None]
                if not ok:
                    skipped.append((layer_type, metric, "no candidate could be fitted"))
                    continue
                best = min(ok, key=lambda i: (losses[i], i))
                best = simplest_equivalent(candidates, [e[0] for e in evaluations], y, best)
                cv_seconds = time.perf_counter() - started
                refit_started = time.perf_counter()
                fit_candidate(candidates[best], x, y, args.seed)
                refit_seconds = time.perf_counter() - refit_started
                seconds = time.perf_counter() - started
                results.append(
                    dict(layer=layer_type, metric=metric, rows=len(y), removed=len(flagged), candidates=len(candidates),
                         best=candidates[best].label(), mape=losses[best], seconds=seconds, cv=cv_seconds,
                         refit=refit_seconds)
                )
                r = results[-1]
                print(
                    f"  {layer_type}/{metric}: {r['rows']} rows, {r['candidates']} candidates, best {r['best']} "
                    f"({r['mape']:.2f}%), {seconds:.2f} s",
                    flush=True,
                )
                if args.candidates:
                    for c, (predicted, reason, secs), loss in zip(candidates, evaluations, losses):
                        shown = f"{loss:8.2f}" if predicted is not None else f"{'-':>8}"
                        print(f"      {c.label():<44} {shown} % {secs:8.3f} s {reason or ''}")
        total = time.perf_counter() - total_started

    print()
    print(
        f"{'layer':<18} {'metric':<8} {'rows':>6} {'removed':>7} {'cands':>5} {'best candidate':<44} "
        f"{'CV MAPE %':>9} {'cv s':>8} {'refit s':>8} {'train s':>8}"
    )
    for r in results:
        print(
            f"{r['layer']:<18} {r['metric']:<8} {r['rows']:>6} {r['removed']:>7} {r['candidates']:>5} {r['best']:<44} "
            f"{r['mape']:>9.2f} {r['cv']:>8.2f} {r['refit']:>8.2f} {r['seconds']:>8.2f}"
        )
    for layer_type, metric, reason in skipped:
        print(f"{layer_type:<18} {metric:<8} not trained: {reason}")
    print()
    print(f"triplets trained: {len(results)}, sum of triplet times: {sum(r['seconds'] for r in results):.2f} s")
    print(f"total wall time (data reading included, pool warm-up excluded): {total:.2f} s")


if __name__ == "__main__":
    main()
