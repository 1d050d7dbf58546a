// package.json is the user-facing half of the code: these check that it and the modules
// agree, so a setting or command added to one and not the other fails here.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CLIENT_COMMANDS, COMMANDS } from "../commands";
import { CLIENT_ONLY_SETTINGS, serverSettingKeys } from "../settings";
import { manifest } from "./manifest";

/** The server commands of the editor contract (docs: editor contract, "Commands"). */
const CONTRACT_COMMANDS = [
  "kernel-lsp.optimize",
  "kernel-lsp.tune",
  "kernel-lsp.bench",
  "kernel-lsp.pinBaseline",
  "kernel-lsp.revert",
  "kernel-lsp.showHistory",
  "kernel-lsp.applyRewrite",
  "kernel-lsp.fix",
  "kernel-lsp.profile",
];

/** The settings of the editor contract, flattened as VS Code names them. */
const CONTRACT_SETTINGS = [
  "nvrtcPath", "ptxasPath", "cudaInclude", "arch", "compileOnType", "compileDebounceMs",
  "maxFileBytes", "sms", "worker", "workers", "python", "applyMode", "benchOnSave",
  "stepsPerAction", "optimizeBudgetS", "useLlm", "sharedPolicy", "hintSpeedupVs", "analysisBudgetMs",
  "llm.strategy.provider", "llm.strategy.url", "llm.strategy.model", "llm.strategy.apiKeyEnv",
  "llm.coder.provider", "llm.coder.url", "llm.coder.model", "llm.coder.apiKeyEnv",
  "llm.callsPerStep", "llm.repairRounds", "llm.promptsDir",
];

const props = () => manifest().contributes.configuration.properties;

test("every contract command has a palette command that forwards to it", () => {
  assert.deepEqual(COMMANDS.map((c) => c.server).sort(), [...CONTRACT_COMMANDS].sort());
  for (const c of COMMANDS) {
    assert.equal(c.id, c.server.replace(/^kernel-lsp\./, "kernelLsp."), c.id);
  }
});

test("package.json contributes exactly the extension's commands, all in category kernel-lsp", () => {
  const contributed = manifest().contributes.commands;
  const ids = [...COMMANDS.map((c) => c.id), ...CLIENT_COMMANDS].sort();
  assert.deepEqual(contributed.map((c) => c.command).sort(), ids);
  for (const c of contributed) {
    assert.equal(c.category, "kernel-lsp", c.command);
    assert.ok(c.title.length > 0, c.command);
  }
});

test("no contributed command takes a server command's id (the client library registers those)", () => {
  for (const c of manifest().contributes.commands) {
    assert.ok(!CONTRACT_COMMANDS.includes(c.command), c.command);
  }
});

test("the kernel commands show in the palette in CUDA and Python editors", () => {
  const menu = manifest().contributes.menus.commandPalette;
  for (const c of COMMANDS) {
    const entry = menu.find((m) => m.command === c.id);
    assert.ok(entry, `${c.id} has no commandPalette entry`);
    assert.match(entry.when, /editorLangId == cuda-cpp/);
    assert.match(entry.when, /editorLangId == python/);
  }
});

test("package.json contributes every contract setting, and the client sends each of them", () => {
  const keys = Object.keys(props()).map((k) => k.replace(/^kernelLsp\./, ""));
  const serverKeys = keys.filter((k) => !(CLIENT_ONLY_SETTINGS as readonly string[]).includes(k));
  assert.deepEqual([...serverKeys].sort(), [...CONTRACT_SETTINGS].sort());
  assert.deepEqual(serverSettingKeys().sort(), [...CONTRACT_SETTINGS].sort());
  for (const k of CLIENT_ONLY_SETTINGS) assert.ok(keys.includes(k), `kernelLsp.${k} is not contributed`);
});

test("every setting has a description, a type, and a default of that type (in its enum)", () => {
  for (const [key, p] of Object.entries(props())) {
    assert.ok(key.startsWith("kernelLsp."), key);
    assert.ok((p.description ?? p.markdownDescription ?? "").length > 10, `${key} has no description`);
    const t = p.type === "integer" ? "number" : p.type;
    assert.equal(typeof p.default, t, `${key}: default ${JSON.stringify(p.default)} is not a ${p.type}`);
    if (p.type === "integer") assert.ok(Number.isInteger(p.default), key);
    if (p.enum) assert.ok(p.enum.includes(p.default), `${key}: default not in enum`);
  }
  assert.deepEqual(props()["kernelLsp.applyMode"]?.enum, ["apply", "offer"]);
  assert.deepEqual(props()["kernelLsp.llm.coder.provider"]?.enum, ["openai", "anthropic"]);
});

test("the manifest is complete for packaging", () => {
  const m = manifest();
  assert.equal(m.name, "kernel-lsp");
  assert.match(m.version, /^\d+\.\d+\.\d+$/);
  assert.equal(m.license, "MIT");
  assert.match(m.engines.vscode, /^\^1\.\d+\.0$/);
  assert.equal(m.main, "./dist/extension.js");
  for (const ev of ["onLanguage:cuda-cpp", "onLanguage:python"]) assert.ok(m.activationEvents.includes(ev), ev);
  // @types/vscode must not be newer than engines.vscode, or vsce refuses to package.
  const engine = m.engines.vscode.replace(/^\^/, "").split(".").slice(0, 2).join(".");
  const types = (m.devDependencies["@types/vscode"] ?? "").replace(/^[~^]/, "").split(".").slice(0, 2).join(".");
  assert.equal(types, engine);
});
