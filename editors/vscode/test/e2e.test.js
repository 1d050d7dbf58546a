// The .vsix in a real VS Code: code-server (VS Code in the browser) with the extension
// installed from the .vsix and kernel-lsp as its server, driven by headless Chromium
// through playwright-core, as a user would: open a kernel file with a spec mistake, see
// the diagnostic in the Problems panel, hover the kernel, insert a spec with the code
// action, find the kernel-lsp commands in the Command Palette and run one.
// Run by e2e.sh, which finds the tools and passes them in:
//   CODE_SERVER, CHROMIUM, KERNEL_LSP_BIN, VSIX, E2E_OUT (screenshots, logs).
"use strict";
const assert = require("node:assert/strict");
const { spawn, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { test, before, after } = require("node:test");
const { chromium } = require("playwright-core");

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set (run this through e2e.sh)`);
  return v;
};
const CODE_SERVER = env("CODE_SERVER");
const CHROMIUM = env("CHROMIUM");
const KERNEL_LSP_BIN = env("KERNEL_LSP_BIN");
const VSIX = env("VSIX");
const OUT = env("E2E_OUT");
const REPO = path.resolve(__dirname, "..", "..", "..");

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kls-e2e-"));
const userData = path.join(tmp, "user-data");
const extensions = path.join(tmp, "extensions");
const workspace = path.join(tmp, "kernels");
const kernelFile = path.join(workspace, "saxpy.cu");

let server;
let serverLog = "";
let browser;
let page;

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitForHttp(url, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (server.exitCode !== null) throw new Error(`code-server exited (${server.exitCode}):\n${serverLog}`);
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`code-server did not answer ${url} within ${ms} ms:\n${serverLog}`);
}

async function shot(name) {
  if (page) await page.screenshot({ path: path.join(OUT, `${name}.png`) }).catch(() => {});
}

/** Runs a Command Palette command by its title. */
async function palette(text) {
  await page.keyboard.press("Escape");
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await input.fill(`>${text}`);
  return input;
}

/** The labels of the rows the Command Palette shows now. */
async function paletteRows() {
  const rows = page.locator(".quick-input-widget .monaco-list-row");
  await rows.first().waitFor({ state: "visible", timeout: 10000 });
  return rows.evaluateAll((els) => els.map((e) => e.getAttribute("aria-label") || e.textContent || ""));
}

/** Puts the cursor on the first occurrence of `text` in the open editor (Ctrl+F, Escape). */
async function cursorTo(text) {
  await page.locator(".monaco-editor .view-lines").first().click();
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("Control+f");
  const find = page.locator(".find-widget textarea, .find-widget input").first();
  await find.fill(text);
  await page.keyboard.press("Enter");
  await page.keyboard.press("Escape");
  // The match stays selected; collapse the selection onto its start.
  await page.keyboard.press("ArrowLeft");
}

before(async () => {
  fs.mkdirSync(OUT, { recursive: true });
  fs.mkdirSync(path.join(userData, "User"), { recursive: true });
  fs.mkdirSync(workspace, { recursive: true });
  // The shipped example with one spec mistake (f33), plus a kernel without a spec.
  const saxpy = fs.readFileSync(path.join(REPO, "examples", "saxpy.cu"), "utf8");
  const broken = saxpy.replace("x: in f32[n]", "x: in f33[n]");
  assert.notEqual(broken, saxpy, "examples/saxpy.cu no longer has `x: in f32[n]`; update the fixture");
  fs.writeFileSync(
    kernelFile,
    broken +
      '\nextern "C" __global__ void scale(int n, float a, float* y) {\n' +
      "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" +
      "    if (i < n) y[i] = a * y[i];\n}\n",
  );
  fs.writeFileSync(
    path.join(userData, "User", "settings.json"),
    JSON.stringify(
      {
        "kernelLsp.serverPath": KERNEL_LSP_BIN,
        // No NVRTC here: the spec checks are what this test looks at.
        "kernelLsp.compileOnType": false,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": false,
        "security.workspace.trust.enabled": false,
        "extensions.autoCheckUpdates": false,
        "extensions.autoUpdate": false,
        "telemetry.telemetryLevel": "off",
        "editor.hover.delay": 100,
      },
      null,
      2,
    ),
  );

  const install = execFileSync(
    CODE_SERVER,
    ["--user-data-dir", userData, "--extensions-dir", extensions, "--install-extension", VSIX],
    { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
  );
  fs.writeFileSync(path.join(OUT, "install-extension.log"), install);
  assert.match(install, /kernel-lsp.*(successfully installed|already installed)/i, install);

  const port = await freePort();
  server = spawn(
    CODE_SERVER,
    [
      "--auth", "none",
      "--bind-addr", `127.0.0.1:${port}`,
      "--disable-telemetry",
      "--disable-update-check",
      "--disable-workspace-trust",
      "--disable-getting-started-override",
      "--user-data-dir", userData,
      "--extensions-dir", extensions,
      workspace,
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, KERNEL_LSP_LOG: "info" } },
  );
  server.stdout.on("data", (d) => (serverLog += d));
  server.stderr.on("data", (d) => (serverLog += d));
  const url = `http://127.0.0.1:${port}/`;
  await waitForHttp(`${url}healthz`, 60000);

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${url}?folder=${encodeURIComponent(workspace)}`);
  await page.locator(".monaco-workbench").waitFor({ timeout: 60000 });
  // Open the kernel file with Quick Open, as a user would.
  await page.locator(".monaco-workbench").click({ position: { x: 700, y: 400 } });
  await page.keyboard.press("Control+p");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await input.fill("saxpy.cu");
  await page.locator(".quick-input-widget .monaco-list-row", { hasText: "saxpy.cu" }).first().waitFor();
  await page.keyboard.press("Enter");
  await page.locator(".monaco-editor .view-lines", { hasText: "__global__" }).first().waitFor({ timeout: 30000 });
});

after(async () => {
  await shot("final");
  await browser?.close().catch(() => {});
  if (server && server.exitCode === null) server.kill("SIGTERM");
  fs.writeFileSync(path.join(OUT, "code-server.log"), serverLog);
  // The extension's output channel is in the code-server logs folder; keep it.
  try {
    execFileSync("bash", ["-c", `cp -r "${userData}/logs" "${OUT}/logs"`]);
  } catch {
    // no logs written
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

test("the spec mistake shows in the Problems panel, from kernel-lsp", async () => {
  await page.keyboard.press("Control+Shift+m");
  const row = page.locator(".markers-panel .monaco-list-row", { hasText: "`f33` is not an element type" });
  try {
    await row.first().waitFor({ timeout: 45000 });
  } catch (e) {
    await shot("problems");
    throw e;
  }
  const text = await row.first().innerText();
  assert.match(text, /did you mean `f32`\?/);
  assert.match(await page.locator(".markers-panel").innerText(), /@bench/);
});

test("hovering the kernel shows kernel-lsp's hover", async () => {
  await cursorTo("saxpy(int n");
  await page.keyboard.press("Control+k");
  await page.keyboard.press("Control+i");
  const hover = page.locator(".monaco-hover", { hasText: "saxpy" });
  try {
    await hover.first().waitFor({ state: "visible", timeout: 15000 });
  } catch (e) {
    await shot("hover");
    throw e;
  }
  const text = await hover.first().innerText();
  assert.match(text, /__global__|@bench|cases?/i, text);
  await page.keyboard.press("Escape");
});

test("the code action 'Insert @bench spec' writes a spec above the kernel without one", async () => {
  await cursorTo("scale(int n");
  await page.keyboard.press("Control+.");
  const item = page.getByText(/Insert @bench spec for `scale`/);
  try {
    await item.first().waitFor({ state: "visible", timeout: 15000 });
  } catch (e) {
    await shot("code-action");
    throw e;
  }
  // The widget focuses its first (here only) action; Enter applies it, as a user would.
  await page.keyboard.press("Enter");
  await page.locator(".context-view .action-widget").waitFor({ state: "hidden", timeout: 5000 }).catch(() => {});
  await page.keyboard.press("Control+s");
  const end = Date.now() + 15000;
  let text = "";
  while (Date.now() < end) {
    text = fs.readFileSync(kernelFile, "utf8");
    if (/@bench[^\n]*\n[^]*void scale/.test(text.slice(text.indexOf("void saxpy")))) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const tail = text.slice(text.indexOf("void saxpy"));
  assert.match(tail, /\/\/ @bench[^\n]*\n(?:[^\n]*\n)*?extern "C" __global__ void scale/, tail);
});

test("the Command Palette lists every kernel-lsp command in a CUDA file", async () => {
  await page.locator(".monaco-editor .view-lines").first().click();
  await palette("kernel-lsp: ");
  const rows = await paletteRows();
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
  await page.keyboard.press("Escape");
});

test("a palette command answers with a visible notification", async () => {
  await cursorTo("saxpy(int n");
  await palette("kernel-lsp: Benchmark kernel");
  await page.locator(".quick-input-widget .monaco-list-row", { hasText: "Benchmark kernel" }).first().waitFor();
  await page.keyboard.press("Enter");
  // Today's server answers that it lacks the command; a newer one starts the job (a
  // progress notification) and reports its outcome. Either way the user sees it.
  const toast = page.locator(".notifications-toasts .notification-list-item", { hasText: /Benchmark|saxpy/ });
  try {
    await toast.first().waitFor({ state: "visible", timeout: 30000 });
  } catch (e) {
    await shot("command");
    throw e;
  }
  fs.writeFileSync(path.join(OUT, "command-notification.txt"), await toast.first().innerText());
});

test("the status bar item is kernel-lsp's, running", async () => {
  // Found by its id (the extension's id, then the item's), as its text changes with the
  // worker status: "kernel-lsp" before a status, a GPU name or "no GPU" after.
  const item = page.locator('.statusbar-item[id$="kernelLsp.status"]');
  await item.first().waitFor({ state: "visible", timeout: 10000 });
  const text = (await item.first().innerText()).trim();
  fs.writeFileSync(path.join(OUT, "status-bar.txt"), text);
  assert.match(text, /kernel-lsp|GPU|NVIDIA/, text);
  assert.doesNotMatch(text, /not found|stopped/, text);
});
