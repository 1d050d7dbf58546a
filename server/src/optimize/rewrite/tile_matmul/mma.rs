//! The tensor-core candidate of `tile_matmul`: 3xTF32 on `mma.sync`.
//!
//! **Matches** the tiled shape whose k loop body is exactly `ACC += A * B;` (either
//! order) with one A-like and one B-like load of `float`, the loop starting at 0, and
//! `ACC` declared in PRE as a `float` set to a literal zero. Each f32 operand is split
//! into a TF32 high part and the TF32 rounding of what is left (`x = hi + lo`), and every
//! product is accumulated as `lo·hi + hi·lo + hi·hi` on the tensor cores (f32
//! accumulators, a fresh one per k step of 8 added to the running sum in f32): about 21
//! bits of each operand take part, so the result is about as close to the exact product
//! as an f32 loop's, unlike plain TF32 (10 bits). But the k terms are added in another
//! order than the author's loop, and near-zero outputs of a long f32 sum then differ from
//! the loop's by more than 1e-5 (the 1024^3 example failed its default atol by that alone),
//! so the candidate is offered only when the spec's atol and rtol are both at least 1e-4,
//! and the verification decides as for every candidate.
//!
//! **Writes** a block of `BM x 64` outputs for `BM / 32 x 2` warps (each warp 32x32: two
//! m16 by four n8 fragments), tiles `[BM][32 + 4]` of A and `[32][64 + 8]` of B (padded
//! so the fragment reads hit distinct banks), filled by the same guarded loops as the
//! other candidates but with zeros past the edges (a tensor-core product reads the whole
//! tile); inline PTX (`cvt.rna.tf32.f32`, `mma.sync.aligned.m16n8k8.row.col.f32.tf32`),
//! no header. Each output then runs PRE and POST as the author wrote them, with `ACC`
//! set to its fragment's value, under the author's bounds check. Launch: block
//! `(32 * warps, 1)`, grid `cdiv(X, 64) x cdiv(Y, BM)`.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::grid2d::Shape2d;
use super::super::tree::{fresh, line_indent, named_children, newline, reindent, text};
use super::{rewrite_text, Matmul, Operand};

/// Columns of a block's tile (two warps of 32 across) and the k depth of a tile.
pub(super) const MMA_BN: u64 = 64;
const MMA_BK: u64 = 32;

/// What the tensor-core candidate needs from the matched kernel: the accumulator's name
/// and which shared operand is A and which is B.
pub(super) struct MmaShape {
    acc: String,
    a: usize,
    b: usize,
}

/// The accumulator and operands when the k loop is `ACC += A * B;` on floats, else why not.
pub(super) fn mma_shape(
    src: &str,
    mm: &Matmul<'_>,
    (atol, rtol): (f64, f64),
) -> Result<MmaShape, String> {
    // Near-zero outputs of a long f32 sum differ between two orders of addition by more
    // than 1e-5 (seen on the H100 with the 1024^3 example: even an f32-accurate product
    // in another order fails its default atol), so the spec must allow it.
    if atol < 1e-4 || rtol < 1e-4 {
        return Err(format!(
            "the spec's atol {atol:e} and rtol {rtol:e} do not both reach 1e-4; the tensor cores add the k terms in another order than the loop, and near-zero outputs of a long f32 sum then differ by more"
        ));
    }
    if mm.start.trim() != "0" {
        return Err(format!("the k loop starts at `{}`, not 0", mm.start));
    }
    let stmts: Vec<Node> = if mm.body.kind() == "compound_statement" {
        named_children(mm.body)
            .into_iter()
            .filter(|n| n.kind() != "comment")
            .collect()
    } else {
        vec![mm.body]
    };
    let not_mac = || "the k loop is not one `ACC += A * B;`".to_string();
    let [stmt] = stmts.as_slice() else {
        return Err(not_mac());
    };
    let assign = named_children(*stmt)
        .into_iter()
        .next()
        .filter(|a| stmt.kind() == "expression_statement" && a.kind() == "assignment_expression")
        .filter(|a| a.child_by_field_name("operator").map(|o| text(src, o)) == Some("+="))
        .ok_or_else(not_mac)?;
    let acc = assign
        .child_by_field_name("left")
        .filter(|l| l.kind() == "identifier")
        .map(|l| text(src, l).to_string())
        .ok_or_else(not_mac)?;
    let mut rhs = assign.child_by_field_name("right").ok_or_else(not_mac)?;
    while rhs.kind() == "parenthesized_expression" {
        rhs = named_children(rhs).into_iter().next().ok_or_else(not_mac)?;
    }
    if rhs.kind() != "binary_expression"
        || rhs.child_by_field_name("operator").map(|o| text(src, o)) != Some("*")
    {
        return Err(not_mac());
    }
    let side = |f: &str| -> Option<usize> {
        let mut n = rhs.child_by_field_name(f)?;
        while n.kind() == "parenthesized_expression" {
            n = named_children(n).into_iter().next()?;
        }
        mm.shared
            .iter()
            .position(|s| s.nodes.len() == 1 && s.nodes[0].id() == n.id())
    };
    let (Some(x), Some(y)) = (side("left"), side("right")) else {
        return Err("the k loop's product is not of one A-like and one B-like load".into());
    };
    let (a, b) = match (mm.shared[x].operand, mm.shared[y].operand) {
        (Operand::A, Operand::B) => (x, y),
        (Operand::B, Operand::A) => (y, x),
        _ => return Err("the k loop's product is not of one A-like and one B-like load".into()),
    };
    if mm.shared.len() != 2 {
        return Err("the k loop loads more than the two operands of its product".into());
    }
    for i in [a, b] {
        if mm.shared[i].ty.trim() != "float" {
            return Err(format!(
                "`{}` is not a float load; the 3xTF32 split is for f32",
                mm.shared[i].text
            ));
        }
    }
    let zero = mm.pre.iter().any(|d| {
        let is_float = d
            .child_by_field_name("type")
            .is_some_and(|t| text(src, t) == "float");
        let mut c = d.walk();
        let inits: Vec<Node> = d.children_by_field_name("declarator", &mut c).collect();
        is_float
            && inits.iter().any(|i| {
                i.kind() == "init_declarator"
                    && i.child_by_field_name("declarator")
                        .is_some_and(|n| text(src, n) == acc)
                    && i.child_by_field_name("value").is_some_and(|v| {
                        matches!(text(src, v), "0" | "0.0" | "0.f" | "0.0f" | "0.F" | "0.0F")
                    })
            })
    });
    if !zero {
        return Err(format!(
            "`{acc}` is not declared before the loop as a float set to zero"
        ));
    }
    Ok(MmaShape { acc, a, b })
}

/// The kernel body of the tensor-core candidate with `bm` rows per block.
pub(super) fn emit_mma(
    src: &str,
    shape: &Shape2d<'_>,
    mm: &Matmul<'_>,
    ms: &MmaShape,
    bm: u64,
    names: &mut BTreeSet<String>,
) -> String {
    let nl = newline(src);
    let ind = line_indent(src, shape.start).to_string();
    let u = shape.unit.clone();
    let (i1, i2, i3, i4) = (
        format!("{ind}{u}"),
        format!("{ind}{u}{u}"),
        format!("{ind}{u}{u}{u}"),
        format!("{ind}{u}{u}{u}{u}"),
    );
    let (bn, bk) = (MMA_BN, MMA_BK);
    let (wm, wn) = (bm / 32, 2);
    let threads = 32 * wm * wn;
    let (tm_n, tn_n) = (2, 4); // m16 and n8 fragments per warp (32x32)
    let (row, col) = (&shape.y, &shape.x);
    let n = |base: &str, names: &mut BTreeSet<String>| fresh(base, names);
    let (at, bt) = (n("a_tile", names), n("b_tile", names));
    let (warp, lane, group, tig) = (
        n("warp", names),
        n("lane", names),
        n("group", names),
        n("tig", names),
    );
    let (wm0, wn0, d) = (n("wm0", names), n("wn0", names), n("d", names));
    let (k0, e, ks) = (n("k0", names), n("e", names), n("ks", names));
    let (ah, al, bh, bl) = (
        n("a_hi", names),
        n("a_lo", names),
        n("b_hi", names),
        n("b_lo", names),
    );
    let (tm, tn, h, v) = (n("tm", names), n("tn", names), n("h", names), n("v", names));
    let part = n("part", names);
    let var = &mm.var;
    let unroll = |i: &str| format!("#pragma unroll{nl}{i}");
    let mut o = String::new();
    o.push_str(&format!(
        "// 3xTF32 on the tensor cores: each f32 operand split into a TF32 part and the TF32 rest{nl}{ind}"
    ));
    o.push_str(&format!(
        "__shared__ float {at}[{bm}][{bk} + 4];{nl}{ind}__shared__ float {bt}[{bk}][{bn} + 8];{nl}{ind}"
    ));
    o.push_str(&format!(
        "const int {warp} = threadIdx.x / 32, {lane} = threadIdx.x % 32;{nl}{ind}"
    ));
    o.push_str(&format!(
        "const int {group} = {lane} / 4, {tig} = {lane} % 4;{nl}{ind}"
    ));
    o.push_str(&format!(
        "const int {wm0} = ({warp} / {wn}) * 32, {wn0} = ({warp} % {wn}) * 32;{nl}{ind}"
    ));
    o.push_str(&format!(
        "float {d}[{tm_n}][{tn_n}][4];{nl}{ind}{}for (int {tm} = 0; {tm} < {tm_n}; ++{tm}){nl}{i1}for (int {tn} = 0; {tn} < {tn_n}; ++{tn}){nl}{i2}for (int {h} = 0; {h} < 4; ++{h}) {d}[{tm}][{tn}][{h}] = 0.0f;{nl}{ind}",
        unroll(&ind)
    ));
    o.push_str(&format!(
        "for ({} {k0} = 0; {k0} < {}; {k0} += {bk}) {{{nl}",
        mm.var_ty, mm.bound
    ));
    // Tiles, zero past the edges.
    for (idx, tile, rows_n, cond) in [(ms.a, &at, bm, &mm.row_cond), (ms.b, &bt, bn, &mm.col_cond)]
    {
        let s = &mm.shared[idx];
        let elems = rows_n * bk;
        let (ix, kx) = if s.along_k {
            (format!("{e} / {bk}"), format!("{e} % {bk}"))
        } else {
            (format!("{e} % {rows_n}"), format!("{e} / {rows_n}"))
        };
        let (decl, slot) = match s.operand {
            Operand::A => (
                format!("{} {} = blockIdx.y * {bm} + {ix};", row.ty, row.name),
                format!("{tile}[{ix}][{kx}]"),
            ),
            Operand::B => (
                format!("{} {} = blockIdx.x * {bn} + {ix};", col.ty, col.name),
                format!("{tile}[{kx}][{ix}]"),
            ),
        };
        let mut guard: Vec<String> = cond.clone();
        guard.push(format!("{var} < {}", mm.bound));
        o.push_str(&format!(
            "{i1}for (int {e} = threadIdx.x; {e} < {elems}; {e} += {threads}) {{{nl}{i2}{decl}{nl}{i2}{} {var} = {k0} + {kx};{nl}{i2}{slot} = ({}) ? {} : 0.0f;{nl}{i1}}}{nl}",
            mm.var_ty,
            guard.join(" && "),
            text(src, s.nodes[0])
        ));
    }
    o.push_str(&format!("{i1}__syncthreads();{nl}"));
    o.push_str(&format!(
        "{i1}{}for (int {ks} = 0; {ks} < {bk}; {ks} += 8) {{{nl}",
        unroll(&i1)
    ));
    o.push_str(&format!(
        "{i2}unsigned {ah}[{tm_n}][4], {al}[{tm_n}][4], {bh}[{tn_n}][2], {bl}[{tn_n}][2];{nl}"
    ));
    // Fragments: A (16x8, row) a0..a3 at rows group, group + 8 and columns tig, tig + 4;
    // B (8x8, col) b0, b1 at rows tig, tig + 4 and column group.
    let split = |hi: &str, lo: &str, at: &str| {
        format!(
            "{{{nl}{i4}float {v} = {at};{nl}{i4}asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"({hi}) : \"f\"({v}));{nl}{i4}{v} -= __uint_as_float({hi});{nl}{i4}asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"({lo}) : \"f\"({v}));{nl}{i3}}}"
        )
    };
    o.push_str(&format!(
        "{i2}{}for (int {tm} = 0; {tm} < {tm_n}; ++{tm}){nl}{i2}{u}{}for (int {h} = 0; {h} < 4; ++{h}) {}{nl}",
        unroll(&i2),
        unroll(&format!("{i2}{u}")),
        split(
            &format!("{ah}[{tm}][{h}]"),
            &format!("{al}[{tm}][{h}]"),
            &format!("{at}[{wm0} + {tm} * 16 + {group} + ({h} & 1) * 8][{ks} + {tig} + ({h} >> 1) * 4]")
        )
    ));
    o.push_str(&format!(
        "{i2}{}for (int {tn} = 0; {tn} < {tn_n}; ++{tn}){nl}{i2}{u}{}for (int {h} = 0; {h} < 2; ++{h}) {}{nl}",
        unroll(&i2),
        unroll(&format!("{i2}{u}")),
        split(
            &format!("{bh}[{tn}][{h}]"),
            &format!("{bl}[{tn}][{h}]"),
            &format!("{bt}[{ks} + {tig} + {h} * 4][{wn0} + {tn} * 8 + {group}]")
        )
    ));
    // Each k step's three products go to a fresh accumulator, added to the running sum
    // in f32 (round to nearest): the tensor cores' own accumulation truncates, and
    // chaining all k steps through it lost about 2^-15 of the sum on the H100.
    let mma = |a: &str, b: &str| {
        format!(
            "asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\"{nl}{i4}{u}: \"+f\"({part}[0]), \"+f\"({part}[1]), \"+f\"({part}[2]), \"+f\"({part}[3]){nl}{i4}{u}: \"r\"({a}[{tm}][0]), \"r\"({a}[{tm}][1]), \"r\"({a}[{tm}][2]), \"r\"({a}[{tm}][3]), \"r\"({b}[{tn}][0]), \"r\"({b}[{tn}][1]));"
        )
    };
    o.push_str(&format!(
        "{i2}{}for (int {tm} = 0; {tm} < {tm_n}; ++{tm}){nl}{i2}{u}{}for (int {tn} = 0; {tn} < {tn_n}; ++{tn}) {{{nl}{i4}float {part}[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};{nl}{i4}{}{nl}{i4}{}{nl}{i4}{}{nl}{i4}for (int {h} = 0; {h} < 4; ++{h}) {d}[{tm}][{tn}][{h}] += {part}[{h}];{nl}{i3}}}{nl}",
        unroll(&i2),
        unroll(&format!("{i2}{u}")),
        mma(&al, &bh),
        mma(&ah, &bl),
        mma(&ah, &bh)
    ));
    o.push_str(&format!(
        "{i1}}}{nl}{i1}__syncthreads();{nl}{ind}}}{nl}{ind}"
    ));
    // Each lane's outputs: C fragment c0..c3 at rows group, group + 8 and columns
    // 2 * tig, 2 * tig + 1; PRE and POST as the author wrote them.
    o.push_str(&format!(
        "{}for (int {tm} = 0; {tm} < {tm_n}; ++{tm}){nl}{i1}{}for (int {tn} = 0; {tn} < {tn_n}; ++{tn}){nl}{i2}{}for (int {h} = 0; {h} < 4; ++{h}) {{{nl}",
        unroll(&ind),
        unroll(&i1),
        unroll(&i2)
    ));
    o.push_str(&format!(
        "{i3}{} {} = blockIdx.y * {bm} + {wm0} + {tm} * 16 + {group} + ({h} >> 1) * 8;{nl}{i3}{} {} = blockIdx.x * {bn} + {wn0} + {tn} * 8 + {tig} * 2 + ({h} & 1);{nl}",
        row.ty, row.name, col.ty, col.name
    ));
    let none = std::collections::BTreeMap::new();
    for s in &mm.pre {
        let t = rewrite_text(src, *s, &none, &[]);
        o.push_str(&format!(
            "{i3}{}{nl}",
            reindent(&t, line_indent(src, s.start_byte()), &i3)
        ));
    }
    o.push_str(&format!("{i3}{} = {d}[{tm}][{tn}][{h}];{nl}", ms.acc));
    if !mm.post.is_empty() {
        let body: Vec<String> = mm
            .post
            .iter()
            .map(|s| {
                let t = rewrite_text(src, *s, &none, &[]);
                reindent(&t, line_indent(src, s.start_byte()), &i4)
            })
            .collect();
        o.push_str(&format!(
            "{i3}if ({}) {{{nl}{i4}{}{nl}{i3}}}{nl}",
            shape.active,
            body.join(&format!("{nl}{i4}"))
        ));
    }
    o.push_str(&format!("{i2}}}"));
    o
}
