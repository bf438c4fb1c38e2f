//! The quantities perfmodel measures and predicts, with their units fixed once so that data files, model files
//! and reports cannot disagree about them.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Execution time of one inference of the layer (whole batch), milliseconds.
    Latency,
    /// Average power while the layer runs, watts.
    Power,
    /// Memory the layer needs while it runs, MiB.
    Memory,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::Latency, Metric::Power, Metric::Memory];

    /// Short name used in model paths and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Latency => "latency",
            Metric::Power => "power",
            Metric::Memory => "memory",
        }
    }

    /// Column of the data CSV holding this metric (unit in the name).
    pub fn column(self) -> &'static str {
        match self {
            Metric::Latency => "latency_ms",
            Metric::Power => "power_w",
            Metric::Memory => "memory_mib",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::Latency => "ms",
            Metric::Power => "W",
            Metric::Memory => "MiB",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.iter().copied().find(|m| m.as_str() == s || m.column() == s)
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
