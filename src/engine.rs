//! Inference engines that execute workloads for measurement. The collector and `perfmodel bench` talk to an
//! engine only through [`Executor`] and [`Workload`], so engines other than tract can be added behind them.

use crate::error::Result;
use crate::layer::LayerConfig;
use crate::network::Network;

/// A built, optimised, ready-to-run model with its input already allocated.
pub trait Workload {
    /// Run one inference (the whole batch).
    fn run(&mut self) -> Result<()>;
}

pub trait Executor: Send + Sync {
    /// Engine name and version, recorded as provenance (e.g. `tract 0.23.9`).
    fn describe(&self) -> String;
    /// Build a single-layer workload for a config.
    fn prepare_layer(&self, config: &LayerConfig) -> Result<Box<dyn Workload>>;
    /// Build a whole-network workload.
    fn prepare_network(&self, network: &Network) -> Result<Box<dyn Workload>>;
}
