//! Training: one regressor per (device, layer type, metric), chosen among several methods by cross-validation,
//! flattened into a compact form and written to the model store that estimation loads.

pub mod cv;
pub mod fit;
pub mod isolation;
pub mod model;
pub mod pipeline;
pub mod report;
pub mod store;
pub mod tvm;

pub use model::Predictor;
pub use store::{ModelStore, Scores};
