import assert from "node:assert/strict";
import { test } from "node:test";

import { formatStatus, MAX_JOB_CHARS, parseStatus, truncate } from "../status";

test("parseStatus reads the contract's shape", () => {
  assert.deepEqual(parseStatus({ worker: "NVIDIA H100 80GB HBM3", message: "", job: null }), {
    worker: "NVIDIA H100 80GB HBM3",
    message: "",
    job: null,
  });
  assert.deepEqual(parseStatus({ worker: null, message: "no GPU: no CUDA driver", job: null }), {
    worker: null,
    message: "no GPU: no CUDA driver",
    job: null,
  });
  // Missing optional fields read as none; empty strings as none.
  assert.deepEqual(parseStatus({ worker: "", job: "" }), { worker: null, message: "", job: null });
});

test("parseStatus rejects what is not the contract's shape", () => {
  assert.equal(parseStatus(null), undefined);
  assert.equal(parseStatus("H100"), undefined);
  assert.equal(parseStatus({ worker: 3, message: "", job: null }), undefined);
  assert.equal(parseStatus({ worker: null, message: 1, job: null }), undefined);
  assert.equal(parseStatus({ worker: null, message: "", job: {} }), undefined);
});

test("a GPU worker shows its name", () => {
  const v = formatStatus("running", { worker: "NVIDIA H100 80GB HBM3", message: "", job: null });
  assert.equal(v.text, "$(chip) NVIDIA H100 80GB HBM3");
  assert.match(v.tooltip, /GPU worker: NVIDIA H100 80GB HBM3/);
  assert.equal(v.error, false);
});

test("no GPU shows 'no GPU' and the reason in the tooltip", () => {
  const v = formatStatus("running", { worker: null, message: "no GPU: cuInit failed (no CUDA driver)", job: null });
  assert.equal(v.text, "$(circle-slash) kernel-lsp: no GPU");
  assert.match(v.tooltip, /no GPU: cuInit failed \(no CUDA driver\)/);
});

test("a running job wins over the worker, shortened in the bar and whole in the tooltip", () => {
  const job = "optimize matmul_tiled_with_a_very_long_kernel_name: verifying block=(32, 8) (2/7)";
  const v = formatStatus("running", { worker: "NVIDIA H100 80GB HBM3", message: "", job });
  assert.ok(v.text.startsWith("$(sync~spin) optimize matmul"), v.text);
  assert.ok(v.text.endsWith("…"), v.text);
  assert.equal(v.text.length, "$(sync~spin) ".length + MAX_JOB_CHARS);
  assert.match(v.tooltip, /Running: optimize matmul_tiled_with_a_very_long_kernel_name: verifying block=\(32, 8\) \(2\/7\)/);
  assert.match(v.tooltip, /GPU worker: NVIDIA H100/);
});

test("text from the server cannot inject status bar icons", () => {
  const v = formatStatus("running", { worker: "$(flame) GPU", message: "", job: null });
  assert.ok(!v.text.includes("$(flame)"), v.text);
});

test("client states before and without a status", () => {
  assert.equal(formatStatus("starting", undefined).text, "$(loading~spin) kernel-lsp");
  assert.equal(formatStatus("running", undefined).text, "$(check) kernel-lsp");
  const stopped = formatStatus("stopped", { worker: "H100", message: "", job: null });
  assert.equal(stopped.text, "$(error) kernel-lsp: stopped");
  assert.equal(stopped.error, true);
  const nf = formatStatus("notFound", undefined);
  assert.equal(nf.error, true);
  assert.match(nf.tooltip, /kernelLsp\.serverPath/);
});

test("truncate", () => {
  assert.equal(truncate("abc", 3), "abc");
  assert.equal(truncate("abcd", 3), "ab…");
});
