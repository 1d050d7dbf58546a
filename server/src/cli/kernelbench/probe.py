"""kernel-lsp import-kernelbench's probe: runs a KernelBench-format problem once on the CPU
and prints what the spec needs as one JSON line on stdout.

Usage: python3 probe.py PROBLEM.py. The problem defines `Model` (an nn.Module with
`forward`), `get_inputs()` and `get_init_inputs()`. Printed: `inputs` (forward's
parameter names with each value: a tensor's shape and dtype, or a number), `params` (the
module's parameters and buffers after init: name, shape, dtype), `outputs` (shape and
dtype of each tensor forward returns), or `error`.
"""

import importlib.util
import inspect
import json
import sys


def fail(msg):
    print(json.dumps({"error": msg}))
    sys.exit(0)


def main():
    path = sys.argv[1]
    try:
        import torch
    except Exception as e:
        fail("torch is not installed in %s (%s); set KERNEL_LSP_PYTHON to a Python with torch" % (sys.executable, e))
    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        fail("importing the problem failed: %s: %s" % (type(e).__name__, e))
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, need):
            fail("the problem defines no `%s`; a KernelBench problem has `class Model(nn.Module)` with `forward`, `get_inputs()` and `get_init_inputs()`" % need)
    torch.manual_seed(0)
    try:
        init = list(mod.get_init_inputs())
        model = mod.Model(*init).eval()
        inputs = list(mod.get_inputs())
    except Exception as e:
        fail("building the model or its inputs failed: %s: %s" % (type(e).__name__, e))
    names = [p for p in inspect.signature(model.forward).parameters]
    if len(names) < len(inputs):
        names += ["in%d" % i for i in range(len(names), len(inputs))]
    ins = []
    for n, v in zip(names, inputs):
        if isinstance(v, torch.Tensor):
            ins.append({"name": n, "shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")})
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            fail("input `%s` of forward is a %s; only tensors and numbers can be kernel arguments" % (n, type(v).__name__))
        else:
            ins.append({"name": n, "value": v})
    params = [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
              for n, t in list(model.named_parameters()) + list(model.named_buffers())]
    try:
        with torch.no_grad():
            out = model(*inputs)
    except Exception as e:
        fail("running forward failed: %s: %s" % (type(e).__name__, e))
    outs = out if isinstance(out, (tuple, list)) else [out]
    res = []
    for o in outs:
        if not isinstance(o, torch.Tensor):
            fail("forward returns a %s; only tensors can be kernel outputs" % type(o).__name__)
        res.append({"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")})
    print(json.dumps({"inputs": ins, "params": params, "outputs": res, "init": [repr(v) for v in init]}))


main()
