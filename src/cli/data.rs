//! `perfmodel data ...`: manage collected data.

use perfmodel::data::{self, merge_files};
use perfmodel::layer::LayerType;
use std::collections::BTreeMap;
use std::path::PathBuf;

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
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Merge { inputs, output } => merge(inputs, output),
    }
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
