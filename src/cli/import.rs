//! `perfmodel import ...`: bring published measurement datasets into the data store.

use super::default_dir;
use perfmodel::train::tvm;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// The TVM_Profiling_Dataset (Sponner et al. 2022): DIR/{conv2d,dense}/*.json, one measured layer per file
    TvmProfiling(TvmArgs),
}

#[derive(clap::Args)]
pub struct TvmArgs {
    /// Dataset directory holding conv2d/ and dense/
    dir: PathBuf,
    /// Device name to store the rows under (DATA_DIR/DEVICE/)
    #[arg(long)]
    device: String,
    /// Data store root; default ./data (or the shipped one)
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::TvmProfiling(args) => {
            let data_dir = args.data_dir.unwrap_or_else(|| default_dir("data"));
            let summary = tvm::import_tvm_profiling(&args.dir, &data_dir, &args.device)?;
            println!("read {} files from {}", summary.files_read, args.dir.display());
            for (path, rows) in &summary.written {
                println!("{}: {rows} rows appended", path.display());
            }
            if !summary.duplicates.is_empty() {
                println!(
                    "{} files skipped: same layer config and batch size already in the data (first: {})",
                    summary.duplicates.len(),
                    summary.duplicates[0].display()
                );
            }
            Ok(())
        }
    }
}
