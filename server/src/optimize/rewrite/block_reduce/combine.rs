//! How `block_reduce`'s one atomic folds values into its one place: a sum (`atomicAdd`),
//! a maximum (`atomicMax`) or a minimum (`atomicMin`); the accumulator's start (the
//! combine's identity for the element type) and the fold written in each thread, each
//! warp and the block. Pure text: no tree.

/// The fold of one atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Combine {
    Sum,
    Max,
    Min,
}

/// The atomics `block_reduce` folds.
pub(super) const ATOMICS: [&str; 3] = ["atomicAdd", "atomicMax", "atomicMin"];

impl Combine {
    /// The combine an atomic function names, if it is one of [`ATOMICS`].
    pub(super) fn of_atomic(name: &str) -> Option<Combine> {
        match name {
            "atomicAdd" => Some(Combine::Sum),
            "atomicMax" => Some(Combine::Max),
            "atomicMin" => Some(Combine::Min),
            _ => None,
        }
    }

    pub(super) fn atomic(self) -> &'static str {
        match self {
            Combine::Sum => "atomicAdd",
            Combine::Max => "atomicMax",
            Combine::Min => "atomicMin",
        }
    }

    /// What the labels call it.
    pub(super) fn noun(self) -> &'static str {
        match self {
            Combine::Sum => "sum",
            Combine::Max => "max",
            Combine::Min => "min",
        }
    }

    /// `acc` folded with `v` (an expression, parenthesized), as an expression: a sum keeps
    /// `acc += v`; a maximum or minimum converts `v` to the accumulator's type `ty` first,
    /// as the atomic's parameter did.
    pub(super) fn fold(self, acc: &str, v: &str, ty: &str) -> String {
        match self {
            Combine::Sum => format!("{acc} += {v}"),
            Combine::Max => format!("{acc} = max({acc}, ({ty}){v})"),
            Combine::Min => format!("{acc} = min({acc}, ({ty}){v})"),
        }
    }

    /// The accumulator's start for the element type `ty` (already normalized by
    /// `numeric`), or why that type cannot be folded this way.
    pub(super) fn identity(self, ty: &str) -> Result<&'static str, String> {
        let found = match (self, ty) {
            (
                Combine::Sum,
                "float"
                | "double"
                | "int"
                | "unsigned"
                | "unsigned int"
                | "unsigned long long"
                | "unsigned long long int",
            ) => Some(("0", "0")),
            (Combine::Sum, _) => None,
            (_, "int") => Some(("(-2147483647 - 1)", "2147483647")),
            (_, "unsigned" | "unsigned int") => Some(("0u", "0xffffffffu")),
            (_, "long long" | "long long int") => {
                Some(("(-9223372036854775807LL - 1)", "9223372036854775807LL"))
            }
            (_, "unsigned long long" | "unsigned long long int") => {
                Some(("0ull", "0xffffffffffffffffull"))
            }
            _ => None,
        };
        match (found, self) {
            (Some((max, _)), Combine::Max | Combine::Sum) => Ok(max),
            (Some((_, min)), Combine::Min) => Ok(min),
            (None, _) => Err(format!(
                "it folds `{ty}` with {}; block_reduce handles float, double, int and unsigned sums, and int, unsigned and 64-bit integer maxima and minima",
                self.atomic()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Combine;

    #[test]
    fn each_combine_starts_from_its_identity_and_folds_in_the_atomics_type() {
        assert_eq!(Combine::Sum.identity("float"), Ok("0"));
        assert_eq!(Combine::Max.identity("int"), Ok("(-2147483647 - 1)"));
        assert_eq!(Combine::Min.identity("unsigned int"), Ok("0xffffffffu"));
        assert_eq!(Combine::Max.identity("unsigned long long"), Ok("0ull"));
        assert!(Combine::Max
            .identity("float")
            .unwrap_err()
            .contains("with atomicMax"));
        assert!(Combine::Sum.identity("long long").is_err());
        assert_eq!(Combine::Sum.fold("acc", "(x[i])", "float"), "acc += (x[i])");
        assert_eq!(
            Combine::Max.fold("acc", "(x[i])", "int"),
            "acc = max(acc, (int)(x[i]))"
        );
        assert_eq!(Combine::of_atomic("atomicMin"), Some(Combine::Min));
        assert_eq!(Combine::of_atomic("atomicCAS"), None);
    }
}
