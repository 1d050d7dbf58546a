#!/usr/bin/env python3
"""Copies of the bundled Triton examples with a PyTorch reference (issue #17), for the
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
}


def with_reference(text, kernel, expr):
    """`text` with the reference line after the last @bench line above `def kernel(`."""
    lines = text.split("\n")
    at = next(i for i, l in enumerate(lines) if l.startswith("def %s(" % kernel))
    last = max(i for i in range(at) if "@bench" in lines[i])
    lines.insert(last + 1, "# @bench reference = torch: %s" % expr)
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
