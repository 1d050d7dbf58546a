//! A Triton check the spec alone cannot make: `tl.arange(0, BLOCK)` needs a power-of-two
//! range, so a `tl.constexpr` that a kernel passes to `tl.arange` and whose spec value
//! is not a power of two fails in Triton's compiler at the first launch, with a long
//! traceback that does not name the parameter. [`check`] turns it into a spec error on
//! the `tl.arange` argument, naming the parameter, its value and the nearest powers of
//! two, before anything runs. Pure: text, kernel and report in.

use crate::spec::{Arg, Severity, SpecDiagnostic, SpecReport, Value};
use crate::syntax::{Kernel, Lang};

/// The identifiers passed to `tl.arange(...)` in `body`, with their byte ranges in it.
fn arange_names(body: &str) -> Vec<(&str, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    for (at, _) in body.match_indices("tl.arange(") {
        let open = at + "tl.arange(".len();
        let Some(len) = body[open..].find(')') else {
            continue;
        };
        let mut from = open;
        for arg in body[open..open + len].split(',') {
            let word = arg.trim();
            let start = from + (arg.len() - arg.trim_start().len());
            let is_name = word
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && word.chars().all(|c| c.is_alphanumeric() || c == '_');
            if is_name {
                out.push((word, start..start + word.len()));
            }
            from += arg.len() + 1;
        }
    }
    out
}

/// Adds an error (and drops the plan) when a constexpr passed to `tl.arange` has a
/// value that is not a power of two in one of the spec's cases.
pub fn check(text: &str, kernel: &Kernel, report: &mut SpecReport) {
    let Some(plan) = report.plan.as_ref().filter(|_| kernel.lang == Lang::Triton) else {
        return;
    };
    let Some(body) = text.get(kernel.def_range.clone()) else {
        return;
    };
    let mut found = Vec::new();
    for (name, range) in arange_names(body) {
        let bad = plan.cases.iter().enumerate().find_map(|(i, c)| {
            c.args.iter().find_map(|a| match a {
                Arg::Constexpr {
                    name: n,
                    value: Value::Int(v),
                } if n == name && !is_pow2(*v) => Some((i, *v)),
                _ => None,
            })
        });
        if let Some((case, v)) = bad {
            let at = kernel.def_range.start + range.start..kernel.def_range.start + range.end;
            found.push(SpecDiagnostic {
                range: at,
                severity: Severity::Error,
                message: message(name, v, case, plan.cases.len()),
            });
        }
    }
    if !found.is_empty() {
        report.diagnostics.extend(found);
        report.plan = None;
    }
}

fn is_pow2(v: i64) -> bool {
    v > 0 && (v & (v - 1)) == 0
}

/// "`BLOCK` is 1000 (case 2), not a power of two, but `tl.arange` needs one: use 512 or
/// 1024".
fn message(name: &str, v: i64, case: usize, cases: usize) -> String {
    let which = if cases > 1 {
        format!(" (case {})", case + 1)
    } else {
        String::new()
    };
    let below = if v > 1 {
        1i64 << (63 - v.leading_zeros())
    } else {
        1
    };
    let above = below.saturating_mul(2);
    let use_ = if v <= 1 {
        "use a power of two such as 1, 2 or 64".to_string()
    } else {
        format!("use {below} or {above}")
    };
    format!("`{name}` is {v}{which}, not a power of two, but `tl.arange` needs a power-of-two range: {use_}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_passed_to_arange_are_found_with_their_ranges() {
        let body = "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    c = tl.arange(0, 64) + tl.arange(START, BLOCK_N)\n";
        let got: Vec<(&str, &str)> = arange_names(body)
            .into_iter()
            .map(|(n, r)| (n, &body[r]))
            .collect();
        assert_eq!(
            got,
            [
                ("BLOCK", "BLOCK"),
                ("START", "START"),
                ("BLOCK_N", "BLOCK_N")
            ]
        );
    }

    #[test]
    fn the_message_names_the_parameter_and_the_nearest_powers() {
        assert_eq!(
            message("BLOCK", 1000, 1, 2),
            "`BLOCK` is 1000 (case 2), not a power of two, but `tl.arange` needs a power-of-two range: use 512 or 1024"
        );
        assert!(is_pow2(1) && is_pow2(1024) && !is_pow2(0) && !is_pow2(96) && !is_pow2(-4));
    }
}
