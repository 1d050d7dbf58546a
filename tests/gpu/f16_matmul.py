"""16-bit matmuls in Triton against cuBLAS (issue #30): times the drafts and the
`triton_persistent_dot` candidates that `cargo test --bench tensor_matmul -- DIR` wrote
(`NAME.py`, `NAME_I.py`) against `torch.matmul` in the operands' type, as the worker
times: 256 MB written between launches to flush the L2, CUDA events, median of 40 after 3
warm-ups. Each file's launch (block sizes, num_warps, num_stages, grid) comes from its
`@bench` lines; inputs uniform in [-0.5, 0.5]; errors against the f32 product.

    python3 tests/gpu/f16_matmul.py DIR [M,N,K ...]   # on a GPU machine with torch and triton

Prints one line per file and shape and writes $OUT/f16_matmul.json where OUT is set.
Record results in docs/benchmarks.md."""
import glob, importlib.util, json, math, os, re, sys
import numpy as np, torch, triton
from timing import bench

D = sys.argv[1].rstrip("/")
SHAPES = [tuple(int(x) for x in s.split(",")) for s in sys.argv[2:]] or [(4096, 4096, 4096), (4000, 4000, 4000)]
dev = "cuda"
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def spec(path, kernel):
    """The `@bench` statements of `kernel`'s block, as NAME -> expression text."""
    lines = open(path).read().splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("def " + kernel + "("))
    out = {}
    i = at - 1
    while i >= 0 and (lines[i].startswith("#") or lines[i].startswith("@")):
        m = re.match(r"#\s*@bench\s+(.*)", lines[i])
        if m:
            for stmt in m.group(1).split(";"):
                if "=" in stmt and ":" not in stmt.split("=")[0] and not stmt.strip().startswith("tune"):
                    name, expr = stmt.split("=", 1)
                    out.setdefault(name.strip(), expr.strip())
        i -= 1
    return out


def load(path, kernel):
    name = os.path.basename(path)[:-3]
    sp = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(sp)
    sp.loader.exec_module(mod)
    return getattr(mod, kernel)


# Per draft: the kernel, operand dtype, and its arguments for (M, N, K) and tensors.
KERNELS = {
    "matmul_f32out": ("matmul_kernel", torch.float16, torch.float32, False),
    "matmul_f16out": ("matmul_kernel", torch.float16, torch.float16, False),
    "mm_tutorial": ("mm_tutorial", torch.float16, torch.float16, False),
    "linear_bt": ("linear_bt", torch.bfloat16, torch.bfloat16, True),
}


def args_of(name, a, b, c, M, N, K):
    if name == "mm_tutorial":
        return [a, b, c, M, N, K, K, 1, N, 1, N, 1]
    return [a, b, c, M, N, K]


rows = []
print(torch.cuda.get_device_name(), "triton", triton.__version__, "torch", torch.__version__, flush=True)
for name, (kernel, dt, out_dt, bt) in KERNELS.items():
    files = [f"{D}/{name}.py"] + sorted(glob.glob(f"{D}/{name}_*.py"))
    for (M, N, K) in SHAPES:
        a = (torch.rand(M, K, device=dev) - 0.5).to(dt)
        b = (torch.rand(N, K, device=dev) - 0.5).to(dt) if bt else (torch.rand(K, N, device=dev) - 0.5).to(dt)
        ref = a.float() @ (b.float().T if bt else b.float())
        c_ref = torch.empty(M, N, device=dev, dtype=dt)
        bb = b.T if bt else b
        t_cub = bench(lambda: torch.matmul(a, bb, out=c_ref))
        for path in files:
            label_path = path[:-3] + ".label"
            label = open(label_path).read() if os.path.exists(label_path) else "draft"
            try:
                fn = load(path, kernel)
                sp = spec(path, kernel)
                sig = open(path).read().split("def " + kernel + "(", 1)[1].split("):", 1)[0]
                names = re.findall(r"(\w+)\s*:\s*tl\.constexpr", sig)
                const = {n: int(sp[n]) for n in names if n in sp}
                env = dict(const, cdiv=lambda x, y: -(-x // y), min=min, max=max, sms=SMS)
                env.update({"M": M, "N": N, "K": K, "m": M, "n": N, "k": K})
                g = eval(sp["grid"], {}, env)
                grid = g if isinstance(g, tuple) else (g,)
                kw = dict(const)
                for knob in ("num_warps", "num_stages"):
                    if knob in sp:
                        kw[knob] = int(sp[knob])
                c = torch.full((M, N), float("nan"), device=dev, dtype=out_dt)
                run = lambda: fn[grid](*args_of(name, a, b, c, M, N, K), **kw)
                run(); torch.cuda.synchronize()
                err = float((c.float() - ref).abs().max())
                ok = err <= 2e-2 + 2e-2 * float(ref.abs().max()) and not math.isnan(err)
                t = bench(run)
            except Exception as ex:
                print(f"{name} {M}x{N}x{K} {label}: FAILED {str(ex)[:300]}", flush=True)
                continue
            fl = 2 * M * N * K
            r = dict(file=os.path.basename(path), label=label, shape=f"{M}x{N}x{K}", ms=t, cublas_ms=t_cub,
                     pct=100 * t_cub / t, tflops=fl / t / 1e9, maxerr=err, ok=ok)
            rows.append(r)
            print(f"{name:14s} {r['shape']:15s} {label[:62]:62s} {t:.4f} ms {r['tflops']:4.0f} TF/s  cuBLAS {t_cub:.4f} -> {r['pct']:5.1f}%  err {err:.1e} {'ok' if ok else 'WRONG'}", flush=True)
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "f16_matmul.json"), "w"), indent=1)
