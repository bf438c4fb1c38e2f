//! Human and spreadsheet renderings of an [`Estimate`]: a table with totals and warnings, CSV with one row per
//! layer, and a bar chart of per-layer latency and energy. JSON is the [`Estimate`]'s `Serialize` form.
//!
//! Unknown values are shown as `-` (CSV: empty), never as 0, so a reader cannot mistake "no model" for "free".

use crate::error::{Error, Result};
use crate::estimate::{Estimate, LayerEstimate};
use crate::fsio::write_atomic;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::fmt::Write as _;
use std::path::Path;

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.decimals$}"))
}

/// The table printed by `perfmodel estimate`: one row per layer, the totals, then every note as a warning.
pub fn table(e: &Estimate) -> String {
    let name_w = e.layers.iter().map(|l| l.name.len()).max().unwrap_or(5).max(5);
    let type_w = e.layers.iter().map(|l| l.layer_type.as_str().len()).max().unwrap_or(4).max(4);
    let mut out = String::new();
    let _ = writeln!(out, "{} on device '{}' (batch {}, method {})", e.network, e.device, e.batch_size, e.method);
    let _ = writeln!(
        out,
        "{:name_w$}  {:type_w$}  {:>11}  {:>8}  {:>10}  {:>10}  {:>10}  predictor",
        "layer", "type", "latency_ms", "power_w", "energy_mj", "memory_mib", "in_use_mib"
    );
    for l in &e.layers {
        let _ = writeln!(
            out,
            "{:name_w$}  {:type_w$}  {:>11}  {:>8}  {:>10}  {:>10.3}  {:>10}  {}",
            l.name,
            l.layer_type.as_str(),
            cell(l.latency_ms, 4),
            cell(l.power_w, 2),
            cell(l.energy_mj, 4),
            l.memory_mib,
            cell(l.in_use_mib, 3),
            l.predictor
        );
    }
    let t = &e.total;
    let _ = writeln!(
        out,
        "{:name_w$}  {:type_w$}  {:>11.4}  {:>8}  {:>10}",
        "total",
        "",
        t.latency_ms,
        "",
        cell(t.energy_mj, 4)
    );
    let _ = writeln!(
        out,
        "peak memory {:.3} MiB (liveness walk{}; {:.3} MiB resident for the whole run); paper's rules: two largest \
         layers {:.3} MiB, 2 x mean {:.3} MiB",
        t.peak_memory_mib,
        t.peak_memory_layer.as_ref().map_or(String::new(), |l| format!(", while {l} runs")),
        t.resident_memory_mib,
        t.memory_two_largest_mib,
        t.memory_two_mean_mib
    );
    if let Some(c) = &e.calibration {
        let mut latency = Vec::new();
        if c.dense_weight_ms_per_mib != 0.0 {
            latency.push(format!(
                "dense layers {:+.4} ms per MiB of weights above {:.2} MiB, up to {:.1} MiB{}",
                c.dense_weight_ms_per_mib,
                c.dense_weight_floor_mib,
                c.dense_weight_limit_mib,
                c.dense_gate_clause()
            ));
        }
        if c.residual_add_ms_per_mib != 0.0 {
            latency.push(format!(
                "convolutions that compute a residual add {:+.4} ms per MiB of its output",
                c.residual_add_ms_per_mib
            ));
        }
        if c.norm_add_ms_per_mib != 0.0 {
            latency.push(format!(
                "layer norms that compute an add {:+.4} ms per MiB of its output",
                c.norm_add_ms_per_mib
            ));
        }
        if c.matmul_extra_fraction != 0.0 || c.matmul_weight_ms_per_mib != 0.0 {
            latency.push(format!(
                "products with a constant weight {:+.1}% {:+.4} ms per MiB of weights",
                100.0 * c.matmul_extra_fraction,
                c.matmul_weight_ms_per_mib
            ));
        }
        if c.pixel_conv_extra_fraction != 0.0 || c.pixel_conv_weight_ms_per_mib != 0.0 {
            latency.push(format!(
                "convolutions over one pixel {:+.1}% {:+.4} ms per MiB of weights",
                100.0 * c.pixel_conv_extra_fraction,
                c.pixel_conv_weight_ms_per_mib
            ));
        }
        if c.input_conv_extra_fraction != 0.0 || c.input_conv_ms_per_input_mib != 0.0 {
            latency.push(format!(
                "convolutions reading the network input {:+.1}% {:+.4} ms per MiB of input",
                100.0 * c.input_conv_extra_fraction,
                c.input_conv_ms_per_input_mib
            ));
        }
        if c.latency_scale != 1.0 || c.latency_per_layer_ms != 0.0 {
            latency.push(format!("layer latency x {:.4} {:+.4} ms", c.latency_scale, c.latency_per_layer_ms));
        }
        let latency = if latency.is_empty() { "latency not calibrated".to_string() } else { latency.join(", ") };
        let _ = writeln!(
            out,
            "calibrated on whole-network runs: {latency}, peak memory {:+.3} MiB {:+.4} MiB per executing layer \
             {:+.4} MiB per weighted one",
            c.memory_fixed_mib, c.memory_per_layer_mib, c.memory_per_weighted_layer_mib
        );
    }
    for u in &e.uncovered {
        let _ = writeln!(
            out,
            "warning: layer '{}' ({}) is uncovered: {} FLOPs, {:.1}% of the network",
            u.name,
            u.layer_type.as_str(),
            u.flops,
            100.0 * u.flops_share
        );
    }
    for note in &e.notes {
        let _ = writeln!(out, "warning: {note}");
    }
    out
}

/// One row per layer with the JSON keys as header; unknown values are empty cells.
pub fn csv(e: &Estimate) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let fail = |err: csv::Error| Error::Invalid(format!("cannot write CSV: {err}"));
    w.write_record(["name", "type", "latency_ms", "power_w", "energy_mj", "memory_mib", "in_use_mib", "predictor"])
        .map_err(fail)?;
    let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    for l in &e.layers {
        w.write_record([
            l.name.as_str(),
            l.layer_type.as_str(),
            &opt(l.latency_ms),
            &opt(l.power_w),
            &opt(l.energy_mj),
            &l.memory_mib.to_string(),
            &opt(l.in_use_mib),
            &l.predictor.to_string(),
        ])
        .map_err(fail)?;
    }
    let bytes = w.into_inner().map_err(|e| Error::Invalid(format!("cannot write CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::Invalid(format!("CSV is not UTF-8: {e}")))
}

/// A bar chart of per-layer latency (and energy, in a second panel, when the device has a power model) written
/// atomically to `path`; the format follows the extension (`.svg` or `.png`). Layers that do not execute (free,
/// fused) are left out: they would only be empty slots.
pub fn plot(e: &Estimate, path: &Path) -> Result<()> {
    let ext = path.extension().and_then(|x| x.to_str()).map(str::to_ascii_lowercase);
    let shown: Vec<&LayerEstimate> = e.layers.iter().filter(|l| l.predictor.runs()).collect();
    if shown.is_empty() {
        return Err(Error::Invalid(format!("{}: nothing to plot, no layer of the network executes", path.display())));
    }
    let size = (((shown.len() as u32) * 16).clamp(640, 4000), 760);
    let draw_err = |err: String| Error::Invalid(format!("{}: cannot draw the plot: {err}", path.display()));
    match ext.as_deref() {
        Some("svg") => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw(e, &shown, &root).map_err(draw_err)?;
                root.present().map_err(|x| draw_err(x.to_string()))?;
            }
            write_atomic(path, svg.as_bytes())
        }
        Some("png") => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            std::fs::create_dir_all(&dir).map_err(|x| Error::io(&dir, x))?;
            let tmp = tempfile::Builder::new().suffix(".png").tempfile_in(&dir).map_err(|x| Error::io(&dir, x))?;
            {
                let root = BitMapBackend::new(tmp.path(), size).into_drawing_area();
                draw(e, &shown, &root).map_err(draw_err)?;
                root.present().map_err(|x| draw_err(x.to_string()))?;
            }
            tmp.as_file().sync_all().map_err(|x| Error::io(path, x))?;
            tmp.persist(path).map_err(|x| Error::io(path, x.error))?;
            Ok(())
        }
        _ => Err(Error::Invalid(format!("{}: the plot file must end in .svg or .png", path.display()))),
    }
}

fn draw<DB: DrawingBackend>(
    e: &Estimate,
    shown: &[&LayerEstimate],
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    let has_energy = shown.iter().any(|l| l.energy_mj.is_some());
    let panels = if has_energy { root.split_evenly((2, 1)) } else { vec![root.clone()] };
    let title = format!("{} on {} ({}, batch {})", e.network, e.device, e.method, e.batch_size);
    bars(&panels[0], &title, "latency (ms)", shown, |l| l.latency_ms, &BLUE)?;
    if has_energy {
        bars(&panels[1], "", "energy (mJ)", shown, |l| l.energy_mj, &RED)?;
    }
    Ok(())
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    layers: &[&LayerEstimate],
    value: impl Fn(&LayerEstimate) -> Option<f64>,
    color: &RGBColor,
) -> Result<(), String> {
    let n = layers.len();
    let max = layers.iter().filter_map(|l| value(l)).fold(0.0f64, f64::max);
    let top = if max > 0.0 { max * 1.05 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(120)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)
        .map_err(|x| x.to_string())?;
    // Layer names are drawn by hand below the axis, reading upwards and ending at their bar: the mesh's own
    // rotated labels are centred on the tick and would run into the bars.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_labels(n)
        .x_label_formatter(&|_| String::new())
        .draw()
        .map_err(|x| x.to_string())?;
    let label = TextStyle::from(("sans-serif", 10).into_font())
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (i, l) in layers.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(SegmentValue::CenterOf(i), 0.0));
        let (ox, oy) = area.get_base_pixel();
        area.draw(&Text::new(l.name.as_str(), (x - ox, y - oy + 4), label.clone())).map_err(|x| x.to_string())?;
    }
    chart
        .draw_series(
            Histogram::vertical(&chart)
                .style(color.filled())
                .margin(1)
                .data(layers.iter().enumerate().filter_map(|(i, l)| value(l).map(|v| (i, v)))),
        )
        .map_err(|x| x.to_string())?;
    Ok(())
}
