#!/usr/bin/env python3
"""Copies of the bundled examples with a PyTorch reference (issue #17), for the
`torch` part of tests/gpu/run.sh: each kernel gets `# @bench reference = torch: EXPR`
as the last line of its spec, so `kernel-lsp bench` verifies it against PyTorch on the
GPU and prints its time next to PyTorch eager and torch.compile
("1.06x eager · 0.93x compile") for docs/benchmarks.md.

Usage: torch_reference_examples.py EXAMPLES_DIR OUT_DIR  (prints the files written)
"""

import os
import sys

# file -> (kernel, the torch expression over the kernel's parameter names): the same
# operations tests/gpu/torch_baselines.py times.
REFERENCES = {
    "vector_add.py": ("add_kernel", "x_ptr + y_ptr"),
    "softmax.py": ("softmax_kernel", "torch.softmax(x_ptr, dim=1)"),
    "matmul.py": ("matmul_kernel", "a_ptr @ b_ptr"),
    # CUDA kernels: the worker compiles them, its Python helper launches them (issue #17).
    "saxpy.cu": ("saxpy", "a * x + y"),
    "matmul_naive.cu": ("matmul", "a @ b"),
    "softmax_rows.cu": ("softmax_rows", "torch.softmax(x, dim=1)"),
    "transpose.cu": ("transpose", "src.t().contiguous()"),
    "reduce_sum.cu": ("reduce_tree", "out + x.float().sum()"),
    # `hist` starts at zeros (the spec says so); torch has no uint32 addition.
    "histogram.cu": ("histogram", "torch.bincount(data.long(), minlength=256)"),
}


def with_reference(text, kernel, expr):
    """`text` with the reference line after the last @bench line above the kernel's
    definition (`def kernel(` or `void kernel(`); a `reference = OTHER` of that spec is
    replaced."""
    cuda = "void %s(" % kernel
    prefix = "// @bench" if cuda in text else "# @bench"
    lines = text.split("\n")
    at = next(i for i, l in enumerate(lines) if l.startswith("def %s(" % kernel) or cuda in l)
    first = at
    while first > 0 and "@bench" in lines[first - 1]:
        first -= 1
    lines[first:at] = [l for l in lines[first:at] if "reference =" not in l]
    at = next(i for i, l in enumerate(lines) if l.startswith("def %s(" % kernel) or cuda in l)
    last = max(i for i in range(at) if "@bench" in lines[i])
    lines.insert(last + 1, "%s reference = torch: %s" % (prefix, expr))
    return "\n".join(lines)


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, (kernel, expr) in REFERENCES.items():
        text = open(os.path.join(src, name)).read()
        path = os.path.join(out, name)
        with open(path, "w") as f:
            f.write(with_reference(text, kernel, expr))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
