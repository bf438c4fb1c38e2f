//! The `perfmodel` command: a thin shell over the library (see `cli/`).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod c_heap;
mod cli;

/// Counts heap bytes so `perfmodel collect` can measure the memory a layer needs.
#[global_allocator]
static ALLOCATOR: perfmodel::collect::CountingAlloc = perfmodel::collect::CountingAlloc;

fn main() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    c_heap::announce();
    perfmodel::error::quiet_engine_panics();
    // Behave like other Unix tools when output is piped into `head`: die quietly on SIGPIPE instead of
    // panicking in `println!`.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(cli::main());
}
