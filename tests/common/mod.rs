//! Helpers shared by the integration tests, which all drive the real binary.

use std::path::Path;
use std::process::{Command, Output};

/// Run `perfmodel ARGS` with `dir` as the working directory.
pub fn perfmodel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfmodel")).current_dir(dir).args(args).output().expect("run perfmodel")
}

/// The command's stderr as text.
#[allow(dead_code)] // Each test file is its own crate; not all of them read stderr this way.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}
