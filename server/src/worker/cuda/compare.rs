//! Comparing a candidate's output buffer with the reference's (docs/spec.md, "Statements":
//! `atol`/`rtol`; "What the tool does with it": verify), and the words of a failure.
//!
//! Pure. The comparison itself runs on the device (`klsp_compare` in `helpers.cu`); the
//! host comparison here is its CPU twin, kept for the tests that pin the rule
//! (`within`) and check the device against it. The anti-cheat rules decide from the
//! device's counts.

#[cfg(test)]
use super::fill::{decode, Elem};
use super::fill::{elem_size, poison_elem};
use crate::spec::DType;

#[cfg(test)]
/// Why one element failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadKind {
    /// Both numbers, too far apart (or NaN in the candidate where the reference has NaN
    /// is fine; a number where the reference has NaN is a mismatch).
    Mismatch,
    /// NaN in the candidate where the reference has a number.
    Nan,
}

#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BadElem {
    /// Row-major flat index.
    pub index: usize,
    pub expected: f64,
    pub actual: f64,
    pub kind: BadKind,
    /// The candidate's element still holds the poison pattern: never written.
    pub unwritten: bool,
}

#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Comparison {
    pub first_bad: Option<BadElem>,
    /// Over every element where both values are finite.
    pub max_abs_err: f64,
    /// Over every element where both are finite and the reference is non-zero.
    pub max_rel_err: f64,
}

#[cfg(test)]
/// Whether `actual` is within tolerance of `expected`: |a - b| <= atol + rtol * |b|;
/// NaN matches only NaN; equal infinities match.
pub fn within(expected: f64, actual: f64, atol: f64, rtol: f64) -> bool {
    if expected.is_nan() || actual.is_nan() {
        return expected.is_nan() && actual.is_nan();
    }
    if expected == actual {
        return true;
    }
    // An infinity matches only itself: rtol * inf would otherwise accept anything.
    if expected.is_infinite() || actual.is_infinite() {
        return false;
    }
    (actual - expected).abs() <= atol + rtol * expected.abs()
}

#[cfg(test)]
/// Compares two buffers of `dtype` element by element. Integers with zero tolerance are
/// compared exactly (no rounding through f64, so i64 keeps every bit).
pub fn compare(dtype: DType, expected: &[u8], actual: &[u8], atol: f64, rtol: f64) -> Comparison {
    let es = elem_size(dtype);
    let poison = poison_elem(dtype);
    let exact = atol == 0.0 && rtol == 0.0;
    let mut c = Comparison::default();
    for (i, (e, a)) in expected
        .chunks_exact(es)
        .zip(actual.chunks_exact(es))
        .enumerate()
    {
        let (ev, av) = (decode(dtype, e), decode(dtype, a));
        let ok = match (ev, av) {
            (Elem::Int(x), Elem::Int(y)) if exact => x == y,
            _ => within(ev.as_f64(), av.as_f64(), atol, rtol),
        };
        let (x, y) = (ev.as_f64(), av.as_f64());
        if x.is_finite() && y.is_finite() {
            let abs = (y - x).abs();
            c.max_abs_err = c.max_abs_err.max(abs);
            if x != 0.0 {
                c.max_rel_err = c.max_rel_err.max(abs / x.abs());
            }
        }
        if !ok && c.first_bad.is_none() {
            c.first_bad = Some(BadElem {
                index: i,
                expected: x,
                actual: y,
                kind: if y.is_nan() && !x.is_nan() {
                    BadKind::Nan
                } else {
                    BadKind::Mismatch
                },
                unwritten: dtype.is_float() && a == poison.as_slice(),
            });
        }
    }
    c
}

/// Whether any element of a reference's output still holds the poison pattern (float
/// types only: an integer poison value cannot be told from a result).
pub fn first_unwritten(dtype: DType, bytes: &[u8]) -> Option<usize> {
    if !dtype.is_float() {
        return None;
    }
    let poison = poison_elem(dtype);
    bytes
        .chunks_exact(elem_size(dtype))
        .position(|c| c == poison.as_slice())
}

/// Row-major coordinates of a flat index in `shape` (the last dimension varies fastest).
/// An empty shape is treated as one dimension.
pub fn unravel(mut flat: u64, shape: &[u64]) -> Vec<u64> {
    if shape.is_empty() {
        return vec![flat];
    }
    let mut coords = vec![0; shape.len()];
    for (c, &d) in coords.iter_mut().zip(shape).rev() {
        let d = d.max(1);
        *c = flat % d;
        flat /= d;
    }
    // A flat index past the end shows up in the first coordinate, not silently wrapped.
    coords[0] += flat * shape[0].max(1);
    coords
}

/// `y[4097]`, `c[3, 17]`.
pub fn element_name(buffer: &str, coords: &[u64]) -> String {
    let parts: Vec<String> = coords.iter().map(u64::to_string).collect();
    format!("{buffer}[{}]", parts.join(", "))
}

/// A number as the author would write it: `1.5`, `-3`, `NaN`, `inf`.
pub fn show(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

// ---- anti-cheat rules (docs/verification.md) ----------------------------------------
// Decided from the device's scan counts over n elements; each guards a way a wrong
// kernel can pass a comparison within tolerance.

/// Every element of the candidate's output is the same value while the reference's are
/// not: an all-zero (or constant) output that the tolerance alone let through.
pub fn constant_where_reference_varies(
    n: u64,
    cand_same_as_first: u64,
    ref_same_as_first: u64,
) -> bool {
    n > 1 && cand_same_as_first == n && ref_same_as_first < n
}

/// The candidate's output is bit for bit equal to some other bytes (an input, or the
/// buffer's own initial contents) while the reference's output is not: a copy or a no-op
/// passing within tolerance.
pub fn equal_where_reference_differs(n: u64, cand_equal: u64, ref_equal: u64) -> bool {
    n > 1 && cand_equal == n && ref_equal < n
}

/// A mismatch on a later input set whose output equals the reference's result for the
/// previous input set: results kept from an earlier launch (cached by pointer).
pub fn stale_results(mismatch_now: bool, bad_against_previous: Option<u64>) -> bool {
    mismatch_now && bad_against_previous == Some(0)
}

/// `(case 1, trial 0, seed 0x2a)`.
pub fn where_suffix(case: usize, trial: u32, seed: u64) -> String {
    format!("(case {case}, trial {trial}, seed {seed:#x})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anti_cheat_rules() {
        // A constant candidate against a varying reference; not when both are constant
        // (a kernel that fills), nor for one element.
        assert!(constant_where_reference_varies(100, 100, 3));
        assert!(!constant_where_reference_varies(100, 100, 100));
        assert!(!constant_where_reference_varies(100, 99, 3));
        assert!(!constant_where_reference_varies(1, 1, 0));
        // A copy of an input (or an untouched inout) where the reference computes.
        assert!(equal_where_reference_differs(64, 64, 0));
        assert!(!equal_where_reference_differs(64, 64, 64)); // the op is a copy
        assert!(!equal_where_reference_differs(64, 63, 0));
        // Stale results: only a mismatch that equals the previous answer.
        assert!(stale_results(true, Some(0)));
        assert!(!stale_results(true, Some(5)));
        assert!(!stale_results(true, None));
        assert!(!stale_results(false, Some(0)));
    }
    use crate::worker::cuda::fill::encode;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn tolerance_rule_is_atol_plus_rtol_times_reference() {
        assert!(within(1.0, 1.0 + 1e-5 + 1e-4 - 1e-12, 1e-5, 1e-4));
        assert!(!within(1.0, 1.0 + 1e-5 + 1e-4 + 1e-9, 1e-5, 1e-4));
        // Relative to the reference (b), not the candidate.
        assert!(within(100.0, 100.9, 0.0, 0.01));
        assert!(!within(0.0, 1e-6, 0.0, 0.5));
        assert!(within(f64::INFINITY, f64::INFINITY, 0.0, 0.0));
        assert!(!within(f64::INFINITY, f64::NEG_INFINITY, 1.0, 1.0));
        assert!(!within(f64::INFINITY, 1e300, 1.0, 1.0));
        assert!(!within(1.0, f64::INFINITY, 1.0, 1.0));
    }

    #[test]
    fn nan_matches_only_nan() {
        assert!(within(f64::NAN, f64::NAN, 0.0, 0.0));
        assert!(!within(1.0, f64::NAN, 1e9, 1e9));
        assert!(!within(f64::NAN, 1.0, 1e9, 1e9));
        let c = compare(
            DType::F32,
            &f32s(&[f32::NAN, 2.0]),
            &f32s(&[f32::NAN, 2.0]),
            0.0,
            0.0,
        );
        assert_eq!(c.first_bad, None);
        let c = compare(
            DType::F32,
            &f32s(&[1.0, 2.0]),
            &f32s(&[1.0, f32::NAN]),
            1e-5,
            1e-4,
        );
        let bad = c.first_bad.unwrap();
        assert_eq!(
            (bad.index, bad.kind, bad.unwritten),
            (1, BadKind::Nan, false)
        );
        let c = compare(DType::F32, &f32s(&[f32::NAN]), &f32s(&[1.0]), 1e-5, 1e-4);
        assert_eq!(c.first_bad.unwrap().kind, BadKind::Mismatch);
    }

    #[test]
    fn first_bad_index_and_max_errors() {
        let e = f32s(&[1.0, 2.0, 4.0, 8.0]);
        let a = f32s(&[1.0, 2.5, 4.0, 9.0]);
        let c = compare(DType::F32, &e, &a, 1e-5, 1e-4);
        let bad = c.first_bad.unwrap();
        assert_eq!((bad.index, bad.expected, bad.actual), (1, 2.0, 2.5));
        assert_eq!(bad.kind, BadKind::Mismatch);
        assert_eq!(c.max_abs_err, 1.0);
        assert_eq!(c.max_rel_err, 0.25);
    }

    #[test]
    fn unwritten_poison_is_recognised() {
        let e = f32s(&[1.0, 2.0]);
        let mut a = f32s(&[1.0, 0.0]);
        a[4..].copy_from_slice(&poison_elem(DType::F32));
        let bad = compare(DType::F32, &e, &a, 1e-5, 1e-4).first_bad.unwrap();
        assert!(bad.unwritten && bad.kind == BadKind::Nan && bad.index == 1);
        assert_eq!(first_unwritten(DType::F32, &a), Some(1));
        assert_eq!(first_unwritten(DType::F32, &e), None);
        assert_eq!(first_unwritten(DType::I32, &[0xa5; 8]), None);
    }

    #[test]
    fn integers_compare_exactly_including_i64_past_2_pow_53() {
        let enc = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let big = (1i64 << 60) + 1;
        let c = compare(DType::I64, &enc(&[5, big]), &enc(&[5, big - 1]), 0.0, 0.0);
        assert_eq!(c.first_bad.unwrap().index, 1);
        assert_eq!(
            compare(DType::I64, &enc(&[big]), &enc(&[big]), 0.0, 0.0).first_bad,
            None
        );
    }

    #[test]
    fn half_precision_uses_its_decoded_values() {
        let mut e = vec![0u8; 4];
        let mut a = vec![0u8; 4];
        encode(DType::F16, 1.0, &mut e[..2]);
        encode(DType::F16, 2.0, &mut e[2..]);
        encode(DType::F16, 1.005, &mut a[..2]);
        encode(DType::F16, 2.5, &mut a[2..]);
        let c = compare(DType::F16, &e, &a, 1e-2, 1e-2);
        let bad = c.first_bad.unwrap();
        assert_eq!((bad.index, bad.expected, bad.actual), (1, 2.0, 2.5));
    }

    #[test]
    fn coordinates_are_row_major() {
        assert_eq!(unravel(4097, &[8192]), vec![4097]);
        assert_eq!(unravel(0, &[3, 4]), vec![0, 0]);
        assert_eq!(unravel(7, &[3, 4]), vec![1, 3]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(unravel(5, &[]), vec![5]);
        assert_eq!(element_name("c", &[1, 3]), "c[1, 3]");
        assert_eq!(show(f64::NAN), "NaN");
        assert_eq!(show(1.5), "1.5");
        assert_eq!(where_suffix(1, 0, 42), "(case 1, trial 0, seed 0x2a)");
    }
}
