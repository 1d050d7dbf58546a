//! Pure rules on address polynomials: how far apart a buffer's accesses step, and how
//! they fall into aligned groups of k. An address `e + c` whose every non-constant
//! coefficient is a multiple of k is `k * (...) + c`: with the base pointer aligned to
//! k elements, `e + (c mod k)`'s group starts on a k-element boundary for every thread.

use super::super::poly::Poly;

/// The greatest common divisor of `a` and `b` (0 with 0 is 0).
pub(super) fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    i64::try_from(a).unwrap_or(0)
}

/// What every non-constant term of the address is a multiple of: the gcd of their
/// coefficients; 0 for a constant address.
pub(super) fn step(p: &Poly) -> i64 {
    p.0.iter()
        .filter(|(atoms, _)| !atoms.is_empty())
        .fold(0, |g, (_, c)| gcd(g, *c))
}

/// The group sizes to try for addresses that all step by multiples of `g`: the powers
/// of two from 16 down to 2 that divide it.
pub(super) fn sizes(g: i64) -> Vec<usize> {
    [16, 8, 4, 2]
        .into_iter()
        .filter(|k| g != 0 && g % (*k as i64) == 0)
        .collect()
}

/// The address as (the start of its group of k, its offset in the group).
pub(super) fn split(p: &Poly, k: i64) -> (Poly, i64) {
    let c = p.0.get(&Vec::new()).copied().unwrap_or(0).rem_euclid(k);
    (p.clone().add(&Poly::constant(c), -1), c)
}

/// The addresses gathered by the group they fall in, in order of first appearance:
/// (group start, [(position in `addrs`, offset)]).
pub(super) fn by_start(addrs: &[&Poly], k: i64) -> Vec<(Poly, Vec<(usize, i64)>)> {
    let mut out: Vec<(Poly, Vec<(usize, i64)>)> = Vec::new();
    for (n, p) in addrs.iter().enumerate() {
        let (start, c) = split(p, k);
        match out.iter_mut().find(|(s, _)| *s == start) {
            Some((_, members)) => members.push((n, c)),
            None => out.push((start, vec![(n, c)])),
        }
    }
    out
}

/// Every two group starts differ by a constant (not zero: they are distinct starts),
/// so the groups never share an element whatever the sizes are. `x[e]` and `x[e + W]`
/// do not: W might be 0.
pub(super) fn surely_apart(starts: &[&Poly]) -> bool {
    starts.iter().enumerate().all(|(n, a)| {
        starts[n + 1..]
            .iter()
            .all(|b| (*a).clone().add(b, -1).as_constant().is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(terms: &[(&[&str], i64)]) -> Poly {
        let mut out = Poly::default();
        for (atoms, c) in terms {
            let mut t = Poly::constant(*c);
            for a in *atoms {
                t = t.mul(&Poly::atom((*a).to_string()));
            }
            out = out.add(&t, 1);
        }
        out
    }

    #[test]
    fn steps_are_the_gcd_of_the_varying_terms() {
        // (p*2*OH + 2*oh) * (2*OW) + 2*ow + 1
        let pool = p(&[
            (&["p", "OH", "OW"], 4),
            (&["oh", "OW"], 4),
            (&["ow"], 2),
            (&[], 1),
        ]);
        assert_eq!(step(&pool), 2);
        assert_eq!(step(&p(&[(&["i"], 4), (&["c"], 1)])), 1);
        assert_eq!(step(&p(&[(&[], 3)])), 0);
        assert_eq!(step(&p(&[(&["i"], -6), (&["j"], 4)])), 2);
        assert_eq!(sizes(2), [2]);
        assert_eq!(sizes(24), [8, 4, 2]);
        assert!(sizes(3).is_empty() && sizes(0).is_empty());
    }

    #[test]
    fn offsets_fall_in_the_group_below_them() {
        let e = p(&[(&["ow"], 2), (&["OW"], 2), (&[], 3)]);
        let (start, c) = split(&e, 2);
        assert_eq!((start, c), (p(&[(&["ow"], 2), (&["OW"], 2), (&[], 2)]), 1));
        let (start, c) = split(&p(&[(&["i"], 2), (&[], -1)]), 2);
        assert_eq!((start, c), (p(&[(&["i"], 2), (&[], -2)]), 1));
        let addrs = [
            p(&[(&["i"], 2)]),
            p(&[(&["i"], 2), (&["W"], 2)]),
            p(&[(&["i"], 2), (&[], 1)]),
            p(&[(&["i"], 2), (&["W"], 2), (&[], 1)]),
        ];
        let refs: Vec<&Poly> = addrs.iter().collect();
        let groups = by_start(&refs, 2);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].1, [(0, 0), (2, 1)]);
        assert_eq!(groups[1].1, [(1, 0), (3, 1)]);
        let starts: Vec<&Poly> = groups.iter().map(|(s, _)| s).collect();
        assert!(!surely_apart(&starts), "W might be 0");
        let near = [p(&[(&["i"], 4)]), p(&[(&["i"], 4), (&[], 2)])];
        assert!(surely_apart(&near.iter().collect::<Vec<_>>()));
    }
}
