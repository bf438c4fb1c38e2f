//! `perfmodel device ...`: make a device for this machine, and show what this machine is.

use perfmodel::collect::DeviceProfile;
use perfmodel::device::init::{init, InitOptions};
use perfmodel::device::Fingerprint;
use perfmodel::Dirs;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write collectors/NAME.toml for this machine: fingerprint, measured roofline, caches, batch sizes and the
    /// power sensors present here
    Init(InitArgs),
    /// Print this machine's fingerprint (TOML) and which device profiles were made for it
    Fingerprint(FingerprintArgs),
}

#[derive(clap::Args)]
pub struct InitArgs {
    /// Name of the new device (letters, digits, '-' and '_')
    name: String,
    /// Engine threads the device measures with
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    threads: u64,
    /// Engine: tract, or onnxruntime (needs its library: `pip install onnxruntime`)
    #[arg(long, default_value = "tract")]
    executor: String,
    /// Replace an existing profile of that name
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
pub struct FingerprintArgs {}

pub fn run(command: Command, dirs: &Dirs) -> anyhow::Result<()> {
    match command {
        Command::Init(args) => run_init(args, dirs),
        Command::Fingerprint(args) => run_fingerprint(args, dirs),
    }
}

fn run_init(args: InitArgs, dirs: &Dirs) -> anyhow::Result<()> {
    let dir = &dirs.collectors;
    let options = InitOptions::default()
        .with_threads(usize::try_from(args.threads).unwrap_or(usize::MAX))
        .with_executor(args.executor)
        .with_force(args.force);
    eprintln!("measuring this machine's roofline (a few seconds)...");
    let done = init(dir, &args.name, &options)?;
    let p = &done.profile;
    println!("wrote {}", done.path.display());
    println!("  machine      {}", Fingerprint::of_host().summary());
    println!("  executor     {} on {} thread(s)", p.executor, p.threads);
    println!(
        "  roofline     peak {:.1} GFLOP/s ({}), memory bandwidth {:.1} GB/s",
        done.roofline.peak_gflops, done.roofline.peak_workload, done.roofline.memory_bandwidth_gbs
    );
    for s in &done.sensors {
        match &s.usable {
            Ok(()) => println!("  power        {}: usable", s.name),
            Err(why) => println!("  power        {}: not usable: {why}", s.name),
        }
    }
    println!("next: perfmodel collect --device {} --quick    (then train, calibrate)", p.name);
    Ok(())
}

fn run_fingerprint(_: FingerprintArgs, dirs: &Dirs) -> anyhow::Result<()> {
    let dir = &dirs.collectors;
    let host = Fingerprint::of_host();
    print!("{}", toml::to_string(host)?);
    println!();
    println!("# {}", host.summary());
    for p in DeviceProfile::list(dir)? {
        let verdict = p.machine_status(host);
        println!("# {:<12} {verdict}", p.name);
    }
    Ok(())
}
