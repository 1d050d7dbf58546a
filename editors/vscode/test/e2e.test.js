// The .vsix in a real VS Code against the real kernel-lsp (KERNEL_LSP_BIN): code-server
// with the extension installed from the .vsix, driven by headless Chromium as a user
// would. Opens a kernel file with a spec mistake, sees the diagnostic in the Problems
// panel, hovers the kernel, inserts a spec with the code action, finds the kernel-lsp
// commands in the Command Palette and runs one. Run by e2e.sh.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { test, before, after } = require("node:test");

const { Session, env } = require("./e2e-session");

const s = new Session({ name: "kernel-lsp", serverPath: env("KERNEL_LSP_BIN"), settings: { "editor.hover.delay": 100 } });
before(() => s.start());
after(() => s.close());

test("the spec mistake shows in the Problems panel, from kernel-lsp", async () => {
  await s.page.keyboard.press("Control+Shift+m");
  const row = s.page.locator(".markers-panel .monaco-list-row", { hasText: "`f33` is not an element type" });
  await s.expectVisible(row, "problems", 45000);
  assert.match(await row.first().innerText(), /did you mean `f32`\?/);
  assert.match(await s.page.locator(".markers-panel").innerText(), /@bench/);
});

test("hovering the kernel shows kernel-lsp's hover", async () => {
  await s.cursorTo("saxpy(int n");
  await s.page.keyboard.press("Control+k");
  await s.page.keyboard.press("Control+i");
  const hover = s.page.locator(".monaco-hover", { hasText: "saxpy" });
  await s.expectVisible(hover, "hover", 15000);
  const text = await hover.first().innerText();
  assert.match(text, /__global__|@bench|cases?/i, text);
  await s.page.keyboard.press("Escape");
});

test("the code action 'Insert @bench spec' writes a spec above the kernel without one", async () => {
  await s.cursorTo("scale(int n");
  await s.page.keyboard.press("Control+.");
  await s.expectVisible(s.page.getByText(/Insert @bench spec for `scale`/), "code-action", 15000);
  // The widget focuses its first (here only) action; Enter applies it, as a user would.
  await s.page.keyboard.press("Enter");
  await s.page.locator(".context-view .action-widget").waitFor({ state: "hidden", timeout: 5000 }).catch(() => {});
  await s.page.keyboard.press("Control+s");
  const spec = /\/\/ @bench[^\n]*\n(?:[^\n]*\n)*?extern "C" __global__ void scale/;
  const end = Date.now() + 15000;
  let tail = "";
  while (Date.now() < end) {
    const text = fs.readFileSync(s.kernelFile, "utf8");
    tail = text.slice(text.indexOf("void saxpy"));
    if (spec.test(tail)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.match(tail, spec, tail);
});

test("the Command Palette lists every kernel-lsp command in a CUDA file", async () => {
  await s.cursorTo("saxpy(int n");
  await s.palette("kernel-lsp: ");
  const rows = await s.paletteRows();
  const want = [
    "Optimize kernel: next step",
    "Tune parameters",
    "Benchmark kernel",
    "Pin kernel as baseline",
    "Revert kernel to last verified version",
    "Show kernel history",
    "Apply verified rewrite",
    "Ask the coder to fix kernel",
    "Restart server",
    "Show server output",
  ];
  for (const title of want) {
    assert.ok(
      rows.some((r) => r.includes(`kernel-lsp: ${title}`)),
      `"kernel-lsp: ${title}" is not in the palette: ${JSON.stringify(rows)}`,
    );
  }
  await s.page.keyboard.press("Escape");
});

test("a palette command answers with a visible notification", async () => {
  await s.cursorTo("saxpy(int n");
  await s.runCommand("kernel-lsp: Benchmark kernel");
  // A server without the command gets the extension's message saying so; one with it
  // starts the job (a progress notification) and reports its outcome.
  const toast = s.page.locator(".notifications-toasts .notification-list-item", { hasText: /Benchmark|saxpy/ });
  await s.expectVisible(toast, "command", 30000);
  fs.writeFileSync(path.join(s.out, "command-notification.txt"), await toast.first().innerText());
});

test("the status bar item is kernel-lsp's, running", async () => {
  await s.expectVisible(s.statusItem(), "status", 10000);
  // The command above may still be running (the item then shows the job's stage); wait
  // for the job to end and the worker status to come back.
  let text = "";
  const deadline = Date.now() + 60000;
  do {
    text = (await s.statusItem().first().innerText()).trim();
    if (/kernel-lsp|GPU|NVIDIA/.test(text)) break;
    await new Promise((r) => setTimeout(r, 250));
  } while (Date.now() < deadline);
  assert.match(text, /kernel-lsp|GPU|NVIDIA/, text);
  assert.doesNotMatch(text, /not found|stopped/, text);
});
