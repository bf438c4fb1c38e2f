#!/usr/bin/env python3
"""A neural-architecture search loop that asks perfmodel's C library for latency, energy and memory.

Why this example exists: a NAS explores thousands of candidates and cannot run each one on the device, but it
can ask the per-layer performance model thousands of times a second. This script shows the intended use of
the C ABI (include/perfmodel.h) from Python with ctypes only:

  * open an estimator once (loading the models is the slow part), reuse it for every query; it is built the way
    `perfmodel estimate` builds it (`pm_estimator_open_method`), so both give the same numbers;
  * describe candidates as arrays of `pm_layer` structs (no JSON formatting/parsing per query);
  * check every return code and read `pm_last_error()` on failure.

The search is regularized evolution (Real et al., 2019) over a small CNN for 32x32 images: a stem convolution,
1-8 blocks (plain conv or depthwise-separable, with a width, a kernel size, an optional 2x2 max pool and an
optional residual connection) and a global-pool + dense head. The objective is the parameter count, a crude
stand-in for accuracy (a real search would train candidates or use a zero-cost proxy), subject to an estimated
latency budget. The point is the query loop, not the objective.

Usage: examples/nas_loop.py [--lib target/debug/libperfmodel.so] [--models models] [--device local]
                            [--iterations 20000] [--budget-ms 1.0] [--seed 0]
                            [--data data] [--collectors collectors]
"""

import argparse
import collections
import ctypes
import functools
import math
import operator
import os
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- The C ABI (mirrors include/perfmodel.h) -------------------------------------------------------------------

STATUS_NAMES = {
    0: "PM_OK",
    1: "PM_ERR_NULL_ARGUMENT",
    2: "PM_ERR_INVALID_ARGUMENT",
    3: "PM_ERR_INVALID_NETWORK",
    4: "PM_ERR_MODEL",
    5: "PM_ERR_DEVICE",
    6: "PM_ERR_IO",
    7: "PM_ERR_INTERNAL",
    8: "PM_ERR_OTHER",
}
PM_OK, PM_ERR_INVALID_NETWORK = 0, 3
PM_CONV2D, PM_DEPTHWISE_CONV2D, PM_DENSE, PM_MAX_POOL2D = 0, 1, 2, 3
PM_GLOBAL_AVG_POOL2D, PM_ADD = 5, 9
PM_ACT_LINEAR, PM_ACT_RELU, PM_ACT_RELU6, PM_ACT_SOFTMAX = 0, 1, 2, 11
PM_PADDING_VALID, PM_PADDING_SAME = 0, 1

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class PmLayer(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int32),
        ("activation", ctypes.c_int32),
        ("units", ctypes.c_int64),
        ("kernel", ctypes.c_int64 * 2),
        ("strides", ctypes.c_int64 * 2),
        ("dilation", ctypes.c_int64 * 2),
        ("groups", ctypes.c_int64),
        ("padding_mode", ctypes.c_int32),
        ("no_bias", ctypes.c_int32),
        ("pad", ctypes.c_int64 * 4),
        ("axis", ctypes.c_int64),
        ("rate", ctypes.c_double),
        ("target_shape", c_int64_p),
        ("target_rank", ctypes.c_size_t),
        ("inputs", c_int64_p),
        ("n_inputs", ctypes.c_size_t),
    ]


class PmResult(ctypes.Structure):
    _fields_ = [
        ("latency_ms", ctypes.c_double),
        ("energy_mj", ctypes.c_double),
        ("peak_memory_mib", ctypes.c_double),
        ("memory_two_largest_mib", ctypes.c_double),
        ("memory_two_mean_mib", ctypes.c_double),
        ("layers", ctypes.c_uint64),
        ("uncovered", ctypes.c_uint64),
    ]


class PerfmodelError(Exception):
    def __init__(self, call, code, message):
        super().__init__(f"{call} failed: {STATUS_NAMES.get(code, code)} ({code}): {message}")
        self.code = code


class Perfmodel:
    """The library and one open estimator."""

    def __init__(self, lib_path, models_dir, data_dir, collectors_dir, device):
        self.lib = ctypes.CDLL(lib_path)
        lib = self.lib
        lib.pm_last_error.restype = ctypes.c_char_p
        lib.pm_last_error.argtypes = []
        lib.pm_version.restype = ctypes.c_char_p
        lib.pm_version.argtypes = []
        lib.pm_estimator_open_method.restype = ctypes.c_int
        lib.pm_estimator_open_method.argtypes = [ctypes.c_char_p] * 5 + [ctypes.POINTER(ctypes.c_void_p)]
        lib.pm_estimator_close.restype = None
        lib.pm_estimator_close.argtypes = [ctypes.c_void_p]
        lib.pm_estimate_layers.restype = ctypes.c_int
        lib.pm_estimate_layers.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            c_int64_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.POINTER(PmResult),
        ]
        self.version = lib.pm_version().decode()
        self.handle = ctypes.c_void_p()
        dirs = [os.fsencode(d) for d in (models_dir, data_dir, collectors_dir)]
        code = lib.pm_estimator_open_method(*dirs, device.encode(), b"learned", ctypes.byref(self.handle))
        self.check("pm_estimator_open_method", code)

    def check(self, call, code):
        if code != PM_OK:
            raise PerfmodelError(call, code, self.lib.pm_last_error().decode(errors="replace"))

    def close(self):
        if self.handle:
            self.lib.pm_estimator_close(self.handle)
            self.handle = ctypes.c_void_p()


# --- The search space ------------------------------------------------------------------------------------------

INPUT_SHAPE = (3, 32, 32)
CLASSES = 10
WIDTHS = (8, 16, 24, 32, 48, 64, 96, 128)
KERNELS = (1, 3, 5, 7)
MAX_BLOCKS = 8
# stem + per block at most 4 layers (depthwise, pointwise, add, pool) + head
MAX_LAYERS = 1 + 4 * MAX_BLOCKS + 2

Block = collections.namedtuple("Block", "kind width kernel pool residual")
fitness_of = operator.itemgetter(0)


@functools.lru_cache(maxsize=None)
def layer_bytes(layer_type, units=0, kernel=0, strides=0, padding=PM_PADDING_VALID, activation=PM_ACT_LINEAR,
                inputs=()):
    """One pm_layer as raw bytes, cached: candidates share most layers, so building a candidate is a join."""
    layer = PmLayer(type=layer_type, units=units, activation=activation, padding_mode=padding)
    layer.kernel[:] = (kernel, kernel)
    layer.strides[:] = (strides, strides)
    if inputs:
        indices = (ctypes.c_int64 * len(inputs))(*inputs)
        _input_arrays.append(indices)  # the cached bytes point at it: keep it alive
        layer.inputs = ctypes.cast(indices, c_int64_p)
        layer.n_inputs = len(inputs)
    return bytes(layer)


_input_arrays = []


def feasible(stem, blocks):
    """The candidate with the options that cannot apply switched off: a residual connection needs the block to
    keep its width, a 2x2 pool needs at least 2x2 pixels."""
    channels, size, fixed = stem.width, INPUT_SHAPE[1] // 2, []
    for b in blocks:
        b = b._replace(residual=b.residual and b.width == channels, pool=b.pool and size >= 2)
        channels, size = b.width, size // 2 if b.pool else size
        fixed.append(b)
    return stem, tuple(fixed)


def encode(stem, blocks):
    """A feasible candidate as pm_layer bytes, its layer count and its parameter count (the search objective)."""
    parts = [layer_bytes(PM_CONV2D, stem.width, stem.kernel, 2, PM_PADDING_SAME, PM_ACT_RELU)]
    channels, params = stem.width, stem.kernel ** 2 * INPUT_SHAPE[0] * stem.width
    for b in blocks:
        block_input = len(parts) - 1
        if b.kind == "conv":
            parts.append(layer_bytes(PM_CONV2D, b.width, b.kernel, 1, PM_PADDING_SAME, PM_ACT_RELU))
            params += b.kernel ** 2 * channels * b.width + b.width
        else:
            parts.append(layer_bytes(PM_DEPTHWISE_CONV2D, 1, b.kernel, 1, PM_PADDING_SAME, PM_ACT_RELU6))
            parts.append(layer_bytes(PM_CONV2D, b.width, 1, 1, PM_PADDING_VALID, PM_ACT_RELU))
            params += b.kernel ** 2 * channels + channels + channels * b.width + b.width
        if b.residual:
            parts.append(layer_bytes(PM_ADD, inputs=(block_input, len(parts) - 1)))
        channels = b.width
        if b.pool:
            parts.append(layer_bytes(PM_MAX_POOL2D))
    parts.append(layer_bytes(PM_GLOBAL_AVG_POOL2D))
    parts.append(layer_bytes(PM_DENSE, CLASSES, activation=PM_ACT_SOFTMAX))
    params += channels * CLASSES + CLASSES
    return b"".join(parts), len(parts), params


def random_block(rng):
    return Block(rng.choice(("conv", "dwsep")), rng.choice(WIDTHS), rng.choice(KERNELS[1:]), rng.random() < 0.3,
                 rng.random() < 0.5)


def mutate(rng, stem, blocks):
    blocks = list(blocks)
    i = rng.randrange(len(blocks))
    what = rng.randrange(7)
    if what == 0:
        stem = stem._replace(width=rng.choice(WIDTHS), kernel=rng.choice((3, 5)))
    elif what == 1:
        blocks[i] = blocks[i]._replace(width=rng.choice(WIDTHS))
    elif what == 2:
        blocks[i] = blocks[i]._replace(kernel=rng.choice(KERNELS))
    elif what == 3:
        blocks[i] = blocks[i]._replace(pool=not blocks[i].pool, residual=not blocks[i].residual)
    elif what == 4:
        blocks[i] = blocks[i]._replace(kind="dwsep" if blocks[i].kind == "conv" else "conv")
    elif what == 5 and len(blocks) < MAX_BLOCKS:
        blocks.insert(i, random_block(rng))
    elif len(blocks) > 1:
        del blocks[i]
    return feasible(stem, blocks)


def describe(stem, blocks):
    parts = [f"conv{stem.kernel}x{stem.kernel}/{stem.width} s2"]
    for b in blocks:
        text = f"{b.kind}{b.kernel}x{b.kernel}/{b.width}"
        text += " +res" if b.residual else ""
        text += " +pool" if b.pool else ""
        parts.append(text)
    return " | ".join(parts + ["gap | dense/10"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default=os.path.join(REPO, "target", "debug", "libperfmodel.so"),
                        help="the perfmodel cdylib (built by cargo build)")
    parser.add_argument("--models", default=os.path.join(REPO, "models"), help="trained models (perfmodel train)")
    parser.add_argument("--data", default=os.path.join(REPO, "data"), help="collected data (unused by 'learned')")
    parser.add_argument("--collectors", default=os.path.join(REPO, "collectors"),
                        help="device profiles: the memory bandwidth prices cheap layers that have no predictor")
    parser.add_argument("--device", default="local", help="device whose models answer")
    parser.add_argument("--iterations", type=int, default=20000, help="candidates to estimate")
    parser.add_argument("--budget-ms", type=float, default=1.0, help="latency budget per inference")
    parser.add_argument("--batch", type=int, default=1, help="batch size of every candidate")
    parser.add_argument("--population", type=int, default=64, help="population size (the oldest candidate is evicted)")
    parser.add_argument("--sample", type=int, default=16, help="candidates drawn to pick the best as the next parent")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the mutations")
    args = parser.parse_args()

    try:
        pm = Perfmodel(args.lib, args.models, args.data, args.collectors, args.device)
    except (OSError, PerfmodelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"perfmodel {pm.version}: device '{args.device}' from {args.models}")
    try:
        search(pm, args)
    except PerfmodelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        pm.close()
    return 0


def search(pm, args):
    """Regularized evolution: mutate the best of a random sample of the population, evict the oldest."""
    rng = random.Random(args.seed)
    buffer = (PmLayer * MAX_LAYERS)()
    shape = (ctypes.c_int64 * 3)(*INPUT_SHAPE)
    result = PmResult()
    result_ref = ctypes.byref(result)
    estimate = pm.lib.pm_estimate_layers
    handle = pm.handle

    population = collections.deque()
    best = None
    invalid = 0
    in_library = 0.0
    start = time.perf_counter()
    for _ in range(args.iterations):
        if len(population) < args.population:
            stem = Block("conv", rng.choice(WIDTHS), rng.choice((3, 5)), False, False)
            candidate = feasible(stem, [random_block(rng) for _ in range(rng.randint(1, 4))])
        else:
            parent = max(rng.choices(population, k=args.sample), key=fitness_of)
            candidate = mutate(rng, *parent[1])
        data, layers, params = encode(*candidate)
        ctypes.memmove(buffer, data, len(data))
        t0 = time.perf_counter()
        code = estimate(handle, buffer, layers, shape, 3, args.batch, result_ref)
        in_library += time.perf_counter() - t0
        if code == PM_ERR_INVALID_NETWORK:
            invalid += 1  # an impossible candidate (the message says which layer and field): skip it
            continue
        pm.check("pm_estimate_layers", code)
        fits = result.latency_ms <= args.budget_ms and result.uncovered == 0
        # Fitness: capacity inside the budget; outside it, the less over budget the better.
        fitness = params if fits else -result.latency_ms
        population.append((fitness, candidate))
        if len(population) > args.population:
            population.popleft()
        if fits and (best is None or params > best[0]):
            best = (params, candidate, result.latency_ms, result.energy_mj, result.peak_memory_mib)
    elapsed = time.perf_counter() - start

    print(f"estimated {args.iterations} networks in {elapsed:.3f} s: {args.iterations / elapsed:.0f} networks/s "
          f"(library calls alone: {args.iterations / max(in_library, 1e-12):.0f} networks/s), "
          f"{invalid} invalid candidates")
    if best is None:
        print(f"best: none under the {args.budget_ms} ms budget")
        return
    params, candidate, latency, energy, memory = best
    energy_text = "energy n/a (no power model)" if math.isnan(energy) else f"{energy:.4f} mJ"
    print(f"best: {latency:.4f} ms (budget {args.budget_ms} ms), {energy_text}, {memory:.2f} MiB peak, "
          f"{params} params: {describe(*candidate)}")


if __name__ == "__main__":
    sys.exit(main())
