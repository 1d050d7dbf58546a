import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { fsProbe, Probe, ResolveEnv, resolveServerPath, serverExecutable } from "../serverPath";

/** A fake file system: path -> kind. */
function env(files: Record<string, ReturnType<Probe>>, over: Partial<ResolveEnv> = {}): ResolveEnv {
  return {
    platform: "linux",
    env: { PATH: "/usr/bin:/home/ada/.cargo/bin" },
    home: "/home/ada",
    workspaceFolder: "/src/kernels",
    probe: (f) => files[f] ?? "missing",
    ...over,
  };
}

test("empty setting: kernel-lsp from PATH, first match wins", () => {
  const r = resolveServerPath("", env({ "/home/ada/.cargo/bin/kernel-lsp": "executable" }));
  assert.deepEqual(r, { ok: true, path: "/home/ada/.cargo/bin/kernel-lsp" });
  const r2 = resolveServerPath(undefined, env({ "/usr/bin/kernel-lsp": "executable", "/home/ada/.cargo/bin/kernel-lsp": "executable" }));
  assert.deepEqual(r2, { ok: true, path: "/usr/bin/kernel-lsp" });
});

test("a non-executable file on PATH is skipped", () => {
  const r = resolveServerPath("", env({ "/usr/bin/kernel-lsp": "notExecutable", "/home/ada/.cargo/bin/kernel-lsp": "executable" }));
  assert.deepEqual(r, { ok: true, path: "/home/ada/.cargo/bin/kernel-lsp" });
});

test("not on PATH: the message names the folders searched and both ways out", () => {
  const r = resolveServerPath("", env({}));
  assert.equal(r.ok, false);
  if (r.ok) return;
  assert.match(r.message, /`kernel-lsp` is not on PATH \(searched \/usr\/bin, \/home\/ada\/\.cargo\/bin\)/);
  assert.match(r.message, /cargo install --path server/);
  assert.match(r.message, /kernelLsp\.serverPath/);
  const empty = resolveServerPath("", env({}, { env: {} }));
  assert.ok(!empty.ok && /PATH is empty/.test(empty.message));
});

test("absolute, ~ and ${workspaceFolder} settings", () => {
  const files = { "/opt/kls/kernel-lsp": "executable", "/home/ada/bin/kernel-lsp": "executable", "/src/kernels/target/debug/kernel-lsp": "executable" } as const;
  assert.deepEqual(resolveServerPath("/opt/kls/kernel-lsp", env(files)), { ok: true, path: "/opt/kls/kernel-lsp" });
  assert.deepEqual(resolveServerPath("~/bin/kernel-lsp", env(files)), { ok: true, path: "/home/ada/bin/kernel-lsp" });
  assert.deepEqual(resolveServerPath("${workspaceFolder}/target/debug/kernel-lsp", env(files)), {
    ok: true,
    path: "/src/kernels/target/debug/kernel-lsp",
  });
});

test("a relative path is taken from the workspace folder; without one it is refused", () => {
  const files = { "/src/kernels/target/debug/kernel-lsp": "executable" } as const;
  assert.deepEqual(resolveServerPath("target/debug/kernel-lsp", env(files)), {
    ok: true,
    path: "/src/kernels/target/debug/kernel-lsp",
  });
  const r = resolveServerPath("./target/debug/kernel-lsp", env(files, { workspaceFolder: undefined }));
  assert.ok(!r.ok && /relative path .* no workspace folder is open/.test(r.message), JSON.stringify(r));
});

test("a bare name is looked up on PATH", () => {
  const r = resolveServerPath("kernel-lsp-dev", env({ "/usr/bin/kernel-lsp-dev": "executable" }));
  assert.deepEqual(r, { ok: true, path: "/usr/bin/kernel-lsp-dev" });
  const miss = resolveServerPath("kernel-lsp-dev", env({}));
  assert.ok(!miss.ok && /`kernel-lsp-dev`, which is not on PATH/.test(miss.message));
});

test("missing, not executable, a folder: each says what is wrong and what to do", () => {
  const missing = resolveServerPath("/opt/nope/kernel-lsp", env({}));
  assert.ok(!missing.ok && /`\/opt\/nope\/kernel-lsp`, which does not exist/.test(missing.message));
  const noX = resolveServerPath("/opt/kernel-lsp", env({ "/opt/kernel-lsp": "notExecutable" }));
  assert.ok(!noX.ok && /chmod \+x \/opt\/kernel-lsp/.test(noX.message));
  const dir = resolveServerPath("/opt/kls", env({ "/opt/kls": "directory" }));
  assert.ok(!dir.ok && /the folder `\/opt\/kls`.*`\/opt\/kls\/kernel-lsp`/.test(dir.message));
});

test("Windows: PATHEXT, ; separators and backslashes", () => {
  const r = resolveServerPath(
    "",
    env(
      { "C:\\tools\\kernel-lsp.exe": "executable" },
      { platform: "win32", env: { Path: "C:\\Windows;C:\\tools", PATHEXT: ".COM;.EXE" }, home: "C:\\Users\\ada", workspaceFolder: "C:\\src" },
    ),
  );
  assert.deepEqual(r, { ok: true, path: "C:\\tools\\kernel-lsp.exe" });
  const rel = resolveServerPath(
    "target\\debug\\kernel-lsp.exe",
    env({ "C:\\src\\target\\debug\\kernel-lsp.exe": "executable" }, { platform: "win32", env: {}, workspaceFolder: "C:\\src" }),
  );
  assert.deepEqual(rel, { ok: true, path: "C:\\src\\target\\debug\\kernel-lsp.exe" });
});

test("fsProbe on the real file system", { skip: process.platform === "win32" ? "POSIX modes" : false }, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kls-probe-"));
  try {
    const exe = path.join(dir, "kernel-lsp");
    const plain = path.join(dir, "notes.txt");
    fs.writeFileSync(exe, "#!/bin/sh\n", { mode: 0o755 });
    fs.writeFileSync(plain, "x", { mode: 0o644 });
    assert.equal(fsProbe(exe), "executable");
    assert.equal(fsProbe(dir), "directory");
    assert.equal(fsProbe(path.join(dir, "absent")), "missing");
    // Even root needs an x bit to run a file.
    assert.equal(fsProbe(plain), "notExecutable");
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("the server starts with no arguments and no transport (which would append --stdio)", () => {
  const exe = serverExecutable("/opt/kernel-lsp", "/src/kernels");
  assert.deepEqual(exe, { command: "/opt/kernel-lsp", args: [], options: { cwd: "/src/kernels" } });
  assert.equal("transport" in exe, false);
  assert.deepEqual(serverExecutable("/opt/kernel-lsp", undefined).options, {});
});
