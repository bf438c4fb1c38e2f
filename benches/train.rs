//! Speed of the model store: opening a device's store and single-layer predictions of every stored predictor,
//! with real feature rows from the device's data. Training time per triplet, the store size and the same
//! prediction latency measured in-process are in `models/<device>/report.md` (written by `perfmodel train`).
//!
//! Run in the dev profile (the team builds one profile): `cargo test --bench train -- --bench`; environment
//! `PERFMODEL_BENCH_DEVICE` (default `local`), `PERFMODEL_MODELS_DIR` (default `models`), `PERFMODEL_DATA_DIR`
//! (default `data`).

use criterion::{criterion_group, criterion_main, Criterion};
use perfmodel::train::ModelStore;
use std::hint::black_box;
use std::path::PathBuf;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn bench_store(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let device = env_or("PERFMODEL_BENCH_DEVICE", "local");
    let models = root.join(env_or("PERFMODEL_MODELS_DIR", "models"));
    let data = root.join(env_or("PERFMODEL_DATA_DIR", "data"));
    let store = match ModelStore::open(&models, &device) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED: no model store to benchmark ({e}); run `perfmodel train --device {device}` first");
            return;
        }
    };
    println!(
        "store {}: {} bytes in {} files",
        store.dir().display(),
        store.size_bytes(),
        store.manifest().models.len()
    );
    c.bench_function(&format!("open_store/{device}"), |b| b.iter(|| ModelStore::open(&models, &device).unwrap()));
    // How many stored rows each prediction benchmark cycles through: 1 keeps one path hot in the caches.
    let rows_per_model: usize = env_or("PERFMODEL_BENCH_ROWS", "64").parse().unwrap_or(64);
    let samples = perfmodel::data::read_device(&data, &device).unwrap_or_default();
    for entry in &store.manifest().models {
        let (Some(t), Some(m)) =
            (perfmodel::LayerType::parse(&entry.layer_type), perfmodel::Metric::parse(&entry.metric))
        else {
            continue;
        };
        let Some(predictor) = store.predictor(t, m) else { continue };
        let rows: Vec<Vec<f64>> = samples
            .get(&t)
            .map(|s| s.iter().take(rows_per_model).filter_map(|s| s.config.features().ok()).collect())
            .unwrap_or_default();
        let rows = if rows.is_empty() { vec![vec![1.0; t.feature_names().len()]] } else { rows };
        let mut i = 0;
        c.bench_function(&format!("predict/{t}/{m}/{}", predictor.method()), |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                black_box(predictor.predict(black_box(&rows[i])))
            })
        });
    }
}

criterion_group!(benches, bench_store);
criterion_main!(benches);
