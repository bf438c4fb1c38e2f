//! What a training run produced, for people: `models/<device>/report.md` (every candidate's cross-validated
//! scores, the chosen one, removed outliers, learning curves, store size and prediction speed) and
//! predicted-vs-measured scatter plots per (layer type, metric) in PNG and SVG.

use crate::error::{Error, Result};
use crate::fsio::write_atomic;
use crate::layer::LayerType;
use crate::metric::Metric;
use crate::train::pipeline::{TrainRun, TripletResult};
use crate::train::store::{self, ModelStore};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Measured speed and size of a written store.
#[derive(Debug, Clone)]
pub struct StoreBench {
    pub size_bytes: u64,
    pub files: usize,
    pub open_ms: f64,
    /// Per predictor: mean wall-clock and thread-CPU nanoseconds per single-row prediction.
    pub predict_ns: Vec<PredictTiming>,
}

#[derive(Debug, Clone)]
pub struct PredictTiming {
    pub layer_type: LayerType,
    pub metric: Metric,
    pub method: String,
    pub size: String,
    pub wall_ns: f64,
    /// CPU time of this thread only: what a prediction costs when the machine is shared.
    pub cpu_ns: f64,
}

/// CPU time consumed by the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if rc == 0 {
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    } else {
        f64::NAN
    }
}

/// Open the store as estimation would and time single-row predictions of every predictor over `rows` (cycled).
pub fn bench_store(models_dir: &Path, device: &str, results: &[TripletResult]) -> Result<StoreBench> {
    let started = Instant::now();
    let store = ModelStore::open(models_dir, device)?;
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut predict_ns = Vec::new();
    for r in results {
        let Some(predictor) = store.predictor(r.layer_type, r.metric) else { continue };
        let rows = &r.evaluation_rows;
        const CALLS: usize = 20_000;
        let mut sink = 0.0;
        let started = Instant::now();
        let cpu_started = thread_cpu_seconds();
        for i in 0..CALLS {
            sink += predictor.predict(std::hint::black_box(&rows[i % rows.len()]));
        }
        let cpu_ns = (thread_cpu_seconds() - cpu_started) * 1e9 / CALLS as f64;
        let wall_ns = started.elapsed().as_secs_f64() * 1e9 / CALLS as f64;
        std::hint::black_box(sink);
        predict_ns.push(PredictTiming {
            layer_type: r.layer_type,
            metric: r.metric,
            method: predictor.method().to_string(),
            size: predictor.model().size_summary(),
            wall_ns,
            cpu_ns,
        });
    }
    Ok(StoreBench { size_bytes: store.size_bytes(), files: store.manifest().models.len(), open_ms, predict_ns })
}

fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        "–".to_string()
    } else if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// The report as Markdown.
pub fn markdown(run: &TrainRun, bench: &StoreBench, options_line: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Training report: device `{}`\n", run.device);
    let _ = writeln!(md, "perfmodel {} · {options_line}\n", crate::VERSION);
    let _ = writeln!(md, "Data hash (SHA-256 over all training rows): `{}`\n", run.manifest.data_hash);
    let _ = writeln!(md, "## Chosen predictors (cross-validated, out-of-fold)\n");
    let _ = writeln!(
        md,
        "| layer | metric | method | CV MAPE % | R² | MAE | MedAE | MaxE | samples | removed outliers | train s |"
    );
    let _ = writeln!(md, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &run.results {
        let s = r.cv();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2} | {:.4} | {} | {} | {} | {} | {} | {:.1} |",
            r.layer_type,
            r.metric,
            r.chosen().label,
            s.mape,
            s.r2,
            fmt_num(s.mae),
            fmt_num(s.medae),
            fmt_num(s.maxe),
            r.samples,
            r.removed.len(),
            r.train_seconds
        );
    }
    if run.results.iter().any(|r| r.holdout.is_some()) {
        let _ = writeln!(
            md,
            "\n## Held-out rows (`--holdout`)\n\nRows split off before outlier removal, cross-validation and the \
             refit, predicted by the models of this store (which are trained without them); every row in \
             `{HOLDOUT_FILE}`.\n"
        );
        let _ = writeln!(
            md,
            "| layer | metric | rows | MAPE % | median APE % | R² |\n| --- | --- | ---: | ---: | ---: | ---: |"
        );
        for r in &run.results {
            let Some(h) = &r.holdout else { continue };
            let s = h.scores();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {} | {} |",
                r.layer_type,
                r.metric,
                h.keys.len(),
                s.mape,
                fmt_num(h.median_ape()),
                fmt_num(s.r2)
            );
        }
    }
    let verdicts: Vec<_> = run.results.iter().filter_map(|r| Some((r, r.transfer_verdict()?))).collect();
    if !verdicts.is_empty() {
        let _ = writeln!(md, "\n## Transfer against training from scratch (best CV MAPE % of each kind)\n");
        for (r, verdict) in verdicts {
            let _ = writeln!(md, "- {}/{}: {verdict}", r.layer_type, r.metric);
        }
    }
    if !run.skipped.is_empty() {
        let _ = writeln!(md, "\n## Not trained\n");
        for s in &run.skipped {
            let _ = writeln!(md, "- {}/{}: {}", s.layer_type, s.metric, s.reason);
        }
    }
    let _ = writeln!(md, "\n## Model store and prediction speed\n");
    let _ = writeln!(
        md,
        "{} model files, {:.2} MB in total; opening the store took {:.1} ms.\n",
        bench.files,
        bench.size_bytes as f64 / 1e6,
        bench.open_ms
    );
    let _ = writeln!(
        md,
        "Single-layer prediction, mean over 20 000 calls (this build: the dev profile, which compiles \
         perfmodel at opt-level 2); wall clock and this thread's CPU time (lower when the machine is shared).\n"
    );
    let _ =
        writeln!(md, "| layer | metric | method | size | µs wall | µs CPU |\n| --- | --- | --- | --- | ---: | ---: |");
    for p in &bench.predict_ns {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} | {:.2} |",
            p.layer_type,
            p.metric,
            p.method,
            p.size,
            p.wall_ns / 1e3,
            p.cpu_ns / 1e3
        );
    }
    for r in &run.results {
        let _ = writeln!(md, "\n## {} / {} ({})\n", r.layer_type, r.metric, r.metric.unit());
        let _ = writeln!(
            md,
            "![predicted vs measured](plots/{0}_{1}.svg)\n\nChosen: **{2}** (data hash `{3}`).\n",
            r.layer_type,
            r.metric,
            r.chosen().label,
            &r.data_hash[..16]
        );
        if let Some(cv) = r.median_latency_cv {
            let _ = writeln!(
                md,
                "Spread of the measurements: the repeated timings behind each row have a median coefficient of \
                 variation of {:.1} % (a busy machine during collection shows up here).\n",
                100.0 * cv
            );
        }
        let _ = writeln!(
            md,
            "| candidate | MAPE % | R² | MAE | MedAE | MaxE | CV s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for (i, e) in r.evaluations.iter().enumerate() {
            let mark = if i == r.best { " ✔" } else { "" };
            let s = &e.scores;
            let _ = writeln!(
                md,
                "| {}{mark} | {} | {} | {} | {} | {} | {:.2} |",
                e.label,
                fmt_num(s.mape),
                fmt_num(s.r2),
                fmt_num(s.mae),
                fmt_num(s.medae),
                fmt_num(s.maxe),
                e.seconds
            );
        }
        if !r.removed.is_empty() {
            let _ = writeln!(md, "\nRemoved by the isolation forest (still in the data file):\n");
            for row in &r.removed {
                let _ = writeln!(md, "- `{}` measured {} {}", row.key, fmt_num(row.measured), r.metric.unit());
            }
        }
        if let Some(lc) = &r.learning_curve {
            let _ = writeln!(
                md,
                "\nLearning curve: validation MAPE % on a fixed {} rows vs. training rows \
                 (plot: `plots/{}_{}_learning_curve.svg`).\n",
                lc.validation_rows, r.layer_type, r.metric
            );
            let header: Vec<String> = lc.train_sizes.iter().map(|n| n.to_string()).collect();
            let _ = writeln!(md, "| candidate | {} |", header.join(" | "));
            let _ = writeln!(md, "| --- |{}", " ---: |".repeat(lc.train_sizes.len()));
            for (label, values) in &lc.mape {
                let cells: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
                let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
            }
        }
    }
    md
}

/// One scatter chart on `range` (same for both axes) with the identity line from `lo` to `hi`; `labels` are the
/// title and the x and y axis descriptions.
fn scatter<DB, R>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    range: R,
    labels: [&str; 3],
    points: &[(f64, f64)],
    (lo, hi): (f64, f64),
    style: ShapeStyle,
) -> std::result::Result<(), String>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    R: AsRangedCoord<Value = f64> + Clone,
    R::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let [title, x_label, y_label] = labels;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(range.clone(), range)
        .map_err(e)?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(e)?;
    chart.draw_series(LineSeries::new([(lo, lo), (hi, hi)], &BLACK)).map_err(e)?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 2, style))).map_err(e)?;
    Ok(())
}

/// Draw measured (x) against out-of-fold predicted (y) with the identity line, log-log when all values are
/// positive.
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    r: &TripletResult,
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let predicted = &r.chosen().predicted;
    let points: Vec<(f64, f64)> = r.measured.iter().copied().zip(predicted.iter().copied()).collect();
    let lo = points.iter().flat_map(|(a, b)| [*a, *b]).fold(f64::INFINITY, f64::min);
    let hi = points.iter().flat_map(|(a, b)| [*a, *b]).fold(f64::NEG_INFINITY, f64::max);
    let title = format!("{} {}: {} (CV MAPE {:.1}%)", r.layer_type, r.metric, r.chosen().label, r.cv().mape);
    let x_label = format!("measured {} ({})", r.metric, r.metric.unit());
    let y_label = format!("predicted (out-of-fold, {})", r.metric.unit());
    let style = ShapeStyle::from(&BLUE.mix(0.5)).filled();
    let labels = [title.as_str(), x_label.as_str(), y_label.as_str()];
    if lo > 0.0 {
        scatter(&root, (lo / 1.2..hi * 1.2).log_scale(), labels, &points, (lo, hi), style)?;
    } else {
        let pad = (hi - lo).max(1e-9) * 0.05;
        scatter(&root, lo - pad..hi + pad, labels, &points, (lo, hi), style)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Validation MAPE against training rows, one line per method family (log-scaled MAPE).
fn draw_learning_curve<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    r: &TripletResult,
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let Some(lc) = &r.learning_curve else { return Ok(()) };
    root.fill(&WHITE).map_err(e)?;
    let values = lc.mape.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo.is_finite() { (lo / 1.2, hi * 1.2) } else { (0.1, 100.0) };
    let max_rows = lc.train_sizes.last().copied().unwrap_or(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{} {}: learning curve ({} validation rows)", r.layer_type, r.metric, lc.validation_rows),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_rows * 1.05, (lo..hi).log_scale())
        .map_err(e)?;
    chart.configure_mesh().x_desc("training rows").y_desc("validation MAPE (%)").draw().map_err(e)?;
    for (i, (label, mape)) in lc.mape.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = lc
            .train_sizes
            .iter()
            .zip(mape)
            .filter(|(_, m)| m.is_finite() && **m > 0.0)
            .map(|(&n, &m)| (n as f64, m))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Plot {
    Scatter,
    LearningCurve,
}

fn render<DB: DrawingBackend>(
    plot: Plot,
    root: DrawingArea<DB, plotters::coord::Shift>,
    r: &TripletResult,
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    match plot {
        Plot::Scatter => draw(root, r),
        Plot::LearningCurve => draw_learning_curve(root, r),
    }
}

/// Write `<stem>.svg` and `<stem>.png` with the same drawing, each atomically.
fn write_plot(plots_dir: &Path, stem: &str, r: &TripletResult, plot: Plot) -> Result<()> {
    let svg_path = plots_dir.join(format!("{stem}.svg"));
    let mut svg = String::new();
    render(plot, SVGBackend::with_string(&mut svg, (720, 600)).into_drawing_area(), r)
        .map_err(|e| Error::Invalid(format!("{}: cannot draw: {e}", svg_path.display())))?;
    write_atomic(&svg_path, svg.as_bytes())?;
    let png_path = plots_dir.join(format!("{stem}.png"));
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{stem}"))
        .suffix(".png")
        .tempfile_in(plots_dir)
        .map_err(|e| Error::io(plots_dir, e))?;
    render(plot, BitMapBackend::new(tmp.path(), (720, 600)).into_drawing_area(), r)
        .map_err(|e| Error::Invalid(format!("{}: cannot draw: {e}", png_path.display())))?;
    tmp.persist(&png_path).map_err(|e| Error::io(&png_path, e.error))?;
    Ok(())
}

/// The scatter plot of one triplet, and its learning curve when there is one.
fn write_plots(plots_dir: &Path, r: &TripletResult) -> Result<()> {
    let stem = format!("{}_{}", r.layer_type, r.metric);
    write_plot(plots_dir, &stem, r, Plot::Scatter)?;
    if r.learning_curve.is_some() {
        write_plot(plots_dir, &format!("{stem}_learning_curve"), r, Plot::LearningCurve)?;
    }
    Ok(())
}

/// Write `report.md` and the plots into the device's model directory.
pub fn write_report(models_dir: &Path, run: &TrainRun, bench: &StoreBench, options_line: &str) -> Result<()> {
    let dir = store::device_dir(models_dir, &run.device);
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(|e| Error::io(&plots, e))?;
    for r in &run.results {
        write_plots(&plots, r)?;
    }
    write_atomic(dir.join("report.md"), markdown(run, bench, options_line).as_bytes())?;
    // The held-out rows of this run, or none: a file from an earlier `--holdout` run would describe other models.
    let holdout_path = dir.join(HOLDOUT_FILE);
    match holdout_csv(run) {
        Some(csv) => write_atomic(&holdout_path, csv.as_bytes()),
        None => match std::fs::remove_file(&holdout_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&holdout_path, e)),
            _ => Ok(()),
        },
    }
}

/// The held-out rows of a `--holdout` run, one per line: layer type, metric, key, measured, predicted.
pub const HOLDOUT_FILE: &str = "holdout.csv";

fn holdout_csv(run: &TrainRun) -> Option<String> {
    if run.results.iter().all(|r| r.holdout.is_none()) {
        return None;
    }
    // Keys come from the data files: written through a CSV writer, which quotes whatever needs it.
    let mut csv = csv::Writer::from_writer(Vec::new());
    let _ = csv.write_record(["layer_type", "metric", "key", "measured", "predicted"]);
    for r in &run.results {
        let Some(h) = &r.holdout else { continue };
        for ((key, measured), predicted) in h.keys.iter().zip(&h.measured).zip(&h.predicted) {
            let (layer, metric) = (r.layer_type.as_str(), r.metric.as_str());
            let _ = csv.write_record([layer, metric, key, &measured.to_string(), &predicted.to_string()]);
        }
    }
    csv.into_inner().ok().and_then(|bytes| String::from_utf8(bytes).ok())
}
