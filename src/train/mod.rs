//! Training: one regressor per (device, layer type, metric), chosen among several methods by cross-validation,
//! flattened into a compact form and written to the model store that estimation loads.

pub mod model;
pub mod store;

pub use model::Predictor;
pub use store::{ModelStore, Scores};
