//! `perfmodel zoo ...`: export the zoo architectures as net.json, list them, sample representative configs.

use perfmodel::layer::LayerType;
use perfmodel::sample::{self, AugmentBudget, SampleOptions};
use perfmodel::zoo;
use perfmodel::Dirs;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write every architecture as <dir>/<name>.json, the holdout networks as <dir>/holdout/<name>.json and the
    /// calibration-only networks as <dir>/calibration/<name>.json
    Export {
        /// Directory to write into (created if missing)
        #[arg(short, long, default_value = "zoo")]
        output: PathBuf,
    },
    /// List the zoo architectures, holdout and calibration-only networks with parameter counts
    List,
    /// Collect unique layer configs across the zoo (never holdout), augment them, write configs.json
    Sample(SampleArgs),
}

#[derive(clap::Args)]
pub struct SampleArgs {
    /// Seed of the augmentation's random choices
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Batch sizes the collector measures each config at
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    batch_sizes: Vec<usize>,
    /// Only these layer types (e.g. conv2d,dense); default: all
    #[arg(long, value_delimiter = ',')]
    layers: Vec<String>,
    /// Output file
    #[arg(short, long)]
    output: PathBuf,
}

pub fn run(command: Command, dirs: &Dirs) -> anyhow::Result<()> {
    match command {
        Command::Export { output } => {
            let written = zoo::export(&output)?;
            println!("wrote {} networks to {}", written.len(), output.display());
        }
        Command::List => {
            println!("{:<24} {:>9} {:>14} {:>14}  set", "name", "layers", "params", "published");
            let sets = [
                ("zoo", zoo::architectures()),
                ("holdout", zoo::holdout()),
                ("calibration", zoo::calibration()),
                ("transformers", zoo::transformers()),
                ("holdout/transformers", zoo::transformer_holdout()),
            ];
            for (set, entries) in sets {
                for e in entries {
                    let net = (e.build)();
                    let params = net.analyze()?.total_params();
                    let published = e.published_params.map_or("-".to_string(), |p| p.to_string());
                    println!("{:<24} {:>9} {:>14} {:>14}  {set}", e.name, net.layers.len(), params, published);
                }
            }
        }
        Command::Sample(args) => sample_cmd(args, dirs)?,
    }
    Ok(())
}

fn sample_cmd(args: SampleArgs, dirs: &Dirs) -> anyhow::Result<()> {
    let layer_types = if args.layers.is_empty() {
        None
    } else {
        let parsed = args
            .layers
            .iter()
            .map(|s| {
                LayerType::parse(s).ok_or_else(|| {
                    perfmodel::Error::Invalid(format!(
                        "--layers: unknown layer type '{s}' (known: {})",
                        LayerType::names_list()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Some(parsed)
    };
    let zoo_dir = &dirs.zoo;
    let networks = sample::load_zoo_dir(zoo_dir)?;
    let options =
        SampleOptions { seed: args.seed, batch_sizes: args.batch_sizes, layer_types, budget: AugmentBudget::default() };
    let (set, counts) = sample::sample(&networks, &options)?;
    set.save(&args.output)?;
    println!("{} networks from {}, seed {}", networks.len(), zoo_dir.display(), set.seed);
    println!(
        "{:<20} {:>8} {:>8} {:>10} {:>8} {:>12}",
        "layer type", "found", "unique", "augmented", "total", "GFLOP@b1"
    );
    for c in &counts {
        let gflop: f64 = set
            .configs
            .iter()
            .filter(|s| s.config.layer_type() == c.layer_type)
            .filter_map(|s| s.config.cost().ok())
            .map(|cost| cost.flops as f64 / 1e9)
            .sum();
        println!(
            "{:<20} {:>8} {:>8} {:>10} {:>8} {:>12.1}",
            c.layer_type.as_str(),
            c.found,
            c.unique,
            c.augmented,
            c.total(),
            gflop
        );
    }
    let total: usize = counts.iter().map(|c| c.total()).sum();
    println!(
        "{} configs x {} batch sizes {:?} = {} measurements; wrote {}",
        total,
        set.batch_sizes.len(),
        set.batch_sizes,
        total * set.batch_sizes.len(),
        args.output.display()
    );
    Ok(())
}
