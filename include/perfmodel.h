/*
 * perfmodel.h — C interface to perfmodel, the per-layer performance model for neural-network inference.
 *
 * Link with -lperfmodel (target/debug/libperfmodel.so). Hand-written; the layouts below match the
 * #[repr(C)] types in src/ffi.rs exactly (tests/ffi.rs checks every size and offset).
 *
 * Usage:
 *     pm_estimator *est;
 *     if (pm_estimator_open("models", "local", &est) != PM_OK) {
 *         fprintf(stderr, "%s\n", pm_last_error());
 *         return 1;
 *     }
 *     pm_result r;
 *     if (pm_estimate_json(est, json_text, 0, &r) == PM_OK)
 *         printf("%.3f ms, %.3f mJ, %.1f MiB\n", r.latency_ms, r.energy_mj, r.peak_memory_mib);
 *     pm_estimator_close(est);
 *
 * Errors: every function that can fail returns a pm_status (PM_OK = 0) and leaves a human-readable message
 * (naming the layer and the field for invalid networks) for pm_last_error() on the calling thread. Output
 * arguments are written only on success. No Rust panic crosses this interface: a bug is reported as
 * PM_ERR_INTERNAL.
 *
 * Threads: a pm_estimator may be used from several threads at once (the estimator is immutable once opened);
 * pm_last_error() is per thread.
 */
#ifndef PERFMODEL_H
#define PERFMODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes returned by pm_* functions. */
typedef enum pm_status {
    PM_OK = 0,
    PM_ERR_NULL_ARGUMENT = 1,     /* a required pointer argument was NULL */
    PM_ERR_INVALID_ARGUMENT = 2,  /* impossible value: not UTF-8, unknown enum value, batch 0, bad handle */
    PM_ERR_INVALID_NETWORK = 3,   /* invalid network (JSON or layer array); the message names layer and field */
    PM_ERR_MODEL = 4,             /* model store missing, corrupt or from another version */
    PM_ERR_DEVICE = 5,            /* unknown device or invalid device profile */
    PM_ERR_IO = 6,                /* a file could not be read */
    PM_ERR_INTERNAL = 7,          /* a bug inside perfmodel (a caught panic) */
    PM_ERR_OTHER = 8              /* any other library error */
} pm_status;

/* Layer types (pm_layer.type). Same order as the net.json "type" names. Unsupported layers (17) and the
   channel_shuffle, channel_slice, matmul, layer_norm, softmax and transpose types have no pm_layer fields:
   pass such networks as JSON. */
typedef enum pm_layer_type {
    PM_CONV2D = 0,
    PM_DEPTHWISE_CONV2D = 1,
    PM_DENSE = 2,
    PM_MAX_POOL2D = 3,
    PM_AVG_POOL2D = 4,
    PM_GLOBAL_AVG_POOL2D = 5,
    PM_GLOBAL_MAX_POOL2D = 6,
    PM_FLATTEN = 7,
    PM_RESHAPE = 8,
    PM_ADD = 9,
    PM_MULTIPLY = 10,
    PM_CONCAT = 11,
    PM_ACTIVATION = 12,
    PM_BATCH_NORM = 13,
    PM_ZERO_PADDING2D = 14,
    PM_CROPPING2D = 15,
    PM_DROPOUT = 16
} pm_layer_type;

/* Activation functions (pm_layer.activation). */
typedef enum pm_activation {
    PM_ACT_LINEAR = 0,
    PM_ACT_RELU = 1,
    PM_ACT_RELU6 = 2,
    PM_ACT_LEAKY_RELU = 3,
    PM_ACT_ELU = 4,
    PM_ACT_GELU = 5,
    PM_ACT_SIGMOID = 6,
    PM_ACT_HARD_SIGMOID = 7,
    PM_ACT_TANH = 8,
    PM_ACT_SWISH = 9,
    PM_ACT_HARD_SWISH = 10,
    PM_ACT_SOFTMAX = 11
} pm_activation;

/* Padding modes (pm_layer.padding_mode). */
typedef enum pm_padding {
    PM_PADDING_VALID = 0,   /* no padding (the net.json default) */
    PM_PADDING_SAME = 1,    /* TensorFlow "same": output = ceil(input / stride) */
    PM_PADDING_EXPLICIT = 2 /* pm_layer.pad = [top, bottom, left, right] */
} pm_padding;

/*
 * One layer, for pm_estimate_layers(). Shapes are batch-less and channels-first ([C, H, W] or [features]).
 * A zero-initialised field means the net.json default, so memset(0) plus the fields that matter is a valid
 * layer. Negative sizes are rejected (PM_ERR_INVALID_NETWORK naming the field).
 */
typedef struct pm_layer {
    int32_t type;            /* pm_layer_type */
    int32_t activation;      /* pm_activation: fused activation (conv2d, depthwise_conv2d, dense) or the
                                function of a PM_ACTIVATION layer */
    int64_t units;           /* conv2d: filters; dense: units; depthwise_conv2d: depth multiplier (0 = 1) */
    int64_t kernel[2];       /* conv2d / depthwise_conv2d: kernel [h, w]; pools: pool size (0 = 2) */
    int64_t strides[2];      /* 0 = default: 1 for convolutions, the pool size for pools */
    int64_t dilation[2];     /* 0 = 1 */
    int64_t groups;          /* conv2d groups, 0 = 1 */
    int32_t padding_mode;    /* pm_padding, for convolutions and pools */
    int32_t no_bias;         /* non-zero: no bias (zero = bias, the net.json default) */
    int64_t pad[4];          /* [top, bottom, left, right]: explicit padding, zero_padding2d or cropping2d amounts */
    int64_t axis;            /* concat axis in the batch-less shape (0 = channels, negative from the end) */
    double rate;             /* dropout rate */
    const int64_t *target_shape; /* reshape: target shape (one entry may be -1) ... */
    size_t target_rank;          /* ... and its length */
    const int64_t *inputs;   /* indices of earlier layers consumed (-1 = the network input) ... */
    size_t n_inputs;         /* ... and how many; 0 = the previous layer (the network input for layer 0) */
} pm_layer;

/*
 * Whole-network totals. A metric the device has no model for is NaN (never a silent 0). The reasons behind
 * partial numbers are the "notes" of pm_estimate_json_full.
 */
typedef struct pm_result {
    double latency_ms;             /* sum of per-layer latencies; a lower bound when uncovered > 0 */
    double energy_mj;              /* sum of latency x power per layer; NaN when the device has no power model,
                                      leaves out layers without a power prediction */
    double peak_memory_mib;        /* liveness walk over the graph plus the layer's workspace */
    double memory_two_largest_mib; /* the paper's rule: the two largest per-layer memory estimates */
    double memory_two_mean_mib;    /* the paper's rule: 2 x the mean per-layer memory estimate */
    uint64_t layers;               /* number of layers estimated */
    uint64_t uncovered;            /* layers with no trained predictor (see pm_estimate_json_full) */
} pm_result;

/* An estimator: the trained models of one device. Opaque. */
typedef struct pm_estimator pm_estimator;

/* The message of the most recent pm_* call on this thread ("" after a success). Never NULL; valid until the next
 * pm_* call on this thread. */
const char *pm_last_error(void);

/* The library version (static string). */
const char *pm_version(void);

/* Open the trained models of `device` under `models_dir` (the layout `perfmodel train` writes). On success *out
 * is a handle to close with pm_estimator_close. Layers without a predictor are reported as uncovered; use
 * pm_estimator_open_method to price cheap ones from the device profile as `perfmodel estimate` does. */
int pm_estimator_open(const char *models_dir, const char *device, pm_estimator **out);

/* Open the estimator `perfmodel estimate --method METHOD` builds: METHOD is "learned" (the trained models under
 * models_dir), "paleo" (the roofline baseline from the peak numbers in collectors_dir/DEVICE.toml) or "template"
 * (the nearest measured sample under data_dir). The device profile in collectors_dir, when it exists, also gives
 * the memory bandwidth that prices cheap layers without a predictor, exactly as on the command line. All
 * arguments are required; directories a method does not use are not read. */
int pm_estimator_open_method(const char *models_dir, const char *data_dir, const char *collectors_dir,
                             const char *device, const char *method, pm_estimator **out);

/* Release an estimator. NULL is ignored. The handle must not be used afterwards. */
void pm_estimator_close(pm_estimator *estimator);

/* Estimate a network given as net.json text (NUL-terminated UTF-8). batch > 0 overrides the network's
 * batch_size; 0 keeps it. */
int pm_estimate_json(const pm_estimator *estimator, const char *json, size_t batch, pm_result *out);

/* Like pm_estimate_json, but *out_json receives the full estimate as JSON (the `perfmodel estimate --format
 * json` document: per-layer values, predictors, uncovered layers). Free it with pm_string_free. */
int pm_estimate_json_full(const pm_estimator *estimator, const char *json, size_t batch, char **out_json);

/* Free a string returned by this library. NULL is ignored. */
void pm_string_free(char *s);

/* Estimate a network given as an array of n layers in execution order, fed by an input of shape
 * input_shape[0..rank] (batch-less), at batch size `batch` (> 0). Layers are named "layer0", "layer1", ... in
 * error messages. */
int pm_estimate_layers(const pm_estimator *estimator, const pm_layer *layers, size_t n, const int64_t *input_shape,
                       size_t rank, size_t batch, pm_result *out);

#ifdef __cplusplus
}
#endif

#endif /* PERFMODEL_H */
