//! Command-line interface. Each subcommand lives in its own file with an `Args` struct and a `run` function
//! that parses nothing further, calls the library and prints; this file resolves the project directories once
//! ([`perfmodel::Dirs`]), dispatches, and turns errors into messages and exit codes (2 for bad input, 1
//! otherwise).

use clap::{Parser, Subcommand};
use perfmodel::dirs::{DirOverrides, Dirs};
use std::path::PathBuf;

mod bench;
mod calibrate;
mod collect;
mod data;
mod device;
mod devices;
mod estimate;
mod import;
mod import_onnx;
mod inspect;
mod outliers;
mod speed;
mod train;
mod validate;
mod zoo;

#[derive(Parser)]
#[command(
    name = "perfmodel",
    version,
    about = "Predict latency, energy and memory of neural-network inference on a device"
)]
struct Cli {
    #[command(flatten)]
    dirs: DirArgs,
    #[command(subcommand)]
    command: Command,
}

/// The project directories, for every command (before or after its name).
#[derive(clap::Args)]
struct DirArgs {
    /// Collected measurements, DATA_DIR/DEVICE/<layer_type>.csv [default: ./data, else the shipped data]
    #[arg(long, global = true, help_heading = "Directories")]
    data_dir: Option<PathBuf>,
    /// Trained models and calibrations, MODELS_DIR/DEVICE/ [default: ./models, else the shipped models]
    #[arg(long, global = true, help_heading = "Directories")]
    models_dir: Option<PathBuf>,
    /// Device profiles, COLLECTORS_DIR/DEVICE.toml [default: ./collectors, else the shipped ones]
    #[arg(long, global = true, help_heading = "Directories")]
    collectors_dir: Option<PathBuf>,
    /// The zoo: architectures, sampled configs, holdout and calibration networks [default: ./zoo, else the
    /// shipped zoo]
    #[arg(long, global = true, help_heading = "Directories")]
    zoo_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Show per-layer shapes, parameters, FLOPs and tensor sizes of a network (net.json or .onnx)
    Inspect(inspect::Args),
    /// The model zoo: export architectures as net.json, sample representative layer configs
    #[command(subcommand)]
    Zoo(zoo::Command),
    /// Convert an ONNX model to net.json
    ImportOnnx(import_onnx::Args),
    /// Run a whole network with the real engine on this machine and time it per layer
    Bench(bench::Args),
    /// Measure sampled layer configs on a device
    Collect(collect::Args),
    /// Make a device for this machine (`device init NAME`), or show this machine's fingerprint
    #[command(subcommand)]
    Device(device::Command),
    /// List device profiles and which sensors are available here
    Devices(devices::Args),
    /// Manage collected data (merge shards)
    #[command(subcommand)]
    Data(data::Command),
    /// Train per-(layer type, metric) predictors for a device
    Train(train::Args),
    /// Import published measurement datasets
    #[command(subcommand)]
    Import(import::Command),
    /// Estimate latency, energy and memory of a network on a device
    Estimate(estimate::Args),
    /// Fit a device's whole-network correction from real runs of the zoo's training architectures
    Calibrate(calibrate::Args),
    /// Compare estimates with real whole-network runs
    Validate(validate::Args),
    /// Flag layers whose measured time is far above prediction
    Outliers(outliers::Args),
    /// Time the machine-speed probe and compare with the speed the device's data was collected at
    Speed(speed::Args),
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    let d = cli.dirs;
    let dirs = &Dirs::resolve(DirOverrides {
        data: d.data_dir,
        models: d.models_dir,
        collectors: d.collectors_dir,
        zoo: d.zoo_dir,
    });
    let result = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Zoo(c) => zoo::run(c, dirs),
        Command::ImportOnnx(a) => import_onnx::run(a),
        Command::Bench(a) => bench::run(a, dirs),
        Command::Collect(a) => collect::run(a, dirs),
        Command::Device(c) => device::run(c, dirs),
        Command::Devices(a) => devices::run(a, dirs),
        Command::Data(c) => data::run(c, dirs),
        Command::Train(a) => train::run(a, dirs),
        Command::Import(c) => import::run(c, dirs),
        Command::Estimate(a) => estimate::run(a, dirs),
        Command::Calibrate(a) => calibrate::run(a, dirs),
        Command::Validate(a) => validate::run(a, dirs),
        Command::Outliers(a) => outliers::run(a, dirs),
        Command::Speed(a) => speed::run(a, dirs),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit_code(&e)
        }
    }
}

/// 2 for errors in what the user gave us (like clap's usage errors), 1 for failures of the machine or engine.
fn exit_code(e: &anyhow::Error) -> i32 {
    use perfmodel::Error;
    match e.downcast_ref::<Error>() {
        Some(Error::Io { .. } | Error::Executor(_) | Error::Sensor { .. }) => 1,
        Some(_) => 2,
        None => 1,
    }
}

/// Output format of the commands that print either a table or JSON.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TableOrJson {
    Table,
    Json,
}
