//! The CUDA scan: the kernel body, and each `__device__` helper it calls with the
//! call's arguments bound to the helper's parameters.

use std::borrow::Cow;

use super::*;

/// Float math calls with a fast intrinsic (`--use_fast_math` picks these).
const FAST_MATH: &[&str] = &[
    "expf", "exp10f", "logf", "log2f", "log10f", "sinf", "cosf", "tanf", "powf", "sincosf",
];

/// How deep helper calls are followed.
const MAX_CALL_DEPTH: usize = 4;

/// `block_x`: the names that mean `blockDim.x` in this kernel
/// (`rewrite::block_width_names`), read as `blockDim.x` where a step counts lanes.
pub(super) fn scan(f: &mut Facts, src: &str, tree: &Tree, kernel: &Kernel, block_x: &[String]) {
    scan_along(f, src, tree, kernel, Lane::X, block_x);
    // The same walk with `threadIdx.y` as the lane: it meets the same accesses in the
    // same order (the lane changes derivatives, never what is visited).
    let mut along_y = Facts::default();
    scan_along(&mut along_y, src, tree, kernel, Lane::Y, block_x);
    let same = along_y.accesses.len() == f.accesses.len();
    for (i, a) in f.accesses.iter_mut().enumerate() {
        a.stride_y = match along_y.accesses.get(i) {
            Some(y) if same && y.span == a.span => y.stride,
            _ => Stride::Unknown,
        };
    }
}

/// The thread axis whose neighbours a scan compares (`threadIdx.x` or `.y`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    X,
    Y,
}

impl Lane {
    fn field(self) -> &'static str {
        match self {
            Lane::X => "x",
            Lane::Y => "y",
        }
    }
}

fn scan_along(
    f: &mut Facts,
    src: &str,
    tree: &Tree,
    kernel: &Kernel,
    lane: Lane,
    block_x: &[String],
) {
    let root = tree.root_node();
    // Every function definition of the unit, by name.
    let mut funcs: HashMap<String, Node> = HashMap::new();
    for r in &kernel.unit_ranges {
        let mut found = Vec::new();
        find_functions(root, r, &mut found, 0);
        for func in found {
            if let Some(name) = function_name(src, func) {
                funcs.entry(name).or_insert(func);
            }
        }
    }
    let Some(kfunc) = find_kernel(root, src, kernel) else {
        return;
    };
    let Some(body) = kfunc.child_by_field_name("body") else {
        return;
    };
    // Launch bounds and maxnreg sit between the definition's start and its body.
    let header = src
        .get(kernel.def_range.start.min(body.start_byte())..body.start_byte())
        .unwrap_or("");
    f.launch_bounds = header.contains("__launch_bounds__");
    f.maxnreg = header.contains("__maxnreg__") || header.contains("maxnreg(");
    f.flat_index_splits = flat_index_splits(src, body);

    let mut bindings = HashMap::new();
    for p in &kernel.params {
        let b = match &p.kind {
            ParamKind::Pointer { .. } => Binding::Buffer {
                buffer: p.name.clone(),
                d: ZERO,
            },
            _ => Binding::Scalar(ZERO),
        };
        bindings.insert(p.name.clone(), b);
    }
    let mut scan = Scan {
        src,
        funcs: &funcs,
        facts: f,
        loops: Vec::new(),
        written: HashSet::new(),
        call_stack: vec![kernel.name.clone()],
        pointees: kernel
            .params
            .iter()
            .filter_map(|p| match &p.kind {
                ParamKind::Pointer { pointee, .. } => Some((p.name.clone(), pointee.clone())),
                _ => None,
            })
            .collect(),
    };
    let mut cx = FnCx::new(src, body, bindings, None, lane);
    cx.block_x = block_x.to_vec();
    scan.visit(&mut cx, body, 0);
    let written = std::mem::take(&mut scan.written);

    for p in &kernel.params {
        let ParamKind::Pointer { is_const, .. } = &p.kind else {
            continue;
        };
        let decl = src.get(p.range.clone()).unwrap_or("");
        let restrict =
            identifiers(decl).any(|w| matches!(w, "__restrict__" | "__restrict" | "restrict"));
        if !restrict {
            f.pointers_without_restrict.push(p.name.clone());
        }
        if !is_const && !written.contains(&p.name) {
            f.read_only_pointers_without_const.push(p.name.clone());
        }
    }
}

/// The `/` and `%` of the kernel body whose left side is a global 1-D thread index (a
/// local whose value reads `blockIdx.x` and `threadIdx.x` and divides nothing) and whose
/// divisor is not a power-of-two literal (the compiler shifts and masks those).
fn flat_index_splits(src: &str, body: Node<'_>) -> u32 {
    let text = |n: Node| src.get(n.byte_range()).unwrap_or("");
    let mut flat: HashSet<String> = HashSet::new();
    let mut stack = vec![body];
    let mut found = Vec::new();
    while let Some(n) = stack.pop() {
        if n.kind() == "init_declarator" {
            let value = n.child_by_field_name("value").map_or("", text);
            let name = n
                .child_by_field_name("declarator")
                .filter(|d| d.kind() == "identifier");
            let global = value.contains("blockIdx.x") && value.contains("threadIdx.x");
            if let Some(name) = name.filter(|_| global && !value.contains(['/', '%'])) {
                flat.insert(text(name).to_string());
            }
        }
        if n.kind() == "binary_expression" {
            found.push(n);
        }
        let mut c = n.walk();
        stack.extend(n.children(&mut c));
    }
    let bare = |n: Node| -> String { text(n).chars().filter(|c| !c.is_whitespace()).collect() };
    let is_flat = |left: &str| {
        let left = left.trim_start_matches('(').trim_end_matches(')');
        flat.iter()
            .any(|i| left == i || left.rsplit_once(')').is_some_and(|(_, v)| v == i))
    };
    let splits = found.into_iter().filter(|b| {
        let op = b.child_by_field_name("operator").map_or("", text);
        let left = b.child_by_field_name("left").map(bare).unwrap_or_default();
        let right = b.child_by_field_name("right").map(bare).unwrap_or_default();
        let right = right.trim_start_matches('(').trim_end_matches(')');
        let pow2 = right.parse::<u64>().is_ok_and(u64::is_power_of_two);
        matches!(op, "/" | "%") && !pow2 && is_flat(&left)
    });
    u32::try_from(splits.count()).unwrap_or(u32::MAX)
}

/// Outermost `function_definition`s inside `r`.
fn find_functions<'t>(
    n: Node<'t>,
    r: &std::ops::Range<usize>,
    out: &mut Vec<Node<'t>>,
    depth: usize,
) {
    if depth > MAX_DEPTH || n.end_byte() <= r.start || n.start_byte() >= r.end {
        return;
    }
    if n.kind() == "function_definition" && n.start_byte() >= r.start && n.end_byte() <= r.end {
        out.push(n);
        return;
    }
    let mut c = n.walk();
    for ch in n.children(&mut c) {
        find_functions(ch, r, out, depth + 1);
    }
}

fn find_kernel<'t>(root: Node<'t>, src: &str, kernel: &Kernel) -> Option<Node<'t>> {
    let mut found = Vec::new();
    find_functions(root, &kernel.def_range, &mut found, 0);
    found
        .into_iter()
        .find(|f| function_name(src, *f).as_deref() == Some(kernel.name.as_str()))
}

/// The function declarator under a definition's declarator (through pointers,
/// references and attributes).
fn function_declarator(mut n: Node) -> Option<Node> {
    for _ in 0..16 {
        if n.kind() == "function_declarator" {
            return Some(n);
        }
        n = n.child_by_field_name("declarator")?;
    }
    None
}

fn function_name(src: &str, func: Node) -> Option<String> {
    let fd = function_declarator(func.child_by_field_name("declarator")?)?;
    let d = fd.child_by_field_name("declarator")?;
    let d = match d.kind() {
        "template_function" => d.child_by_field_name("name")?,
        "qualified_identifier" => d.child_by_field_name("name")?,
        _ => d,
    };
    Some(node_text(src, d).to_string())
}

/// The parameter names of a function definition, in order (None for an unnamed one).
fn param_names(src: &str, func: Node) -> Vec<Option<String>> {
    let Some(fd) = func
        .child_by_field_name("declarator")
        .and_then(function_declarator)
    else {
        return Vec::new();
    };
    let Some(list) = fd.child_by_field_name("parameters") else {
        return Vec::new();
    };
    named_children(list)
        .into_iter()
        .filter(|p| p.kind() == "parameter_declaration")
        .map(|p| {
            p.child_by_field_name("declarator")
                .and_then(|d| declared_name(src, d))
        })
        .collect()
}

/// The identifier a declarator declares (through pointer, reference, array, init).
pub(super) fn declared_name(src: &str, mut d: Node) -> Option<String> {
    for _ in 0..16 {
        match d.kind() {
            "identifier" => return Some(node_text(src, d).to_string()),
            "reference_declarator" => d = named_children(d).into_iter().next()?,
            _ => d = d.child_by_field_name("declarator")?,
        }
    }
    None
}

/// The callee name of a call: `f`, `ns::f`, `f<T>`, `obj.f`.
/// The `__ld*(&p[i])` call that loads the element `n`, if any.
pub(crate) fn load_call<'t>(src: &str, n: Node<'t>) -> Option<Node<'t>> {
    n.parent()
        .filter(|p| {
            p.kind() == "pointer_expression"
                && p.child_by_field_name("operator")
                    .is_some_and(|o| node_text(src, o) == "&")
        })
        .and_then(|p| p.parent())
        .filter(|a| a.kind() == "argument_list")
        .and_then(|a| a.parent())
        .filter(|c| call_name(src, *c).starts_with("__ld"))
}

/// `(size_t)&p[i]`, `reinterpret_cast<uintptr_t>(&p[i])`: the address as a number (an
/// alignment test), no access to the element.
fn address_only(src: &str, n: Node) -> bool {
    let Some(amp) = n.parent().filter(|p| {
        p.kind() == "pointer_expression"
            && p.child_by_field_name("operator")
                .is_some_and(|o| node_text(src, o) == "&")
    }) else {
        return false;
    };
    let target = match amp.parent() {
        Some(c) if c.kind() == "cast_expression" => c.child_by_field_name("type"),
        Some(a) if a.kind() == "argument_list" => a
            .parent()
            .filter(|call| call_name(src, *call).ends_with("_cast"))
            .and_then(|call| call.child_by_field_name("function"))
            .and_then(|f| f.child_by_field_name("arguments")),
        _ => None,
    };
    target.is_some_and(|t| !node_text(src, t).contains('*'))
}

/// Where the element of `&p[i]` is accessed when the address goes through a pointer
/// cast: `reinterpret_cast<const float4*>(&p[i])[0]` or `*(const float4*)&p[i]` give
/// the subscript or dereference of the cast and the cast's element type (`float4`);
/// anything else gives `n` itself and None.
pub(super) fn cast_site<'t>(src: &str, n: Node<'t>) -> (Node<'t>, Option<String>) {
    let found = (|| {
        let amp = n.parent().filter(|p| {
            p.kind() == "pointer_expression"
                && p.child_by_field_name("operator")
                    .is_some_and(|o| node_text(src, o) == "&")
        })?;
        let (cast, ty) = match amp.parent()?.kind() {
            "argument_list" => {
                let call = amp.parent()?.parent()?;
                let f = call.child_by_field_name("function")?;
                let targs = f.child_by_field_name("arguments")?;
                (call_name(src, call).ends_with("_cast")).then_some(())?;
                (
                    call,
                    node_text(src, targs).trim_matches(['<', '>']).to_string(),
                )
            }
            "cast_expression" => {
                let c = amp.parent()?;
                (
                    c,
                    node_text(src, c.child_by_field_name("type")?).to_string(),
                )
            }
            _ => return None,
        };
        let ty = crate::syntax::pointee_type(&ty)?;
        let site = cast.parent()?;
        let deref = site.kind() == "pointer_expression"
            && site
                .child_by_field_name("operator")
                .is_some_and(|o| node_text(src, o) == "*");
        let subscript = site.kind() == "subscript_expression"
            && site.child_by_field_name("argument") == Some(cast);
        (deref || subscript).then_some((site, ty))
    })();
    match found {
        Some((site, ty)) => (site, Some(ty)),
        None => (n, None),
    }
}

fn call_name(src: &str, call: Node) -> String {
    let Some(mut f) = call.child_by_field_name("function") else {
        return String::new();
    };
    for _ in 0..4 {
        f = match f.kind() {
            "template_function" | "qualified_identifier" => match f.child_by_field_name("name") {
                Some(n) => n,
                None => break,
            },
            "field_expression" => match f.child_by_field_name("field") {
                Some(n) => n,
                None => break,
            },
            _ => break,
        };
    }
    node_text(src, f).to_string()
}

#[derive(Clone)]
enum Binding {
    Scalar(Deriv),
    /// A pointer into a kernel buffer; `d` is the derivative of its offset.
    Buffer {
        buffer: String,
        d: Deriv,
    },
}

/// One function being scanned: its bindings (parameters) and local definitions.
struct FnCx<'t> {
    src: &'t str,
    bindings: HashMap<String, Binding>,
    defs: HashMap<String, Vec<Def<'t>>>,
    memo: HashMap<String, Memo>,
    /// Per-name results of `konst` and `buffer_of` (None while being computed), so
    /// chains like `a2 = a1 + a1` stay linear.
    konst_memo: RefCell<HashMap<String, Option<i64>>>,
    buffer_memo: RefCell<HashMap<String, Option<String>>>,
    axes_memo: RefCell<HashMap<String, u8>>,
    /// The helper's name, or None in the kernel itself.
    via: Option<String>,
    /// The thread axis derivatives are taken along.
    lane: Lane,
    /// Names that mean `blockDim.x` in the kernel (none in a helper).
    block_x: Vec<String>,
    /// Names declared more than once (in sibling or nested blocks): for each
    /// declaration, where it is in scope and where it starts.
    scoped: HashMap<String, Vec<Scope>>,
}

/// Where one declaration of a local is in scope: from the declaration to the end of its
/// block (a `for` initializer's: the loop).
#[derive(Clone, Copy)]
struct Scope {
    decl: usize,
    end: usize,
}

/// Every declaration of a local in `body`, by name: the names declared more than once,
/// with the scope of each declaration.
fn scopes(src: &str, body: Node<'_>) -> HashMap<String, Vec<Scope>> {
    let mut out: HashMap<String, Vec<Scope>> = HashMap::new();
    let mut stack = vec![body];
    while let Some(n) = stack.pop() {
        if n.kind() == "declaration" {
            // A `for` initializer's scope is the loop, an `if (T v = ...)` condition's the
            // statement, any other declaration's the rest of its block.
            let end = match n.parent() {
                Some(p) if p.kind() == "condition_clause" => p.parent().unwrap_or(p).end_byte(),
                Some(p) => p.end_byte(),
                None => n.end_byte(),
            };
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                if let Some(name) = declared_name(src, d) {
                    let scope = Scope {
                        decl: n.start_byte(),
                        end,
                    };
                    out.entry(name).or_default().push(scope);
                }
            }
        }
        let mut c = n.walk();
        stack.extend(n.children(&mut c));
    }
    out.retain(|_, v| v.len() > 1);
    out
}

impl<'t> LaneWalk<'t> for FnCx<'t> {
    const FORMS: Forms = Forms {
        literals: &[
            "number_literal",
            "char_literal",
            "string_literal",
            "true",
            "false",
            "null",
            "nullptr",
            "sizeof_expression",
        ],
        unary: "unary_expression",
        binary: "binary_expression",
    };

    fn src(&self) -> &'t str {
        self.src
    }
    fn memo(&mut self) -> &mut HashMap<String, Memo> {
        &mut self.memo
    }
    fn konst(&self, n: Node<'t>) -> Option<i64> {
        FnCx::konst(self, n, 0)
    }
    fn bound(&self, name: &str) -> Option<Deriv> {
        match self.bindings.get(name)? {
            Binding::Scalar(d) | Binding::Buffer { d, .. } => Some(*d),
        }
    }
    fn defs(&self) -> &HashMap<String, Vec<Def<'t>>> {
        &self.defs
    }
    fn defs_mut(&mut self) -> &mut HashMap<String, Vec<Def<'t>>> {
        &mut self.defs
    }
    fn defines(&self, n: Node<'t>) -> Vec<(String, Def<'t>)> {
        let at = n.start_byte();
        FnCx::defines(self, n)
            .into_iter()
            .map(|(name, d)| match self.key_at(&name, at) {
                Cow::Owned(key) => (key, d),
                Cow::Borrowed(_) => (name, d),
            })
            .collect()
    }
    fn name_at(&self, n: Node<'t>) -> Cow<'t, str> {
        self.key_at(node_text(self.src, n), n.start_byte())
    }
    fn branches(&self, n: Node<'t>) -> Option<(Node<'t>, Node<'t>, Node<'t>)> {
        Some((
            n.child_by_field_name("condition")?,
            n.child_by_field_name("consequence")?,
            n.child_by_field_name("alternative")?,
        ))
    }

    fn bound_buffer(&self, name: &str) -> Option<Option<String>> {
        match self.bindings.get(name)? {
            Binding::Buffer { buffer, .. } => Some(Some(buffer.clone())),
            Binding::Scalar(_) => Some(None),
        }
    }
    fn buffer_memo(&self) -> &RefCell<HashMap<String, Option<String>>> {
        &self.buffer_memo
    }
    /// Casts (`(float4*)p`, `reinterpret_cast<float4*>(p)`) and `&p[i]`.
    fn buffer_own(&self, n: Node<'t>, depth: usize) -> Option<Option<String>> {
        let src = self.src;
        let arg = match n.kind() {
            "cast_expression" => n.child_by_field_name("value"),
            "pointer_expression" => n
                .child_by_field_name("argument")
                .filter(|a| a.kind() == "subscript_expression")
                .filter(|_| {
                    n.child_by_field_name("operator")
                        .is_some_and(|o| node_text(src, o) == "&")
                })
                .and_then(|a| a.child_by_field_name("argument")),
            "call_expression" => n
                .child_by_field_name("function")
                .filter(|f| node_text(src, *f).contains("_cast"))
                .and_then(|_| n.child_by_field_name("arguments"))
                .and_then(|a| named_children(a).first().copied()),
            _ => return None,
        };
        Some(arg.and_then(|a| self.buffer_of(a, depth + 1)))
    }

    /// `threadIdx.y`, `blockIdx.x`, ... (`blockDim` and `gridDim` are the same everywhere).
    fn axes_own(&self, n: Node<'t>) -> Option<u8> {
        if n.kind() != "field_expression" {
            return None;
        }
        let a = node_text(self.src, n.child_by_field_name("argument")?);
        let shift = match node_text(self.src, n.child_by_field_name("field")?) {
            "x" => 0,
            "y" => 1,
            "z" => 2,
            _ => return None,
        };
        match a {
            "threadIdx" => Some(THREAD_X << shift),
            "blockIdx" => Some(BLOCK_X << shift),
            "blockDim" | "gridDim" => Some(0),
            _ => None,
        }
    }
    fn axes_memo(&self) -> &RefCell<HashMap<String, u8>> {
        &self.axes_memo
    }

    /// Thread indices, member access, casts, calls, memory reads and addresses.
    fn deriv_own(&mut self, n: Node<'t>, depth: usize) -> Option<Deriv> {
        let src = self.src;
        Some(match n.kind() {
            "field_expression" => {
                let (Some(a), Some(fld)) = (
                    n.child_by_field_name("argument"),
                    n.child_by_field_name("field"),
                ) else {
                    return Some(Unknown);
                };
                match (node_text(src, a), node_text(src, fld)) {
                    ("threadIdx", f) if f == self.lane.field() => Const(1),
                    ("threadIdx" | "blockIdx" | "blockDim" | "gridDim", _) => ZERO,
                    _ => self.deriv(a, depth + 1),
                }
            }
            "cast_expression" => match n.child_by_field_name("value") {
                Some(v) => self.deriv(v, depth + 1),
                None => Unknown,
            },
            "call_expression" => {
                let args: Vec<Node> = n
                    .child_by_field_name("arguments")
                    .map(named_children)
                    .unwrap_or_default();
                let ds: Vec<Deriv> = args.iter().map(|a| self.deriv(*a, depth + 1)).collect();
                Deriv::opaque(&ds)
            }
            // A value read from memory at a lane-independent address is itself
            // lane-independent; anything else read from memory is data.
            "subscript_expression" => {
                let idx = n
                    .child_by_field_name("indices")
                    .or_else(|| n.child_by_field_name("index"))
                    .map(named_children)
                    .unwrap_or_default();
                let mut ds: Vec<Deriv> = idx.iter().map(|i| self.deriv(*i, depth + 1)).collect();
                if let Some(a) = n.child_by_field_name("argument") {
                    ds.push(self.deriv(a, depth + 1));
                }
                Deriv::opaque(&ds)
            }
            "pointer_expression" => match n.child_by_field_name("argument") {
                Some(a) => {
                    let d = self.deriv(a, depth + 1);
                    match n.child_by_field_name("operator").map(|o| node_text(src, o)) {
                        // `&x`: an address moves with the lvalue.
                        Some("&") => d,
                        _ => Deriv::opaque(&[d]),
                    }
                }
                None => Unknown,
            },
            _ => return None,
        })
    }
}

impl<'t> FnCx<'t> {
    fn new(
        src: &'t str,
        body: Node<'t>,
        bindings: HashMap<String, Binding>,
        via: Option<String>,
        lane: Lane,
    ) -> Self {
        let mut cx = FnCx {
            lane,
            src,
            bindings,
            defs: HashMap::new(),
            memo: HashMap::new(),
            konst_memo: RefCell::default(),
            buffer_memo: RefCell::default(),
            axes_memo: RefCell::default(),
            via,
            block_x: Vec::new(),
            scoped: scopes(src, body),
        };
        cx.collect_defs(body, 0);
        cx
    }

    /// `name` as the definitions key it at byte `at`: a name declared more than once is
    /// keyed by the innermost declaration in scope there (`n@start`); any other name is
    /// its own key (borrowed: this runs for every identifier the walk meets).
    fn key_at<'n>(&self, name: &'n str, at: usize) -> Cow<'n, str> {
        let innermost = self.scoped.get(name).and_then(|decls| {
            decls
                .iter()
                .filter(|s| s.decl <= at && at < s.end)
                .max_by_key(|s| s.decl)
        });
        match innermost {
            Some(s) => Cow::Owned(format!("{name}@{}", s.decl)),
            None => Cow::Borrowed(name),
        }
    }

    /// The local names `n` itself defines, with their definitions.
    fn defines(&self, n: Node<'t>) -> Vec<(String, Def<'t>)> {
        let mut out = Vec::new();
        match n.kind() {
            "init_declarator" => {
                if let (Some(d), Some(v)) = (
                    n.child_by_field_name("declarator"),
                    n.child_by_field_name("value"),
                ) {
                    if let Some(name) = declared_name(self.src, d) {
                        // `T x(v)` and `T x{v}` hold the value in an argument list.
                        let v = match v.kind() {
                            "argument_list" | "initializer_list" => {
                                let ch = named_children(v);
                                if ch.len() == 1 {
                                    ch[0]
                                } else {
                                    v
                                }
                            }
                            _ => v,
                        };
                        out.push((
                            name,
                            Def {
                                op: "=",
                                value: Some(v),
                            },
                        ));
                    }
                }
            }
            "assignment_expression" => {
                if let (Some(l), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) {
                    if l.kind() == "identifier" {
                        let op = n
                            .child_by_field_name("operator")
                            .map_or("=", |o| node_text(self.src, o));
                        out.push((
                            node_text(self.src, l).to_string(),
                            Def { op, value: Some(r) },
                        ));
                    }
                }
            }
            "update_expression" => {
                if let Some(a) = n.child_by_field_name("argument") {
                    if a.kind() == "identifier" {
                        out.push((
                            node_text(self.src, a).to_string(),
                            Def {
                                op: "++",
                                value: None,
                            },
                        ));
                    }
                }
            }
            _ => {}
        }
        out
    }

    /// A literal integer value (numbers, arithmetic on them, single-definition locals).
    fn konst(&self, n: Node, depth: usize) -> Option<i64> {
        if depth > MAX_DEPTH {
            return None;
        }
        match n.kind() {
            "number_literal" => int_literal(node_text(self.src, n)),
            "parenthesized_expression" => self.konst(*named_children(n).first()?, depth + 1),
            "cast_expression" => self.konst(n.child_by_field_name("value")?, depth + 1),
            "unary_expression" => {
                let a = self.konst(n.child_by_field_name("argument")?, depth + 1)?;
                match node_text(self.src, n.child_by_field_name("operator")?) {
                    "-" => a.checked_neg(),
                    "+" => Some(a),
                    _ => None,
                }
            }
            "binary_expression" => {
                let a = self.konst(n.child_by_field_name("left")?, depth + 1)?;
                let b = self.konst(n.child_by_field_name("right")?, depth + 1)?;
                match node_text(self.src, n.child_by_field_name("operator")?) {
                    "+" => a.checked_add(b),
                    "-" => a.checked_sub(b),
                    "*" => a.checked_mul(b),
                    "/" if b != 0 => a.checked_div(b),
                    "<<" => a.checked_shl(u32::try_from(b).ok()?),
                    ">>" => a.checked_shr(u32::try_from(b).ok()?),
                    _ => None,
                }
            }
            "identifier" => {
                let name = &*LaneWalk::name_at(self, n);
                if self.bindings.contains_key(name) {
                    return None;
                }
                if let Some(k) = self.konst_memo.borrow().get(name) {
                    return *k;
                }
                self.konst_memo.borrow_mut().insert(name.to_string(), None);
                let k = match self.defs.get(name).map(Vec::as_slice) {
                    Some(
                        [Def {
                            op: "=",
                            value: Some(v),
                        }],
                    ) => self.konst(*v, depth + 1),
                    _ => None,
                };
                self.konst_memo.borrow_mut().insert(name.to_string(), k);
                k
            }
            _ => None,
        }
    }
}

struct Scan<'a, 't> {
    src: &'t str,
    funcs: &'a HashMap<String, Node<'t>>,
    facts: &'a mut Facts,
    /// Indices into `facts.loops` of the loops around the current node.
    loops: Vec<usize>,
    /// Buffers that may be written: stored to, atomics, or passed to unknown code.
    written: HashSet<String>,
    call_stack: Vec<String>,
    /// Each pointer parameter's element type (`float`, `__half`).
    pointees: HashMap<String, String>,
}

impl<'t> Scan<'_, 't> {
    fn visit(&mut self, cx: &mut FnCx<'t>, n: Node<'t>, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let src = self.src;
        let mut pushed_loop = false;
        match n.kind() {
            "for_statement" | "while_statement" | "do_statement" => {
                let fact = self.loop_fact(cx, n);
                self.facts.loops.push(fact);
                self.loops.push(self.facts.loops.len() - 1);
                pushed_loop = true;
            }
            "subscript_expression" if !address_only(src, n) => {
                if let Some(a) = n.child_by_field_name("argument") {
                    if let Some(buffer) = cx.buffer_of(a, 0) {
                        let idx = n
                            .child_by_field_name("indices")
                            .or_else(|| n.child_by_field_name("index"))
                            .map(named_children)
                            .unwrap_or_default();
                        let mut d = cx.deriv(a, 0);
                        let mut axes = cx.axes(a, 0);
                        for i in &idx {
                            d = d.add(cx.deriv(*i, 0));
                            axes |= cx.axes(*i, 0);
                        }
                        let index = idx
                            .first()
                            .map_or(String::new(), |i| node_text(src, *i).to_string());
                        let kind = self.kind_in_context(n);
                        self.record(cx, buffer, index, kind, (d, axes), n);
                    }
                }
            }
            "pointer_expression" => {
                let deref =
                    n.child_by_field_name("operator").map(|o| node_text(src, o)) == Some("*");
                if let (true, Some(a)) = (deref, n.child_by_field_name("argument")) {
                    if let Some(buffer) = cx.buffer_of(a, 0) {
                        let d = (cx.deriv(a, 0), cx.axes(a, 0));
                        let kind = self.kind_in_context(n);
                        let text = node_text(src, a);
                        let text = text
                            .strip_prefix('(')
                            .and_then(|t| t.strip_suffix(')'))
                            .unwrap_or(text);
                        self.record(cx, buffer, text.to_string(), kind, d, n);
                    }
                }
            }
            "field_expression" => {
                if let (Some(a), Some(fld)) = (
                    n.child_by_field_name("argument"),
                    n.child_by_field_name("field"),
                ) {
                    match node_text(src, a) {
                        "blockDim" => self.facts.uses_block_dim = true,
                        "threadIdx" => match node_text(src, fld) {
                            "x" => self.facts.thread_axes[0] = true,
                            "y" => self.facts.thread_axes[1] = true,
                            "z" => self.facts.thread_axes[2] = true,
                            _ => {}
                        },
                        _ => {}
                    }
                }
            }
            "declaration" => self.shared_decl(cx, n),
            "call_expression" => self.call(cx, n, depth),
            _ => {}
        }
        let mut c = n.walk();
        let children: Vec<Node> = n.children(&mut c).collect();
        for ch in children {
            self.visit(cx, ch, depth + 1);
        }
        if pushed_loop {
            self.loops.pop();
        }
    }

    fn record(
        &mut self,
        cx: &FnCx<'t>,
        buffer: String,
        index: String,
        kind: AccessKind,
        (d, axes): (Deriv, u8),
        n: Node,
    ) {
        if kind != AccessKind::Load {
            self.written.insert(buffer.clone());
        }
        let site = cast_site(self.src, n);
        let stride = match (site.1, d.stride()) {
            // `reinterpret_cast<const float4*>(&x[4 * i])[0]`: one vector a lane.
            (Some(ty), Stride::Strided(k)) if self.vector_of(&buffer, &ty) == Some(k) => {
                Stride::Unit
            }
            (_, s) => s,
        };
        let access = Access {
            buffer,
            index: collapse_ws(&index),
            kind,
            stride,
            stride_y: Stride::Unknown,
            in_loop: false,
            line: line_of(n),
            via: cx.via.clone(),
            axes,
            span: Some((site.0.start_byte(), site.0.end_byte())),
            hinted: self.hinted(site.0),
        };
        record_access(self.facts, &self.loops, access);
    }

    /// How many of `buffer`'s elements one `ty` holds (`float4` over `float`: 4).
    fn vector_of(&self, buffer: &str, ty: &str) -> Option<i64> {
        let elem = elem_bytes(self.pointees.get(buffer)?)?;
        let vec = elem_bytes(ty)?;
        (vec > elem && vec % elem == 0).then(|| (vec / elem) as i64)
    }

    /// `&p[i]` handed to a cache-hinted load (`__ldcs`, `__ldg`, `__ldlu`, ...).
    /// `__ldg` only routes the load through the read-only path: it keeps its lines as any
    /// load does, so it is not counted as a hint here (`stream_loads` may replace it).
    fn hinted(&self, n: Node) -> bool {
        load_call(self.src, n).is_some_and(|c| call_name(self.src, c) != "__ldg")
    }

    /// Load, store or both, from where an lvalue sits.
    fn kind_in_context(&self, n: Node) -> AccessKind {
        let Some(p) = n.parent() else {
            return AccessKind::Load;
        };
        match p.kind() {
            "assignment_expression" if p.child_by_field_name("left") == Some(n) => {
                match p
                    .child_by_field_name("operator")
                    .map(|o| node_text(self.src, o))
                {
                    Some("=") | None => AccessKind::Store,
                    _ => AccessKind::LoadStore,
                }
            }
            "update_expression" => AccessKind::LoadStore,
            "pointer_expression"
                if p.child_by_field_name("operator")
                    .map(|o| node_text(self.src, o))
                    == Some("&") =>
            {
                // `&p[i]` handed to a call: atomics, `__ldg`, `__stcs`, or unknown.
                let call = p
                    .parent()
                    .filter(|a| a.kind() == "argument_list")
                    .and_then(|a| a.parent());
                if let (site, Some(_)) = cast_site(self.src, n) {
                    return self.kind_in_context(site);
                }
                match call.map(|c| call_name(self.src, c)) {
                    Some(name) if name.starts_with("atomic") => AccessKind::Atomic,
                    Some(name) if name.starts_with("__ld") => AccessKind::Load,
                    Some(name) if name.starts_with("__st") => AccessKind::Store,
                    _ => AccessKind::LoadStore,
                }
            }
            _ => AccessKind::Load,
        }
    }

    fn loop_fact(&mut self, cx: &mut FnCx<'t>, n: Node<'t>) -> LoopFact {
        let src = self.src;
        let mut fact = LoopFact {
            line: line_of(n),
            counted: false,
            var: None,
            trip_count: None,
            unroll_pragma: false,
            global_loads: 0,
            global_stores: 0,
            via: cx.via.clone(),
            carries: super::carries::carried(src, n),
            runtime_step: false,
            lane_step: false,
        };
        // `#pragma unroll` right before the loop (comments in between allowed).
        let mut prev = n.prev_named_sibling();
        while let Some(p) = prev.filter(|p| p.kind() == "comment") {
            prev = p.prev_named_sibling();
        }
        if let Some(p) = prev.filter(|p| p.kind() == "preproc_call") {
            let dir = p
                .child_by_field_name("directive")
                .map(|d| node_text(src, d));
            let arg = p
                .child_by_field_name("argument")
                .map_or("", |a| node_text(src, a));
            fact.unroll_pragma = dir == Some("#pragma") && arg.trim_start().starts_with("unroll");
        }
        if n.kind() == "while_statement" {
            fact.runtime_step = self.while_steps_at_run_time(cx, n);
        }
        if n.kind() != "for_statement" {
            return fact;
        }
        // init: `int v = e` or `v = e`
        let (var, init) = match n.child_by_field_name("initializer") {
            Some(i) if i.kind() == "declaration" => {
                let d = named_children(i)
                    .into_iter()
                    .find(|c| c.kind() == "init_declarator");
                let name = d
                    .and_then(|d| d.child_by_field_name("declarator"))
                    .and_then(|d| declared_name(src, d));
                (name, d.and_then(|d| d.child_by_field_name("value")))
            }
            Some(i) if i.kind() == "assignment_expression" => (
                i.child_by_field_name("left")
                    .filter(|l| l.kind() == "identifier")
                    .map(|l| node_text(src, l).to_string()),
                i.child_by_field_name("right"),
            ),
            _ => (None, None),
        };
        let Some(var) = var else {
            return fact;
        };
        // condition: `v <op> bound` (or `bound <op> v`, flipped)
        let Some(cond) = n
            .child_by_field_name("condition")
            .filter(|c| c.kind() == "binary_expression")
        else {
            return fact;
        };
        let (Some(l), Some(r), Some(op)) = (
            cond.child_by_field_name("left"),
            cond.child_by_field_name("right"),
            cond.child_by_field_name("operator")
                .map(|o| node_text(src, o)),
        ) else {
            return fact;
        };
        let (cmp, bound) = if node_text(src, l) == var {
            (op, r)
        } else if node_text(src, r) == var {
            let flipped = match op {
                "<" => ">",
                "<=" => ">=",
                ">" => "<",
                ">=" => "<=",
                o => o,
            };
            (flipped, l)
        } else {
            return fact;
        };
        if !matches!(cmp, "<" | "<=" | ">" | ">=" | "!=") {
            return fact;
        }
        // update: `++v`, `v--`, `v += c`, `v >>= 1`, `v = v + c`
        let Some(upd) = n.child_by_field_name("update") else {
            return fact;
        };
        let (uop, step) = match upd.kind() {
            "update_expression" => {
                let arg = upd
                    .child_by_field_name("argument")
                    .map(|a| node_text(src, a));
                if arg != Some(var.as_str()) {
                    return fact;
                }
                let dec = node_text(src, upd).contains("--");
                (if dec { "-=" } else { "+=" }, Some(1))
            }
            "assignment_expression" => {
                let left = upd.child_by_field_name("left").map(|a| node_text(src, a));
                let op = upd
                    .child_by_field_name("operator")
                    .map_or("=", |o| node_text(src, o));
                if left != Some(var.as_str()) || op == "=" {
                    return fact;
                }
                (
                    op,
                    upd.child_by_field_name("right")
                        .and_then(|r| cx.konst(r, 0)),
                )
            }
            _ => return fact,
        };
        fact.counted = true;
        fact.runtime_step = step.is_none();
        fact.lane_step = uop == "+="
            && init.is_some_and(|i| cx.axes(i, 0) & THREAD_X != 0)
            && upd
                .child_by_field_name("right")
                .is_some_and(|r| counts_lanes(cx, r, 0));
        fact.var = Some(var);
        if let (Some(i), Some(b), Some(s)) =
            (init.and_then(|i| cx.konst(i, 0)), cx.konst(bound, 0), step)
        {
            fact.trip_count = simulate_trip_count(i, cmp, b, uop, s);
        }
        fact
    }

    /// `while (...) { ...; v += e; }` with `e` not a constant.
    fn while_steps_at_run_time(&self, cx: &mut FnCx<'t>, n: Node<'t>) -> bool {
        let last = n.child_by_field_name("body").and_then(|b| {
            named_children(b)
                .into_iter()
                .rfind(|c| c.kind() != "comment")
        });
        let Some(e) = last
            .filter(|l| l.kind() == "expression_statement")
            .and_then(|l| named_children(l).into_iter().next())
            .filter(|e| e.kind() == "assignment_expression")
        else {
            return false;
        };
        let op = e
            .child_by_field_name("operator")
            .map_or("", |o| node_text(self.src, o));
        op == "+="
            && e.child_by_field_name("right")
                .is_some_and(|r| cx.konst(r, 0).is_none())
    }

    fn shared_decl(&mut self, cx: &FnCx<'t>, n: Node<'t>) {
        let src = self.src;
        let children = named_children(n);
        let has = |kind: &str, word: &str| {
            children
                .iter()
                .any(|c| c.kind() == kind && node_text(src, *c) == word)
        };
        if !has("type_qualifier", "__shared__") && !has("attribute_specifier", "__shared__") {
            return;
        }
        if has("storage_class_specifier", "extern") {
            self.facts.dynamic_smem = true;
            return;
        }
        let ty = n
            .child_by_field_name("type")
            .map_or("", |t| node_text(src, t));
        let elem = elem_bytes(ty);
        let mut c = n.walk();
        for d in n.children_by_field_name("declarator", &mut c) {
            let mut d = if d.kind() == "init_declarator" {
                d.child_by_field_name("declarator").unwrap_or(d)
            } else {
                d
            };
            let mut count: Option<u64> = Some(1);
            while d.kind() == "array_declarator" {
                let size = d.child_by_field_name("size").and_then(|s| cx.konst(s, 0));
                count = match (count, size) {
                    (Some(c), Some(s)) if s > 0 => c.checked_mul(s.unsigned_abs()),
                    _ => None,
                };
                match d.child_by_field_name("declarator") {
                    Some(inner) => d = inner,
                    None => break,
                }
            }
            match (count, elem) {
                (Some(c), Some(e)) => {
                    self.facts.static_smem_bytes = self
                        .facts
                        .static_smem_bytes
                        .saturating_add(c.saturating_mul(e));
                }
                _ => self.facts.static_smem_unsized = true,
            }
        }
    }

    fn call(&mut self, cx: &mut FnCx<'t>, n: Node<'t>, depth: usize) {
        let src = self.src;
        let name = call_name(src, n);
        let args: Vec<Node> = n
            .child_by_field_name("arguments")
            .map(named_children)
            .unwrap_or_default();
        if name.starts_with("atomic") {
            self.facts.atomics += 1;
            // `atomicAdd(out, v)` / `atomicAdd(out + i, v)`; `&p[i]` is recorded by
            // the subscript itself.
            if let Some(a) = args.first().filter(|a| a.kind() != "pointer_expression") {
                if let Some(buffer) = cx.buffer_of(*a, 0) {
                    let d = (cx.deriv(*a, 0), cx.axes(*a, 0));
                    let index = match a.kind() {
                        "identifier" => "0".to_string(),
                        _ => node_text(src, *a).to_string(),
                    };
                    self.record(cx, buffer, index, AccessKind::Atomic, d, n);
                }
            }
            return;
        }
        match name.as_str() {
            "__syncthreads"
            | "__syncwarp"
            | "__syncthreads_or"
            | "__syncthreads_and"
            | "__syncthreads_count" => {
                self.facts.barriers += 1;
            }
            n if n.starts_with("__shfl") => self.facts.shuffles += 1,
            "mma_sync" | "wgmma" | "mma" => self.facts.tensor_core_ops += 1,
            n if FAST_MATH.contains(&n) => {
                *self.facts.fast_math_calls.entry(n.to_string()).or_default() += 1;
            }
            _ => {}
        }
        if let Some(func) = self.funcs.get(&name).copied() {
            if self.call_stack.len() <= MAX_CALL_DEPTH && !self.call_stack.contains(&name) {
                self.inline_call(cx, func, &name, &args, depth);
                return;
            }
        }
        // A buffer passed to code we do not follow may be written there.
        if !name.starts_with("__ld") {
            for a in &args {
                if a.kind() == "identifier" || a.kind() == "binary_expression" {
                    if let Some(b) = cx.buffer_of(*a, 0) {
                        self.written.insert(b);
                    }
                }
            }
        }
    }

    fn inline_call(
        &mut self,
        cx: &mut FnCx<'t>,
        func: Node<'t>,
        name: &str,
        args: &[Node<'t>],
        depth: usize,
    ) {
        let Some(body) = func.child_by_field_name("body") else {
            return;
        };
        let mut bindings = HashMap::new();
        for (p, a) in param_names(self.src, func).into_iter().zip(args) {
            let Some(p) = p else { continue };
            let b = match cx.buffer_of(*a, 0) {
                Some(buffer) => Binding::Buffer {
                    buffer,
                    d: cx.deriv(*a, 0),
                },
                None => Binding::Scalar(cx.deriv(*a, 0)),
            };
            bindings.insert(p, b);
        }
        let mut inner = FnCx::new(self.src, body, bindings, Some(name.to_string()), cx.lane);
        self.call_stack.push(name.to_string());
        self.visit(&mut inner, body, depth + 1);
        self.call_stack.pop();
    }
}

/// Bytes of one element of a shared array's type, when known.
pub(crate) fn elem_bytes(ty: &str) -> Option<u64> {
    let t = collapse_ws(ty);
    Some(match t.as_str() {
        "char" | "unsigned char" | "signed char" | "bool" | "int8_t" | "uint8_t" => 1,
        "short" | "unsigned short" | "__half" | "half" | "__nv_bfloat16" | "int16_t"
        | "uint16_t" => 2,
        "float" | "int" | "unsigned" | "unsigned int" | "__half2" | "half2" | "__nv_bfloat162"
        | "int32_t" | "uint32_t" => 4,
        "double" | "long long" | "unsigned long long" | "int64_t" | "uint64_t" | "float2"
        | "int2" | "size_t" => 8,
        "float4" | "int4" | "double2" | "uint4" => 16,
        _ => return None,
    })
}

/// Does `n` count lanes: `blockDim.x`, `blockDim.x * gridDim.x` (any order, casts
/// aside), `warpSize`, a literal multiple of 32, or a local defined once as one of them?
fn counts_lanes<'t>(cx: &FnCx<'t>, n: Node<'t>, depth: usize) -> bool {
    if depth > 4 {
        return false;
    }
    let src = cx.src;
    match n.kind() {
        "parenthesized_expression" => named_children(n)
            .first()
            .is_some_and(|c| counts_lanes(cx, *c, depth + 1)),
        "cast_expression" => n
            .child_by_field_name("value")
            .is_some_and(|v| counts_lanes(cx, v, depth + 1)),
        "number_literal" => cx.konst(n, 0).is_some_and(|k| k > 0 && k % 32 == 0),
        "field_expression" => collapse_ws(node_text(src, n)) == "blockDim.x",
        "identifier" if node_text(src, n) == "warpSize" => true,
        "identifier" if cx.block_x.iter().any(|b| b == node_text(src, n)) => true,
        "identifier" => match cx.defs.get(&*LaneWalk::name_at(cx, n)).map(Vec::as_slice) {
            Some([d]) if d.op == "=" => d.value.is_some_and(|v| counts_lanes(cx, v, depth + 1)),
            _ => false,
        },
        "binary_expression" => {
            let side = |f: &str| {
                n.child_by_field_name(f).map(|c| {
                    let t = strip_casts(src, c);
                    match cx.block_x.contains(&t) {
                        true => "blockDim.x".to_string(),
                        false => t,
                    }
                })
            };
            let op = n.child_by_field_name("operator").map(|o| node_text(src, o));
            let mut sides = [side("left"), side("right")];
            sides.sort();
            // All the grid's threads, the blocks along y or z (a team per row), or K blocks.
            let block = Some("blockDim.x".to_string());
            let other = match (&sides[0], &sides[1]) {
                (a, b) if *b == block => a.clone(),
                (a, b) if *a == block => b.clone(),
                _ => None,
            };
            let konst = |f: &str| {
                n.child_by_field_name(f)
                    .and_then(|c| cx.konst(c, 0))
                    .is_some_and(|k| k > 1)
            };
            op == Some("*")
                && (other.as_deref().is_some_and(|o| o.starts_with("gridDim."))
                    || (other.is_some() && (konst("left") || konst("right"))))
        }
        _ => false,
    }
}

/// The text of `n` without casts, parentheses or spaces.
fn strip_casts(src: &str, n: Node<'_>) -> String {
    match n.kind() {
        "parenthesized_expression" | "cast_expression" => {
            let inner = n
                .child_by_field_name("value")
                .or_else(|| named_children(n).into_iter().last());
            inner.map_or_else(|| collapse_ws(node_text(src, n)), |i| strip_casts(src, i))
        }
        _ => collapse_ws(node_text(src, n)).replace(' ', ""),
    }
}
