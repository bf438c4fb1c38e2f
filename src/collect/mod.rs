//! Collection: measuring sampled layer configs on a device with a real engine, durably, resumably.
//!
//! Every later number (trained models, estimates, validation) is only as good as these measurements, and the
//! machine they are taken on is noisy and shared. Hence the protocol in [`runner`]: burn-in, several rounds of
//! timed repetitions interleaved across a small group of configs, medians with their spread, a re-measurement of
//! noisy samples, and failures recorded with their reason rather than lost. Rows are appended durably as they are
//! measured, keyed by the config's feature hash, so a killed collection resumes without duplicates or gaps.

pub mod alloc;
pub mod profile;
pub mod quick;
pub mod runner;
pub mod sensors;
pub mod speed;

pub use alloc::CountingAlloc;
pub use profile::{DeviceProfile, Protocol, SensorSpec};
pub use runner::{
    collect, remeasure, CollectOptions, Observer, Remeasured, Remeasurement, Shard, Summary, TypeSummary,
};
