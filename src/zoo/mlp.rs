//! Small multi-layer perceptrons, so the zoo (and therefore the sampled dense configs) also covers the
//! fully-connected networks people run on tabular data and flattened images.

use super::builder::Builder;
use crate::layer::Activation;
use crate::network::Network;

/// Published total parameters of the Keras example `mnist_mlp.py` (784-512-512-10): "Total params: 669,706".
pub const MNIST_MLP_PARAMS: u64 = 669_706;

/// The Keras `mnist_mlp.py` example: two 512-unit hidden layers with dropout.
pub fn mnist_mlp() -> Network {
    let mut b = Builder::new("mnist_mlp", vec![784]);
    b.dense("dense", 512, Activation::Relu);
    b.dropout("dropout", 0.2);
    b.dense("dense_1", 512, Activation::Relu);
    b.dropout("dropout_1", 0.2);
    b.dense("dense_2", 10, Activation::Softmax);
    b.finish()
}

/// Parameters of [`tabular_mlp`]: 256*1024+1024 + 1024*1024+1024 + 1024*256+256 + 256*64+64 + 64*1+1.
pub const TABULAR_MLP_PARAMS: u64 = 263_168 + 1_049_600 + 262_400 + 16_448 + 65;

/// A wider regression MLP for tabular inputs (256 features → 1024 → 1024 → 256 → 64 → 1) with tanh / sigmoid
/// layers, so activations other than ReLU appear in dense-only networks.
pub fn tabular_mlp() -> Network {
    let mut b = Builder::new("tabular_mlp", vec![256]);
    b.dense("dense", 1024, Activation::Relu);
    b.dense("dense_1", 1024, Activation::Relu);
    b.dropout("dropout", 0.1);
    b.dense("dense_2", 256, Activation::Tanh);
    b.dense("dense_3", 64, Activation::Relu);
    b.dense("output", 1, Activation::Sigmoid);
    b.finish()
}
