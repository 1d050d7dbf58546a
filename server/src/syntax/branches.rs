//! Inactive preprocessor branches (issue #31): the lines of `#if`/`#ifdef`/`#elif`/
//! `#else` branches that a compile under known defines skips, so that syntax errors there
//! (HIP-only code under `USE_ROCM`) are not shown. Pure: text and defines in, ranges out.
//!
//! A condition is decided only when it is made of `defined(X)`, `defined X`, names,
//! integers, `!`, `&&`, `||` and parentheses; a name is defined when the defines name it,
//! when the text `#define`s it above, or when the CUDA compilers predefine it
//! (`__CUDACC__`, `__NVCC__`, `__CUDA_ARCH__`, `__cplusplus`). Anything else (comparisons,
//! macros with values) leaves the group undecided, and all its branches count as active:
//! errors are hidden only where the compile surely skips.

use std::collections::HashMap;

use super::ByteRange;

const PREDEFINED: &[&str] = &["__CUDACC__", "__NVCC__", "__CUDA_ARCH__", "__cplusplus"];

/// One open conditional group.
struct Group {
    /// None: undecided (every branch active).
    taken: Option<bool>,
    /// The current branch is skipped.
    skipping: bool,
    /// The line where the current skipped branch's code starts.
    from: usize,
}

/// Byte ranges of the text that inactive branches hold, under `defines` (`NAME` or
/// `NAME=VALUE`).
pub fn inactive_ranges(text: &str, defines: &[String]) -> Vec<ByteRange> {
    let mut known: HashMap<String, Option<i64>> = defines
        .iter()
        .map(|d| {
            let (n, v) = d.split_once('=').unwrap_or((d, "1"));
            (n.trim().to_string(), v.trim().parse().ok())
        })
        .collect();
    for p in PREDEFINED {
        known.entry((*p).to_string()).or_insert(Some(1));
    }
    let mut out = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let Some(d) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let d = d.trim_start();
        let word: String = d.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        let arg = d[word.len()..].split("//").next().unwrap_or("").trim();
        let outer_skip = groups.iter().any(|g| g.skipping);
        let close = |g: &Group, out: &mut Vec<ByteRange>| {
            if g.skipping && g.from < start {
                out.push(g.from..start);
            }
        };
        match word.as_str() {
            "if" | "ifdef" | "ifndef" => {
                let cond = match word.as_str() {
                    "ifdef" => Some(known.contains_key(arg)),
                    "ifndef" => Some(!known.contains_key(arg)),
                    _ => eval(arg, &known).map(|v| v != 0),
                };
                let taken = if outer_skip { None } else { cond };
                groups.push(Group {
                    taken,
                    skipping: !outer_skip && cond == Some(false),
                    from: at,
                });
            }
            "elif" | "else" => {
                if let Some(g) = groups.last_mut() {
                    close(g, &mut out);
                    let cond = match word.as_str() {
                        "else" => Some(true),
                        _ => eval(arg, &known).map(|v| v != 0),
                    };
                    g.skipping = match g.taken {
                        Some(true) => true,
                        Some(false) => cond == Some(false),
                        None => false,
                    };
                    if g.taken == Some(false) {
                        g.taken = cond;
                    }
                    g.from = at;
                }
            }
            "endif" => {
                if let Some(g) = groups.pop() {
                    close(&g, &mut out);
                }
            }
            "define" if !outer_skip => {
                let name: String = arg
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let value = arg[name.len()..].trim().parse().ok();
                known.entry(name).or_insert(value);
            }
            _ => {}
        }
    }
    out
}

/// The value of a condition, if it can be decided.
fn eval(cond: &str, known: &HashMap<String, Option<i64>>) -> Option<i64> {
    let tokens = tokenize(cond)?;
    let mut p = Parser {
        t: &tokens,
        i: 0,
        known,
    };
    let v = p.or()?;
    (p.i == tokens.len()).then_some(v)
}

fn tokenize(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let n = b[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            out.push(s[i..i + n].to_string());
            i += n;
        } else if s[i..].starts_with("&&") || s[i..].starts_with("||") {
            out.push(s[i..i + 2].to_string());
            i += 2;
        } else if matches!(c, b'!' | b'(' | b')') && !s[i..].starts_with("!=") {
            out.push((c as char).to_string());
            i += 1;
        } else {
            return None; // comparisons, arithmetic: undecided
        }
    }
    Some(out)
}

struct Parser<'a> {
    t: &'a [String],
    i: usize,
    known: &'a HashMap<String, Option<i64>>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).map(String::as_str)
    }

    fn or(&mut self) -> Option<i64> {
        let mut v = self.and()?;
        while self.peek() == Some("||") {
            self.i += 1;
            let r = self.and()?;
            v = i64::from(v != 0 || r != 0);
        }
        Some(v)
    }

    fn and(&mut self) -> Option<i64> {
        let mut v = self.unary()?;
        while self.peek() == Some("&&") {
            self.i += 1;
            let r = self.unary()?;
            v = i64::from(v != 0 && r != 0);
        }
        Some(v)
    }

    fn unary(&mut self) -> Option<i64> {
        let tok = self.peek()?.to_string();
        self.i += 1;
        match tok.as_str() {
            "!" => self.unary().map(|v| i64::from(v == 0)),
            "(" => {
                let v = self.or()?;
                (self.peek() == Some(")")).then(|| self.i += 1)?;
                Some(v)
            }
            "defined" => {
                let paren = self.peek() == Some("(");
                if paren {
                    self.i += 1;
                }
                let name = self.peek()?.to_string();
                self.i += 1;
                if paren {
                    (self.peek() == Some(")")).then(|| self.i += 1)?;
                }
                Some(i64::from(self.known.contains_key(&name)))
            }
            t if t.bytes().all(|c| c.is_ascii_digit()) => t.parse().ok(),
            // A name: its value when known; an undefined name is 0, as in the
            // preprocessor.
            t => match self.known.get(t) {
                Some(v) => *v,
                None => Some(0),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(text: &str, defines: &[&str]) -> Vec<String> {
        let d: Vec<String> = defines.iter().map(|s| s.to_string()).collect();
        inactive_ranges(text, &d)
            .into_iter()
            .map(|r| text[r].trim().replace('\n', "|"))
            .collect()
    }

    #[test]
    fn branches_skipped_under_the_defines() {
        let text = "#if defined(USE_HIP)\nhip }}}\n#else\ncuda\n#endif\n#ifdef __CUDACC__\ndev\n#else\nhost }\n#endif\n#if 0\nzero\n#elif FAST && !defined(SLOW)\nfast\n#else\nslow\n#endif\n#if VERSION >= 3\nunknown\n#endif\n";
        assert_eq!(skipped(text, &[]), ["hip }}}", "host }", "zero", "fast"]);
        assert_eq!(
            skipped(text, &["USE_HIP", "FAST=1"]),
            ["cuda", "host }", "zero", "slow"]
        );
        // Nested groups inside a skipped branch are skipped with it; a name the file
        // defines counts.
        let nested = "#define HAVE_X\n#ifndef HAVE_X\n#if 1\na\n#else\nb\n#endif\n#endif\n";
        assert_eq!(skipped(nested, &[]), ["#if 1|a|#else|b|#endif"]);
    }
}
