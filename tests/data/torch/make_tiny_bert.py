#!/usr/bin/env python3
"""Make tiny BERT-encoder ONNX test fixtures with both PyTorch exporters, verify and describe them.

Versions used (Python 3.11.7, default PyPI (CUDA) builds of torch, run on CPU):
  torch 2.15.0+cu132, transformers 5.24.0, onnx 1.23.2, onnxscript 0.7.2,
  onnx_ir 1.1.0, onnxruntime 1.32.0, numpy 2.4.6, protobuf 7.36.2

Run:  python3 tests/data/torch/make_tiny_bert.py (not in CI: the files it writes are committed)
Writes into the directory of this script:
  tiny_bert_torchscript.onnx  (torch.onnx.export(..., dynamo=False, opset_version=17))
  tiny_bert_dynamo.onnx       (torch.onnx.export(..., dynamo=True, external_data=False))
  tiny_bert_summary.md        (checker / onnxruntime / comparison results, op counts, node lists)

Model: BertModel(BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)), eager attention,
torch.manual_seed(0), then every parameter overwritten with N(0, 0.02^2) (so no two
initializers are identical and no bias is all zeros; both exporters deduplicate identical
initializers), eval(). Input input_ids [1, 32] int64 in [0, 1000) drawn from the same RNG
stream right after the parameters. Wrapper: forward(input_ids) -> last_hidden_state only.
The exports are deliberately not run under torch.no_grad() (as for the other fixtures).
"""
import ast
import collections
import inspect
import os
import re
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import helper, numpy_helper
from transformers import BertConfig, BertModel

OUT = os.path.dirname(os.path.abspath(__file__))
TS = os.path.join(OUT, "tiny_bert_torchscript.onnx")
DY = os.path.join(OUT, "tiny_bert_dynamo.onnx")
SUMMARY = os.path.join(OUT, "tiny_bert_summary.md")
NOTES = []  # facts recorded during the run, copied into the summary


def note(msg):
    print(msg, flush=True)
    NOTES.append(msg)


class Wrap(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids):
        return self.bert(input_ids).last_hidden_state


# Third fixture (added later; defined below Wrap on purpose: the dynamo export records the source
# line of Wrap.forward in its stack-trace metadata, so nothing may be inserted above it or
# tiny_bert_dynamo.onnx stops being byte-identical):
#   tiny_bert_torchscript14.onnx  (torch.onnx.export(..., dynamo=False, opset_version=14), LayerNorm
#   decomposed into ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add; opset 13 fallback if 14 fails)
TS14 = os.path.join(OUT, "tiny_bert_torchscript14.onnx")


def build():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=64)
    try:
        m = BertModel(cfg, attn_implementation="eager")
        note("BertModel(cfg, attn_implementation='eager') accepted")
    except TypeError as e:
        note(f"attn_implementation kwarg not accepted ({e}); set cfg._attn_implementation='eager'")
        cfg._attn_implementation = "eager"
        m = BertModel(cfg)
    note(f"config._attn_implementation = {m.config._attn_implementation!r}")
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.02)
    m.eval()
    w = Wrap(m).eval()
    ids = torch.randint(0, 1000, (1, 32), dtype=torch.int64)
    return w, ids


def export_ts14(w, ids):
    """Third export, same model/weights/input, TorchScript exporter at opset 14 (13 as fallback).
    Runs after export_both so the other two files are produced exactly as before."""
    if os.path.exists(TS14):
        os.remove(TS14)
    for opset in (14, 13):
        try:
            torch.onnx.export(w, (ids,), TS14, dynamo=False, opset_version=opset,
                              input_names=["input_ids"], output_names=["last_hidden_state"])
            note(f"TorchScript export opset {opset} OK: {TS14}")
            return
        except Exception as e:
            note(f"TorchScript export opset {opset} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()


def export_both(w, ids):
    for p in (TS, DY, TS + ".data", DY + ".data"):
        if os.path.exists(p):
            os.remove(p)
    try:
        torch.onnx.export(w, (ids,), TS, dynamo=False, opset_version=17,
                          input_names=["input_ids"], output_names=["last_hidden_state"])
        note(f"TorchScript export OK: {TS}")
    except Exception as e:
        note(f"TorchScript export FAILED: {type(e).__name__}: {e}")
        traceback.print_exc()
    try:
        try:
            torch.onnx.export(w, (ids,), DY, dynamo=True, external_data=False)
            note(f"dynamo export (external_data=False) OK: {DY}")
        except TypeError as e:
            if "external_data" not in str(e):
                raise
            note(f"external_data not accepted ({e}); exporting with defaults")
            torch.onnx.export(w, (ids,), DY, dynamo=True)
            note(f"dynamo export (defaults) OK: {DY}")
    except Exception as e:
        note(f"dynamo export FAILED: {type(e).__name__}: {e}")
        traceback.print_exc()


# ---------------------------------------------------------------- description helpers
DT = {v: k for k, v in onnx.TensorProto.DataType.items()}
NP2ONNX = {np.dtype("float32"): "FLOAT", np.dtype("int64"): "INT64", np.dtype("bool"): "BOOL",
           np.dtype("float64"): "DOUBLE", np.dtype("int32"): "INT32"}


def fmt_vals(arr):
    if arr.ndim == 0:
        v = arr.item()
        return repr(float(np.float32(v)) if arr.dtype.kind == "f" else v) + " (scalar)"
    flat = arr.flatten().tolist()
    if arr.dtype.kind == "f":
        flat = [float(np.float32(x)) for x in flat]
    return repr(flat)


def tensor_desc(t, values=True):
    dims = list(t.dims)
    n = int(np.prod(dims)) if dims else 1
    s = f"{DT.get(t.data_type, t.data_type)} {dims}"
    if values and n <= 8:
        s += " = " + fmt_vals(numpy_helper.to_array(t))
    return s


def shape_of(vi):
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return f"{DT.get(tt.elem_type, tt.elem_type)} ?"
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return f"{DT.get(tt.elem_type, tt.elem_type)} {dims}"


def attr_str(a):
    if a.type == onnx.AttributeProto.TENSOR:
        return f"{a.name}=<tensor {tensor_desc(a.t)}>"
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        v = v.decode()
    elif isinstance(v, list):
        v = [x.decode() if isinstance(x, bytes) else x for x in v]
    if isinstance(v, float):
        v = float(np.float32(v))
    return f"{a.name}={v!r}"


def meta(node, key):
    for p in node.metadata_props:
        if p.key == key:
            return p.value
    return None


def layer_index(node, kind):
    if kind == "torchscript":
        m = re.search(r"/layer\.(\d+)/", node.name)
        return int(m.group(1)) if m else None
    sc = meta(node, "pkg.torch.onnx.name_scopes")
    if sc:
        for s in ast.literal_eval(sc):
            m = re.fullmatch(r"(?:bert\.)?encoder\.layer\.(\d+)", s)
            if m:
                return int(m.group(1))
    return None


def runtime_shapes(model, feeds):
    """Run with every node output exposed; name -> 'DTYPE [dims]' (actual shapes)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res = sess.run(names, feeds)
    return {k: f"{NP2ONNX.get(v.dtype, str(v.dtype))} {list(v.shape)}" for k, v in zip(names, res)}


def describe_nodes(nodes, ctx, kind, out):
    inits, consts, gin, shapes = ctx
    for n in nodes:
        dom = f"{n.domain}::" if n.domain else ""
        line = f"- **{dom}{n.op_type}** `{n.name}`"
        if kind == "dynamo":
            ch = meta(n, "pkg.torch.onnx.class_hierarchy")
            if ch:
                line += f" (from `{ast.literal_eval(ch)[-1]}`)"
        out.append(line)
        attrs = [attr_str(a) for a in n.attribute]
        if attrs:
            out.append(f"  - attrs: {', '.join(attrs)}")
        for i, name in enumerate(n.input):
            if name == "":
                out.append(f"  - in[{i}]: <empty>")
                continue
            if name in inits:
                d = f"initializer {tensor_desc(inits[name])}"
            elif name in consts:
                d = f"Constant {tensor_desc(consts[name])}"
            elif name in gin:
                d = f"graph input {shape_of(gin[name])}"
            else:
                d = shapes.get(name, "?")
            out.append(f"  - in[{i}]: `{name}` : {d}")
        for i, name in enumerate(n.output):
            out.append(f"  - out[{i}]: `{name}` : {shapes.get(name, '?')}")


def analyse(path, feeds, out):
    kind = "dynamo" if "dynamo" in os.path.basename(path) else "torchscript"
    fname = os.path.basename(path)
    out.append(f"\n## {fname}\n")
    out.append(f"- file size: {os.path.getsize(path)} bytes; external data file: "
               f"{'yes' if os.path.exists(path + '.data') else 'none'}")
    try:
        onnx.checker.check_model(path, full_check=True)
        chk = "OK"
    except Exception as e:
        chk = f"FAILED: {type(e).__name__}: {e}"
    out.append(f"- onnx.checker.check_model(path, full_check=True): {chk}")
    m = onnx.load(path)
    g = m.graph
    out.append(f"- ir_version {m.ir_version}; opset_import: " +
               ", ".join(f"{o.domain or 'ai.onnx'}={o.version}" for o in m.opset_import) +
               f"; producer: {m.producer_name} {m.producer_version}")
    out.append("- graph inputs: " + ", ".join(f"`{i.name}` {shape_of(i)}" for i in g.input))
    out.append("- graph outputs: " + ", ".join(f"`{o.name}` {shape_of(o)}" for o in g.output))
    out.append(f"- initializers: {len(g.initializer)} (total "
               f"{sum(int(np.prod(t.dims)) for t in g.initializer)} elements); "
               f"value_info entries: {len(g.value_info)}; local functions: {len(m.functions)}")
    cnt = collections.Counter((f"{n.domain}::" if n.domain else "") + n.op_type for n in g.node)
    out.append(f"- nodes: {len(g.node)}; op_type counts: " +
               ", ".join(f"{k} {v}" for k, v in sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))))

    inits = {t.name: t for t in g.initializer}
    consts = {n.output[0]: a.t for n in g.node if n.op_type == "Constant"
              for a in n.attribute if a.name == "value"}
    gin = {i.name: i for i in g.input}
    shapes = runtime_shapes(m, feeds)
    for k, t in inits.items():
        shapes.setdefault(k, tensor_desc(t, False))
    out.append("- shapes of non-constant tensors below: observed by running the model in onnxruntime "
               "(optimizations off, every node output exposed); small constants/initializers "
               "(<= 8 elements) show their values")
    ctx = (inits, consts, gin, shapes)
    li = [layer_index(n, kind) for n in g.node]
    blocks = sorted({x for x in li if x is not None})
    if not blocks:
        out.append("- no encoder layers found")
        return
    first_i = min(i for i, x in enumerate(li) if x is not None)
    last_i = max(i for i, x in enumerate(li) if x is not None)
    out.append(f"- encoder layers found: {len(blocks)}; nodes per layer: " +
               ", ".join(str(li.count(b)) for b in blocks))
    before = [n for i, n in enumerate(g.node) if i < first_i and li[i] is None]
    middle = [n for i, n in enumerate(g.node) if first_i <= i <= last_i and li[i] is None]
    after = [n for i, n in enumerate(g.node) if i > last_i and li[i] is None]
    layer0 = [n for i, n in enumerate(g.node) if li[i] == blocks[0]]
    out.append(f"\n### {fname}: nodes before the first encoder layer (embeddings etc., {len(before)} nodes, file order)\n")
    describe_nodes(before, ctx, kind, out)
    if middle:
        out.append(f"\n### {fname}: nodes inside the layer range not attributed to a layer ({len(middle)} nodes)\n")
        describe_nodes(middle, ctx, kind, out)
    out.append(f"\n### {fname}: first encoder layer (layer {blocks[0]}, {len(layer0)} nodes, file order)\n")
    describe_nodes(layer0, ctx, kind, out)
    if after:
        out.append(f"\n### {fname}: nodes after the last encoder layer ({len(after)} nodes)\n")
        describe_nodes(after, ctx, kind, out)


def main():
    w, ids = build()
    export_both(w, ids)
    export_ts14(w, ids)
    with torch.no_grad():
        ref = w(ids).numpy()
    feeds = {"input_ids": ids.numpy()}
    res = {"pytorch": ref}
    for tag, p in (("torchscript", TS), ("dynamo", DY), ("torchscript14", TS14)):
        if not os.path.exists(p):
            continue
        try:
            sess = ort.InferenceSession(p, providers=["CPUExecutionProvider"])
            names = [i.name for i in sess.get_inputs()]
            res[tag] = sess.run(None, {names[0]: feeds["input_ids"]})[0]
            note(f"onnxruntime {tag}: OK, inputs {names}, output {sess.get_outputs()[0].name} "
                 f"{list(res[tag].shape)} {res[tag].dtype}")
        except Exception as e:
            note(f"onnxruntime {tag}: FAILED: {type(e).__name__}: {e}")
    keys = list(res)
    cmp_lines = []
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            d = float(np.max(np.abs(res[keys[i]] - res[keys[j]])))
            cmp_lines.append(f"- max |{keys[i]} - {keys[j]}| = {d:.3e}")
    for l in cmp_lines:
        print(l)

    out = ["# Tiny BERT ONNX fixtures", "",
           "Generated by `make_tiny_bert.py` (see its header for model, weights and versions).", "",
           f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}, "
           f"onnxruntime {ort.__version__}", "", "## Run notes", ""]
    out += [f"- {n}" for n in NOTES]
    out += ["", "## Output comparison (input_ids [1, 32] from the script; onnxruntime CPU, default optimizations)",
            ""] + cmp_lines
    for p in (TS, DY, TS14):
        if os.path.exists(p):
            try:
                analyse(p, feeds, out)
            except Exception:
                out.append("```\n" + traceback.format_exc() + "```")
    with open(SUMMARY, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", SUMMARY)


if __name__ == "__main__":
    main()
