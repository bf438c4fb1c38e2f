//! perfmodel from Rust: a network estimated on this machine's device (else the nearest shipped one, scaled to
//! this machine), as `perfmodel estimate` does it, then the same network on a named device without calibration.
//!
//!     cargo run --example library -- zoo/resnet50.json

use perfmodel::estimate::request::Request;
use perfmodel::{Dirs, Network};

fn main() -> perfmodel::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "zoo/resnet50.json".to_string());
    let net = Network::load(&path)?;
    // ./data, ./models, ./collectors and ./zoo, else the ones shipped beside the sources.
    let dirs = Dirs::default();
    // Opening loads the models once (the slow part); the estimator is Send + Sync and answers in microseconds.
    let here = Request::default().open(&dirs)?;
    let estimate = here.estimate(&net)?;
    println!(
        "{} on '{}'{}: {:.2} ms, peak memory {:.1} MiB",
        net.name,
        here.choice.device,
        if here.zero_shot.is_some() { " (zero-shot)" } else { "" },
        estimate.total.latency_ms,
        estimate.total.peak_memory_mib
    );
    let raw = Request::default().with_device(Some("zen5".into())).with_uncalibrated(true).open(&dirs)?;
    let estimate = raw.estimator.estimate(&net)?;
    println!("{} on 'zen5', uncalibrated: {:.2} ms", net.name, estimate.total.latency_ms);
    for layer in estimate.layers.iter().filter(|l| l.predictor.runs()).take(3) {
        println!("  {:<24} {:>9.4} ms  {}", layer.name, layer.latency_ms.unwrap_or(f64::NAN), layer.predictor);
    }
    Ok(())
}
