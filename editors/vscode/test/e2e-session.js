// One code-server session for the end-to-end tests: a workspace with a kernel file, the
// .vsix installed, code-server on a loopback port, and headless Chromium on it with the
// kernel file open. Tools come from e2e.sh: CODE_SERVER, CHROMIUM, VSIX, E2E_OUT.
"use strict";
const assert = require("node:assert/strict");
const { spawn, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { chromium } = require("playwright-core");

function env(k) {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set (run the end-to-end tests through e2e.sh)`);
  return v;
}

const REPO = path.resolve(__dirname, "..", "..", "..");

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

/** examples/saxpy.cu with one spec mistake (f33), plus a kernel without a spec. */
function kernelFixture() {
  const saxpy = fs.readFileSync(path.join(REPO, "examples", "saxpy.cu"), "utf8");
  const broken = saxpy.replace("x: in f32[n]", "x: in f33[n]");
  assert.notEqual(broken, saxpy, "examples/saxpy.cu no longer has `x: in f32[n]`; update the fixture");
  return (
    broken +
    '\nextern "C" __global__ void scale(int n, float a, float* y) {\n' +
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" +
    "    if (i < n) y[i] = a * y[i];\n}\n"
  );
}

class Session {
  /** @param {{name: string, serverPath: string, settings?: object, machineSettings?: object, env?: object}} opts */
  constructor(opts) {
    this.name = opts.name;
    this.out = path.join(env("E2E_OUT"), opts.name);
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kls-e2e-"));
    this.userData = path.join(this.tmp, "user-data");
    this.extensions = path.join(this.tmp, "extensions");
    this.config = path.join(this.tmp, "code-server.yaml");
    this.workspace = path.join(this.tmp, "kernels");
    this.kernelFile = path.join(this.workspace, "saxpy.cu");
    this.settingsFile = path.join(this.userData, "User", "settings.json");
    this.machineSettingsFile = path.join(this.userData, "Machine", "settings.json");
    this.opts = opts;
    this.log = "";
  }

  writeSettings() {
    // code-server is a remote window: settings of `machine-overridable` scope (the paths,
    // the worker command) belong in the machine's settings (the Settings editor's
    // "Remote" tab). VS Code reads them from the user settings at start but drops them
    // there on the next change, as it does for any remote.
    const machine = {
      "kernelLsp.serverPath": this.opts.serverPath,
      ...this.opts.machineSettings,
    };
    fs.mkdirSync(path.dirname(this.machineSettingsFile), { recursive: true });
    fs.writeFileSync(this.machineSettingsFile, JSON.stringify(machine, null, 2));
    const settings = {
      // No NVRTC here: the spec checks are what these tests look at.
      "kernelLsp.compileOnType": false,
      "workbench.startupEditor": "none",
      "workbench.tips.enabled": false,
      "security.workspace.trust.enabled": false,
      "extensions.autoCheckUpdates": false,
      "extensions.autoUpdate": false,
      "telemetry.telemetryLevel": "off",
      ...this.opts.settings,
    };
    fs.writeFileSync(this.settingsFile, JSON.stringify(settings, null, 2));
  }

  async start() {
    const codeServer = env("CODE_SERVER");
    fs.mkdirSync(this.out, { recursive: true });
    fs.mkdirSync(path.dirname(this.settingsFile), { recursive: true });
    fs.mkdirSync(this.workspace, { recursive: true });
    fs.writeFileSync(this.kernelFile, kernelFixture());
    fs.writeFileSync(this.config, "auth: none\ncert: false\n");
    this.writeSettings();

    const install = execFileSync(
      codeServer,
      ["--config", this.config, "--user-data-dir", this.userData, "--extensions-dir", this.extensions, "--install-extension", env("VSIX")],
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
    );
    fs.writeFileSync(path.join(this.out, "install-extension.log"), install);
    assert.match(install, /kernel-lsp.*successfully installed/i, install);

    const port = await freePort();
    this.server = spawn(
      codeServer,
      [
        // Its own config file, so nothing is written to ~/.config/code-server.
        "--config", this.config,
        "--auth", "none",
        "--bind-addr", `127.0.0.1:${port}`,
        "--disable-telemetry",
        "--disable-update-check",
        "--disable-workspace-trust",
        "--disable-getting-started-override",
        "--user-data-dir", this.userData,
        "--extensions-dir", this.extensions,
        this.workspace,
      ],
      { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...this.opts.env } },
    );
    this.server.stdout.on("data", (d) => (this.log += d));
    this.server.stderr.on("data", (d) => (this.log += d));
    const url = `http://127.0.0.1:${port}/`;
    await this.waitForHttp(`${url}healthz`, 60000);

    this.browser = await chromium.launch({
      executablePath: env("CHROMIUM"),
      headless: true,
      args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
    });
    this.page = await this.browser.newPage({ viewport: { width: 1400, height: 900 } });
    const page = this.page;
    await page.goto(`${url}?folder=${encodeURIComponent(this.workspace)}`);
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
  }

  async waitForHttp(url, ms) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (this.server.exitCode !== null) throw new Error(`code-server exited (${this.server.exitCode}):\n${this.log}`);
      try {
        const r = await fetch(url);
        if (r.ok) return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`code-server did not answer ${url} within ${ms} ms:\n${this.log}`);
  }

  async shot(name) {
    if (this.page) await this.page.screenshot({ path: path.join(this.out, `${name}.png`) }).catch(() => {});
  }

  /** Waits for `locator`; on a time-out keeps a screenshot named `name`. */
  async expectVisible(locator, name, timeout) {
    try {
      await locator.first().waitFor({ state: "visible", timeout });
    } catch (e) {
      await this.shot(name);
      throw e;
    }
  }

  /** Opens the Command Palette with `text` typed. */
  async palette(text) {
    const page = this.page;
    await page.keyboard.press("Escape");
    await page.keyboard.press("F1");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    await input.fill(`>${text}`);
  }

  /** Runs a Command Palette command by its full title. */
  async runCommand(title) {
    await this.palette(title);
    await this.page.locator(".quick-input-widget .monaco-list-row", { hasText: title }).first().waitFor();
    await this.page.keyboard.press("Enter");
  }

  /** The labels of the rows the Command Palette shows now. */
  async paletteRows() {
    const rows = this.page.locator(".quick-input-widget .monaco-list-row");
    await rows.first().waitFor({ state: "visible", timeout: 10000 });
    return rows.evaluateAll((els) => els.map((e) => e.getAttribute("aria-label") || e.textContent || ""));
  }

  /** Puts the cursor on the first occurrence of `text` in the open editor. */
  async cursorTo(text) {
    const page = this.page;
    await page.keyboard.press("Escape");
    await page.locator(".monaco-editor .view-lines").first().click();
    await page.keyboard.press("Control+Home");
    await page.keyboard.press("Control+f");
    await page.locator(".find-widget textarea, .find-widget input").first().fill(text);
    await page.keyboard.press("Enter");
    await page.keyboard.press("Escape");
    // The match stays selected; collapse the selection onto its start.
    await page.keyboard.press("ArrowLeft");
  }

  /** The status bar item of the extension (found by id: its text changes). */
  statusItem() {
    return this.page.locator('.statusbar-item[id$="kernelLsp.status"]');
  }

  async close() {
    await this.shot("final");
    await this.browser?.close().catch(() => {});
    if (this.server && this.server.exitCode === null) this.server.kill("SIGTERM");
    fs.writeFileSync(path.join(this.out, "code-server.log"), this.log);
    // The extension's output channel is in the code-server logs folder; keep it.
    const logs = path.join(this.userData, "logs");
    if (fs.existsSync(logs)) fs.cpSync(logs, path.join(this.out, "logs"), { recursive: true });
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}

module.exports = { Session, REPO, env };
