"""Tile shapes, warps and pipelining for Triton column reductions and a matrix-vector
product: the measurements behind `triton_split_loop`'s budgeted tile (docs/benchmarks.md,
"Cures chosen by the analysis (issue #29)"), against torch.compile and a 256 MB copy,
in one process, timed with `triton.testing.do_bench` (median; the L2 cleared between
launches).

    python3 tests/gpu/split_tile_sweep.py [mean] [norm] [matvec]   # on a GPU machine

`colred_plain` is the shape `triton_split_loop` wrote before the budget (plain `range`,
the launch's num_stages); `colred` the budgeted one (`tl.range(..., num_stages=ST)`;
U=2 loads two row tiles before adding them); `colnorm_inloop` the shape
`triton_program_tile` writes (a reduction over the lanes on every iteration). Every
configuration is checked against PyTorch before it is timed."""
import os, sys, time, json
import torch, triton
import triton.language as tl
from triton.testing import do_bench

OUT = os.environ.get("OUT", ".")
log = open(os.path.join(OUT, "sweep.txt"), "a")
def say(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True); log.write(s + "\n"); log.flush()

dev = torch.cuda.get_device_name()
say("device", dev, "sms", torch.cuda.get_device_properties(0).multi_processor_count,
    "triton", triton.__version__, "torch", torch.__version__, time.strftime("%Y-%m-%d %H:%M"))

def bench(f):
    return do_bench(f, warmup=25, rep=100, return_mode="median")

# copy bandwidth
big = torch.empty(1 << 26, device="cuda", dtype=torch.float32); big2 = torch.empty_like(big)
tc = bench(lambda: big2.copy_(big))
COPY = 2 * big.numel() * 4 / (tc * 1e-3)
say(f"copy 256MB: {tc:.4f} ms = {COPY/1e12:.2f} TB/s")


@triton.jit
def colred(x, out, M, N, scale, BLOCK: tl.constexpr, R: tl.constexpr, ST: tl.constexpr,
           U: tl.constexpr, SQ: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    part = tl.zeros((R, BLOCK), tl.float32)
    for r in tl.range(0, M, R * U, num_stages=ST):
        rs = r + tl.arange(0, R)
        ok = rs[:, None] < M
        v = tl.load(x + rs[:, None] * N + cols[None, :], mask=(cols[None, :] < N) & ok, other=0.0)
        if SQ:
            v = v * v
        if U == 2:
            rs2 = rs + R
            ok2 = rs2[:, None] < M
            w = tl.load(x + rs2[:, None] * N + cols[None, :], mask=(cols[None, :] < N) & ok2, other=0.0)
            if SQ:
                w = w * w
            v = v + w
        part += v
    acc = tl.sum(part, axis=0)
    if SQ:
        acc = tl.sqrt(acc)
    tl.store(out + cols, acc * scale, mask=cols < N)


@triton.jit
def colred_plain(x, out, M, N, scale, BLOCK: tl.constexpr, R: tl.constexpr, SQ: tl.constexpr):
    # the rewrite's shape today: plain range, launch num_stages
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    part = tl.zeros((R, 1), dtype=acc.dtype) + tl.zeros_like(acc)[None, :]
    for r in range(0, M, R):
        rs = r + tl.arange(0, R)
        ok = rs[:, None] < M
        v = tl.load(x + rs[:, None] * N + cols[None, :], mask=(cols[None, :] < N) & ok, other=0.0)
        if SQ:
            v = v * v
        part += tl.where(ok, v, 0)
    acc += tl.sum(part, axis=0)
    if SQ:
        acc = tl.sqrt(acc)
    tl.store(out + cols, acc * scale, mask=cols < N)


@triton.jit
def colnorm_inloop(x, out, M, N, CB: tl.constexpr, BLOCK: tl.constexpr):
    # triton_program_tile's shape: a reduction over the lanes inside the loop
    col = tl.program_id(0) * CB + tl.arange(0, CB)
    ing = col < N
    total = tl.zeros([CB], dtype=tl.float32)
    for r0 in range(0, M, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        v = tl.load((x + r * N)[:, None] + col[None, :], mask=((r < M)[:, None]) & ing[None, :], other=0.0)
        total += tl.sum(v * v, axis=0)
    tl.store(out + col, tl.sqrt(total), mask=ing)


@triton.jit
def matvec_k(A, v, y, M, K, ROWS: tl.constexpr, R: tl.constexpr, ST: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < M
    part = tl.zeros((R, ROWS), tl.float32)
    for k in tl.range(0, K, R, num_stages=ST):
        ks = k + tl.arange(0, R)
        ok = ks[:, None] < K
        a = tl.load(A + rows[None, :] * K + ks[:, None], mask=live[None, :] & ok, other=0.0)
        part += a * tl.load(v + ks[:, None], mask=ok, other=0.0)
    tl.store(y + rows, tl.sum(part, axis=0), mask=live)


results = {}
def row(name, t, nbytes, ref_t):
    pc = nbytes / (t * 1e-3) / COPY * 100
    say(f"{name:60s} {t:.4f} ms  {pc:5.1f}% copy  x_compile {ref_t / t:.2f}")
    results[name] = t

def try_cfg(name, launch, check, nbytes, ref_t):
    try:
        launch(); torch.cuda.synchronize()
        ok = check()
        if not ok:
            say(name, "WRONG"); return
        row(name, bench(launch), nbytes, ref_t)
    except Exception as e:
        say(name, "FAIL", type(e).__name__, str(e)[:120])

which = sys.argv[1:] or ["mean", "norm", "matvec"]
torch.manual_seed(0)

if "mean" in which:
    M, N = 16384, 1024
    x = torch.randn(M, N, device="cuda"); out = torch.empty(N, device="cuda")
    ref = x.mean(0)
    f = torch.compile(lambda t: t.mean(0)); f(x)
    tcmp = bench(lambda: f(x)); nb = x.numel() * 4 + N * 4
    row("mean: torch.compile", tcmp, nb, tcmp)
    row("mean: eager", bench(lambda: x.mean(0)), nb, tcmp)
    chk = lambda: torch.allclose(out, ref, atol=1e-4, rtol=1e-3)
    def plain(B, R, nw, ns):
        return lambda: colred_plain[(triton.cdiv(N, B),)](x, out, M, N, 1.0 / M, BLOCK=B, R=R, SQ=False, num_warps=nw, num_stages=ns)
    def gen(B, R, nw, st, u=1):
        return lambda: colred[(triton.cdiv(N, B),)](x, out, M, N, 1.0 / M, BLOCK=B, R=R, ST=st, U=u, SQ=False, num_warps=nw)
    try_cfg("mean plain B8 R512 nw16 ns3 (today)", plain(8, 512, 16, 3), chk, nb, tcmp)
    try_cfg("mean plain B8 R512 nw16 ns1", plain(8, 512, 16, 1), chk, nb, tcmp)
    for R in [512, 1024, 2048]:
        for nw in [8, 16, 32]:
            for st in [1, 3]:
                try_cfg(f"mean B8 R{R} nw{nw} st{st}", gen(8, R, nw, st), chk, nb, tcmp)
    for R in [512, 1024]:
        for nw in [16, 32]:
            try_cfg(f"mean B8 R{R} nw{nw} st1 U2", gen(8, R, nw, 1, 2), chk, nb, tcmp)
    for (B, R, nw) in [(16, 512, 16), (16, 1024, 16), (16, 1024, 32), (4, 1024, 16), (4, 2048, 16), (4, 2048, 32)]:
        try_cfg(f"mean B{B} R{R} nw{nw} st1", gen(B, R, nw, 1), chk, nb, tcmp)
    del x

if "norm" in which:
    M, N = 8192, 2048
    x = torch.randn(M, N, device="cuda"); out = torch.empty(N, device="cuda")
    ref = torch.linalg.vector_norm(x, dim=0)
    f = torch.compile(lambda t: torch.linalg.vector_norm(t, dim=0)); f(x)
    tcmp = bench(lambda: f(x)); nb = x.numel() * 4 + N * 4
    row("norm: torch.compile", tcmp, nb, tcmp)
    chk = lambda: torch.allclose(out, ref, atol=1e-3, rtol=1e-3)
    for (CB, BL, nw) in [(8, 8192, 8), (8, 1024, 8), (8, 256, 4), (16, 512, 8)]:
        try_cfg(f"norm inloop CB{CB} BLOCK{BL} nw{nw}",
                (lambda CB=CB, BL=BL, nw=nw: colnorm_inloop[(triton.cdiv(N, CB),)](x, out, M, N, CB=CB, BLOCK=BL, num_warps=nw)), chk, nb, tcmp)
    for (B, R, nw, st) in [(8, 512, 16, 1), (8, 1024, 16, 1), (8, 1024, 32, 1), (8, 2048, 32, 1), (16, 512, 16, 1), (16, 1024, 16, 1), (16, 1024, 32, 1), (8, 1024, 16, 3), (16, 512, 8, 1), (32, 256, 8, 1)]:
        try_cfg(f"norm B{B} R{R} nw{nw} st{st}",
                (lambda B=B, R=R, nw=nw, st=st: colred[(triton.cdiv(N, B),)](x, out, M, N, 1.0, BLOCK=B, R=R, ST=st, U=1, SQ=True, num_warps=nw)), chk, nb, tcmp)
    del x

if "matvec" in which:
    M, K = 8192, 4096
    A = torch.randn(M, K, device="cuda"); v = torch.randn(K, device="cuda"); y = torch.empty(M, device="cuda")
    ref = A @ v
    f = torch.compile(lambda a, b: a @ b); f(A, v)
    tcmp = bench(lambda: f(A, v)); nb = A.numel() * 4 + K * 4 + M * 4
    row("matvec: torch.compile", tcmp, nb, tcmp)
    chk = lambda: torch.allclose(y, ref, atol=1e-2, rtol=1e-3)
    for (ROWS, R, nw, st) in [(64, 32, 4, 3), (64, 128, 8, 1), (64, 128, 16, 1), (32, 128, 8, 1), (32, 256, 8, 1), (16, 256, 8, 1), (16, 512, 8, 1), (16, 512, 16, 1),
                              (8, 512, 8, 1), (8, 512, 4, 1), (8, 1024, 8, 1), (4, 1024, 8, 1), (16, 256, 4, 3), (8, 512, 8, 3)]:
        try_cfg(f"matvec ROWS{ROWS} R{R} nw{nw} st{st}",
                (lambda ROWS=ROWS, R=R, nw=nw, st=st: matvec_k[(triton.cdiv(M, ROWS),)](A, v, y, M, K, ROWS=ROWS, R=R, ST=st, num_warps=nw)), chk, nb, tcmp)

json.dump(results, open(os.path.join(OUT, "sweep.json"), "w"), indent=1)
say("done")
