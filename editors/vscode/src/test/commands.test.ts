import assert from "node:assert/strict";
import { test } from "node:test";

import {
  buildArgs,
  chooseKernel,
  COMMANDS,
  explicitArgs,
  KernelSymbol,
  parseResult,
  unsupportedMessage,
} from "../commands";

const sym = (name: string, l0: number, l1: number): KernelSymbol => ({
  name,
  range: { start: { line: l0, character: 0 }, end: { line: l1, character: 1 } },
});
const at = (line: number, character = 4) => ({ line, character });

test("the cursor inside a kernel picks it, ends included", () => {
  const syms = [sym("saxpy", 9, 12), sym("scale", 20, 25)];
  assert.deepEqual(chooseKernel(syms, at(10)), { kind: "at", name: "saxpy" });
  assert.deepEqual(chooseKernel(syms, { line: 9, character: 0 }), { kind: "at", name: "saxpy" });
  assert.deepEqual(chooseKernel(syms, { line: 12, character: 1 }), { kind: "at", name: "saxpy" });
  assert.deepEqual(chooseKernel(syms, at(22)), { kind: "at", name: "scale" });
});

test("outside every kernel: the only one, a choice among several, or none", () => {
  assert.deepEqual(chooseKernel([sym("saxpy", 9, 12)], at(2)), { kind: "only", name: "saxpy" });
  assert.deepEqual(chooseKernel([sym("a", 1, 2), sym("b", 5, 6)], at(3)), { kind: "choose", names: ["a", "b"] });
  assert.deepEqual(chooseKernel([sym("saxpy", 9, 12)], { line: 12, character: 2 }), { kind: "only", name: "saxpy" });
  assert.deepEqual(chooseKernel([], at(3)), { kind: "none" });
});

test("nested ranges pick the innermost", () => {
  assert.deepEqual(chooseKernel([sym("outer", 0, 20), sym("inner", 5, 8)], at(6)), { kind: "at", name: "inner" });
  assert.deepEqual(chooseKernel([sym("inner", 5, 8), sym("outer", 0, 20)], at(6)), { kind: "at", name: "inner" });
});

test("buildArgs gives the contract's {uri, kernel?, position}", () => {
  assert.deepEqual(buildArgs("file:///k/saxpy.cu", { line: 10, character: 3 }, "saxpy"), {
    uri: "file:///k/saxpy.cu",
    kernel: "saxpy",
    position: { line: 10, character: 3 },
  });
  assert.deepEqual(buildArgs("file:///k/a.py", { line: 0, character: 0 }), {
    uri: "file:///k/a.py",
    position: { line: 0, character: 0 },
  });
});

test("explicit arguments pass through when they name a document", () => {
  assert.deepEqual(explicitArgs({ uri: "file:///a.cu", kernel: "k", extra: 1 }), { uri: "file:///a.cu", kernel: "k" });
  assert.deepEqual(explicitArgs({ uri: "file:///a.cu", position: { line: 1, character: 2 } }), {
    uri: "file:///a.cu",
    position: { line: 1, character: 2 },
  });
  assert.equal(explicitArgs(undefined), undefined);
  assert.equal(explicitArgs({ kernel: "k" }), undefined);
  assert.equal(explicitArgs({ uri: "" }), undefined);
  // VS Code passes the clicked resource's Uri object from menus: not our argument object.
  assert.equal(explicitArgs({ scheme: "file", path: "/a.cu" }), undefined);
});

test("parseResult", () => {
  assert.deepEqual(parseResult({ message: "saxpy: 1.31× faster", outcome: "accepted" }), {
    message: "saxpy: 1.31× faster",
    outcome: "accepted",
  });
  assert.deepEqual(parseResult({ message: "pinned" }), { message: "pinned" });
  assert.deepEqual(parseResult({ message: "x", outcome: "weird" }), { message: "x" });
  assert.equal(parseResult(null), undefined);
  assert.equal(parseResult({ outcome: "ok" }), undefined);
});

test("a server without the command gets a message that says what to do", () => {
  const optimize = COMMANDS.find((c) => c.id === "kernelLsp.optimize")!;
  assert.equal(unsupportedMessage(optimize, ["kernel-lsp.optimize"], "0.2.0"), undefined);
  const msg = unsupportedMessage(optimize, undefined, "0.1.0");
  assert.ok(msg);
  assert.match(msg, /kernel-lsp 0\.1\.0 does not provide the command `kernel-lsp\.optimize`/);
  assert.match(msg, /kernelLsp\.serverPath/);
  assert.match(unsupportedMessage(optimize, ["kernel-lsp.bench"], undefined)!, /This kernel-lsp server/);
});

test("the long commands are the ones that run a GPU job", () => {
  assert.deepEqual(
    COMMANDS.filter((c) => c.long).map((c) => c.server).sort(),
    ["kernel-lsp.bench", "kernel-lsp.fix", "kernel-lsp.optimize", "kernel-lsp.profile", "kernel-lsp.tune"],
  );
});
