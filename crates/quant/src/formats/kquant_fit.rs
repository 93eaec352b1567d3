//! Scale (and min) searches for the K-quant quantizers.
//!
//! For each sub-block the quantizer tries a small grid of inverse scales around
//! `nmax / range`, rounds to integer codes, and refits the scale (and offset) to
//! those codes by weighted least squares, keeping the candidate with the lowest
//! weighted squared error. This is the usual approach for these formats; it is
//! our own implementation, not a port.

use super::nearest_int;

/// Fits `x ≈ scale * L - min` with integer `L` in `0..=nmax`, `scale >= 0` and
/// `min >= 0`, minimizing `Σ w (scale L - min - x)²`. Writes the codes to `l`
/// and returns `(scale, min)`.
pub(crate) fn fit_affine(x: &[f32], w: &[f32], nmax: i32, l: &mut [u8]) -> (f32, f32) {
    let lo = x.iter().copied().fold(0.0f32, f32::min);
    let hi = x.iter().copied().fold(f32::MIN, f32::max);
    if hi <= lo {
        l.fill(0);
        return (0.0, -lo);
    }
    debug_assert!(x.len() <= 32);
    let mut buf = [0u8; 32];
    let cand = &mut buf[..x.len()];
    let mut best = (f32::INFINITY, 0.0f32, -lo);
    for step in -10..=10 {
        let iscale = (nmax as f32 + 0.1 * step as f32) / (hi - lo);
        for (c, &v) in cand.iter_mut().zip(x) {
            *c = nearest_int(iscale * (v - lo)).clamp(0, nmax) as u8;
        }
        let Some((a, b)) = lsq_affine(x, w, cand) else {
            continue;
        };
        let err = weighted_err(x, w, cand, a, b);
        if err < best.0 {
            best = (err, a, -b);
            l.copy_from_slice(cand);
        }
    }
    if best.0.is_infinite() {
        // Degenerate weights: fall back to the plain min/max grid.
        let scale = (hi - lo) / nmax as f32;
        for (c, &v) in l.iter_mut().zip(x) {
            *c = nearest_int((v - lo) / scale).clamp(0, nmax) as u8;
        }
        return (scale, -lo);
    }
    (best.1, best.2)
}

/// Weighted least squares `x ≈ a L + b` with the constraint `b <= 0`, `a >= 0`.
fn lsq_affine(x: &[f32], w: &[f32], l: &[u8]) -> Option<(f32, f32)> {
    let (mut sw, mut swl, mut swl2, mut swx, mut swlx) = (0f32, 0f32, 0f32, 0f32, 0f32);
    for ((&v, &wi), &li) in x.iter().zip(w).zip(l) {
        let lf = f32::from(li);
        sw += wi;
        swl += wi * lf;
        swl2 += wi * lf * lf;
        swx += wi * v;
        swlx += wi * lf * v;
    }
    let det = sw * swl2 - swl * swl;
    if det <= 0.0 {
        return None;
    }
    let mut a = (sw * swlx - swl * swx) / det;
    let mut b = (swl2 * swx - swl * swlx) / det;
    if b > 0.0 {
        b = 0.0;
        a = swlx / swl2;
    }
    (a > 0.0 && a.is_finite() && b.is_finite()).then_some((a, b))
}

fn weighted_err(x: &[f32], w: &[f32], l: &[u8], a: f32, b: f32) -> f32 {
    x.iter()
        .zip(w)
        .zip(l)
        .map(|((&v, &wi), &li)| {
            let e = a * f32::from(li) + b - v;
            wi * e * e
        })
        .sum()
}

/// Fits `x ≈ scale * L` with integer `L` in `-nmax..=nmax-1`, minimizing
/// `Σ w (scale L - x)²`. Writes the codes to `l` and returns `scale` (signed).
pub(crate) fn fit_symmetric(x: &[f32], w: &[f32], nmax: i32, l: &mut [i8]) -> f32 {
    let (max, amax) = super::signed_absmax(x);
    if amax < 1e-30 {
        l.fill(0);
        return 0.0;
    }
    debug_assert!(x.len() <= 32);
    let mut buf = [0i8; 32];
    let cand = &mut buf[..x.len()];
    let mut best = (f32::NEG_INFINITY, 0.0f32);
    for step in -9..=9 {
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for ((c, &v), &wi) in cand.iter_mut().zip(x).zip(w) {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            *c = q as i8;
            sumlx += wi * v * q as f32;
            suml2 += wi * (q * q) as f32;
        }
        // Error = Σw x² - (Σw x L)² / Σw L²: maximize the second term.
        if suml2 > 0.0 && sumlx * sumlx / suml2 > best.0 {
            best = (sumlx * sumlx / suml2, sumlx / suml2);
            l.copy_from_slice(cand);
        }
    }
    if best.0.is_infinite() {
        let scale = max / -(nmax as f32);
        for (c, &v) in l.iter_mut().zip(x) {
            *c = nearest_int(v / scale).clamp(-nmax, nmax - 1) as i8;
        }
        return scale;
    }
    best.1
}
