import assert from "node:assert/strict";
import { test } from "node:test";

import {
  configurationItem,
  didChangeConfigurationSettings,
  expandPath,
  needsRestart,
  toServerSettings,
} from "../settings";
import { manifestDefaults } from "./manifest";

/** A ConfigReader over the package.json defaults, with some settings overridden. */
function reader(overrides: Record<string, unknown> = {}) {
  const values: Record<string, unknown> = { ...manifestDefaults(), ...overrides };
  return (key: string) => values[key];
}

test("the package.json defaults send the contract's defaults and leave the searched paths to the server", () => {
  assert.deepEqual(toServerSettings(reader()), {
    arch: "sm_90",
    compileOnType: true,
    compileDebounceMs: 300,
    maxFileBytes: 2097152,
    analysisBudgetMs: 2000,
    sms: 132,
    workers: 1,
    applyMode: "apply",
    benchOnSave: false,
    stepsPerAction: 0,
    optimizeBudgetS: 600,
    useLlm: false,
    sharedPolicy: false,
    hintSpeedupVs: "all",
    llm: { callsPerStep: 6, repairRounds: 2 },
  });
});

test("set values are sent; empty strings are not", () => {
  const s = toServerSettings(
    reader({
      nvrtcPath: "/usr/local/cuda",
      ptxasPath: "   ",
      arch: "sm_80",
      compileOnType: false,
      worker: "ssh gpu-box kernel-lsp worker",
      workers: 4,
      applyMode: "offer",
    }),
  );
  assert.equal(s.nvrtcPath, "/usr/local/cuda");
  assert.equal("ptxasPath" in s, false);
  assert.equal(s.arch, "sm_80");
  assert.equal(s.compileOnType, false);
  assert.equal(s.worker, "ssh gpu-box kernel-lsp worker");
  assert.equal(s.workers, 4);
  assert.equal(s.applyMode, "offer");
});

test("a value of the wrong type is passed on for the server to name in its warning", () => {
  const s = toServerSettings(reader({ compileDebounceMs: "soon" }));
  assert.equal(s.compileDebounceMs, "soon");
});

test("path settings expand ~ and ${workspaceFolder}; the worker command does not", () => {
  const s = toServerSettings(
    reader({
      nvrtcPath: "~/cuda/lib64",
      python: "${workspaceFolder}/.venv/bin/python3",
      "llm.promptsDir": "${workspaceFolder}/prompts",
      worker: "ssh box ~/bin/kernel-lsp worker",
    }),
    { home: "/home/ada", workspaceFolder: "/src/kernels" },
  );
  assert.equal(s.nvrtcPath, "/home/ada/cuda/lib64");
  assert.equal(s.python, "/src/kernels/.venv/bin/python3");
  assert.deepEqual((s.llm as Record<string, unknown>).promptsDir, "/src/kernels/prompts");
  assert.equal(s.worker, "ssh box ~/bin/kernel-lsp worker");
});

test("expandPath leaves ~user and mid-path tildes alone", () => {
  assert.equal(expandPath("~bob/x", { home: "/h" }), "~bob/x");
  assert.equal(expandPath("/a/~/b", { home: "/h" }), "/a/~/b");
  assert.equal(expandPath("~", { home: "/h" }), "/h");
});

test("an LLM role is sent only once its url or model is set, with its empty fields left out", () => {
  const s = toServerSettings(
    reader({
      useLlm: true,
      "llm.coder.provider": "anthropic",
      "llm.coder.model": "claude-sonnet-4-5",
      "llm.coder.apiKeyEnv": "ANTHROPIC_API_KEY",
      "llm.strategy.provider": "anthropic",
    }),
  );
  assert.deepEqual(s.llm, {
    coder: { provider: "anthropic", model: "claude-sonnet-4-5", apiKeyEnv: "ANTHROPIC_API_KEY" },
    callsPerStep: 6,
    repairRounds: 2,
  });
});

test("both roles with urls", () => {
  const s = toServerSettings(
    reader({
      "llm.strategy.url": "http://localhost:8000/v1",
      "llm.strategy.model": "qwen",
      "llm.coder.url": "http://localhost:8001/v1",
    }),
  );
  const llm = s.llm as Record<string, unknown>;
  assert.deepEqual(llm.strategy, { provider: "openai", url: "http://localhost:8000/v1", model: "qwen" });
  assert.deepEqual(llm.coder, { provider: "openai", url: "http://localhost:8001/v1" });
});

test("no llm object when nothing under llm is set", () => {
  const s = toServerSettings(() => undefined);
  assert.deepEqual(s, {});
});

test("didChangeConfiguration nests under the section; workspace/configuration answers ours only", () => {
  const settings = toServerSettings(reader());
  assert.deepEqual(didChangeConfigurationSettings(settings), { kernelLsp: settings });
  assert.equal(configurationItem("kernelLsp", settings), settings);
  assert.equal(configurationItem("kernel-lsp", settings), settings);
  assert.equal(configurationItem("kernelLsp.arch", settings), "sm_90");
  assert.equal(configurationItem("kernelLsp.llm.callsPerStep", settings), 6);
  assert.equal(configurationItem("kernelLsp.nvrtcPath", settings), null);
  assert.equal(configurationItem("kernelLsp.arch.deeper", settings), null);
  assert.equal(configurationItem("python", settings), undefined);
  assert.equal(configurationItem("kernelLspx", settings), undefined);
  assert.equal(configurationItem(undefined, settings), undefined);
});

test("only a serverPath change restarts the server", () => {
  assert.equal(needsRestart((k) => k === "kernelLsp.serverPath"), true);
  assert.equal(needsRestart((k) => k === "kernelLsp.arch"), false);
});
