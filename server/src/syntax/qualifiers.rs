//! Execution-space qualifier macros (issue #31): projects spell `__host__ __device__`
//! as a macro (`#define HD __host__ __device__`, `HOST_DEVICE`, `C10_HOST_DEVICE`,
//! `CUTLASS_HOST_DEVICE`), and write `HD inline float f()`, `HD constexpr T g()`. The
//! grammar cannot read such a head (a macro where a type should be), and the device
//! slice would take the function for host code. This module says which words are such
//! macros; `mask` hides them from the parser, and the device slice keeps a function
//! whose head names one (`cuda.rs`). Pure: text in, names and ranges out.
//!
//! A word is a qualifier macro when it is in `grammars/cuda/device_macros.txt`, when it
//! is an all-caps name with a `DEVICE`, `HD` or `CALLABLE` part, or when the text
//! defines it (`#define NAME ...`) with a replacement made only of words, one of which
//! is `__device__`, `__global__` or a qualifier macro.

use std::collections::HashSet;

use super::{queries, ByteRange};

/// Whether `word` names a qualifier macro by the list or by its spelling alone.
pub fn is_qualifier_name(word: &str) -> bool {
    if queries::data_lines(queries::DEVICE_MACROS).any(|m| m == word) {
        return true;
    }
    let caps = word.len() >= 2
        && word
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
        && word.bytes().any(|c| c.is_ascii_uppercase());
    caps && word
        .split('_')
        .any(|part| matches!(part, "DEVICE" | "HD" | "CALLABLE" | "HOSTDEVICE"))
}

/// `(name, words of the replacement)` of each object-like `#define` whose replacement is
/// only identifiers (at most 8), in text order.
pub fn word_defines(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("define") else {
            continue;
        };
        if !rest.starts_with([' ', '\t']) {
            continue;
        }
        let rest = rest.trim_start();
        let name_len = rest
            .bytes()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
            .count();
        let (name, value) = rest.split_at(name_len);
        if name.is_empty() || value.starts_with('(') {
            continue;
        }
        let value = value.split("//").next().unwrap_or("");
        let words: Vec<String> = value.split_whitespace().map(String::from).collect();
        let all_words = words
            .iter()
            .all(|w| w.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'));
        if !words.is_empty() && words.len() <= 8 && all_words {
            out.push((name.to_string(), words));
        }
    }
    out
}

/// The names among `defines` that stand for a device qualifier, directly or through
/// another of them (`#define FN_DECL HD inline`).
pub fn defined_qualifiers(defines: &[(String, Vec<String>)]) -> HashSet<String> {
    let mut set: HashSet<String> = HashSet::new();
    loop {
        let before = set.len();
        for (name, words) in defines {
            if set.contains(name) {
                continue;
            }
            let device = words.iter().any(|w| {
                matches!(w.as_str(), "__device__" | "__global__")
                    || is_qualifier_name(w)
                    || set.contains(w)
            });
            if device {
                set.insert(name.clone());
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// Declaration specifiers that may stand between qualifier macros in a head.
const SPECIFIERS: &[&str] = &[
    "static",
    "inline",
    "constexpr",
    "__forceinline__",
    "__inline__",
    "__noinline__",
    "__host__",
    "__device__",
    "virtual",
    "explicit",
    "friend",
    "extern",
];

/// The qualifier macros at the head of a declaration, to hide from the parser: on each
/// line, after an optional `template <...>` on the same line, the words before the
/// declaration's type that are qualifier macros (by name, or defined so in `text`).
pub fn head_macro_ranges(text: &str) -> Vec<ByteRange> {
    let defined = defined_qualifiers(&word_defines(text));
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let lead = line.len() - line.trim_start().len();
        let mut i = lead;
        let t = &line[lead..];
        if t.starts_with('#') || t.starts_with("//") || t.starts_with('*') || t.starts_with("/*") {
            continue;
        }
        if let Some(rest) = t.strip_prefix("template") {
            let r = rest.trim_start();
            if !r.starts_with('<') {
                continue;
            }
            let open = line.len() - r.len();
            match super::mask::close_bracket(line, open, b'<', b'>') {
                Some(close) => i = close + 1,
                None => continue,
            }
        }
        loop {
            let rest = &line[i..];
            let ws = rest.len() - rest.trim_start().len();
            i += ws;
            let n = line[i..]
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
                .count();
            if n == 0 {
                break;
            }
            let word = &line[i..i + n];
            let next = line[i + n..].trim_start();
            if is_qualifier_name(word)
                || defined.contains(word)
                || attribute_macro(word, &line[i + n..])
            {
                // Followed by the rest of a head (a word, or the line's end), not by
                // `(` (a macro call), `=` or `;` (a variable of that name).
                let head_goes_on = next.is_empty()
                    || next.starts_with("//")
                    || next.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
                if !head_goes_on {
                    break;
                }
                out.push(start + i..start + i + n);
            } else if !SPECIFIERS.contains(&word) {
                break;
            }
            i += n;
        }
    }
    out
}

/// An all-caps word that stands before a whole function head on its line
/// (`EXPORT_API int f(`, `TORCH_API static void g(`): an attribute or export macro,
/// which the grammar cannot read there. `MY_TYPE f(` (the caps word is the type) is not.
fn attribute_macro(word: &str, rest: &str) -> bool {
    let caps = word.len() >= 2
        && word
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
        && word.bytes().any(|c| c.is_ascii_uppercase());
    let Some(head) = rest
        .split('(')
        .next()
        .filter(|_| caps && rest.contains('('))
    else {
        return false;
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    // `MY_TYPE CUDART_CBX f(`: a caps type, then a macro; not an attribute first.
    let next_is_caps = words
        .first()
        .is_some_and(|w| !w.bytes().any(|c| c.is_ascii_lowercase()));
    words.len() >= 2
        && !next_is_caps
        && words
            .iter()
            .all(|w| w.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_list_spelling_and_definition() {
        for w in [
            "HD",
            "HOST_DEVICE",
            "C10_HOST_DEVICE",
            "CUTLASS_HOST_DEVICE",
            "MY_HD_INLINE",
            "CUDA_CALLABLE",
            "GLM_FUNC_QUALIFIER",
        ] {
            assert!(is_qualifier_name(w), "{w}");
        }
        for w in [
            "HDR",
            "DEVICES",
            "host_device",
            "MAX_THREADS",
            "FN",
            "Device",
        ] {
            assert!(!is_qualifier_name(w), "{w}");
        }
        let text = "#define FN __host__ __device__ // both\n#define DECL FN inline\n#define N 128\n#define F(x) __device__ x\n#define HOSTONLY inline\n";
        let set = defined_qualifiers(&word_defines(text));
        let mut names: Vec<&str> = set.iter().map(String::as_str).collect();
        names.sort();
        assert_eq!(names, ["DECL", "FN"]);
    }

    #[test]
    fn head_macros_are_found_where_a_declaration_starts() {
        let text = "#define QUAL __device__\nHD inline float a();\ntemplate <typename T> HD constexpr T b(T x);\nstatic QUAL float c();\n  CUTLASS_HOST_DEVICE\n  int d() const;\nHD(x);\nfloat HD_e();\n// HD float f();\nHOST_DEVICE = 1;\n";
        let hidden: Vec<&str> = head_macro_ranges(text)
            .into_iter()
            .map(|r| &text[r])
            .collect();
        assert_eq!(hidden, ["HD", "HD", "QUAL", "CUTLASS_HOST_DEVICE"]);
    }
}
