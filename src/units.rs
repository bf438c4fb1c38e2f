//! Units perfmodel reports in, defined once: memory in MiB (binary megabytes, as allocators and `/proc` count),
//! latency in milliseconds, energy in millijoules (ms × W).

/// Bytes per MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// Bytes per GiB.
pub const GIB: f64 = 1024.0 * MIB;

/// Bytes of an f32 (every tensor and weight perfmodel counts).
pub const F32_BYTES: u64 = 4;
