//! Isolation forest (Liu, Ting & Zhou 2008) for removing measurement outliers before training.
//!
//! No maintained Rust crate offers it with a seedable, dependency-light API, and the algorithm is short: random
//! axis-aligned cuts isolate an anomalous row in fewer cuts than a normal one, so the average path length over
//! many random trees scores each row.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone, PartialEq)]
pub struct IsolationForest {
    pub n_trees: usize,
    /// Rows drawn (without replacement) to grow each tree.
    pub sample_size: usize,
    pub seed: u64,
}

impl Default for IsolationForest {
    fn default() -> Self {
        IsolationForest { n_trees: 100, sample_size: 256, seed: 0 }
    }
}

/// Average path length of an unsuccessful binary-search-tree search among `n` points: the normaliser c(n).
fn average_path(n: usize) -> f64 {
    match n {
        0 | 1 => 0.0,
        2 => 1.0,
        _ => {
            let n = n as f64;
            2.0 * ((n - 1.0).ln() + 0.577_215_664_901_532_9) - 2.0 * (n - 1.0) / n
        }
    }
}

crate::train::fit::with_setters!(IsolationForest {
    with_n_trees: n_trees: usize,
    with_sample_size: sample_size: usize,
    with_seed: seed: u64,
});

impl IsolationForest {
    /// Anomaly score in (0, 1] per row: near 1 = easily isolated (anomalous), ≲ 0.5 = normal.
    pub fn scores(&self, rows: &[Vec<f64>]) -> Vec<f64> {
        let n = rows.len();
        if n < 3 {
            return vec![0.0; n];
        }
        let psi = self.sample_size.clamp(2, n);
        let height_limit = (psi as f64).log2().ceil() as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut depth_sum = vec![0.0; n];
        let mut all: Vec<usize> = (0..n).collect();
        for _ in 0..self.n_trees.max(1) {
            // Partial Fisher–Yates: the first psi entries become the subsample.
            for i in 0..psi {
                let j = rng.random_range(i..n);
                all.swap(i, j);
            }
            let sample: Vec<usize> = all[..psi].to_vec();
            let tree = grow(rows, sample, height_limit, &mut rng);
            for (row, sum) in rows.iter().zip(depth_sum.iter_mut()) {
                *sum += tree.path_length(row);
            }
        }
        let c = average_path(psi);
        depth_sum.iter().map(|s| 2f64.powf(-(s / self.n_trees.max(1) as f64) / c)).collect()
    }

    /// Indices of the `round(contamination × n)` rows with the highest scores (ties broken by index), sorted.
    pub fn outliers(&self, rows: &[Vec<f64>], contamination: f64) -> Vec<usize> {
        let count = ((contamination.clamp(0.0, 0.5)) * rows.len() as f64).round() as usize;
        if count == 0 {
            return vec![];
        }
        let scores = self.scores(rows);
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let mut flagged = order[..count].to_vec();
        flagged.sort_unstable();
        flagged
    }
}

/// A node of an isolation tree, in a flat vector.
enum Node {
    Leaf { size: usize },
    Split { feature: usize, threshold: f64, left: usize, right: usize },
}

struct Tree {
    nodes: Vec<Node>,
}

fn grow(rows: &[Vec<f64>], sample: Vec<usize>, height_limit: usize, rng: &mut ChaCha8Rng) -> Tree {
    let d = rows[0].len();
    let mut nodes = Vec::new();
    // (node slot, rows, depth)
    let mut stack = vec![(0usize, sample, 0usize)];
    nodes.push(Node::Leaf { size: 0 });
    while let Some((slot, members, depth)) = stack.pop() {
        // Features on which these rows still differ; a cut is only possible there.
        let ranges: Vec<(usize, f64, f64)> = (0..d)
            .filter_map(|f| {
                let (lo, hi) = members
                    .iter()
                    .map(|&r| rows[r][f])
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
                (hi > lo).then_some((f, lo, hi))
            })
            .collect();
        if depth >= height_limit || members.len() <= 1 || ranges.is_empty() {
            nodes[slot] = Node::Leaf { size: members.len() };
            continue;
        }
        let (feature, lo, hi) = ranges[rng.random_range(0..ranges.len())];
        let threshold = rng.random_range(lo..hi);
        let (left_rows, right_rows): (Vec<usize>, Vec<usize>) =
            members.into_iter().partition(|&r| rows[r][feature] < threshold);
        let left = nodes.len();
        nodes.push(Node::Leaf { size: 0 });
        let right = nodes.len();
        nodes.push(Node::Leaf { size: 0 });
        nodes[slot] = Node::Split { feature, threshold, left, right };
        stack.push((left, left_rows, depth + 1));
        stack.push((right, right_rows, depth + 1));
    }
    Tree { nodes }
}

impl Tree {
    fn path_length(&self, row: &[f64]) -> f64 {
        let mut i = 0;
        let mut depth = 0.0;
        loop {
            match self.nodes[i] {
                Node::Leaf { size } => return depth + average_path(size),
                Node::Split { feature, threshold, left, right } => {
                    i = if row[feature] < threshold { left } else { right };
                    depth += 1.0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_planted_outliers() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut rows: Vec<Vec<f64>> = (0..400)
            .map(|_| {
                let (a, b): (f64, f64) = (rng.random_range(1.0..10.0), rng.random_range(1.0..10.0));
                vec![a, b, (3.0 * a * b).ln()]
            })
            .collect();
        let planted = [17usize, 101, 250, 333];
        for &i in &planted {
            // Same features, a target 50x too high: a broken measurement.
            rows[i][2] += 50f64.ln();
        }
        let flagged = IsolationForest::default().with_seed(1).outliers(&rows, 0.01);
        assert_eq!(flagged, planted.to_vec());
        let scores = IsolationForest::default().scores(&rows);
        let normal_mean = scores.iter().enumerate().filter(|(i, _)| !planted.contains(i)).map(|(_, s)| s).sum::<f64>()
            / (rows.len() - planted.len()) as f64;
        assert!(planted.iter().all(|&i| scores[i] > normal_mean + 0.1), "{normal_mean}");
    }

    #[test]
    fn zero_contamination_removes_nothing() {
        let rows: Vec<Vec<f64>> = (0..50).map(|i| vec![i as f64]).collect();
        assert!(IsolationForest::default().outliers(&rows, 0.0).is_empty());
    }
}
