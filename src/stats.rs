//! Statistics, in one place: robust summaries of timed repetitions, quantiles and medians.
//!
//! Medians and MADs rather than means, because a shared VM produces long-tailed timings; outliers are counted with Tukey's fences and reported, never silently dropped.

/// Spread of one sample's repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    /// Median absolute deviation from the median.
    pub mad: f64,
    /// Standard deviation / mean.
    pub cv: f64,
    /// 1.4826 MAD / median: the CV a normal distribution with this MAD would have, insensitive to the odd
    /// preempted repetition that inflates `cv` on a shared machine.
    pub robust_cv: f64,
    /// Values outside [Q1 - 1.5 IQR, Q3 + 1.5 IQR].
    pub tukey_outliers: u64,
    pub count: usize,
}

/// Linear-interpolated quantile of sorted values (q in [0, 1]).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Median (the mean of the middle two for an even count); `None` for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| quantile_sorted(&sorted(values), 0.5))
}

/// Summary of repetitions; `None` for an empty slice.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    let s = sorted(values);
    let median = quantile_sorted(&s, 0.5);
    let mad = quantile_sorted(&sorted(&s.iter().map(|x| (x - median).abs()).collect::<Vec<_>>()), 0.5);
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let var = if s.len() > 1 { s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    let (q1, q3) = (quantile_sorted(&s, 0.25), quantile_sorted(&s, 0.75));
    let (lo, hi) = (q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1));
    let tukey_outliers = s.iter().filter(|&&x| x < lo || x > hi).count() as u64;
    let robust_cv = if median > 0.0 { 1.4826 * mad / median } else { 0.0 };
    Some(Spread { median, mad, cv, robust_cv, tukey_outliers, count: s.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_mad_and_outliers() {
        let s = spread(&[1.0, 1.1, 0.9, 1.0, 10.0]).unwrap();
        assert_eq!(s.median, 1.0);
        assert!((s.mad - 0.1).abs() < 1e-12);
        assert_eq!(s.tukey_outliers, 1);
        assert!(s.cv > 1.0 && (s.robust_cv - 0.14826).abs() < 1e-9);
        let flat = spread(&[2.0, 2.0, 2.0]).unwrap();
        assert_eq!((flat.cv, flat.tukey_outliers), (0.0, 0));
        assert!(spread(&[]).is_none());
    }
}
