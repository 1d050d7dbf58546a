//! The one parser of catalog parameters (`params = { ... }` in `prompts/strategies.toml`,
//! or what an LLM strategist passed). Every rewrite reads its parameters through
//! [`Params`], so a wrong type or value is always a `BadParam` naming the parameter and
//! saying what was expected, and an absent parameter is always its default.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use super::RewriteError;

/// A rewrite's parameters.
#[derive(Clone, Copy)]
pub(super) struct Params<'a>(pub &'a BTreeMap<String, serde_json::Value>);

fn bad(name: &str, message: String) -> RewriteError {
    RewriteError::BadParam {
        name: name.to_string(),
        message,
    }
}

impl<'a> Params<'a> {
    fn get(&self, name: &str) -> Option<&'a serde_json::Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A list of integers within `range` (a single integer counts as a list of one;
    /// repeats are dropped), or `default` when absent.
    pub fn ints(
        &self,
        name: &str,
        default: &[i64],
        range: RangeInclusive<i64>,
    ) -> Result<Vec<i64>, RewriteError> {
        let wanted = if *range.end() == i64::MAX {
            format!("integers >= {}", range.start())
        } else {
            format!("integers from {} to {}", range.start(), range.end())
        };
        let Some(v) = self.get(name) else {
            return Ok(default.to_vec());
        };
        let items = match v {
            serde_json::Value::Array(items) if !items.is_empty() => items.as_slice(),
            serde_json::Value::Number(_) => std::slice::from_ref(v),
            other => {
                return Err(bad(
                    name,
                    format!("expected a non-empty list of {wanted}, found `{other}`"),
                ))
            }
        };
        let mut out: Vec<i64> = Vec::new();
        for item in items {
            let n = item
                .as_i64()
                .filter(|n| range.contains(n))
                .ok_or_else(|| bad(name, format!("expected a list of {wanted}, found `{item}`")))?;
            if !out.contains(&n) {
                out.push(n);
            }
        }
        Ok(out)
    }

    /// [`Params::ints`] for non-negative values.
    pub fn uints(
        &self,
        name: &str,
        default: &[u64],
        range: RangeInclusive<u64>,
    ) -> Result<Vec<u64>, RewriteError> {
        let to_i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let default: Vec<i64> = default.iter().map(|v| to_i(*v)).collect();
        let list = self.ints(name, &default, to_i(*range.start())..=to_i(*range.end()))?;
        Ok(list.into_iter().map(i64::unsigned_abs).collect())
    }

    /// [`Params::uints`], where an empty list is allowed (a kind of candidate left out).
    pub fn uints_or_none(
        &self,
        name: &str,
        default: &[u64],
        range: RangeInclusive<u64>,
    ) -> Result<Vec<u64>, RewriteError> {
        match self.get(name) {
            Some(serde_json::Value::Array(items)) if items.is_empty() => Ok(Vec::new()),
            _ => self.uints(name, default, range),
        }
    }

    /// A non-empty list of positive finite numbers, or `default`.
    pub fn positive_numbers(&self, name: &str, default: &[f64]) -> Result<Vec<f64>, RewriteError> {
        let one = |v: &serde_json::Value| {
            v.as_f64()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| {
                    bad(
                        name,
                        format!("expected a list of positive numbers, found `{v}`"),
                    )
                })
        };
        match self.get(name) {
            None => Ok(default.to_vec()),
            Some(serde_json::Value::Array(items)) if !items.is_empty() => {
                items.iter().map(one).collect()
            }
            Some(v @ serde_json::Value::Number(_)) => Ok(vec![one(v)?]),
            Some(v) => Err(bad(
                name,
                format!("expected a non-empty list of positive numbers, found `{v}`"),
            )),
        }
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, RewriteError> {
        match self.get(name) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(bad(name, format!("expected a string, found `{v}`"))),
        }
    }

    /// A list of strings, each one of `allowed` (a single string counts as a list of
    /// one; repeats are dropped), or `default`.
    pub fn choices(
        &self,
        name: &str,
        default: &[&str],
        allowed: &[&str],
    ) -> Result<Vec<String>, RewriteError> {
        let Some(v) = self.get(name) else {
            return Ok(default.iter().map(|s| s.to_string()).collect());
        };
        let wanted = || format!("a non-empty list of {}", allowed.join(", "));
        let items = match v {
            serde_json::Value::Array(items) if !items.is_empty() => items.as_slice(),
            serde_json::Value::String(_) => std::slice::from_ref(v),
            other => return Err(bad(name, format!("expected {}, found `{other}`", wanted()))),
        };
        let mut out: Vec<String> = Vec::new();
        for item in items {
            let s = item
                .as_str()
                .filter(|s| allowed.contains(s))
                .ok_or_else(|| bad(name, format!("expected {}, found `{item}`", wanted())))?;
            if !out.iter().any(|o| o == s) {
                out.push(s.to_string());
            }
        }
        Ok(out)
    }

    pub fn bool(&self, name: &str, default: bool) -> Result<bool, RewriteError> {
        match self.get(name) {
            None => Ok(default),
            Some(serde_json::Value::Bool(b)) => Ok(*b),
            Some(other) => Err(bad(name, format!("expected true or false, got `{other}`"))),
        }
    }

    /// [`Self::pairs`], where an empty list means none (a kind of candidate turned off).
    pub fn pairs_or_none(
        &self,
        name: &str,
        default: &[[u64; 2]],
    ) -> Result<Vec<[u64; 2]>, RewriteError> {
        match self.get(name) {
            Some(serde_json::Value::Array(items)) if items.is_empty() => Ok(Vec::new()),
            _ => self.pairs(name, default),
        }
    }

    /// `[[32, 8], ...]`: pairs of positive integers.
    pub fn pairs(&self, name: &str, default: &[[u64; 2]]) -> Result<Vec<[u64; 2]>, RewriteError> {
        self.rows(name, default)
    }

    /// `[[128, 256, 64], ...]`: lists of `N` positive integers each.
    pub fn rows<const N: usize>(
        &self,
        name: &str,
        default: &[[u64; N]],
    ) -> Result<Vec<[u64; N]>, RewriteError> {
        let Some(v) = self.get(name) else {
            return Ok(default.to_vec());
        };
        let what = if N == 2 {
            "[x, y] pairs".to_string()
        } else {
            format!("lists of {N}")
        };
        let err = || {
            bad(
                name,
                format!("expected a list of {what} of positive integers, found `{v}`"),
            )
        };
        let items = v.as_array().filter(|a| !a.is_empty()).ok_or_else(err)?;
        items
            .iter()
            .map(|row| {
                let r = row.as_array().filter(|r| r.len() == N).ok_or_else(err)?;
                let mut out = [0u64; N];
                for (o, x) in out.iter_mut().zip(r) {
                    *o = x.as_u64().filter(|x| *x > 0).ok_or_else(err)?;
                }
                Ok(out)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(v: serde_json::Value) -> BTreeMap<String, serde_json::Value> {
        match v {
            serde_json::Value::Object(m) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        }
    }

    #[test]
    fn every_kind_of_parameter_reads_its_default_value_and_errors() {
        let m = map(
            json!({"a": [4, 2, 4], "b": 3, "c": "x", "d": [[32, 8]], "e": true, "f": ["warp", "block", "warp"], "z": null}),
        );
        let p = Params(&m);
        assert_eq!(p.ints("a", &[1], 1..=8).unwrap(), [4, 2]);
        assert_eq!(p.ints("b", &[1], 1..=8).unwrap(), [3]);
        assert_eq!(p.ints("z", &[7], 1..=8).unwrap(), [7], "null is absent");
        assert_eq!(p.uints("missing", &[5], 0..=9).unwrap(), [5]);
        assert_eq!(
            p.ints("a", &[1], 3..=8).unwrap_err().to_string(),
            "parameter `a`: expected a list of integers from 3 to 8, found `2`"
        );
        assert_eq!(
            p.ints("c", &[1], 1..=i64::MAX).unwrap_err().to_string(),
            "parameter `c`: expected a non-empty list of integers >= 1, found `\"x\"`"
        );
        assert_eq!(p.positive_numbers("b", &[1.0]).unwrap(), [3.0]);
        assert_eq!(p.string("c").unwrap().as_deref(), Some("x"));
        assert_eq!(p.pairs("d", &[]).unwrap(), [[32, 8]]);
        assert!(p.bool("e", false).unwrap());
        assert_eq!(
            p.bool("c", false).unwrap_err().to_string(),
            "parameter `c`: expected true or false, got `\"x\"`"
        );
        assert_eq!(
            p.choices("f", &["warp"], &["warp", "block"]).unwrap(),
            ["warp", "block"]
        );
        assert_eq!(
            p.choices("missing", &["warp"], &["warp"]).unwrap(),
            ["warp"]
        );
        assert_eq!(
            p.choices("c", &["warp"], &["warp", "block"])
                .unwrap_err()
                .to_string(),
            "parameter `c`: expected a non-empty list of warp, block, found `\"x\"`"
        );
    }
}
