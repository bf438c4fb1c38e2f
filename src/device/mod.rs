//! Devices as machines: a device is a (machine, engine) pair, and the machine is identified by its
//! [`Fingerprint`]. [`init`] writes a profile for this host with measured roofline numbers and the power sensors
//! that are really present, so a newcomer never starts by editing TOML.

pub mod fingerprint;
pub mod init;

pub use fingerprint::Fingerprint;
