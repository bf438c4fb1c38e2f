//! The order of a quick collection: configs that teach the most first, so that a collection stopped after a
//! few minutes is as informative as its length allows, and continuing it later measures the rest.
//!
//! Why this order: a model trained on a few hundred rows is good where they are, so they should cover each
//! layer type's configuration space rather than repeat its densest corner (CDMPP selects its samples by k-means
//! over standardised features for the same reason), and the rows should go where real networks spend their
//! time: a convolution's error moves a network's estimate far more than a dropout's. So, per layer type, the
//! configs are ordered by k-means with a doubling number of clusters (1, 2, 4, ...: each round adds the member
//! nearest each cluster's centre, clusters with no member chosen yet first, so every prefix is a coarse-to-fine
//! cover), and the types are interleaved
//! in proportion to their share of the zoo's time, priced by the device's roofline, with a floor so that
//! every type gets rows early.

use crate::layer::{LayerConfig, LayerType};
use crate::sample::SampledConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Least share of a quick collection's configs any layer type gets.
pub const MIN_TYPE_SHARE: f64 = 0.02;

/// Clusters beyond which the coverage order continues by farthest point instead of k-means (which costs
/// clusters × configs per iteration).
const MAX_CLUSTERS: usize = 64;

/// Lloyd iterations per k-means.
const ITERATIONS: usize = 15;

/// The quick order: indices into `configs`, and each layer type's share of the interleaving.
#[derive(Debug, Clone)]
pub struct QuickOrder {
    pub order: Vec<usize>,
    pub shares: BTreeMap<LayerType, f64>,
}

/// Order `configs` for a quick collection on a machine with this roofline (GFLOP/s, GB/s). Deterministic.
pub fn quick_order(configs: &[SampledConfig], peak_gflops: f64, bandwidth_gbs: f64) -> QuickOrder {
    let mut by_type: BTreeMap<LayerType, Vec<usize>> = BTreeMap::new();
    for (i, c) in configs.iter().enumerate() {
        by_type.entry(c.config.layer_type()).or_default().push(i);
    }
    let time = |c: &LayerConfig| roofline_ms(c, peak_gflops, bandwidth_gbs);
    let mut zoo_ms: BTreeMap<LayerType, f64> = BTreeMap::new();
    for c in configs {
        *zoo_ms.entry(c.config.layer_type()).or_default() += c.count as f64 * time(&c.config);
    }
    let total: f64 = zoo_ms.values().sum();
    let mut shares: BTreeMap<LayerType, f64> = by_type
        .keys()
        .map(|t| {
            let share = if total > 0.0 { zoo_ms.get(t).copied().unwrap_or(0.0) / total } else { 0.0 };
            (*t, share.max(MIN_TYPE_SHARE))
        })
        .collect();
    let sum: f64 = shares.values().sum();
    shares.values_mut().for_each(|s| *s /= sum);

    let mut per_type: BTreeMap<LayerType, std::collections::VecDeque<usize>> = BTreeMap::new();
    for (t, members) in &by_type {
        let weights: Vec<f64> =
            members.iter().map(|&i| (configs[i].count.max(1) as f64) * time(&configs[i].config)).collect();
        let points: Vec<Vec<f64>> = standardised(members.iter().map(|&i| feature_vector(&configs[i].config)).collect());
        let local = coverage_order(&points, &weights, t.as_str().len() as u64);
        per_type.insert(*t, local.into_iter().map(|j| members[j]).collect());
    }

    // Stride scheduling: the next config comes from the type furthest below its share.
    let mut taken: BTreeMap<LayerType, usize> = per_type.keys().map(|t| (*t, 0)).collect();
    let mut order = Vec::with_capacity(configs.len());
    loop {
        let next = per_type
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(t, _)| (*t, (taken[t] + 1) as f64 / shares[t]))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let Some((t, _)) = next else { break };
        if let Some(i) = per_type.get_mut(&t).and_then(|q| q.pop_front()) {
            order.push(i);
            *taken.get_mut(&t).expect("every type has a count") += 1;
        }
    }
    QuickOrder { order, shares }
}

/// The roofline time of a config at batch 1 (ms): the larger of its FLOPs at the peak rate and its tensors'
/// bytes at the memory bandwidth; 0 when its cost cannot be computed.
fn roofline_ms(config: &LayerConfig, peak_gflops: f64, bandwidth_gbs: f64) -> f64 {
    let Ok(cost) = config.cost() else { return 0.0 };
    let bytes = 4.0 * (cost.input_elems + cost.weight_elems + cost.output_elems) as f64;
    let compute = cost.flops as f64 / (peak_gflops.max(1e-3) * 1e6);
    let memory = bytes / (bandwidth_gbs.max(1e-3) * 1e6);
    compute.max(memory)
}

/// The config's features on a log scale (sizes span orders of magnitude; a 3x3 against a 1x1 kernel should
/// weigh like 300 against 100 channels).
fn feature_vector(config: &LayerConfig) -> Vec<f64> {
    config.features().unwrap_or_default().into_iter().map(|x| x.abs().ln_1p() * x.signum()).collect()
}

/// Columns brought to zero mean and unit variance; constant columns dropped.
fn standardised(rows: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    let width = rows.iter().map(Vec::len).min().unwrap_or(0);
    let n = rows.len().max(1) as f64;
    let mut keep = Vec::new();
    for j in 0..width {
        let mean = rows.iter().map(|r| r[j]).sum::<f64>() / n;
        let var = rows.iter().map(|r| (r[j] - mean).powi(2)).sum::<f64>() / n;
        if var > 1e-12 {
            keep.push((j, mean, var.sqrt()));
        }
    }
    rows.iter().map(|r| keep.iter().map(|&(j, mean, sd)| (r[j] - mean) / sd).collect()).collect()
}

fn distance2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Indices of `points` in coverage order: k-means medoids for k = 1, 2, 4, ... up to [`MAX_CLUSTERS`] (each
/// round's new picks by their cluster's weight, heaviest first), then the rest by farthest point from what is
/// chosen.
fn coverage_order(points: &[Vec<f64>], weights: &[f64], seed: u64) -> Vec<usize> {
    let n = points.len();
    let mut chosen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut k = 1;
    while k <= MAX_CLUSTERS && order.len() < n {
        let (centres, assignment) = kmeans(points, k.min(n), &mut rng);
        // (covered already, weight, medoid): clusters with no chosen member first, then the heavier.
        let mut picks: Vec<(bool, f64, usize)> = Vec::new();
        for (c, centre) in centres.iter().enumerate() {
            let members = (0..n).filter(|&i| assignment[i] == c);
            let weight: f64 = members.clone().map(|i| weights[i]).sum();
            let covered = members.clone().any(|i| chosen[i]);
            let medoid = members
                .filter(|&i| !chosen[i])
                .min_by(|&a, &b| distance2(&points[a], centre).total_cmp(&distance2(&points[b], centre)));
            if let Some(m) = medoid {
                picks.push((covered, weight, m));
            }
        }
        picks.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)));
        for (_, _, m) in picks {
            if !chosen[m] {
                chosen[m] = true;
                order.push(m);
            }
        }
        k *= 2;
    }
    // The rest: each next point the one farthest from everything chosen.
    let mut nearest: Vec<f64> = (0..n)
        .map(|i| order.iter().map(|&c| distance2(&points[i], &points[c])).fold(f64::INFINITY, f64::min))
        .collect();
    while order.len() < n {
        let next = (0..n)
            .filter(|&i| !chosen[i])
            .max_by(|&a, &b| nearest[a].total_cmp(&nearest[b]).then(b.cmp(&a)))
            .expect("an unchosen point remains");
        chosen[next] = true;
        order.push(next);
        for i in 0..n {
            nearest[i] = nearest[i].min(distance2(&points[i], &points[next]));
        }
    }
    order
}

/// Lloyd's k-means with k-means++ seeding: the centres and each point's cluster.
fn kmeans(points: &[Vec<f64>], k: usize, rng: &mut ChaCha8Rng) -> (Vec<Vec<f64>>, Vec<usize>) {
    let n = points.len();
    let mut centres: Vec<Vec<f64>> = vec![points[rng.random_range(0..n)].clone()];
    let mut d2: Vec<f64> = points.iter().map(|p| distance2(p, &centres[0])).collect();
    while centres.len() < k {
        let total: f64 = d2.iter().sum();
        let next = if total > 0.0 {
            let mut r = rng.random::<f64>() * total;
            let mut pick = n - 1;
            for (i, d) in d2.iter().enumerate() {
                if r < *d {
                    pick = i;
                    break;
                }
                r -= d;
            }
            pick
        } else {
            rng.random_range(0..n)
        };
        centres.push(points[next].clone());
        for (i, p) in points.iter().enumerate() {
            d2[i] = d2[i].min(distance2(p, &points[next]));
        }
    }
    let mut assignment = vec![0; n];
    for _ in 0..ITERATIONS {
        let mut changed = false;
        for (i, p) in points.iter().enumerate() {
            let best = (0..centres.len())
                .min_by(|&a, &b| distance2(p, &centres[a]).total_cmp(&distance2(p, &centres[b])))
                .unwrap_or(0);
            if best != assignment[i] {
                assignment[i] = best;
                changed = true;
            }
        }
        for (c, centre) in centres.iter_mut().enumerate() {
            let members: Vec<&Vec<f64>> =
                points.iter().zip(&assignment).filter(|(_, &a)| a == c).map(|(p, _)| p).collect();
            if members.is_empty() {
                continue;
            }
            for (j, v) in centre.iter_mut().enumerate() {
                *v = members.iter().map(|m| m[j]).sum::<f64>() / members.len() as f64;
            }
        }
        if !changed {
            break;
        }
    }
    (centres, assignment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str, count: usize) -> SampledConfig {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        SampledConfig { config: LayerConfig::from_json(&v).unwrap(), source: "test".into(), count }
    }

    fn conv(channels: usize, size: usize, count: usize) -> SampledConfig {
        config(
            &format!(
                r#"{{"type":"conv2d","filters":{channels},"kernel":[3,3],"padding":"same","batch_size":1,"input_shapes":[[{channels},{size},{size}]]}}"#
            ),
            count,
        )
    }

    fn relu(channels: usize, size: usize) -> SampledConfig {
        config(
            &format!(
                r#"{{"type":"activation","function":"relu","batch_size":1,"input_shapes":[[{channels},{size},{size}]]}}"#
            ),
            1,
        )
    }

    #[test]
    fn every_config_once_types_by_their_time_and_a_cover_first() {
        let mut configs = Vec::new();
        // Two tight groups of convolutions, far apart, the first much larger.
        for c in [16, 17, 18, 19, 20, 21, 22, 23] {
            configs.push(conv(c, 56, 1));
        }
        for c in [512, 513, 514, 515] {
            configs.push(conv(c, 7, 1));
        }
        for c in 1..=12 {
            configs.push(relu(c * 8, 14));
        }
        let q = quick_order(&configs, 100.0, 20.0);
        let mut sorted = q.order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..configs.len()).collect::<Vec<_>>(), "every config exactly once");
        assert!(q.shares[&LayerType::Conv2d] > q.shares[&LayerType::Activation]);
        // The first two convolutions cover both groups.
        let convs: Vec<usize> = q.order.iter().copied().filter(|&i| i < 12).take(2).collect();
        assert!(convs.iter().any(|&i| i < 8) && convs.iter().any(|&i| i >= 8), "{convs:?}");
        // Deterministic.
        assert_eq!(quick_order(&configs, 100.0, 20.0).order, q.order);
    }
}
