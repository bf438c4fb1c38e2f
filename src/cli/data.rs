//! `perfmodel data ...`: manage collected data.

use perfmodel::data::{self, merge_files, Status};
use perfmodel::layer::LayerType;
use perfmodel::Dirs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Join data (e.g. shards) without duplicate samples: CSV files into one file, or device directories into
    /// one directory (per layer-type file)
    Merge {
        /// Input CSV files, or device data directories (e.g. data/local/shard-0-of-2)
        #[arg(required = true, num_args = 2..)]
        inputs: Vec<PathBuf>,
        /// Output file (for file inputs) or directory (for directory inputs)
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Rows per layer type and status of a device's data, with the time span of the collection
    Summary {
        #[arg(long)]
        device: String,
    },
}

pub fn run(command: Command, dirs: &Dirs) -> anyhow::Result<()> {
    match command {
        Command::Merge { inputs, output } => merge(inputs, output),
        Command::Summary { device } => summary(&device, &dirs.data),
    }
}

fn summary(device: &str, data_dir: &Path) -> anyhow::Result<()> {
    let by_type = data::read_device(data_dir, device)?;
    println!("{:<18} {:>6} {:>6} {:>9} {:>7}", "layer type", "rows", "ok", "unstable", "failed");
    let mut stamps: Vec<&str> = Vec::new();
    for (t, samples) in &by_type {
        let count = |st: Status| samples.iter().filter(|s| s.status == st).count();
        println!(
            "{:<18} {:>6} {:>6} {:>9} {:>7}",
            t.as_str(),
            samples.len(),
            count(Status::Ok),
            count(Status::Unstable),
            count(Status::Failed)
        );
        stamps.extend(samples.iter().map(|s| s.timestamp.as_str()));
    }
    stamps.sort_unstable();
    let total: usize = by_type.values().map(Vec::len).sum();
    match (stamps.first(), stamps.last()) {
        (Some(first), Some(last)) => println!("{total} samples, measured {first} .. {last}"),
        _ => println!("no samples"),
    }
    Ok(())
}

fn merge(inputs: Vec<PathBuf>, output: PathBuf) -> anyhow::Result<()> {
    let dirs = inputs.iter().filter(|p| p.is_dir()).count();
    if dirs == 0 {
        let rows = merge_files(&inputs, &output)?;
        println!("{rows} samples -> {}", output.display());
        return Ok(());
    }
    anyhow::ensure!(dirs == inputs.len(), "merge either CSV files or directories, not both");
    let mut by_type: BTreeMap<LayerType, Vec<PathBuf>> = BTreeMap::new();
    for dir in &inputs {
        for t in LayerType::ALL {
            let file = data::file_path(dir, t);
            if file.is_file() {
                by_type.entry(t).or_default().push(file);
            }
        }
    }
    anyhow::ensure!(!by_type.is_empty(), "no <layer_type>.csv files in {inputs:?}");
    for (t, files) in by_type {
        let out = data::file_path(&output, t);
        let mut sources = files;
        if out.is_file() && !sources.contains(&out) {
            sources.insert(0, out.clone());
        }
        let rows = merge_files(&sources, &out)?;
        println!("{t}: {rows} samples -> {}", out.display());
    }
    Ok(())
}
