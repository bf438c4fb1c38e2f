//! The `perfmodel` command: a thin shell over the library (see `cli/`).

mod cli;

/// Counts heap bytes so `perfmodel collect` can measure the memory a layer needs.
#[global_allocator]
static ALLOCATOR: perfmodel::collect::CountingAlloc = perfmodel::collect::CountingAlloc;

fn main() {
    std::process::exit(cli::main());
}
