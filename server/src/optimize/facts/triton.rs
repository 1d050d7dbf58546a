//! The Triton scan: the `@triton.jit` kernel body. The lane is a `tl.arange`
//! element: `x_ptr + pid * BLOCK + tl.arange(0, BLOCK)` is unit-stride. A 2-D tile
//! (`offs[:, None]`) is reported as irregular rather than guessed.

use super::*;

pub(super) fn scan(f: &mut Facts, src: &str, tree: &Tree, kernel: &Kernel) {
    let root = tree.root_node();
    let Some(def) = root
        .descendant_for_byte_range(kernel.name_range.start, kernel.name_range.end)
        .and_then(|n| n.parent())
        .filter(|n| n.kind() == "function_definition")
    else {
        return;
    };
    let Some(body) = def.child_by_field_name("body") else {
        return;
    };
    let params: HashSet<String> = kernel
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::TritonArg { .. }))
        .map(|p| p.name.clone())
        .collect();
    let mut cx = Cx {
        src,
        params,
        defs: HashMap::new(),
        memo: HashMap::new(),
        buffer_memo: RefCell::default(),
        axes_memo: RefCell::default(),
    };
    cx.collect_defs(body, 0);
    let top = super::triton_loops::statements(body);
    f.triton_loops = super::triton_loops::summarize(src, &super::triton_loops::loops(src, &top));
    let mut scan = Scan {
        facts: f,
        loops: Vec::new(),
    };
    scan.visit(&mut cx, body, 0);
}

/// `tl.load`, or `triton.language.load` as `tl.load`.
fn callee(src: &str, call: Node) -> String {
    let f = call
        .child_by_field_name("function")
        .map_or("", |f| node_text(src, f));
    match f.strip_prefix("triton.language.") {
        Some(rest) => format!("tl.{rest}"),
        None => f.to_string(),
    }
}

fn positional(args: Node) -> Vec<Node> {
    named_children(args)
        .into_iter()
        .filter(|a| a.kind() != "keyword_argument")
        .collect()
}

fn keyword<'t>(src: &str, args: Node<'t>, name: &str) -> Option<Node<'t>> {
    named_children(args).into_iter().find_map(|a| {
        (a.kind() == "keyword_argument"
            && a.child_by_field_name("name").map(|n| node_text(src, n)) == Some(name))
        .then(|| a.child_by_field_name("value"))
        .flatten()
    })
}

struct Cx<'t> {
    src: &'t str,
    /// Non-constexpr parameters: pointers or scalars, both lane-independent.
    params: HashSet<String>,
    defs: HashMap<String, Vec<Def<'t>>>,
    memo: HashMap<String, Memo>,
    /// Per-name results of `buffer_of` (None while being computed).
    buffer_memo: RefCell<HashMap<String, Option<String>>>,
    axes_memo: RefCell<HashMap<String, u8>>,
}

impl<'t> LaneWalk<'t> for Cx<'t> {
    const FORMS: Forms = Forms {
        literals: &["integer", "float", "true", "false", "none", "string"],
        unary: "unary_operator",
        binary: "binary_operator",
    };

    fn src(&self) -> &'t str {
        self.src
    }
    fn memo(&mut self) -> &mut HashMap<String, Memo> {
        &mut self.memo
    }
    fn konst(&self, n: Node<'t>) -> Option<i64> {
        Cx::konst(self, n)
    }
    /// Non-constexpr parameters, pointers or scalars, are the same in every lane.
    fn bound(&self, name: &str) -> Option<Deriv> {
        self.params.contains(name).then_some(ZERO)
    }
    fn defs(&self) -> &HashMap<String, Vec<Def<'t>>> {
        &self.defs
    }
    fn defs_mut(&mut self) -> &mut HashMap<String, Vec<Def<'t>>> {
        &mut self.defs
    }
    fn defines(&self, n: Node<'t>) -> Vec<(String, Def<'t>)> {
        Cx::defines(self, n)
    }
    /// `a if c else b`.
    fn branches(&self, n: Node<'t>) -> Option<(Node<'t>, Node<'t>, Node<'t>)> {
        match named_children(n).as_slice() {
            [a, c, b] => Some((*c, *a, *b)),
            _ => None,
        }
    }

    /// Pointer parameters are buffers (scalars never reach an address here).
    fn bound_buffer(&self, name: &str) -> Option<Option<String>> {
        self.params.contains(name).then(|| Some(name.to_string()))
    }
    fn buffer_memo(&self) -> &RefCell<HashMap<String, Option<String>>> {
        &self.buffer_memo
    }
    fn buffer_own(&self, _: Node<'t>, _: usize) -> Option<Option<String>> {
        None
    }

    /// `tl.arange(...)` is the lane; `tl.program_id(d)` the block along axis d.
    fn axes_own(&self, n: Node<'t>) -> Option<u8> {
        if n.kind() != "call" {
            return None;
        }
        match callee(self.src, n).as_str() {
            "tl.arange" => Some(THREAD_X),
            "tl.program_id" => {
                let args = n.child_by_field_name("arguments")?;
                let axis = positional(args)
                    .first()
                    .copied()
                    .or_else(|| keyword(self.src, args, "axis"))
                    .and_then(|a| self.konst(a))
                    .filter(|a| (0..3).contains(a))?;
                Some(BLOCK_X << axis)
            }
            _ => None,
        }
    }
    fn axes_memo(&self) -> &RefCell<HashMap<String, u8>> {
        &self.axes_memo
    }

    /// `tl.arange` and the hints around it, other calls, tiles and comparisons.
    fn deriv_own(&mut self, n: Node<'t>, depth: usize) -> Option<Deriv> {
        Some(match n.kind() {
            "call" => {
                let name = callee(self.src, n);
                let args = n
                    .child_by_field_name("arguments")
                    .map(positional)
                    .unwrap_or_default();
                match name.as_str() {
                    "tl.arange" => Const(1),
                    "tl.multiple_of" | "tl.max_contiguous" | "tl.max_constancy" => {
                        match args.first() {
                            Some(a) => self.deriv(*a, depth + 1),
                            None => Unknown,
                        }
                    }
                    _ => {
                        let ds: Vec<Deriv> =
                            args.iter().map(|a| self.deriv(*a, depth + 1)).collect();
                        Deriv::opaque(&ds)
                    }
                }
            }
            // `offs[:, None]`: a 2-D tile; which axis is contiguous is not tracked.
            "subscript" => match n.child_by_field_name("value") {
                Some(v) => Deriv::opaque(&[self.deriv(v, depth + 1)]),
                None => Unknown,
            },
            "comparison_operator" | "boolean_operator" | "not_operator" => {
                let ch = named_children(n);
                let ds: Vec<Deriv> = ch.iter().map(|c| self.deriv(*c, depth + 1)).collect();
                Deriv::opaque(&ds)
            }
            _ => return None,
        })
    }
}

impl<'t> Cx<'t> {
    /// Whether `n` floor-divides or takes the remainder of a value that moves with the
    /// lanes (`(offs // HW) % C`), itself or through its names' definitions: neighbouring
    /// lanes then share elements (a gathered per-channel parameter), so the address does
    /// not move with each lane.
    fn collapses_lanes(&self, n: Node<'t>, depth: usize, seen: &mut Vec<String>) -> bool {
        if depth > MAX_DEPTH {
            return true;
        }
        if n.kind() == "binary_operator" {
            let op = n.child_by_field_name("operator").map(|o| o.kind());
            let left = n.child_by_field_name("left");
            if matches!(op, Some("//" | "%"))
                && left.is_some_and(|l| self.axes(l, 0) & lanes::THREAD_X != 0)
            {
                return true;
            }
        }
        if n.kind() == "identifier" {
            let name = node_text(self.src, n).to_string();
            if seen.contains(&name) {
                return false;
            }
            seen.push(name.clone());
            let values: Vec<Node<'t>> = self
                .defs
                .get(&name)
                .map(|ds| ds.iter().filter_map(|d| d.value).collect())
                .unwrap_or_default();
            return values
                .into_iter()
                .any(|v| self.collapses_lanes(v, depth + 1, seen));
        }
        let mut c = n.walk();
        let children: Vec<Node<'t>> = n.children(&mut c).collect();
        children
            .into_iter()
            .any(|ch| self.collapses_lanes(ch, depth + 1, seen))
    }

    /// The local names `n` itself defines, with their definitions.
    fn defines(&self, n: Node<'t>) -> Vec<(String, Def<'t>)> {
        let mut out = Vec::new();
        match n.kind() {
            "assignment" | "augmented_assignment" => {
                if let (Some(l), r) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) {
                    let op = if n.kind() == "assignment" {
                        "="
                    } else {
                        n.child_by_field_name("operator")
                            .map_or("opaque", |o| node_text(self.src, o))
                    };
                    if l.kind() == "identifier" {
                        out.push((node_text(self.src, l).to_string(), Def { op, value: r }));
                    } else {
                        for name in named_children(l)
                            .into_iter()
                            .filter(|c| c.kind() == "identifier")
                        {
                            out.push((
                                node_text(self.src, name).to_string(),
                                Def {
                                    op: "opaque",
                                    value: None,
                                },
                            ));
                        }
                    }
                }
            }
            "for_statement" => {
                if let Some(l) = n
                    .child_by_field_name("left")
                    .filter(|l| l.kind() == "identifier")
                {
                    // A loop counter is the same for every lane.
                    out.push((
                        node_text(self.src, l).to_string(),
                        Def {
                            op: "loop",
                            value: None,
                        },
                    ));
                }
            }
            _ => {}
        }
        out
    }

    fn konst(&self, n: Node) -> Option<i64> {
        match n.kind() {
            "integer" => int_literal(node_text(self.src, n)),
            "unary_operator"
                if n.child_by_field_name("operator")
                    .map(|o| node_text(self.src, o))
                    == Some("-") =>
            {
                self.konst(n.child_by_field_name("argument")?)?
                    .checked_neg()
            }
            _ => None,
        }
    }

    /// A literal trip count for `range(a[, b[, c]])`.
    fn range_count(&self, args: &[Node]) -> Option<u64> {
        let k: Vec<i64> = args.iter().map(|a| self.konst(*a)).collect::<Option<_>>()?;
        let (start, stop, step) = match k.as_slice() {
            [stop] => (0, *stop, 1),
            [start, stop] => (*start, *stop, 1),
            [start, stop, step] => (*start, *stop, *step),
            _ => return None,
        };
        if step > 0 {
            simulate_trip_count(start, "<", stop, "+=", step)
        } else if step < 0 {
            simulate_trip_count(start, ">", stop, "+=", step)
        } else {
            None
        }
    }
}

struct Scan<'a> {
    facts: &'a mut Facts,
    loops: Vec<usize>,
}

impl<'t> Scan<'_> {
    fn visit(&mut self, cx: &mut Cx<'t>, n: Node<'t>, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let src = cx.src;
        let mut pushed = false;
        match n.kind() {
            "for_statement" | "while_statement" => {
                let mut fact = LoopFact {
                    line: line_of(n),
                    counted: false,
                    var: None,
                    trip_count: None,
                    unroll_pragma: false,
                    global_loads: 0,
                    global_stores: 0,
                    via: None,
                    carries: Vec::new(),
                    runtime_step: false,
                    lane_step: false,
                };
                if n.kind() == "for_statement" {
                    let right = n
                        .child_by_field_name("right")
                        .filter(|r| r.kind() == "call");
                    let name = right.map(|r| callee(src, r));
                    if let (Some(r), Some(name)) = (right, name) {
                        if matches!(name.as_str(), "range" | "tl.range" | "tl.static_range") {
                            fact.counted = true;
                            fact.var = n
                                .child_by_field_name("left")
                                .filter(|l| l.kind() == "identifier")
                                .map(|l| node_text(src, l).to_string());
                            fact.unroll_pragma = name == "tl.static_range";
                            let args = r
                                .child_by_field_name("arguments")
                                .map(positional)
                                .unwrap_or_default();
                            fact.trip_count = cx.range_count(&args);
                        }
                    }
                }
                self.facts.loops.push(fact);
                self.loops.push(self.facts.loops.len() - 1);
                pushed = true;
            }
            "attribute" => {
                let t = node_text(src, n);
                if t == "tl.program_id" {
                    if let Some(call) = n.parent().filter(|p| p.kind() == "call") {
                        let args = call.child_by_field_name("arguments");
                        let axis = args
                            .and_then(|a| {
                                positional(a)
                                    .first()
                                    .copied()
                                    .or_else(|| keyword(src, a, "axis"))
                            })
                            .and_then(|a| cx.konst(a));
                        if let Some(ax) = axis
                            .and_then(|a| usize::try_from(a).ok())
                            .filter(|a| *a < 3)
                        {
                            self.facts.thread_axes[ax] = true;
                        }
                    }
                }
            }
            "call" => self.call(cx, n),
            _ => {}
        }
        let mut c = n.walk();
        let children: Vec<Node> = n.children(&mut c).collect();
        for ch in children {
            self.visit(cx, ch, depth + 1);
        }
        if pushed {
            self.loops.pop();
        }
    }

    /// An integer literal, or a `tl.constexpr` the timed case sets and the grid does not
    /// read.
    fn constant(&self, src: &str, n: Node<'t>) -> Option<u64> {
        let t = node_text(src, n).trim();
        t.parse::<u64>().ok().or_else(|| {
            (!self.facts.grid_names.contains(t))
                .then(|| self.facts.constexpr_values.get(t).copied())
                .flatten()
        })
    }

    fn call(&mut self, cx: &mut Cx<'t>, n: Node<'t>) {
        let src = cx.src;
        let name = callee(src, n);
        let Some(args) = n.child_by_field_name("arguments") else {
            return;
        };
        if name == "tl.arange" {
            let ends: Vec<Option<u64>> = positional(args)
                .iter()
                .map(|a| self.constant(src, *a))
                .collect();
            let extent = match ends.as_slice() {
                [Some(a), Some(b)] => b.saturating_sub(*a),
                _ => u64::MAX,
            };
            self.facts.lane_extent = Some(self.facts.lane_extent.unwrap_or(0).max(extent));
        }
        let kind = match name.as_str() {
            "tl.load" => Some(AccessKind::Load),
            "tl.store" => Some(AccessKind::Store),
            a if a.starts_with("tl.atomic_") => {
                self.facts.atomics += 1;
                Some(AccessKind::Atomic)
            }
            "tl.dot" | "tl.dot_scaled" => {
                self.facts.tensor_core_ops += 1;
                None
            }
            "tl.sum"
            | "tl.max"
            | "tl.min"
            | "tl.reduce"
            | "tl.argmax"
            | "tl.argmin"
            | "tl.xor_sum"
            | "tl.cumsum"
            | "tl.cumprod"
            | "tl.associative_scan" => {
                self.facts.reductions += 1;
                None
            }
            "tl.debug_barrier" => {
                self.facts.barriers += 1;
                None
            }
            _ => None,
        };
        let Some(kind) = kind else {
            return;
        };
        let ptr = positional(args)
            .first()
            .copied()
            .or_else(|| keyword(src, args, "pointer"));
        let Some(ptr) = ptr else {
            return;
        };
        let Some(buffer) = cx.buffer_of(ptr, 0) else {
            return;
        };
        let d = cx.deriv(ptr, 0);
        let hinted = ["eviction_policy", "cache_modifier"]
            .iter()
            .any(|k| keyword(src, args, k).is_some());
        let access = Access {
            buffer,
            index: collapse_ws(node_text(src, ptr)),
            kind,
            stride: d.stride(),
            stride_y: Stride::Unknown,
            in_loop: false,
            line: line_of(n),
            via: None,
            axes: match cx.collapses_lanes(ptr, 0, &mut Vec::new()) {
                true => cx.axes(ptr, 0) & !lanes::THREAD_X,
                false => cx.axes(ptr, 0),
            },
            span: Some((n.start_byte(), n.end_byte())),
            hinted,
        };
        record_access(self.facts, &self.loops, access);
    }
}
