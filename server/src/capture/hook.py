"""kernel-lsp capture: records the Triton launches of one run of the user's own command.

`kernel-lsp capture` writes this file as `sitecustomize.py` into a temporary folder and
puts that folder first on the child's PYTHONPATH; nothing is installed into the user's
environment, and a `sitecustomize` the environment already has still runs (chained at the
end). When Triton's runtime modules are imported, `JITFunction.run` (and the CPU
interpreter's `InterpretedFunction.run`), `Autotuner.run`, `Autotuner._bench` and
`Heuristics.run` are wrapped. Each distinct launch (shapes, strides, dtypes, scalars,
constexprs, grid) of a kernel, up to KERNEL_LSP_CAPTURE_MAX_CASES, is recorded as one JSON
line in KERNEL_LSP_CAPTURE_OUT: every argument, the grid as launched, num_warps and
num_stages, and for every tensor whether the launch wrote it and whether the kernel read
what it wrote over (a replay with the written tensors poisoned: `out` or `inout`). A
second replay on the same inputs tells kernels that depend on state outside their
arguments. After the replays every tensor holds what the one real launch left there, so
the user's program goes on as if nothing had watched it. Launches the autotuner makes to
time its configs are not recorded; the launch with the config it chose is.
"""

import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys
import threading

_OUT = os.environ.get("KERNEL_LSP_CAPTURE_OUT")
_ONLY = os.environ.get("KERNEL_LSP_CAPTURE_KERNEL") or None
_MAX_CASES = int(os.environ.get("KERNEL_LSP_CAPTURE_MAX_CASES") or "4")
_MAX_BYTES = int(os.environ.get("KERNEL_LSP_CAPTURE_MAX_BYTES") or str(1 << 30))
_HERE = os.path.dirname(os.path.abspath(__file__))

_local = threading.local()
_lock = threading.Lock()
_seen = {}  # (file, kernel) -> set of launch keys
_counts = {}  # (file, kernel) -> launches seen (all of them)


class _Refuse(Exception):
    pass


def _emit(obj):
    if not _OUT:
        return
    line = json.dumps(obj, default=str) + "\n"
    with _lock:
        with open(_OUT, "a", encoding="utf-8") as f:
            f.write(line)


def _flag(name):
    return getattr(_local, name, 0)


def _is_constexpr(param):
    ann = param.annotation
    return ann is not inspect.Parameter.empty and "constexpr" in str(ann)


def _torch():
    return sys.modules.get("torch")


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _extent(t):
    """Elements from the first to one past the last element the view can reach."""
    if t.numel() == 0:
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def _bytes_of(t):
    return _extent(t) * t.element_size()


def _range(t):
    torch = _torch()
    if t.numel() == 0 or t.dtype == torch.bool:
        return None, None
    x = t.detach()
    if x.is_floating_point():
        x = x.float()
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return None, None
        return float(x.min()), float(x.max())
    if x.is_complex():
        return None, None
    return int(x.min()), int(x.max())


def _same(a, b):
    torch = _torch()
    if a.shape != b.shape:
        return False
    x = a.detach().reshape(-1).contiguous()
    y = b.detach().reshape(-1).contiguous()
    if x.element_size() == 0:
        return True
    return torch.equal(x.view(torch.uint8), y.view(torch.uint8))


def _poison(t):
    torch = _torch()
    if t.is_floating_point():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif not t.is_complex():
        t.fill_(torch.iinfo(t.dtype).min + 7)


def _sync(tensors):
    torch = _torch()
    if any(t.is_cuda for t in tensors) and torch.cuda.is_available():
        torch.cuda.synchronize()


def _describe(name, value, param, marks):
    torch = _torch()
    d = {"name": name, "constexpr": bool(param is not None and _is_constexpr(param))}
    if param is not None and param.default is not inspect.Parameter.empty:
        d["has_default"] = True
        d["default"] = _scalar_json(param.default)
    if name in marks:
        d["set_by"] = marks[name]
    if torch is not None and isinstance(value, torch.Tensor):
        lo, hi = _range(value)
        d.update(kind="tensor", shape=list(value.shape), strides=list(value.stride()),
                 dtype=_dtype_name(value), offset=int(value.storage_offset()),
                 device=str(value.device), lo=lo, hi=hi)
    elif value is None:
        d["kind"] = "none"
    elif isinstance(value, bool):
        d.update(kind="bool", value=value)
    elif isinstance(value, int):
        d.update(kind="int", value=value)
    elif isinstance(value, float):
        d.update(kind="float", value=value)
    elif isinstance(value, str):
        d.update(kind="str", value=value)
    elif hasattr(value, "data_ptr"):
        d.update(kind="pointer", type=type(value).__name__)
    elif isinstance(value, (tuple, list)):
        d.update(kind="tuple", value=repr(value)[:200])
    else:
        d.update(kind="other", type=type(value).__name__, value=repr(value)[:200])
    return d


def _scalar_json(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)[:200]


def _key(desc, grid, options):
    parts = []
    for d in desc:
        if d["kind"] == "tensor":
            parts.append((d["name"], tuple(d["shape"]), tuple(d["strides"]), d["dtype"]))
        else:
            parts.append((d["name"], d["kind"], repr(d.get("value"))))
    return repr((parts, grid, sorted(options.items())))


def _bind(self, args, kwargs):
    fn = self.fn
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    names = [p.name for p in params]
    bound = dict(zip(names, args))
    options = {}
    for k, v in kwargs.items():
        if k in names:
            bound[k] = v
        else:
            options[k] = v
    return fn, params, bound, options


def _grid(grid, bound, options):
    g = grid({**bound, **options}) if callable(grid) else grid
    if isinstance(g, int):
        g = (g,)
    g = tuple(int(x) for x in g)
    return list(g) + [1] * (3 - len(g))


def _launch(orig, self, args, grid, kwargs):
    return orig(self, *args, grid=grid, warmup=False, **kwargs)


def _record(orig, self, args, grid, kwargs):
    """Launch once as the program asked, watch it, and return what the launch returned."""
    torch = _torch()
    fn, params, bound, options = _bind(self, args, kwargs)
    name = fn.__name__
    where = (os.path.abspath(fn.__code__.co_filename), name)
    if torch is None or (_ONLY and name != _ONLY):
        return _launch(orig, self, args, grid, kwargs)
    marks = {}
    for n in getattr(_local, "heuristic", ()) or ():
        marks[n] = "heuristics"
    for n in getattr(_local, "tuned", ()) or ():
        marks.setdefault(n, "autotune")
    desc = []
    for p in params:
        present = p.name in bound
        v = bound.get(p.name, p.default if p.default is not inspect.Parameter.empty else None)
        d = _describe(p.name, v, p, marks)
        d["passed"] = present
        desc.append(d)
    try:
        g = _grid(grid, {**{p.name: p.default for p in params if p.default is not inspect.Parameter.empty}, **bound}, options)
    except Exception as e:  # noqa: BLE001 - the program's own launch will say what is wrong
        g = None
    launch_opts = {k: options[k] for k in ("num_warps", "num_stages") if options.get(k) is not None}
    key = _key(desc, g, launch_opts)
    with _lock:
        seen = _seen.setdefault(where, set())
        fresh = key not in seen and len(seen) < _MAX_CASES
        if fresh:
            seen.add(key)
    if not fresh or g is None:
        ret = _launch(orig, self, args, grid, kwargs)
        _count(where)
        return ret
    rec = {"kernel": name, "file": where[0], "line": fn.__code__.co_firstlineno,
           "args": desc, "grid": g, **launch_opts}
    tensors = {d["name"]: bound[d["name"]] for d in desc if d["kind"] == "tensor" and d["passed"]}
    total = sum(_bytes_of(t) for t in tensors.values())
    if total > _MAX_BYTES:
        rec["refused"] = "its tensors hold %d bytes, over the capture limit of %d" % (total, _MAX_BYTES)
        ret = _launch(orig, self, args, grid, kwargs)
        _count(where)
        _emit(rec)
        return ret
    before = {n: t.detach().clone() for n, t in tensors.items()}
    ret = _launch(orig, self, args, grid, kwargs)
    _sync(tensors.values())
    _count(where)
    try:
        _local.busy = True
        _watch(rec, orig, self, args, grid, kwargs, tensors, before)
    except Exception as e:  # noqa: BLE001 - a replay that fails is reported, never raised
        rec["refused"] = "replaying the launch failed: %s" % (str(e).splitlines() or [type(e).__name__])[-1]
    finally:
        _local.busy = False
    _emit(rec)
    return ret


def _count(where):
    """Launches that ran: one that raised is the program's own failure, not a launch."""
    with _lock:
        _counts[where] = _counts.get(where, 0) + 1


def _restore(tensors, state):
    # Through `.data`, without grad: autograd neither sees these writes nor counts them
    # as in-place changes of tensors it saved for backward.
    with _torch().no_grad():
        for n, t in tensors.items():
            t.data.copy_(state[n])


def _watch(rec, orig, self, args, grid, kwargs, tensors, before):
    after = {n: t.detach().clone() for n, t in tensors.items()}
    written = [n for n in tensors if not _same(before[n], after[n])]
    try:
        _alias_check(tensors, written)
        _restore(tensors, before)
        _launch(orig, self, args, grid, kwargs)
        _sync(tensors.values())
        moved = [n for n in tensors if not _same(tensors[n], after[n])]
        if moved:
            raise _Refuse("it depends on state outside its arguments: launched again on the same "
                          "inputs it left different values in `%s`" % "`, `".join(moved))
        _restore(tensors, before)
        with _torch().no_grad():
            for n in written:
                _poison(tensors[n].data)
        _launch(orig, self, args, grid, kwargs)
        _sync(tensors.values())
        for d in rec["args"]:
            n = d["name"]
            if n not in tensors:
                continue
            if n not in written:
                d["role"] = "in"
            else:
                d["role"] = "out" if _same(tensors[n], after[n]) else "inout"
    except _Refuse as e:
        rec["refused"] = str(e)
    finally:
        _restore(tensors, after)


def _alias_check(tensors, written):
    spans = []
    for n, t in tensors.items():
        if n in written and t.numel() > 1 and _extent(t) < t.numel():
            raise _Refuse("`%s` is written through a view whose elements overlap (a stride of 0 "
                          "or overlapping strides)" % n)
        start = t.data_ptr()
        spans.append((start, start + _bytes_of(t), n))
    spans.sort()
    for i, (s, e, n) in enumerate(spans):
        for s2, e2, n2 in spans[i + 1:]:
            if s2 >= e:
                break
            if n in written or n2 in written:
                raise _Refuse("`%s` and `%s` share memory and the launch wrote into it: aliasing "
                              "outputs cannot be given as separate buffers" % (n, n2))


def _wrap_run(orig):
    def run(self, *args, grid, warmup, **kwargs):
        if warmup or _flag("busy") or _flag("benching"):
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        return _record(orig, self, args, grid, kwargs)

    run.__wrapped__ = orig
    return run


def _wrap_tuner_run(orig):
    def run(self, *args, **kwargs):
        names = set()
        for c in getattr(self, "configs", ()) or ():
            names.update(getattr(c, "kwargs", {}) or {})
        prev = getattr(_local, "tuned", None)
        _local.tuned = names
        try:
            return orig(self, *args, **kwargs)
        finally:
            _local.tuned = prev

    run.__wrapped__ = orig
    return run


def _wrap_bench(orig):
    def bench(self, *args, **kwargs):
        prev = _flag("benching")
        _local.benching = 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            _local.benching = prev

    bench.__wrapped__ = orig
    return bench


def _wrap_heuristics_run(orig):
    def run(self, *args, **kwargs):
        prev = getattr(_local, "heuristic", None)
        _local.heuristic = set(getattr(self, "values", {}) or {})
        try:
            return orig(self, *args, **kwargs)
        finally:
            _local.heuristic = prev

    run.__wrapped__ = orig
    return run


def _patch(name, module):
    if name == "triton.runtime.jit" and hasattr(module, "JITFunction"):
        module.JITFunction.run = _wrap_run(module.JITFunction.run)
    elif name == "triton.runtime.interpreter" and hasattr(module, "InterpretedFunction"):
        module.InterpretedFunction.run = _wrap_run(module.InterpretedFunction.run)
    elif name == "triton.runtime.autotuner":
        if hasattr(module, "Autotuner"):
            module.Autotuner.run = _wrap_tuner_run(module.Autotuner.run)
            if hasattr(module.Autotuner, "_bench"):
                module.Autotuner._bench = _wrap_bench(module.Autotuner._bench)
        if hasattr(module, "Heuristics"):
            module.Heuristics.run = _wrap_heuristics_run(module.Heuristics.run)


_TARGETS = ("triton.runtime.jit", "triton.runtime.interpreter", "triton.runtime.autotuner")


class _Loader(importlib.abc.Loader):
    def __init__(self, real, name):
        self._real = real
        self._name = name

    def __getattr__(self, attr):
        return getattr(self._real, attr)

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        self._real.exec_module(module)
        try:
            _patch(self._name, module)
        except Exception as e:  # noqa: BLE001 - never break the user's import
            sys.stderr.write("kernel-lsp capture: could not hook %s: %s\n" % (self._name, e))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, name)
        return spec


def _chain_sitecustomize():
    """Run the environment's own sitecustomize, which this file shadows."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or not spec.origin:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) == _HERE:
        return
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - as Python's own site.py does
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(e).__name__, e))


def _summary():
    with _lock:
        counts = [{"file": f, "kernel": k, "launches": n} for (f, k), n in _counts.items()]
    if counts:
        _emit({"summary": counts, "pid": os.getpid()})


if _OUT:
    import atexit
    import importlib.util

    sys.meta_path.insert(0, _Finder())
    atexit.register(_summary)
_chain_sitecustomize()
