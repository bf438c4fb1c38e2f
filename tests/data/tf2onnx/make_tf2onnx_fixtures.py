"""Make small Keras -> tf2onnx ONNX test fixtures for perfmodel's `import-onnx`.

The repository keeps tiny_cnn_opset13_{nhwc,nchw}, tiny_se_opset13_nchw, tiny_se_opset17_nhwc,
tiny_se_nobias_opset13_nchw, tiny_transformer_opset17_nhwc, tiny_transformer_erf_opset13_nhwc and ort_check.json
(tests/onnx.rs); the other files this writes are the same graphs at the other opset or layout.

Package versions this was run with (fresh venv, Python 3.11.7, x86_64 Linux, CPU only):
    tensorflow-cpu 2.21.0, keras 3.15.1, tf2onnx 1.17.0, onnx 1.23.2, onnxruntime 1.32.0,
    protobuf 7.36.2, numpy 2.4.6
    (installed with: pip install tensorflow-cpu tf2onnx onnx onnxruntime)

How to run:
    python3 -m venv venv && venv/bin/pip install tensorflow-cpu tf2onnx onnx onnxruntime
    OMP_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 CUDA_VISIBLE_DEVICES= \
        nice -n 19 venv/bin/python make_tf2onnx_fixtures.py [--out DIR] [--models tiny_cnn,tiny_se,...]

Models (random seeded weights, batch 1, NHWC Keras input):
    tiny_cnn          Conv-BN-ReLU, DWConv-BN-ReLU6, 1x1 conv + 1x1 projection residual Add, GAP, Dense softmax
    tiny_se           swish convs, ZeroPadding2D + strided DepthwiseConv2D, EfficientNet SE (GAP+Reshape,
                      swish/sigmoid 1x1 convs, Multiply) and MobileNetV3 SE (GAP keepdims, relu,
                      hard_sigmoid = ReLU6(x+3)/6, Multiply), hard_swish, keras 'hard_sigmoid' activation
    tiny_se_nobias    same with a bias-less Conv2D(activation='hard_sigmoid'): trips tf2onnx's transpose optimizer
                      (logged "Failed to apply optimize_transpose"), so the graph stays NHWC inside
    tiny_transformer  (16, 32) sequence: MultiHeadAttention(4 heads, key_dim 8) + residual + LayerNorm,
                      Dense(64, gelu) + Dense(32) + residual + LayerNorm; gelu is keras' approximate (tanh) form
    tiny_transformer_erf        same, exact gelu written as 0.5*x*(1+erf(x/sqrt 2)) (older tf.nn.gelu form)
    tiny_transformer_kerasgelu  same with activation='gelu' (keras 3 exact gelu -> TF Erfc): tf2onnx 1.17
                      fails ("Tensorflow op Erfc is not supported"), recorded in ort_check.json, no file
    mobilenetv2_035_96, efficientnetb0_64   (keras.applications, weights=None; not default, ~6.7 MB and ~21 MB per
                      file, mostly the 1000-class classifier: --models mobilenetv2_035_96,efficientnetb0_64 --out DIR)

Each model is written as NAME_opset{13,17}_{nhwc,nchw}.onnx: `nhwc` is tf2onnx's default (ONNX input NHWC like
Keras, Transposes inserted inside the graph), `nchw` uses tf2onnx's inputs_as_nchw (ONNX input is NCHW; 4-D
inputs only, so the transformer has no nchw variant). Every file is checked with onnx.checker (full_check)
and run with onnxruntime against Keras' output; the max abs diff is printed and written to DIR/ort_check.json.
The default set takes ~10 s on one core. Reruns are not byte-identical: tf2onnx's generated node names
(e.g. Conv__305) and, occasionally, whether its optimizer drops a redundant Reshape vary from run to run.
"""
import argparse
import json
import os

for k, v in dict(OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1",
                 CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2").items():
    os.environ.setdefault(k, v)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tf2onnx  # noqa: E402

L = keras.layers


def randomize_weights(model, rng):
    """Keras initialises biases, BN betas and moving statistics to 0/1: give them random values, so that
    tf2onnx cannot drop them as identities (it removes an Add of zeros) and the ORT comparison means something."""
    for v in model.weights:
        name = v.name.split("/")[-1].split(":")[0]
        if name in ("bias", "beta", "moving_mean"):
            v.assign(rng.normal(0, 0.1, v.shape).astype("float32"))
        elif name in ("gamma", "moving_variance"):
            v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32"))


def tiny_cnn():
    inp = keras.Input((32, 32, 3), batch_size=1, name="input")
    x = L.Conv2D(16, 3, padding="same", name="conv1")(inp)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.ReLU(name="relu1")(x)
    x = L.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = L.BatchNormalization(name="bn2")(x)
    x = L.ReLU(6.0, name="relu6")(x)
    main = L.Conv2D(32, 1, name="pw")(x)
    proj = L.Conv2D(32, 1, name="proj")(inp)
    x = L.Add(name="residual")([main, proj])
    x = L.GlobalAveragePooling2D(name="gap")(x)
    out = L.Dense(10, activation="softmax", name="fc")(x)
    return keras.Model(inp, out, name="tiny_cnn")


def hard_sigmoid(x):  # as keras.applications.MobileNetV3 writes it: layers.ReLU(6.0)(x + 3.0) * (1.0 / 6.0)
    return L.ReLU(6.0)(x + 3.0) * (1.0 / 6.0)


def tiny_se(hsig_bias=True, name="tiny_se"):
    inp = keras.Input((32, 32, 3), batch_size=1, name="input")
    x = L.Conv2D(16, 3, padding="same", use_bias=False, name="stem_conv")(inp)
    x = L.BatchNormalization(name="stem_bn")(x)
    x = L.Activation("swish", name="stem_swish")(x)
    # EfficientNet-style strided depthwise: explicit ZeroPadding2D (correct_pad) then 'valid'
    x = L.ZeroPadding2D(padding=((0, 1), (0, 1)), name="dw_pad")(x)
    x = L.DepthwiseConv2D(3, strides=2, padding="valid", use_bias=False, name="dw")(x)
    x = L.BatchNormalization(name="dw_bn")(x)
    x = L.Activation("swish", name="dw_swish")(x)
    # EfficientNet SE: GAP -> Reshape -> Conv swish -> Conv sigmoid -> Multiply
    se = L.GlobalAveragePooling2D(name="se1_squeeze")(x)
    se = L.Reshape((1, 1, 16), name="se1_reshape")(se)
    se = L.Conv2D(4, 1, padding="same", activation="swish", name="se1_reduce")(se)
    se = L.Conv2D(16, 1, padding="same", activation="sigmoid", name="se1_expand")(se)
    x = L.Multiply(name="se1_excite")([x, se])
    x = L.Conv2D(24, 1, padding="same", activation="swish", name="expand_conv")(x)
    # MobileNetV3 SE: GAP(keepdims) -> Conv relu -> Conv -> hard_sigmoid(ReLU6(x+3)/6) -> Multiply
    se = L.GlobalAveragePooling2D(keepdims=True, name="se2_squeeze")(x)
    se = L.Conv2D(8, 1, padding="same", name="se2_reduce")(se)
    se = L.ReLU(name="se2_relu")(se)
    se = L.Conv2D(24, 1, padding="same", name="se2_expand")(se)
    se = hard_sigmoid(se)
    x = L.Multiply(name="se2_excite")([x, se])
    # MobileNetV3 hard_swish: x * hard_sigmoid(x)
    x = L.Multiply(name="hswish")([x, hard_sigmoid(x)])
    # keras' built-in hard_sigmoid activation (keras 3: relu6(x+3)/6)
    x = L.Conv2D(24, 1, activation="hard_sigmoid", use_bias=hsig_bias, name="hsig_conv")(x)
    x = L.Conv2D(32, 1, use_bias=False, name="project_conv")(x)
    x = L.BatchNormalization(name="project_bn")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    out = L.Dense(10, activation="softmax", name="fc")(x)
    return keras.Model(inp, out, name=name)


def tiny_se_nobias():
    """tiny_se with a bias-less hsig_conv: tf2onnx 1.17's transpose optimizer crashes on a bias-less Conv followed
    by Add(rank-0 constant) ("Failed to apply optimize_transpose ... ValueError: max() arg is an empty sequence"),
    logs it and keeps the unoptimised graph: NHWC inside, a Transpose pair around every Conv, ReduceMean axes
    [1, 2], Pad in NHWC order, even with inputs_as_nchw."""
    return tiny_se(hsig_bias=False, name="tiny_se_nobias")


def _transformer(name, gelu):
    inp = keras.Input((16, 32), batch_size=1, name="input")
    a = L.MultiHeadAttention(num_heads=4, key_dim=8, name="mha")(inp, inp)
    x = L.LayerNormalization(epsilon=1e-6, name="ln1")(L.Add(name="res1")([inp, a]))
    f = L.Dense(64, activation=gelu, name="ffn1")(x)
    f = L.Dense(32, name="ffn2")(f)
    out = L.LayerNormalization(epsilon=1e-6, name="ln2")(L.Add(name="res2")([x, f]))
    return keras.Model(inp, out, name=name)


def tiny_transformer():
    """FFN with Dense(activation=keras.activations.gelu(approximate=True)): the tanh form."""
    return _transformer("tiny_transformer", lambda t: keras.activations.gelu(t, approximate=True))


def tiny_transformer_erf():
    """FFN with the exact GELU written with erf as TF <= 2.14's tf.nn.gelu did, 0.5*x*(1+erf(x/sqrt(2))), which
    tf2onnx converts (keras 3 / TF 2.21's exact gelu uses erfc, which it cannot)."""
    return _transformer("tiny_transformer_erf",
                        lambda t: 0.5 * t * (1.0 + tf.math.erf(t / tf.cast(1.4142135623730951, t.dtype))))


def tiny_transformer_kerasgelu():
    """FFN with Dense(activation='gelu') as asked: keras 3's exact gelu lowers to TF Erfc, which tf2onnx 1.17
    cannot convert (expected to fail; no file is kept)."""
    return _transformer("tiny_transformer_kerasgelu", "gelu")


def mobilenetv2_035_96():
    return keras.applications.MobileNetV2(alpha=0.35, input_shape=(96, 96, 3), weights=None)


def efficientnetb0_64():
    return keras.applications.EfficientNetB0(input_shape=(64, 64, 3), weights=None)


MODELS = dict(tiny_cnn=tiny_cnn, tiny_se=tiny_se, tiny_se_nobias=tiny_se_nobias, tiny_transformer=tiny_transformer,
              tiny_transformer_erf=tiny_transformer_erf, tiny_transformer_kerasgelu=tiny_transformer_kerasgelu,
              mobilenetv2_035_96=mobilenetv2_035_96, efficientnetb0_64=efficientnetb0_64)


def convert(model, name, out_dir, results):
    shape = (1,) + tuple(model.input_shape[1:])
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype("float32")
    ref = np.asarray(model(x, training=False))
    for opset in (13, 17):
        for layout in (("nhwc", "nchw") if len(shape) == 4 else ("nhwc",)):
            fname = f"{name}_opset{opset}_{layout}.onnx"
            path = os.path.join(out_dir, fname)
            entry = dict(file=fname, model=name, opset=opset, layout=layout)
            try:
                sig = (tf.TensorSpec(shape, tf.float32, name="input"),)
                kw = dict(inputs_as_nchw=["input"]) if layout == "nchw" else {}
                proto, _ = tf2onnx.convert.from_keras(model, input_signature=sig, opset=opset,
                                                      output_path=path, **kw)
                onnx.checker.check_model(onnx.load(path), full_check=True)
                entry["checker"] = "ok"
                so = ort.SessionOptions()
                so.intra_op_num_threads = 1
                so.inter_op_num_threads = 1
                sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                feed = x.transpose(0, 3, 1, 2) if layout == "nchw" else x
                got = sess.run(None, {sess.get_inputs()[0].name: feed})[0]
                entry.update(onnx_input=[sess.get_inputs()[0].name, list(sess.get_inputs()[0].shape)],
                             nodes=len(proto.graph.node), bytes=os.path.getsize(path),
                             max_abs_diff=float(np.max(np.abs(got - ref))), ref_max_abs=float(np.max(np.abs(ref))))
            except Exception as e:  # record and continue
                entry["error"] = f"{type(e).__name__}: {e}"
                if os.path.exists(path):  # tf2onnx writes the (invalid) file before the checker runs
                    os.remove(path)
            print(json.dumps(entry), flush=True)
            results.append(entry)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--models", default="tiny_cnn,tiny_se,tiny_se_nobias,tiny_transformer,tiny_transformer_erf,tiny_transformer_kerasgelu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("versions:", dict(tensorflow=tf.__version__, keras=keras.__version__, tf2onnx=tf2onnx.__version__,
                            onnx=onnx.__version__, onnxruntime=ort.__version__, numpy=np.__version__))
    results = []
    for name in args.models.split(","):
        keras.utils.set_random_seed(0)
        model = MODELS[name]()
        randomize_weights(model, np.random.default_rng(0))
        print(f"{name}: {model.count_params()} params", flush=True)
        convert(model, name, args.out, results)
    with open(os.path.join(args.out, "ort_check.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
