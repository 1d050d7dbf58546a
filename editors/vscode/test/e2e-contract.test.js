// The extension's side of the editor contract in a real VS Code, against a test double
// of the server's side (contract-server.js) until kernel-lsp serves it: the settings
// reach the server as initializationOptions and on change, the status bar shows the
// worker and the running job from `kernel-lsp/status`, a palette command sends
// `{uri, kernel, position}` with a workDoneToken, shows the server's $/progress and
// cancels from the notification, and outside a kernel the palette asks which one.
// Run by e2e.sh.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { test, before, after } = require("node:test");

const { Session } = require("./e2e-session");

const recordFile = path.join(require("node:os").tmpdir(), `kls-contract-${process.pid}.jsonl`);
const s = new Session({
  name: "contract",
  serverPath: path.join(__dirname, "contract-server.js"),
  settings: { "kernelLsp.applyMode": "offer" },
  machineSettings: { "kernelLsp.worker": "ssh gpu-box kernel-lsp worker" },
  env: { KLS_CONTRACT_RECORD: recordFile },
});
before(() => s.start());
after(async () => {
  await s.close();
  if (fs.existsSync(recordFile)) fs.renameSync(recordFile, path.join(s.out, "record.jsonl"));
});

function records(kind) {
  if (!fs.existsSync(recordFile)) return [];
  return fs
    .readFileSync(recordFile, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((r) => r.kind === kind)
    .map((r) => r.data);
}

async function waitFor(what, f, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; recorded: ${fs.existsSync(recordFile) ? fs.readFileSync(recordFile, "utf8") : "nothing"}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Where `text` starts in the kernel file, as an LSP position. */
function positionOf(text) {
  const lines = fs.readFileSync(s.kernelFile, "utf8").split("\n");
  const line = lines.findIndex((l) => l.includes(text));
  return { line, character: lines[line].indexOf(text) };
}

test("the settings reach the server as initializationOptions", async () => {
  const [init] = await waitFor("initialize", () => records("initialize").length && records("initialize"));
  assert.deepEqual(init.initializationOptions, {
    arch: "sm_90",
    compileOnType: false,
    compileDebounceMs: 300,
    maxFileBytes: 2097152,
    analysisBudgetMs: 2000,
    sms: 132,
    worker: "ssh gpu-box kernel-lsp worker",
    workers: 1,
    applyMode: "offer",
    benchOnSave: false,
    stepsPerAction: 0,
    optimizeBudgetS: 600,
    sharedPolicy: false,
    useLlm: false,
    hintSpeedupVs: "all",
    llm: { callsPerStep: 6, repairRounds: 2 },
  });
});

test("the status bar shows the worker's GPU from kernel-lsp/status", async () => {
  await s.expectVisible(s.statusItem().filter({ hasText: "NVIDIA H100 80GB HBM3" }), "status-gpu", 15000);
});

test("Optimize sends {uri, kernel, position} with a progress token, shows the job, and Cancel stops it", async () => {
  await s.cursorTo("saxpy(int n");
  await s.runCommand("kernel-lsp: Optimize kernel: next step");
  const toast = s.page.locator(".notifications-toasts .notification-list-item", { hasText: "verifying block=(32, 8) (2/7)" });
  await s.expectVisible(toast, "progress", 15000);
  assert.match(await toast.first().innerText(), /kernel-lsp: Optimize `saxpy`/);
  await s.expectVisible(s.statusItem().filter({ hasText: "optimize saxpy: verifying 2/7" }), "status-job", 10000);

  const [call] = await waitFor("executeCommand", () => records("executeCommand").length && records("executeCommand"));
  assert.equal(call.command, "kernel-lsp.optimize");
  assert.deepEqual(call.arguments, [
    { uri: `file://${s.kernelFile}`, kernel: "saxpy", position: positionOf("saxpy(int n") },
  ]);
  assert.equal(typeof call.workDoneToken, "string");

  await toast.first().hover();
  await toast.first().getByRole("button", { name: "Cancel" }).click();
  await waitFor("the job to be cancelled", () => records("cancelled").length);
  await s.expectVisible(s.statusItem().filter({ hasText: "NVIDIA H100 80GB HBM3" }), "status-after-cancel", 10000);
});

test("outside every kernel of a file with two, the palette command asks which", async () => {
  await s.cursorTo("#include");
  await s.runCommand("kernel-lsp: Pin kernel as baseline");
  const input = s.page.locator(".quick-input-widget input");
  await s.expectVisible(s.page.locator(".quick-input-widget .monaco-list-row", { hasText: "scale" }), "pick", 10000);
  assert.deepEqual(
    (await s.paletteRows()).map((r) => r.trim()).sort(),
    ["saxpy", "scale"],
  );
  await input.fill("scale");
  await s.page.keyboard.press("Enter");
  const toast = s.page.locator(".notifications-toasts .notification-list-item", { hasText: "kernel-lsp.pinBaseline done for scale" });
  await s.expectVisible(toast, "pinned", 10000);
  const call = records("executeCommand").at(-1);
  assert.deepEqual(call.arguments, [{ uri: `file://${s.kernelFile}`, kernel: "scale", position: positionOf("#include") }]);
  assert.equal(call.workDoneToken, undefined, "short commands take no progress token");
});

test("a settings change reaches the server as didChangeConfiguration", async () => {
  // Through the Settings editor, as a user would.
  await s.page.keyboard.press("Escape");
  await s.page.keyboard.press("Control+,");
  const search = s.page.locator(".settings-editor .suggest-input-container textarea, .settings-editor .search-container input").first();
  await search.waitFor({ state: "visible", timeout: 15000 });
  await search.fill("kernelLsp.arch");
  const field = s.page.locator('.settings-editor input[aria-label="kernelLsp.arch"]').first();
  await s.expectVisible(field, "settings-editor", 15000);
  await field.click();
  await field.fill("sm_80");
  await s.page.keyboard.press("Tab");
  assert.equal(await field.inputValue(), "sm_80");
  const change = await waitFor("didChangeConfiguration with sm_80", () =>
    records("didChangeConfiguration").find((c) => c?.kernelLsp?.arch === "sm_80"),
  );
  assert.equal(change.kernelLsp.worker, "ssh gpu-box kernel-lsp worker");
  assert.equal("serverPath" in change.kernelLsp, false);
});
