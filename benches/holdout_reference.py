#!/usr/bin/env python3
"""Held-out error of `perfmodel train` against scikit-learn's extra-trees on the same splits.

Purpose
-------
Cross-validation scores are what selection optimised, so they flatter the chosen model. This script asks
the plain question instead: hold out a fraction of a device's rows, train on the rest, predict the held-out
rows. It runs `perfmodel train --holdout FRACTION --seed S` for several seeds (perfmodel writes the rows it
held out and its predictions to MODELS_DIR/DEVICE/holdout.csv), fits scikit-learn's ExtraTreesRegressor
(its defaults: 100 fully grown trees on the raw features and target, random_state=S) on every row perfmodel
did not hold out (perfmodel's isolation forest then drops 2% of them for its own training; the reference
keeps them, as a plain scikit-learn user would), and prints both errors on the same held-out rows, split by
split. Rows measured as 0 are left out of the errors.

The features are the data file's columns between `config` and the first measurement column (perfmodel's
LayerType::feature_names), as in benches/reference_train.py. Measured values come from holdout.csv, so a
device whose latencies perfmodel brings to a nominal speed is compared on those values; for the training
rows the reference sees the file's raw values (the published GTX 980 Ti slice has no speed probe, so the two
agree there).

"Flagged" counts held-out rows measured at more than --threshold times their prediction: what
`perfmodel outliers` would flag as a slow (untuned) kernel.

Usage
-----
    pip install scikit-learn
    perfmodel import tvm-profiling ../shared/datasets/tvm-980ti --device gtx980ti --data-dir /tmp/d980
    python3 benches/holdout_reference.py --device gtx980ti --data-dir /tmp/d980 --models-dir /tmp/m980 \\
        --layers conv2d --metrics latency --seeds 1-20

Options: --perfmodel PATH (default: target/debug/perfmodel, else `perfmodel` on PATH), --holdout (0.2),
--seeds A-B or a,b,c (default 1-10), --threshold (2.0), --layers, --metrics (default latency).
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys

import numpy as np
from sklearn.ensemble import ExtraTreesRegressor

COLUMN = {"latency": "latency_ms", "power": "power_w", "memory": "memory_mib"}


def seeds(text):
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def read_rows(path, metric):
    """{key: [(features, value), ...]}: every measured row, a key measured twice keeping both."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    first, column = header.index("config") + 1, header.index(COLUMN[metric])
    key_col = header.index("key")
    out = {}
    for r in rows[1:]:
        try:
            x = [float(v) for v in r[first:header.index("latency_ms")]]
            y = float(r[column])
        except ValueError:
            continue
        if np.isfinite(y):
            out.setdefault(r[key_col], []).append((x, y))
    return out


def ape(measured, predicted):
    return np.abs(predicted - measured) / np.abs(measured) * 100.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", required=True)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--models-dir", required=True, help="scratch models directory (overwritten)")
    ap.add_argument("--perfmodel", default=None)
    ap.add_argument("--holdout", type=float, default=0.2)
    ap.add_argument("--seeds", type=seeds, default=list(range(1, 11)))
    ap.add_argument("--threshold", type=float, default=2.0)
    ap.add_argument("--layers", default="conv2d")
    ap.add_argument("--metrics", default="latency")
    args = ap.parse_args()
    exe = args.perfmodel or ("target/debug/perfmodel" if os.path.exists("target/debug/perfmodel") else shutil.which("perfmodel"))
    if not exe:
        sys.exit("perfmodel not found: build it (cargo build) or pass --perfmodel")
    totals = {}
    for seed in args.seeds:
        cmd = [exe, "train", "--device", args.device, "--data-dir", args.data_dir, "--models-dir", args.models_dir,
               "--layers", args.layers, "--metrics", args.metrics, "--holdout", str(args.holdout), "--seed", str(seed)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
        held = {}
        path = os.path.join(args.models_dir, args.device, "holdout.csv")
        if not os.path.exists(path):
            sys.exit(f"perfmodel held out no rows (too few rows per triplet?):\n{done.stdout}")
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                held.setdefault((r["layer_type"], r["metric"]), []).append(
                    (r["key"], float(r["measured"]), float(r["predicted"])))
        for (layer, metric), rows in sorted(held.items()):
            data = read_rows(os.path.join(args.data_dir, args.device, f"{layer}.csv"), metric)
            keys = {k for k, _, _ in rows}
            rows = [r for r in rows if r[1] > 0]
            train = [v for k, vs in data.items() if k not in keys for v in vs]
            x = np.array([v[0] for v in train])
            y = np.array([v[1] for v in train])
            et = ExtraTreesRegressor(random_state=seed, n_jobs=1).fit(x, y)
            xt = np.array([data[k][0][0] for k, _, _ in rows])
            measured = np.array([m for _, m, _ in rows])
            ours = np.array([p for _, _, p in rows])
            ref = et.predict(xt)
            line = totals.setdefault((layer, metric), [])
            e_ours, e_ref = ape(measured, ours), ape(measured, ref)
            flag_ours = int(np.sum(measured > args.threshold * ours))
            flag_ref = int(np.sum(measured > args.threshold * ref))
            line.append((e_ours.mean(), e_ref.mean(), np.median(e_ours), np.median(e_ref), flag_ours, flag_ref))
            print(f"seed {seed:>3} {layer}/{metric}: {len(rows)} held out  MAPE perfmodel {e_ours.mean():7.1f} %  "
                  f"extra-trees {e_ref.mean():7.1f} %   median APE {np.median(e_ours):6.1f} / {np.median(e_ref):6.1f} %   "
                  f"flagged {flag_ours} / {flag_ref}", flush=True)
    print()
    for (layer, metric), line in sorted(totals.items()):
        a = np.array(line)
        wins = int(np.sum(a[:, 0] <= a[:, 1]))
        print(f"{layer}/{metric} over {len(a)} splits: MAPE perfmodel mean {a[:, 0].mean():.1f} % (median "
              f"{np.median(a[:, 0]):.1f}), extra-trees mean {a[:, 1].mean():.1f} % (median {np.median(a[:, 1]):.1f}); "
              f"perfmodel at or below on {wins} of {len(a)}; median APE {a[:, 2].mean():.1f} / {a[:, 3].mean():.1f} %; "
              f"flagged per split {a[:, 4].mean():.1f} / {a[:, 5].mean():.1f}")


if __name__ == "__main__":
    main()
