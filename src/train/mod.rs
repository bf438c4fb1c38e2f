//! Training: one regressor per (device, layer type, metric), chosen among several methods by cross-validation,
//! flattened into a compact form and written to the model store that estimation loads.
//!
//! The pieces: [`fit`] (the candidate estimators: smartcore's trees, boosting and linear regression, converted
//! right after fitting into the flat arrays of [`model`]; kNN on standardised features), [`cv`] (seeded k-fold
//! cross-validation, metrics, selection), [`isolation`] (outlier removal before training), [`pipeline`] (a whole
//! `perfmodel train` run), [`store`] (the versioned, hash-checked model files and manifest), [`report`]
//! (report.md, plots, store benchmark) and [`tvm`] (import of the published TVM_Profiling_Dataset).

pub mod cv;
pub mod fit;
pub mod grow;
pub mod isolation;
pub mod lstsq;
pub mod model;
pub mod pipeline;
pub mod report;
pub mod store;
pub mod tvm;

pub use model::Predictor;
pub use store::{ModelStore, Scores};
