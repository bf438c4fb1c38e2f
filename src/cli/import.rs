//! `perfmodel import ...`: bring published measurement datasets into the data store.

use perfmodel::train::tvm;
use perfmodel::Dirs;
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
}

pub fn run(command: Command, dirs: &Dirs) -> anyhow::Result<()> {
    match command {
        Command::TvmProfiling(args) => {
            let summary = tvm::import_tvm_profiling(&args.dir, &dirs.data, &args.device)?;
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
