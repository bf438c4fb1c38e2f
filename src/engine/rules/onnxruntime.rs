//! ONNX Runtime's rules (CPU execution provider) at a graph-optimisation level, as its optimiser rewrites the
//! graphs perfmodel exports. Each is checked by a test against the optimised graph ONNX Runtime saves
//! (`optimized_model_filepath`):
//!
//! - `basic` folds a batch norm into the linear convolution before it (`ConvBNFusion`);
//! - `extended` also runs the activation a convolution or dense layer is followed by inside it (`FusedConv`,
//!   `FusedGemm`: ReLU, ReLU6 as `Clip`, leaky ReLU, sigmoid, hard sigmoid, tanh);
//! - `all` adds the NCHWc layout transform on x86 (blocks of 16 channels with AVX-512, 8 with AVX2): a
//!   convolution runs blocked (its output channels padded to whole blocks), applies hard swish too, and takes a
//!   residual add of a tensor of the same shape into its output (the add's ReLU with it) when the add is its
//!   only reader.
//!
//!   A batch norm that is not folded into a convolution runs as a blocked 1x1 depthwise convolution, which takes
//!   the activation after it (DenseNet's pre-activations).
//!
//! Not followed yet: the two channel slices of ShuffleNet's split, which ONNX Runtime runs as one `Split` at
//! `extended` and above. What ONNX Runtime adds around blocked regions (`ReorderInput`, `ReorderOutput`) is not in the plan yet: a
//! layer measured alone pays for both of its reorders, a layer inside a blocked region for none.

use super::EngineRules;
use crate::engine::GraphOptimization;
use crate::layer::{Activation, Op};
use crate::network::{Analysis, Network, Source};

/// ONNX Runtime at one graph-optimisation level, on a machine with NCHWc blocks of `nchwc_block` channels
/// (0: no blocked layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnnxRuntime {
    pub level: GraphOptimization,
    pub nchwc_block: usize,
}

impl OnnxRuntime {
    /// The rules on this machine: the NCHWc block ONNX Runtime's kernels use for its instruction set.
    pub fn on_this_machine(level: GraphOptimization) -> OnnxRuntime {
        let isa = crate::device::Fingerprint::of_host().isa_features.as_deref().unwrap_or(&[]);
        let has = |f: &str| isa.iter().any(|x| x == f);
        let nchwc_block = if has("avx512f") {
            16
        } else if has("avx2") {
            8
        } else {
            0
        };
        OnnxRuntime { level, nchwc_block }
    }

    /// The rules for models measured with `engine` (an `engine` column, as `Executor::describe` writes it:
    /// `onnxruntime 1.32.0 (optimisation all)`), on this machine's NCHWc block; `None` for another engine.
    pub fn for_engine(engine: &str) -> Option<&'static OnnxRuntime> {
        static RULES: std::sync::OnceLock<Vec<OnnxRuntime>> = std::sync::OnceLock::new();
        let rest = engine.strip_prefix("onnxruntime ")?;
        let level = rest
            .split("(optimisation ")
            .nth(1)
            .and_then(|l| l.strip_suffix(')'))
            .and_then(|l| l.parse::<GraphOptimization>().ok())
            .unwrap_or_default();
        let rules =
            RULES.get_or_init(|| GraphOptimization::ALL.iter().map(|&l| OnnxRuntime::on_this_machine(l)).collect());
        rules.iter().find(|r| r.level == level)
    }

    fn at_least(&self, level: GraphOptimization) -> bool {
        let rank = |l: GraphOptimization| GraphOptimization::ALL.iter().position(|&x| x == l).unwrap_or(0);
        rank(self.level) >= rank(level)
    }

    /// Whether a convolution runs in the blocked layout (level `all`; its output channels are padded to whole
    /// blocks).
    fn blocked(&self, op: &Op) -> bool {
        self.at_least(GraphOptimization::All)
            && self.nchwc_block > 0
            && matches!(op, Op::Conv2d(_) | Op::DepthwiseConv2d(_))
    }
}

impl EngineRules for OnnxRuntime {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn kernel_takes_epilogue(&self, producer: &Op) -> bool {
        self.at_least(GraphOptimization::Basic) && self.runs_as_product(producer)
    }

    fn runs_as_product(&self, op: &Op) -> bool {
        match op {
            Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::Dense(_) => true,
            // A batch norm of its own runs as a blocked 1x1 depthwise convolution.
            Op::BatchNorm => self.nchwc_block > 0 && self.at_least(GraphOptimization::All),
            _ => false,
        }
    }

    fn fuses_activation(&self, producer: &Op, a: Activation) -> bool {
        if !self.at_least(GraphOptimization::Extended) {
            return a == Activation::Linear;
        }
        let fused = matches!(
            a,
            Activation::Linear
                | Activation::Relu
                | Activation::Relu6
                | Activation::LeakyRelu
                | Activation::Sigmoid
                | Activation::HardSigmoid
                | Activation::Tanh
        );
        // Hard swish only in the blocked kernels.
        fused || (a == Activation::HardSwish && self.at_least(GraphOptimization::All) && blocked_kind(producer))
    }

    fn folds_batch_norm(&self) -> bool {
        self.at_least(GraphOptimization::Basic)
    }

    fn fuses_padding(&self) -> bool {
        self.at_least(GraphOptimization::Basic)
    }

    fn residual_adds(&self, net: &Network, analysis: &Analysis, consumers_of: &[u32]) -> Vec<Option<(usize, usize)>> {
        let n = net.layers.len();
        let mut into = vec![None; n];
        if !self.at_least(GraphOptimization::All) || self.nchwc_block == 0 {
            return into;
        }
        // Back from an input of the add, through what the convolution takes in (its folded batch norm, the
        // activation it applies, a dropout inference drops), each read by the next alone, to a blocked
        // convolution.
        let blocked_conv = |mut j: usize| -> Option<usize> {
            loop {
                if consumers_of[j] != 1 {
                    return None;
                }
                let op = &net.layers[j].op;
                match (op, analysis.sources[j].as_slice()) {
                    (Op::Conv2d(_) | Op::DepthwiseConv2d(_), _) => return self.blocked(op).then_some(j),
                    (Op::BatchNorm, [Source::Layer(p)]) if self.folds_batch_norm() => j = *p,
                    (Op::Activation(a), [Source::Layer(p)]) if self.fuses_activation(&net.layers[*p].op, *a) => j = *p,
                    (Op::Dropout { .. }, [Source::Layer(p)]) => j = *p,
                    _ => return None,
                }
            }
        };
        for (i, layer) in net.layers.iter().enumerate() {
            if !matches!(layer.op, Op::Add) {
                continue;
            }
            let [a, b] = analysis.sources[i].as_slice() else { continue };
            let shapes = &analysis.input_shapes[i];
            if shapes.len() != 2 || shapes[0] != shapes[1] || a == b {
                continue;
            }
            // The later of the two convolutions: the other input is then ready when it stores its output.
            into[i] = [a, b]
                .iter()
                .enumerate()
                .filter_map(|(side, s)| match s {
                    Source::Layer(j) => blocked_conv(*j).map(|conv| (conv, side)),
                    Source::Input => None,
                })
                .max_by_key(|&(j, _)| j);
        }
        into
    }
}

fn blocked_kind(op: &Op) -> bool {
    matches!(op, Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::BatchNorm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::onnxruntime::optimized_nodes_per_layer;
    use crate::engine::rules::Role;
    use crate::engine::OrtExecutor;

    /// The plan of `rules` against the graph ONNX Runtime optimises at the same level: a layer runs in the plan
    /// exactly when ONNX Runtime keeps a node of its own for it (views left out: ONNX Runtime keeps a Flatten).
    fn plan_matches_onnxruntime(net: &Network, level: GraphOptimization) -> Vec<String> {
        let executor = OrtExecutor::new(1, level).unwrap_or_else(|e| panic!("these tests need ONNX Runtime: {e}"));
        let nodes = optimized_nodes_per_layer(&executor, net).unwrap();
        let rules = OnnxRuntime::on_this_machine(level);
        let plan = rules.plan(net, &net.analyze().unwrap());
        let mut wrong = Vec::new();
        for (i, layer) in net.layers.iter().enumerate() {
            if matches!(plan.role(i), Role::Free) {
                continue;
            }
            let runs = plan.runs(i);
            if runs != !nodes[i].is_empty() {
                wrong.push(format!(
                    "{} '{}' ({:?}): plan {:?}, ONNX Runtime nodes {:?}",
                    net.name,
                    layer.name,
                    level,
                    plan.role(i),
                    nodes[i]
                ));
            }
        }
        wrong
    }

    fn zoo(name: &str) -> Network {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("zoo").join(name);
        Network::load(&path).unwrap()
    }

    #[test]
    fn rules_are_chosen_by_the_engine_that_measured_the_models() {
        let rules = OnnxRuntime::for_engine("onnxruntime 1.32.0 (optimisation extended)").unwrap();
        assert_eq!(rules.level, GraphOptimization::Extended);
        assert_eq!(OnnxRuntime::for_engine("onnxruntime 1.20.1").unwrap().level, GraphOptimization::All);
        assert!(OnnxRuntime::for_engine("tract 0.23.9").is_none());
    }

    #[test]
    fn the_plan_follows_the_optimised_graph_at_every_level() {
        let nets = [
            "mobilenetv2.json",
            "torchvision/resnet18.json",
            "torchvision/mobilenet_v3_small.json",
            "torchvision/regnet_x_400mf.json",
            "torchvision/efficientnet_b0.json",
            "torchvision/densenet121.json",
            "inceptionv3.json",
        ];
        let mut wrong = Vec::new();
        for name in nets {
            let net = zoo(name);
            for level in GraphOptimization::ALL {
                wrong.extend(plan_matches_onnxruntime(&net, level));
            }
        }
        assert!(wrong.is_empty(), "{} layers differ:\n{}", wrong.len(), wrong.join("\n"));
    }
}
