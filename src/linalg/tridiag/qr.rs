//! All eigenvalues of a symmetric tridiagonal matrix by the
//! Pal-Walker-Kahan root-free QL/QR iteration (LAPACK's `dsterf`), with
//! LAPACK's `dlae2` for the 2 x 2 blocks.

/// The eigenvalues of the symmetric tridiagonal `T` (diagonal `d`,
/// subdiagonal `e`, `e.len() + 1 = d.len()`), ascending, by the
/// Pal-Walker-Kahan root-free QL/QR iteration (LAPACK's `dsterf`): the
/// implicit shifted QR iteration carried on the squares `e_i^2`, so a
/// sweep needs one division pair per row and no square root; `O(n^2)`
/// work with about two sweeps per eigenvalue. Each unreduced block is
/// scaled into `[sqrt(safe min) / eps^2, sqrt(safe max) / 3]` first and
/// iterated from its end with the larger diagonal entry (QL from the top,
/// QR from the bottom), as LAPACK does for graded matrices.
///
/// `None` when the entries are not finite or the iteration has not split
/// `T` after `30 n` sweeps (LAPACK's limit), for the caller's fallback.
pub(crate) fn tridiagonal_eigenvalues(d: &[f64], e: &[f64]) -> Option<Vec<f64>> {
    let n = d.len();
    if n == 0 {
        return Some(Vec::new());
    }
    if e.len() + 1 != n || d.iter().chain(e).any(|v| !v.is_finite()) {
        return None;
    }
    let mut d = d.to_vec();
    // The squares of the subdiagonal, one spare entry for simpler indexing.
    let mut e2: Vec<f64> = e.to_vec();
    e2.push(0.0);
    let eps = f64::EPSILON * 0.5;
    let eps2 = eps * eps;
    let safe_min = f64::MIN_POSITIVE;
    let scale_max = (1.0 / safe_min).sqrt() / 3.0;
    let scale_min = safe_min.sqrt() / eps2;
    let max_sweeps = n.saturating_mul(30);
    let mut sweeps = 0usize;
    let mut l1 = 0usize;
    while l1 < n {
        if l1 > 0 {
            e2[l1 - 1] = 0.0;
        }
        // The unreduced block l1 ..= m (e here still holds the entries).
        let mut m = l1;
        while m + 1 < n {
            if e2[m].abs() <= d[m].abs().sqrt() * d[m + 1].abs().sqrt() * eps {
                e2[m] = 0.0;
                break;
            }
            m += 1;
        }
        let (start, end) = (l1, m);
        l1 = m + 1;
        if end == start {
            continue;
        }
        // Scale the block.
        let norm = d[start..=end].iter().chain(&e2[start..end]).fold(0.0f64, |a, v| a.max(v.abs()));
        if norm == 0.0 {
            continue;
        }
        let factor = if norm > scale_max {
            scale_max / norm
        } else if norm < scale_min {
            scale_min / norm
        } else {
            1.0
        };
        if factor != 1.0 {
            d[start..=end].iter_mut().for_each(|v| *v *= factor);
            e2[start..end].iter_mut().for_each(|v| *v *= factor);
        }
        e2[start..end].iter_mut().for_each(|v| *v *= *v);
        if d[end].abs() >= d[start].abs() {
            // QL iteration: eigenvalues found at the top, l moving down.
            let mut l = start;
            'ql: while l <= end {
                let mut m = l;
                while m < end {
                    if e2[m].abs() <= eps2 * (d[m] * d[m + 1]).abs() {
                        break;
                    }
                    m += 1;
                }
                if m < end {
                    e2[m] = 0.0;
                }
                let p = d[l];
                if m == l {
                    l += 1;
                    continue;
                }
                if m == l + 1 {
                    let (rt1, rt2) = symmetric_2x2_eigenvalues(d[l], e2[l].sqrt(), d[l + 1]);
                    d[l] = rt1;
                    d[l + 1] = rt2;
                    e2[l] = 0.0;
                    l += 2;
                    continue;
                }
                if sweeps == max_sweeps {
                    break 'ql;
                }
                sweeps += 1;
                let rte = e2[l].sqrt();
                let mut sigma = (d[l + 1] - p) / (2.0 * rte);
                let r = sigma.hypot(1.0);
                sigma = p - rte / (sigma + if sigma >= 0.0 { r } else { -r });
                let (mut c, mut s) = (1.0f64, 0.0f64);
                let mut gamma = d[m] - sigma;
                let mut p = gamma * gamma;
                for i in (l..m).rev() {
                    let bb = e2[i];
                    let r = p + bb;
                    if i + 1 != m {
                        e2[i + 1] = s * r;
                    }
                    let old_c = c;
                    c = p / r;
                    s = bb / r;
                    let old_gamma = gamma;
                    let alpha = d[i];
                    gamma = c * (alpha - sigma) - s * old_gamma;
                    d[i + 1] = old_gamma + (alpha - gamma);
                    p = if c != 0.0 { gamma * gamma / c } else { old_c * bb };
                }
                e2[l] = s * p;
                d[l] = sigma + gamma;
            }
        } else {
            // QR iteration: eigenvalues found at the bottom, l moving up.
            let mut l = end;
            'qr: while l >= start {
                let mut m = l;
                while m > start {
                    if e2[m - 1].abs() <= eps2 * (d[m] * d[m - 1]).abs() {
                        break;
                    }
                    m -= 1;
                }
                if m > start {
                    e2[m - 1] = 0.0;
                }
                let p = d[l];
                if m == l {
                    if l == start {
                        break 'qr;
                    }
                    l -= 1;
                    continue;
                }
                if m + 1 == l {
                    let (rt1, rt2) = symmetric_2x2_eigenvalues(d[l], e2[l - 1].sqrt(), d[l - 1]);
                    d[l] = rt1;
                    d[l - 1] = rt2;
                    e2[l - 1] = 0.0;
                    if l < start + 2 {
                        break 'qr;
                    }
                    l -= 2;
                    continue;
                }
                if sweeps == max_sweeps {
                    break 'qr;
                }
                sweeps += 1;
                let rte = e2[l - 1].sqrt();
                let mut sigma = (d[l - 1] - p) / (2.0 * rte);
                let r = sigma.hypot(1.0);
                sigma = p - rte / (sigma + if sigma >= 0.0 { r } else { -r });
                let (mut c, mut s) = (1.0f64, 0.0f64);
                let mut gamma = d[m] - sigma;
                let mut p = gamma * gamma;
                for i in m..l {
                    let bb = e2[i];
                    let r = p + bb;
                    if i != m {
                        e2[i - 1] = s * r;
                    }
                    let old_c = c;
                    c = p / r;
                    s = bb / r;
                    let old_gamma = gamma;
                    let alpha = d[i + 1];
                    gamma = c * (alpha - sigma) - s * old_gamma;
                    d[i] = old_gamma + (alpha - gamma);
                    p = if c != 0.0 { gamma * gamma / c } else { old_c * bb };
                }
                e2[l - 1] = s * p;
                d[l] = sigma + gamma;
            }
        }
        if factor != 1.0 {
            d[start..=end].iter_mut().for_each(|v| *v /= factor);
        }
        if sweeps >= max_sweeps {
            // Not split after the limit: the block's entries are not all
            // eigenvalues.
            if e2[start..end].iter().any(|&v| v != 0.0) {
                return None;
            }
        }
    }
    if d.iter().any(|v| !v.is_finite()) {
        return None;
    }
    d.sort_by(f64::total_cmp);
    Some(d)
}

/// The eigenvalues `(rt1, rt2)`, `|rt1| >= |rt2|`, of the symmetric
/// `[[a, b], [b, c]]` (LAPACK's `dlae2`): the larger from the stable
/// quadratic formula, the smaller from the determinant.
fn symmetric_2x2_eigenvalues(a: f64, b: f64, c: f64) -> (f64, f64) {
    let sm = a + c;
    let adf = (a - c).abs();
    let ab = (b + b).abs();
    let (acmx, acmn) = if a.abs() > c.abs() { (a, c) } else { (c, a) };
    let rt = if adf > ab {
        adf * (1.0 + (ab / adf).powi(2)).sqrt()
    } else if adf < ab {
        ab * (1.0 + (adf / ab).powi(2)).sqrt()
    } else {
        ab * std::f64::consts::SQRT_2
    };
    if sm != 0.0 {
        let rt1 = 0.5 * (sm + rt.copysign(sm));
        (rt1, (acmx / rt1) * acmn - (b / rt1) * b)
    } else {
        (0.5 * rt, -0.5 * rt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;
    use rand::{Rng, SeedableRng};

    /// The eigenvalues of `T` as the dense reference (faer's solver on the
    /// tridiagonal written out) has them, within `1e-13 n ||T||`.
    fn check_eigenvalues(d: &[f64], e: &[f64]) {
        let n = d.len();
        let t = Mat::<f64>::from_fn(n, n, |i, j| {
            if i == j {
                d[i]
            } else if i == j + 1 {
                e[j]
            } else if j == i + 1 {
                e[i]
            } else {
                0.0
            }
        });
        let mut reference = t.as_ref().self_adjoint_eigenvalues(faer::Side::Lower).expect("reference");
        reference.sort_by(f64::total_cmp);
        let values = tridiagonal_eigenvalues(d, e).expect("converges");
        assert_eq!(values.len(), n);
        let norm = d.iter().chain(e).fold(0.0f64, |m, v| m.max(v.abs())) * 3.0;
        for (i, (v, r)) in values.iter().zip(&reference).enumerate() {
            assert!((v - r).abs() <= 1e-13 * (n as f64) * norm.max(f64::MIN_POSITIVE), "n {n}, eigenvalue {i}: {v} against {r}");
        }
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "ascending");
    }

    #[test]
    fn root_free_qr_matches_the_dense_eigenvalues() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        for n in [1usize, 2, 3, 10, 200, 1000] {
            let d: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let e: Vec<f64> = (0..n - 1).map(|_| rng.random_range(-1.0..1.0)).collect();
            check_eigenvalues(&d, &e);
            // The same at extreme scales (the blocks are scaled inside).
            for scale in [1e-300, 1e300] {
                let (ds, es): (Vec<f64>, Vec<f64>) = (d.iter().map(|v| v * scale).collect(), e.iter().map(|v| v * scale).collect());
                let values = tridiagonal_eigenvalues(&ds, &es).expect("converges");
                let unscaled = tridiagonal_eigenvalues(&d, &e).expect("converges");
                for (v, u) in values.iter().zip(&unscaled) {
                    assert!((v / scale - u).abs() <= 1e-12 * (n as f64), "scale {scale:e}, n {n}: {v} against {u}");
                }
            }
        }
        // Wilkinson W+ (pairs of close eigenvalues), graded diagonals in
        // both directions (QL and QR), a split matrix, zero and diagonal ones.
        for m in [10usize, 50] {
            let n = 2 * m + 1;
            let d: Vec<f64> = (0..n).map(|i| (i as f64 - m as f64).abs()).collect();
            check_eigenvalues(&d, &vec![1.0; n - 1]);
        }
        let graded: Vec<f64> = (0..60).map(|i| 10f64.powf(-(i as f64) / 6.0)).collect();
        let graded_e: Vec<f64> = graded.windows(2).map(|w| 0.5 * w[1]).collect();
        check_eigenvalues(&graded, &graded_e);
        let reversed: Vec<f64> = graded.iter().rev().copied().collect();
        let reversed_e: Vec<f64> = graded_e.iter().rev().copied().collect();
        check_eigenvalues(&reversed, &reversed_e);
        let d: Vec<f64> = (0..300).map(|_| rng.random_range(-1.0..1.0)).collect();
        let e: Vec<f64> = (0..299).map(|i| if i % 30 == 29 { 0.0 } else { rng.random_range(-1.0..1.0) }).collect();
        check_eigenvalues(&d, &e);
        check_eigenvalues(&[0.0; 7], &[0.0; 6]);
        check_eigenvalues(&[3.0, -1.0, 2.0, 2.0], &[0.0; 3]);
        // Bad input: None, not a panic.
        assert!(tridiagonal_eigenvalues(&[1.0, f64::NAN], &[1.0]).is_none());
        assert!(tridiagonal_eigenvalues(&[1.0, 2.0], &[]).is_none());
        assert_eq!(tridiagonal_eigenvalues(&[], &[]), Some(Vec::new()));
    }
}
