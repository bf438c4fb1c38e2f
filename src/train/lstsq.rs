//! Ordinary least squares for the linear candidate: a Householder QR of the design matrix, then a one-sided
//! Jacobi SVD of its small triangular factor, and the minimum-norm solution over the singular values above a
//! threshold (collinear columns, as one-hot features beside the intercept are, get no weight of their own).
//!
//! Why not smartcore's `LinearRegression`, which perfmodel used before: its SVD solver decomposes the whole
//! rows × (features + 1) matrix through a generic element accessor, and the linear candidate, fitted for every
//! fold of every triplet, was 15-18% of `perfmodel train`'s CPU time. Here the pass over the rows is one QR in
//! contiguous columns, and the SVD runs on a square matrix of the features' width. The solution is the same
//! least-squares solution; its last bits differ from smartcore's.

/// Coefficients `w` (one per column of `x`) and intercept `b` minimising `Σ (x_i · w + b - y_i)²`, the
/// minimum-norm such solution when the columns and the intercept are collinear. `None` when there are fewer rows
/// than unknowns or the data are not finite.
pub fn least_squares(x: &[Vec<f64>], y: &[f64]) -> Option<(Vec<f64>, f64)> {
    let m = x.len();
    let d = x.first().map_or(0, Vec::len);
    let k = d + 1;
    if m != y.len() || m < k || x.iter().any(|r| r.len() != d) {
        return None;
    }
    // Column-major, the intercept's column of ones last.
    let mut a = vec![0.0; m * k];
    for (i, row) in x.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            a[j * m + i] = v;
        }
        a[d * m + i] = 1.0;
    }
    if a.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let mut b = y.to_vec();
    // Householder QR: column j below the diagonal reflected onto the diagonal, the same reflection applied to the
    // columns after it and to b. R ends in the upper triangle of the first k rows.
    for j in 0..k {
        let (done, rest) = a.split_at_mut((j + 1) * m);
        let col = &mut done[j * m..];
        let squared = col[j..].iter().map(|v| v * v).sum::<f64>();
        if squared == 0.0 {
            continue;
        }
        let norm = squared.sqrt();
        let alpha = if col[j] > 0.0 { -norm } else { norm };
        // v = col[j..] - alpha e_1, kept in place of the column; H = I - 2 v vᵀ / (vᵀ v), where vᵀ v = |x|² -
        // 2 alpha x_j + alpha² = 2 (|x|² - alpha x_j), with -alpha x_j >= 0 (alpha has the sign opposite x_j).
        let vv = 2.0 * (squared - alpha * col[j]);
        col[j] -= alpha;
        let v = &col[j..];
        let reflect = |target: &mut [f64]| {
            let dot = v.iter().zip(target.iter()).map(|(a, b)| a * b).sum::<f64>();
            let f = 2.0 * dot / vv;
            for (t, &vi) in target.iter_mut().zip(v) {
                *t -= f * vi;
            }
        };
        for c in rest.chunks_exact_mut(m) {
            reflect(&mut c[j..]);
        }
        reflect(&mut b[j..]);
        col[j] = alpha;
        col[j + 1..].fill(0.0);
    }
    // R (k × k, column-major) and the first k entries of Qᵀ b.
    let mut w: Vec<f64> = (0..k).flat_map(|c| (0..k).map(move |r| (r, c))).map(|(r, c)| a[c * m + r]).collect();
    let c = &b[..k];
    // One-sided Jacobi: rotate pairs of columns of W = R V until they are orthogonal; then the singular values
    // are the columns' norms and R = U Σ Vᵀ with U's columns W's normalised.
    let mut v = vec![0.0; k * k];
    for i in 0..k {
        v[i * k + i] = 1.0;
    }
    for _sweep in 0..60 {
        let mut rotated = false;
        for p in 0..k {
            for q in p + 1..k {
                let (wp, wq) = (&w[p * k..(p + 1) * k], &w[q * k..(q + 1) * k]);
                let alpha = wp.iter().map(|x| x * x).sum::<f64>();
                let beta = wq.iter().map(|x| x * x).sum::<f64>();
                let gamma = wp.iter().zip(wq).map(|(a, b)| a * b).sum::<f64>();
                if gamma == 0.0 || gamma.abs() <= f64::EPSILON * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let t = if zeta == 0.0 { 1.0 } else { t };
                let cs = 1.0 / (1.0 + t * t).sqrt();
                let sn = cs * t;
                for m in [&mut w, &mut v] {
                    for r in 0..k {
                        let (x, y) = (m[p * k + r], m[q * k + r]);
                        m[p * k + r] = cs * x - sn * y;
                        m[q * k + r] = sn * x + cs * y;
                    }
                }
            }
        }
        if !rotated {
            break;
        }
    }
    let sigma: Vec<f64> = (0..k).map(|j| w[j * k..(j + 1) * k].iter().map(|x| x * x).sum::<f64>().sqrt()).collect();
    let largest = sigma.iter().copied().fold(0.0, f64::max);
    // smartcore's cut (half of sqrt(rows + unknowns + 1) times the largest singular value times machine epsilon),
    // 16 times over: standardised columns that are exactly proportional (a size in elements and in bytes) leave a
    // singular value of rounding noise, which landed within 2x below smartcore's cut, and one above it would get
    // a weight of 1e14. A direction 1e-12 as strong as the largest carries nothing f64 can fit.
    let tol = 16.0 * 0.5 * ((m + k) as f64 + 1.0).sqrt() * largest * f64::EPSILON;
    let mut solution = vec![0.0; k];
    for j in 0..k {
        if sigma[j] <= tol {
            continue;
        }
        // (U_jᵀ c) / σ_j with U_j = W_j / σ_j.
        let coefficient = w[j * k..(j + 1) * k].iter().zip(c).map(|(a, b)| a * b).sum::<f64>() / (sigma[j] * sigma[j]);
        for (s, &vj) in solution.iter_mut().zip(&v[j * k..(j + 1) * k]) {
            *s += coefficient * vj;
        }
    }
    let intercept = solution.pop()?;
    (solution.iter().all(|v| v.is_finite()) && intercept.is_finite()).then_some((solution, intercept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn an_exact_linear_relation_is_recovered() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let x: Vec<Vec<f64>> = (0..200).map(|_| (0..5).map(|_| rng.random_range(-3.0..3.0)).collect()).collect();
        let w = [1.5, -2.0, 0.0, 7.25, -0.5];
        let y: Vec<f64> = x.iter().map(|r| r.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() + 4.0).collect();
        let (coefficients, intercept) = least_squares(&x, &y).unwrap();
        for (c, w) in coefficients.iter().zip(&w) {
            assert!((c - w).abs() < 1e-10, "{coefficients:?}");
        }
        assert!((intercept - 4.0).abs() < 1e-10, "{intercept}");
    }

    #[test]
    fn noisy_data_get_the_normal_equations_solution() {
        // Residuals orthogonal to every column and to the intercept: Xᵀ (y - X w - b) = 0.
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let x: Vec<Vec<f64>> = (0..300).map(|_| (0..7).map(|_| rng.random_range(-1.0..1.0)).collect()).collect();
        let y: Vec<f64> = x.iter().map(|r| r[0] * 3.0 - r[3] + rng.random_range(-0.5..0.5) + 0.1).collect();
        let (w, b) = least_squares(&x, &y).unwrap();
        let residual: Vec<f64> =
            x.iter().zip(&y).map(|(r, y)| y - b - r.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>()).collect();
        assert!(residual.iter().sum::<f64>().abs() < 1e-9);
        for j in 0..7 {
            let dot: f64 = x.iter().zip(&residual).map(|(r, e)| r[j] * e).sum();
            assert!(dot.abs() < 1e-9, "column {j}: {dot}");
        }
    }

    #[test]
    fn collinear_columns_get_the_minimum_norm_solution() {
        // One-hot columns that always sum to one are collinear with the intercept: y = 2 a + 5 b + 0.5 c + 1 is
        // met by many (w, b); the minimum-norm one shares the constant between the one-hot weights and the
        // intercept.
        let x: Vec<Vec<f64>> =
            (0..60).map(|i| if i % 3 == 0 { vec![1.0, 0.0, i as f64] } else { vec![0.0, 1.0, i as f64] }).collect();
        let y: Vec<f64> = x.iter().map(|r| 2.0 * r[0] + 5.0 * r[1] + 0.5 * r[2] + 1.0).collect();
        let (w, b) = least_squares(&x, &y).unwrap();
        for (r, y) in x.iter().zip(&y) {
            let p = b + r.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
            assert!((p - y).abs() < 1e-9, "{p} vs {y}");
        }
        assert!((w[2] - 0.5).abs() < 1e-9 && (w[0] + b - 3.0).abs() < 1e-9 && (w[1] + b - 6.0).abs() < 1e-9);
        // Among w0 = 3 - b, w1 = 6 - b, the norm (3 - b)² + (6 - b)² + b² is least at b = 3.
        assert!((b - 3.0).abs() < 1e-9, "{w:?} {b}");
    }

    #[test]
    fn proportional_standardised_columns_get_no_runaway_weights() {
        // A size and the same size in another unit (3.7 per element: not a power of two, so rounding differs),
        // standardised as the linear candidate does: the second column is the first up to rounding.
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for m in [12, 200, 2000, 12000] {
            let raw: Vec<[f64; 3]> = (0..m)
                .map(|_| {
                    let e = rng.random_range(1.0..5e6_f64).round();
                    [e, 3.7 * e, rng.random_range(0.0..3.0)]
                })
                .collect();
            let st = crate::train::model::Standardizer::fit(&raw.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
            let x: Vec<Vec<f64>> = raw.iter().map(|r| st.apply(r)).collect();
            // With noise in the target, which has a part along the columns' rounding difference too.
            let y: Vec<f64> = x.iter().map(|r| 3.0 * r[0] - r[2] + 0.5 + rng.random_range(-0.1..0.1)).collect();
            let (w, b) = least_squares(&x, &y).unwrap();
            assert!(w.iter().all(|w| w.abs() < 10.0), "{m} rows: {w:?}");
            assert!((w[0] + w[1] - 3.0).abs() < 0.1 && (w[2] + 1.0).abs() < 0.1 && (b - 0.5).abs() < 0.1, "{w:?} {b}");
        }
    }

    #[test]
    fn as_many_rows_as_unknowns_are_solved_exactly() {
        let x = vec![vec![1.0, 0.0], vec![0.0, 2.0], vec![3.0, 1.0]];
        let y = [2.0, 3.0, 9.0];
        let (w, b) = least_squares(&x, &y).unwrap();
        for (r, y) in x.iter().zip(&y) {
            assert!((b + r[0] * w[0] + r[1] * w[1] - y).abs() < 1e-12);
        }
    }

    #[test]
    fn too_few_rows_or_non_finite_data_are_refused() {
        assert!(least_squares(&[vec![1.0]], &[1.0]).is_none());
        assert!(least_squares(&[vec![1.0, 2.0], vec![2.0, 1.0]], &[1.0, 2.0]).is_none());
        assert!(least_squares(&[vec![1.0], vec![2.0], vec![f64::NAN]], &[1.0, 2.0, 3.0]).is_none());
        assert!(least_squares(&[vec![1.0], vec![2.0], vec![3.0]], &[1.0, f64::INFINITY, 3.0]).is_none());
    }
}
