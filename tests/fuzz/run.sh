#!/usr/bin/env bash
# Run one fuzz target for a fixed number of inputs (docs/fuzzing.md).
#   tests/fuzz/run.sh TARGET [RUNS]      TARGET: net_json onnx_import data_csv profile_toml model_store ffi
# Seeds come from the repository's own files (networks, ONNX fixtures, data, profiles, model files) into
# tests/fuzz/corpus/TARGET, which grows as the fuzzer finds new coverage; crashes go to tests/fuzz/artifacts/.
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
target=${1:?target}
runs=${2:-1000000}
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus="$root/tests/fuzz/corpus/$target"
mkdir -p "$corpus"
max_len=65536
seed() { cp "$@" "$corpus/" 2>/dev/null || true; }
case "$target" in
  net_json) seed "$root"/zoo/holdout/*.json "$root"/tests/data/tiny_net.json ;;
  onnx_import) seed "$root"/tests/data/torch/*_torchscript.onnx "$root"/tests/data/tf2onnx/tiny_se_nobias_opset13_nchw.onnx ;;
  data_csv)
    # A header and a few rows each: a CSV's cost grows with its rows, and the fuzzer's mutations with its length.
    for t in conv2d dense concat reshape; do head -4 "$root/data/xeon480/$t.csv" > "$corpus/$t.csv"; done
    max_len=4096 ;;
  profile_toml) seed "$root"/collectors/*.toml ;;
  model_store)
    # A selector byte (even: a model file of layer type selector/2; odd: a manifest), then the bytes.
    python3 - "$root" "$corpus" <<'PY'
import json, sys, os
root, corpus = sys.argv[1], sys.argv[2]
# perfmodel::LayerType::ALL's order: the target reads the layer type as ALL[selector / 2].
order = ["conv2d", "depthwise_conv2d", "dense", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
         "global_max_pool2d", "flatten", "reshape", "add", "multiply", "concat", "activation", "batch_norm",
         "zero_padding2d", "cropping2d", "dropout", "unsupported", "channel_shuffle", "channel_slice"]
for device in ["xeon480-ort", "xeon480"]:
    d = os.path.join(root, "models", device)
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    with open(os.path.join(corpus, f"manifest-{device}"), "wb") as f:
        f.write(b"\x01" + open(os.path.join(d, "manifest.json"), "rb").read())
    for m in manifest["models"]:
        path = os.path.join(d, m["file"])
        if os.path.getsize(path) > 300_000:
            continue
        with open(os.path.join(corpus, f"{device}-{m['layer_type']}-{m['metric']}"), "wb") as f:
            f.write(bytes([2 * order.index(m["layer_type"])]) + open(path, "rb").read())
PY
    ;;
  ffi)
    for f in "$root"/zoo/holdout/mnist_cnn.json "$root"/tests/data/tiny_net.json; do
      { printf '\x00'; cat "$f"; } > "$corpus/json-$(basename "$f")"
    done
    printf '\x01\x04\x03\x03\x00\x00\x00\x00\x00\x00\x00\x20\x00\x00\x00\x00\x00\x00\x00\x20' > "$corpus/layers" ;;
  *) echo "unknown target $target" >&2; exit 2 ;;
esac
cd "$root"
exec cargo +nightly fuzz run --fuzz-dir tests/fuzz -O "$target" "$corpus" -- \
  -runs="$runs" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=512 -print_final_stats=1 \
  -artifact_prefix="$root/tests/fuzz/artifacts/$target-"
