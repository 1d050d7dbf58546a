// Checks the packaged .vsix (run after `npm run package`; VSIX names it, default
// kernel-lsp-<version>.vsix): exactly the expected files, the manifest inside equals
// package.json, the bundle needs nothing but Node and `vscode`, and, loaded into a fake
// `vscode`, it activates, registers every contributed command and, with a server path
// that does not exist, tells the user so instead of starting.
"use strict";
const assert = require("node:assert/strict");
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const Module = require("node:module");
const os = require("node:os");
const path = require("node:path");
const { test, after } = require("node:test");

const root = path.resolve(__dirname, "..");
const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
const vsix = path.resolve(root, process.env.VSIX || `kernel-lsp-${pkg.version}.vsix`);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kls-vsix-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
if (fs.existsSync(vsix)) execFileSync("unzip", ["-q", "-o", vsix, "-d", tmp]);

test("the .vsix exists", () => {
  assert.ok(fs.existsSync(vsix), `${vsix} is missing: run npm run package first`);
});

test("the .vsix holds exactly the bundle, manifest, readme, changelog and license", () => {
  const names = execFileSync("unzip", ["-Z1", vsix], { encoding: "utf8" }).split("\n").filter(Boolean).sort();
  assert.deepEqual(names, [
    "[Content_Types].xml",
    "extension.vsixmanifest",
    "extension/LICENSE.txt",
    "extension/changelog.md",
    "extension/dist/extension.js",
    "extension/package.json",
    "extension/readme.md",
  ]);
  const inside = JSON.parse(fs.readFileSync(path.join(tmp, "extension", "package.json"), "utf8"));
  assert.deepEqual(inside.contributes, pkg.contributes);
  assert.equal(inside.version, pkg.version);
  const readme = fs.readFileSync(path.join(tmp, "extension", "readme.md"), "utf8");
  assert.match(readme, /kernelLsp\.serverPath/, "the packaged README documents the settings");
  const manifest = fs.readFileSync(path.join(tmp, "extension.vsixmanifest"), "utf8");
  assert.match(manifest, new RegExp(`Version="${pkg.version.replace(/\./g, "\\.")}"`));
  assert.match(manifest, /Microsoft\.VisualStudio\.Code\.Engine" Value="\^1\.\d+\.0"/);
});

test("the bundle is self-contained: it requires only Node built-ins and vscode", () => {
  const js = fs.readFileSync(path.join(tmp, "extension", "dist", "extension.js"), "utf8");
  const required = new Set([...js.matchAll(/\brequire\("([^"]+)"\)/g)].map((m) => m[1]));
  assert.ok(required.has("vscode"));
  for (const r of required) {
    if (r === "vscode") continue;
    assert.ok(Module.isBuiltin(r), `the bundle requires ${r}, which the .vsix does not ship`);
  }
  assert.ok(!js.includes('require("vscode-languageclient'), "vscode-languageclient must be bundled");
});

/** Just enough of the `vscode` API for activation, recording what the extension did. */
function fakeVscode(settings) {
  const rec = { commands: new Map(), errors: [], status: undefined, output: [] };
  const disposable = () => ({ dispose() {} });
  const Generic = class {};
  const api = {
    version: "1.82.0",
    StatusBarAlignment: { Left: 1, Right: 2 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    ThemeColor: class { constructor(id) { this.id = id; } },
    CancellationError: class extends Error {},
    Disposable: class { constructor(f) { this.f = f; } dispose() { this.f?.(); } static from() { return disposable(); } },
    EventEmitter: class { constructor() { this.event = () => disposable(); } fire() {} dispose() {} },
    window: {
      createOutputChannel: () => ({ appendLine: (l) => rec.output.push(l), append() {}, show() {}, dispose() {} }),
      createStatusBarItem: () => (rec.status = { show() {}, hide() {}, dispose() {} }),
      showErrorMessage: (msg) => { rec.errors.push(msg); return Promise.resolve(undefined); },
      showInformationMessage: () => Promise.resolve(undefined),
      get activeTextEditor() { return undefined; },
    },
    commands: {
      registerCommand: (id, fn) => { rec.commands.set(id, fn); return disposable(); },
      executeCommand: () => Promise.resolve(undefined),
    },
    workspace: {
      workspaceFolders: undefined,
      getConfiguration: () => ({ get: (k) => settings[k] }),
      onDidChangeConfiguration: () => disposable(),
    },
  };
  // vscode-languageclient reads more of the API at load time; give it inert classes.
  const proxy = new Proxy(api, { get: (t, k) => (k in t ? t[k] : Generic) });
  return { proxy, rec };
}

test("activation with a server path that does not exist registers the commands and says what to do", async () => {
  const { proxy, rec } = fakeVscode({ serverPath: "/nonexistent/kernel-lsp" });
  const load = Module._load;
  Module._load = function (request, ...rest) {
    return request === "vscode" ? proxy : load.call(this, request, ...rest);
  };
  let ext;
  try {
    ext = require(path.join(tmp, "extension", "dist", "extension.js"));
  } finally {
    Module._load = load;
  }
  assert.equal(typeof ext.activate, "function");
  assert.equal(typeof ext.deactivate, "function");
  await ext.activate({ subscriptions: [] });

  const contributed = pkg.contributes.commands.map((c) => c.command).sort();
  assert.deepEqual([...rec.commands.keys()].sort(), contributed);
  assert.equal(rec.errors.length, 1, JSON.stringify(rec.errors));
  assert.match(rec.errors[0], /`kernelLsp\.serverPath` points at `\/nonexistent\/kernel-lsp`, which does not exist/);
  assert.equal(rec.status.text, "$(error) kernel-lsp: server not found");

  // A palette command with no server says so rather than failing silently.
  await rec.commands.get("kernelLsp.optimize")(undefined);
  assert.equal(rec.errors.length, 2);
  assert.match(rec.errors[1], /Optimize: the server is not running/);
  await ext.deactivate();
});
