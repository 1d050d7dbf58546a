"""fp32 matmul on the tensor cores (issue #30): compiles the candidates that
`cargo bench --bench tensor_matmul -- DIR` wrote (NVRTC through CuPy, sm_90), checks each
against the f64 product (and the draft's own output) and times it against cuBLAS fp32
(`torch.matmul`, TF32 off) as the worker times: 256 MB written between launches to flush
the L2, CUDA events, median of 40 after 3 warm-ups. Inputs uniform in [-1, 1].

    python3 tests/gpu/tensor_matmul.py DIR    # on a GPU machine with torch and cupy

Prints one line per candidate and shape and writes DIR/../tensor_matmul.json (or
$OUT/tensor_matmul.json where OUT is set). Record results in docs/benchmarks.md."""
import os, re, sys, glob, json, numpy as np, torch, cupy as cp
torch.backends.cuda.matmul.allow_tf32 = False
C = sys.argv[1].rstrip("/") + "/"
OUT = os.environ.get("OUT", os.path.dirname(C.rstrip("/")) or ".")
log = open(os.path.join(OUT, "tensor_matmul_log.txt"), "w")
def P(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True); log.write(s + "\n"); log.flush()
dev = "cuda"
P(torch.cuda.get_device_name())
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def bench(fn, reps=40):
    s = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    e = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3): fn()
    for r in range(reps):
        flush.zero_(); s[r].record(); fn(); e[r].record()
    torch.cuda.synchronize()
    return float(np.median([s[r].elapsed_time(e[r]) for r in range(reps)]))
def load(path, name):
    src = open(path).read()
    mod = cp.RawModule(code=src, options=("-arch=sm_90", "-std=c++17"))
    f = mod.get_function(name)
    head = src[:src.index("void " + name + "(")]
    head = head[head.rindex("*/") if "*/" in head else 0:]
    head = "\n".join(l for l in head.splitlines()[-12:])
    g = re.search(r"@bench grid = \(cdiv\((\w+), (\d+)\), cdiv\((\w+), (\d+)\)\); block = \((\d+), (\d+)\)", head)
    sm = re.search(r"@bench smem = (\d+)", head)
    smem = int(sm.group(1)) if sm else 0
    if smem: f.max_dynamic_shared_size_bytes = smem
    return f, g.groups(), smem
def fails(x, ref, atol, rtol):
    return int(((x.double() - ref).abs() > atol + rtol * ref.abs()).sum())
i32 = np.int32; u32 = np.uint32; f32 = np.float32
rows = []
def run(kernel, files, shape, make):
    sizes, args_of, ref_of, out_idx, naive = make(shape)
    ref = ref_of()
    for path in files:
        label = open(path.replace(".cu", ".label")).read() if os.path.exists(path.replace(".cu", ".label")) else "draft"
        f, (gx, bx, gy, by, tx, ty), smem = load(path, kernel)
        grid = ((sizes[gx] + int(bx) - 1) // int(bx), (sizes[gy] + int(by) - 1) // int(by))
        args, outs = args_of()
        launch = lambda: f(grid, (int(tx), int(ty)), args, shared_mem=smem)
        launch(); torch.cuda.synchronize()
        o = outs[out_idx]
        nan = int(torch.isnan(o).sum())
        d = (o.double() - ref)
        e = dict(maxabs=float(d.abs().max()), f64_d=fails(o, ref, 1e-5, 1e-4), f64_3=fails(o, ref, 1e-3, 1e-3), nan=nan)
        if naive is not None:
            e["vs_draft_max"] = float((o.double() - naive.double()).abs().max()); e["vs_draft_d"] = fails(o, naive.double(), 1e-5, 1e-4)
        t = bench(launch) if shape[0] >= 1000 else float("nan")
        P(f"  {kernel} {shape} {os.path.basename(path)} [{label}] {t:.4f} ms", e)
        rows.append(dict(kernel=kernel, shape=shape, file=os.path.basename(path), label=label, ms=t, **e))
def mk_matmul(shape):
    m, n, k = shape
    A = torch.rand(m, k, device=dev) * 2 - 1; B = torch.rand(k, n, device=dev) * 2 - 1
    ref = lambda: A.double() @ B.double()
    Cn = torch.full((m, n), float("nan"), device=dev)
    fd, (gx, bx, gy, by, tx, ty), _ = load(C + "draft_matmul.cu", "matmul")
    fd(((n + 15) // 16, (m + 15) // 16), (16, 16), (i32(m), i32(n), i32(k), cp.asarray(A), cp.asarray(B), cp.asarray(Cn)))
    fl = 2.0 * m * n * k
    tt = bench(lambda: torch.matmul(A, B)) if m >= 1000 else float("nan")
    td = bench(lambda: fd(((n + 15) // 16, (m + 15) // 16), (16, 16), (i32(m), i32(n), i32(k), cp.asarray(A), cp.asarray(B), cp.asarray(Cn)))) if m >= 1000 else float("nan")
    Ct = torch.matmul(A, B)
    P(f"== matmul {shape}: draft {td:.4f} ms, torch fp32 {tt:.4f} ms ({fl/tt/1e9:.1f} TF); torch vs f64 fails(default) {fails(Ct, A.double() @ B.double(), 1e-5, 1e-4)}, draft vs f64 {fails(Cn, A.double() @ B.double(), 1e-5, 1e-4)} max {float((Cn.double() - A.double() @ B.double()).abs().max()):.2e}, torch==draft {bool(torch.equal(Ct, Cn))}")
    rows.append(dict(kernel="torch", shape=shape, ms=tt, draft_ms=td))
    def args():
        c = torch.full((m, n), float("nan"), device=dev)
        return (i32(m), i32(n), i32(k), cp.asarray(A), cp.asarray(B), cp.asarray(c)), [c]
    return dict(m=m, n=n, k=k), args, ref, 0, Cn
def mk_loose(shape):
    m, n, k = shape
    A = torch.rand(m, k, device=dev) * 2 - 1; B = torch.rand(k, n, device=dev) * 2 - 1
    def args():
        c = torch.full((m, n), float("nan"), device=dev)
        return (cp.asarray(A), cp.asarray(B), cp.asarray(c), i32(m), i32(n), i32(k)), [c]
    return dict(m=m, n=n, k=k), args, lambda: A.double() @ B.double(), 0, None
def mk_tn(shape):
    m, n, k = shape
    A = torch.rand(k, m, device=dev) * 2 - 1; B = torch.rand(n, k, device=dev) * 2 - 1
    C0 = torch.rand(m, n, device=dev) * 2 - 1
    ref = lambda: 1.5 * (A.double().t() @ B.double().t()) - 0.5 * C0.double()
    def args():
        c = C0.clone()
        return (i32(m), i32(n), i32(k), f32(1.5), cp.asarray(A), cp.asarray(B), f32(-0.5), cp.asarray(c)), [c]
    return dict(m=m, n=n, k=k), args, ref, 0, None
def mk_ld(shape):
    m, n, k, lda, ldb = shape
    A = torch.rand(m, lda, device=dev) * 2 - 1; B = torch.rand(k, ldb, device=dev) * 2 - 1
    ref = lambda: A[:, :k].double() @ B[:, :n].double()
    def args():
        c = torch.full((m, n), float("nan"), device=dev)
        return (cp.asarray(A), cp.asarray(B), cp.asarray(c), u32(m), u32(n), u32(k), u32(lda), u32(ldb)), [c]
    return dict(m=m, n=n, k=k), args, ref, 0, None
def mk_nt(shape):
    rows_, outs, ins = shape
    X = torch.rand(rows_, ins, device=dev) * 2 - 1; W = torch.rand(outs, ins, device=dev) * 2 - 1
    bias = torch.rand(outs, device=dev) * 2 - 1
    ref = lambda: X.double() @ W.double().t() + bias.double()
    def args():
        y = torch.full((rows_, outs), float("nan"), device=dev)
        return (cp.asarray(X), cp.asarray(W), cp.asarray(bias), cp.asarray(y), i32(rows_), i32(outs), i32(ins)), [y]
    return dict(rows=rows_, outs=outs, ins=ins), args, ref, 0, None
def mk_band(shape):
    m, n, k, row0 = shape
    A = torch.rand(m, k, device=dev) * 2 - 1; B = torch.rand(k, n, device=dev) * 2 - 1
    C0 = torch.rand(m, n, device=dev) * 2 - 1
    def ref():
        r = C0.double().clone(); r[row0:] = A[row0:].double() @ B.double(); return r
    def args():
        c = C0.clone()
        return (i32(m), i32(n), i32(k), i32(row0), cp.asarray(A), cp.asarray(B), cp.asarray(c)), [c]
    return dict(m=m, n=n, k=k), args, ref, 0, None
files = lambda k: sorted(glob.glob(C + k + "_[0-9].cu"))
for s in [(2048, 2048, 1024), (1024, 1024, 1024), (1000, 1000, 1000), (67, 45, 33)]:
    run("matmul", files("matmul"), s, mk_matmul)
for s in [(1000, 1000, 1000), (70, 33, 45)]:
    run("matmul_loose", files("matmul_loose"), s, mk_loose)
for s in [(1000, 998, 1001), (37, 70, 19)]:
    run("gemm_tn", files("gemm_tn"), s, mk_tn)
for s in [(1000, 1000, 1000, 1001, 1003), (2048, 2048, 1024, 1024, 2048), (33, 41, 17, 20, 45)]:
    run("gemm_ld", files("gemm_ld"), s, mk_ld)
for s in [(1000, 998, 1001), (2048, 2048, 1024), (37, 70, 19)]:
    run("linear_nt", files("linear_nt"), s, mk_nt)
for s in [(300, 200, 150, 37), (1000, 1000, 1000, 200), (70, 45, 33, 5)]:
    run("matmul_band", files("matmul_band"), s, mk_band)
json.dump(rows, open(os.path.join(OUT, "tensor_matmul.json"), "w"), indent=1)
