"""Variants of the f32 tensor-core matmul (issue #30), timed against cuBLAS fp32 and
checked against the f64 product and the naive sequential loop: the prototype behind
`tile_matmul`'s 3xTF32 candidate (docs/benchmarks.md, "Matmuls on the tensor cores").

    python3 tests/gpu/tensor_matmul_variants.py    # on a GPU machine: nvcc, torch, cupy

Builds tensor_matmul_variants.cu with nvcc (sm_90) for the VARIANTS below, times each as
the worker times (256 MB written between launches to flush the L2, CUDA events, median
of 30 after 3 warm-ups) and prints, per shape, the counts of outputs outside
`1e-5 + 1e-4·abs(x)` (f64_d, nv_d) and `1e-5 + 1e-3·abs(x)` (f64_3, nv_3) of the f64
product and of the naive loop's output."""
import os, sys, time, math, json, subprocess, tempfile
import numpy as np, torch, cupy as cp
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
OUT = os.environ.get("OUT", ".")
log = open(os.path.join(OUT, "tensor_matmul_variants_log.txt"), "w")
def P(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True); log.write(s + "\n"); log.flush()
dev = torch.device("cuda")
P(torch.cuda.get_device_name(), torch.__version__)
# (BM, BN, BK, warps along m, warps along n, stages, MODE, SPLIT, FILL, LDSM, ZF): the knobs
# of tensor_matmul_variants.cu. The first is what `tile_matmul` emitted up to the sixth
# session at 128x128; the earlier list (MODE and SPLIT at 128x128x16 and 64x64x32) is in
# docs/benchmarks.md with its results.
VARIANTS = [
    (128, 128, 16, 2, 2, 4, 3, 1, 0, 0, 0),  # as emitted (fresh accumulator per k tile)
    (128, 128, 32, 2, 2, 3, 0, 1, 0, 0, 0),  # chained (inaccurate): the cost of the fresh one
    (128, 128, 16, 2, 2, 4, 3, 1, 0, 0, 1),  # + first product from zero
    (128, 128, 16, 2, 2, 4, 3, 1, 0, 1, 0),  # + ldmatrix for A
    (128, 128, 16, 2, 2, 4, 3, 1, 0, 1, 1),  # + both
    (128, 128, 16, 2, 2, 4, 3, 1, 1, 1, 1),  # + counted copy loop
    (128, 128, 16, 2, 2, 4, 3, 3, 0, 1, 1),  # raw bits as the TF32 part
    (128, 128, 16, 2, 2, 4, 4, 1, 0, 1, 1),  # row by row
    (128, 128, 16, 2, 4, 4, 3, 1, 0, 1, 1),  # 8 warps of 64x32
    (128, 128, 32, 2, 4, 3, 3, 1, 0, 1, 1),
    (128, 128, 32, 2, 4, 3, 3, 3, 1, 1, 1),
    (128, 256, 16, 2, 4, 3, 3, 1, 0, 1, 1),  # 8 warps of 64x64
    (128, 256, 16, 2, 4, 4, 3, 1, 0, 1, 1),
    (256, 128, 16, 4, 2, 3, 3, 1, 0, 1, 1),
    (128, 64, 32, 2, 2, 3, 3, 1, 0, 0, 0),  # as emitted at 128x64
    (128, 64, 32, 2, 2, 3, 3, 1, 1, 1, 1),
    (128, 64, 32, 2, 2, 3, 3, 1, 0, 1, 1),
    (64, 64, 32, 2, 2, 4, 3, 1, 0, 0, 0),  # as emitted at 64x64
    (64, 64, 32, 2, 2, 4, 3, 1, 0, 1, 1),
    (64, 64, 32, 2, 2, 4, 3, 1, 1, 1, 1),
    (64, 64, 16, 2, 2, 4, 3, 1, 0, 1, 1),
    (64, 64, 32, 2, 4, 4, 3, 1, 0, 1, 1),  # 8 warps of 32x16
    (64, 128, 32, 2, 2, 3, 3, 1, 0, 1, 1),
    (64, 128, 32, 2, 4, 3, 3, 1, 0, 1, 1),  # 8 warps of 32x32
    (128, 64, 32, 4, 2, 3, 3, 1, 0, 1, 1),
]
here = os.path.dirname(os.path.abspath(__file__))
build = tempfile.mkdtemp()
cfgs = []
with open(os.path.join(build, "variants.inc"), "w") as inc:
    for v in VARIANTS:
        name = "g_%d_%d_%d_%d_%d_%d_m%d_s%d_f%d_l%d_z%d" % v
        inc.write("INST(%s, %s)\n" % (name, ", ".join(map(str, v))))
        cfgs.append([name] + [str(x) for x in v[:7]])
subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-I", build,
                os.path.join(here, "tensor_matmul_variants.cu"), "-o", os.path.join(build, "v.cubin")], check=True)
mod = cp.RawModule(path=os.path.join(build, "v.cubin"))
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def bench(fn, reps=30):
    s = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    e = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3): fn()
    for r in range(reps):
        flush.zero_()
        s[r].record(); fn(); e[r].record()
    torch.cuda.synchronize()
    return float(np.median([s[r].elapsed_time(e[r]) for r in range(reps)]))
def launcher(name, bm, bn, bk, wm, wn, st, m, n, k, A, B, C):
    # Shared memory: A as [BM][BK + 4] and B as [BK][BN + 8] per stage.
    f = mod.get_function(name)
    smem = st * (bm * (bk + 4) + bk * (bn + 8)) * 4
    f.max_dynamic_shared_size_bytes = smem
    grid = ((n + bn - 1) // bn, (m + bm - 1) // bm)
    args = (np.int32(m), np.int32(n), np.int32(k), cp.asarray(A), cp.asarray(B), cp.asarray(C))
    return lambda: f(grid, (wm * wn * 32,), args, shared_mem=smem)
def naive_launcher(m, n, k, A, B, C):
    f = mod.get_function("naive")
    args = (np.int32(m), np.int32(n), np.int32(k), cp.asarray(A), cp.asarray(B), cp.asarray(C))
    return lambda: f(((n + 15) // 16, (m + 15) // 16), (16, 16), args)
def fails(x, ref, atol, rtol):
    return int(((x.double() - ref.double()).abs() > atol + rtol * ref.double().abs()).sum())
def errs(x, ref64, naive):
    d = (x.double() - ref64)
    return dict(maxabs=float(d.abs().max()), rel=float(d.norm() / ref64.norm()),
                f64_d=fails(x, ref64, 1e-5, 1e-4), f64_3=fails(x, ref64, 1e-5, 1e-3),
                nv_d=fails(x, naive, 1e-5, 1e-4), nv_3=fails(x, naive, 1e-5, 1e-3),
                nv_max=float((x.double() - naive.double()).abs().max()))
# SHAPES: "m,n,k m,n,k ..."; NCU=1: the first shape only, each variant launched once (for
# `ncu -k regex:...`), nothing timed.
shapes = [tuple(map(int, x.split(","))) for x in os.environ.get(
    "SHAPES", "2048,2048,1024 1000,1000,1000 2000,3000,1500 1024,1024,1024 67,45,33 1023,517,129").split()]
only = os.environ.get("ONLY")
if os.environ.get("NCU"):
    m, n, k = shapes[0]
    A = torch.rand(m, k, device=dev) * 2 - 1; B = torch.rand(k, n, device=dev) * 2 - 1
    for c in cfgs:
        if only and c[0] not in only.split(","): continue
        C = torch.empty((m, n), device=dev)
        launcher(c[0], *map(int, c[1:7]), m, n, k, A, B, C)()
    torch.cuda.synchronize(); sys.exit(0)
results = []
for (m, n, k) in shapes:
    g = torch.Generator(device=dev).manual_seed(m * 7 + n * 3 + k)
    A = torch.rand(m, k, device=dev, generator=g) * 2 - 1
    B = torch.rand(k, n, device=dev, generator=g) * 2 - 1
    ref64 = A.double() @ B.double()
    Cn = torch.full((m, n), float("nan"), device=dev)
    nl = naive_launcher(m, n, k, A, B, Cn); nl(); torch.cuda.synchronize()
    big = m * n * k >= 1 << 30
    fl = 2.0 * m * n * k
    tn = bench(nl, 10 if big else 30)
    tt = bench(lambda: torch.matmul(A, B))
    Ct = torch.matmul(A, B)
    P(f"== {m}x{n}x{k}: naive {tn:.4f} ms, torch fp32 {tt:.4f} ms ({fl/tt/1e9:.1f} TFLOP/s)")
    P("  naive ", errs(Cn, ref64, Cn))
    P("  torch ", errs(Ct, ref64, Cn))
    ex = ref64.float()
    P("  f64->f32", errs(ex, ref64, Cn))
    row = dict(shape=(m, n, k), naive=tn, torch=tt, cands={})
    for c in cfgs:
        name = c[0]; bm, bn, bk, wm, wn, st, mo = map(int, c[1:])
        if only and name not in only.split(","): continue
        C = torch.full((m, n), float("nan"), device=dev)
        l = launcher(name, bm, bn, bk, wm, wn, st, m, n, k, A, B, C)
        try:
            l(); torch.cuda.synchronize()
        except Exception as ex_:
            P("  ", name, "FAILED", ex_); continue
        bad = int(torch.isnan(C).sum())
        t = bench(l)
        e = errs(C, ref64, Cn)
        P(f"  {name:24s} {t:.4f} ms {fl/t/1e9:6.1f} TF  x{t/tt:.3f} torch  nan={bad} {e}")
        row["cands"][name] = dict(t=t, nan=bad, **e)
    results.append(row)
json.dump(results, open(os.path.join(OUT, "tensor_matmul_variants.json"), "w"), indent=1)
# The short table last: per variant, its time over cuBLAS's at each shape and the outputs
# outside the default tolerance of the f64 product (a NaN count where it left any unwritten).
P("\nvariant " + " ".join("%dx%dx%d" % r["shape"] for r in results))
P("cuBLAS  " + " ".join("%.4f" % r["torch"] for r in results))
for c in cfgs:
    cells = []
    for r in results:
        x = r["cands"].get(c[0])
        cells.append("-" if x is None else "%.4f x%.3f %d%s" % (x["t"], x["t"] / r["torch"], x["f64_d"], " NAN%d" % x["nan"] if x["nan"] else ""))
    P(c[0][2:], " | ".join(cells))
