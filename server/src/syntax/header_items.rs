//! The namespace-level item of a header's device slice at a line, for the NVRTC check of
//! a file whose project headers hold host code the slice rules did not catch (a struct
//! with a `std::vector` member, a `typedef pthread_t Thread;`): NVRTC reports an error
//! there, the check blanks that item and compiles again (`analysis::compile`). This
//! module says what the item is: its range (a `template <...>` around it included),
//! whether it is device code (then it is never blanked: an error there is the author's
//! or NVRTC's, and the file gets its "not checked" note), and the names it declares, so
//! that errors the blank causes in the file itself (`"Params" is undefined`) are told
//! from the file's own. Pure: text in, item out.

use tree_sitter::Node;

use super::cuda::{has_token, head_words, name_of, template_item};
use super::{qualifiers, text, ByteRange, Lang};

/// An item of a header, as [`item_at_line`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderItem {
    /// The item's bytes, from the first word of its head (macros the grammar did not
    /// read included) to its end.
    pub range: ByteRange,
    /// Device code: a kernel or device function, a `__device__`/`__constant__`
    /// variable, a class with device members.
    pub device: bool,
    /// What it declares: a type's, function's or variable's name, a typedef's, the
    /// enumerators of an enum.
    pub names: Vec<String>,
}

/// The innermost namespace-level item of `text` (a header's device slice) holding
/// 0-based `line`, walked through namespaces, `extern "C"` blocks and `#if` groups; `None`
/// on a blank line, a directive, or where the grammar found no item (an ERROR region).
pub fn item_at_line(text: &str, line: usize) -> Option<HeaderItem> {
    let start = line_offset(text, line)?;
    let end = text[start..].find('\n').map_or(text.len(), |e| start + e);
    let code = text[start..end].trim();
    if code.is_empty() || code.starts_with('#') {
        return None;
    }
    let at = start + (text[start..end].len() - text[start..end].trim_start().len());
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&super::ts_language(Lang::Cuda)).ok()?;
    let tree = super::parse_text(&mut parser, Lang::Cuda, text)?;
    let mut node = tree.root_node();
    loop {
        let mut cursor = node.walk();
        let child = node
            .named_children(&mut cursor)
            .find(|c| c.start_byte() < end && at < c.end_byte())?;
        match child.kind() {
            "namespace_definition" | "linkage_specification"
                if child
                    .child_by_field_name("body")
                    .is_some_and(|b| b.kind() == "declaration_list") =>
            {
                node = child.child_by_field_name("body")?;
            }
            "declaration_list" | "preproc_if" | "preproc_ifdef" | "preproc_else"
            | "preproc_elif" | "preproc_elifdef" => node = child,
            "ERROR" | "comment" => return None,
            _ => return Some(describe(text, child)),
        }
    }
}

/// Byte offset where 0-based `line` starts.
fn line_offset(text: &str, line: usize) -> Option<usize> {
    if line == 0 {
        return Some(0);
    }
    text.match_indices('\n').nth(line - 1).map(|(i, _)| i + 1)
}

fn describe(src: &str, item: Node) -> HeaderItem {
    let inner = match item.kind() {
        "template_declaration" => template_item(item).0,
        // `extern "C" void f(...) { ... }`: the function is the item.
        "linkage_specification" => item.child_by_field_name("body").unwrap_or(item),
        _ => item,
    };
    let (words, head_start) = head_words(src, item);
    let qualified = words.iter().any(|w| qualifiers::is_qualifier_name(w));
    let device = qualified || is_device(src, inner);
    HeaderItem {
        range: head_start.min(item.start_byte())..item.end_byte(),
        device,
        names: declared_names(src, inner),
    }
}

const DEVICE_TOKENS: &[&str] = &[
    "__device__",
    "__global__",
    "__constant__",
    "__shared__",
    "__managed__",
];

/// Device code by its own tokens, or a class with a device member.
fn is_device(src: &str, n: Node) -> bool {
    if has_token(n, DEVICE_TOKENS) {
        return true;
    }
    let class = match n.kind() {
        "struct_specifier" | "class_specifier" | "union_specifier" => Some(n),
        "declaration" | "type_definition" => n
            .child_by_field_name("type")
            .filter(|t| t.child_by_field_name("body").is_some()),
        _ => None,
    };
    let Some(body) = class.and_then(|c| c.child_by_field_name("body")) else {
        return false;
    };
    let mut cursor = body.walk();
    let members: Vec<Node> = body.named_children(&mut cursor).collect();
    members.into_iter().any(|m| {
        let f = match m.kind() {
            "template_declaration" => template_item(m).0,
            _ => m,
        };
        has_token(f, DEVICE_TOKENS)
            || head_words(src, f)
                .0
                .iter()
                .any(|w| qualifiers::is_qualifier_name(w))
            || is_device(src, f)
    })
}

/// The names `n` declares.
fn declared_names(src: &str, n: Node) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |x: Option<Node>| {
        if let Some(x) = x {
            let t = text(src, x).trim();
            if !t.is_empty() {
                out.push(t.to_string());
            }
        }
    };
    let ty = match n.kind() {
        "struct_specifier" | "class_specifier" | "union_specifier" | "enum_specifier" => Some(n),
        _ => n.child_by_field_name("type"),
    };
    if let Some(t) = ty {
        push(t.child_by_field_name("name"));
        if let Some(list) = t
            .child_by_field_name("body")
            .filter(|_| t.kind() == "enum_specifier")
        {
            let mut c = list.walk();
            for e in list.named_children(&mut c) {
                push(e.child_by_field_name("name"));
            }
        }
    }
    if n.kind() == "alias_declaration" {
        push(n.child_by_field_name("name"));
    }
    let mut cursor = n.walk();
    let declarators: Vec<Node> = n
        .children_by_field_name("declarator", &mut cursor)
        .collect();
    for d in declarators {
        push(innermost_name(d));
    }
    out
}

/// The identifier a declarator declares, through pointer, function, array and
/// initializer declarators.
fn innermost_name(mut d: Node) -> Option<Node> {
    for _ in 0..32 {
        match d.kind() {
            "identifier" | "type_identifier" | "field_identifier" => return Some(d),
            "qualified_identifier" | "template_function" => return name_of(d),
            _ => {}
        }
        d = d
            .child_by_field_name("declarator")
            .or_else(|| d.named_child(0))?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"#pragma once
#include <pthread.h>
typedef pthread_t CUTThread;
namespace ggml {
struct graph_state {
    std::vector<int> props;
    bool enabled() const;
};
template <typename T>
struct vec2 {
    T x, y;
    __device__ T sum() const { return x + y; }
};
enum mode { MODE_A, MODE_B };
HD inline float twice(float x) { return 2 * x; }
__constant__ float table[4];
}
"#;

    fn at(line: usize) -> Option<HeaderItem> {
        item_at_line(HEADER, line)
    }

    #[test]
    fn host_items_with_their_names() {
        let t = at(2).expect("typedef");
        assert!(!t.device);
        assert_eq!(t.names, ["CUTThread"]);
        assert_eq!(&HEADER[t.range], "typedef pthread_t CUTThread;");
        // Any line of a struct finds the whole struct.
        let s = at(5).expect("struct");
        assert_eq!(
            (s.device, s.names.clone()),
            (false, vec!["graph_state".to_string()])
        );
        assert!(HEADER[s.range].starts_with("struct graph_state {"));
        let e = at(13).expect("enum");
        assert_eq!(e.names, ["mode", "MODE_A", "MODE_B"]);
    }

    #[test]
    fn device_items_are_marked() {
        let v = at(11).expect("class template with a device member");
        assert!(v.device);
        assert!(HEADER[v.range].starts_with("template <typename T>"));
        assert!(at(14).expect("qualifier macro").device);
        let c = at(15).expect("constant");
        assert!(c.device);
        assert_eq!(c.names, ["table"]);
    }

    #[test]
    fn a_function_in_a_one_item_linkage_block_is_the_whole_block() {
        let src = "extern \"C\" void\nlaunch(int n, // a; b\n       float* p) {\n  go(n);\n}\n";
        let item = item_at_line(src, 3).expect("the function");
        assert_eq!(item.range, 0..src.len() - 1);
        assert_eq!(item.names, ["launch"]);
        assert!(!item.device);
    }

    #[test]
    fn directives_blank_lines_and_namespaces_are_no_items() {
        assert_eq!(at(1), None);
        assert_eq!(at(0), None);
        assert_eq!(at(99), None);
    }
}
