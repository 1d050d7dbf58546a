// Finds the kernel-lsp binary from the `kernelLsp.serverPath` setting, or on PATH, and
// says what to do when it is not there. No `vscode` import; the file system is reached
// through `probe` so tests can give a fake one.

import * as fs from "node:fs";
import * as path from "node:path";

export type Probe = (file: string) => "executable" | "notExecutable" | "directory" | "missing";

export interface ResolveEnv {
  platform: NodeJS.Platform;
  /** PATH and, on Windows, PATHEXT. */
  env: { PATH?: string; PATHEXT?: string; Path?: string };
  home?: string;
  /** The first workspace folder, for relative settings. */
  workspaceFolder?: string;
  probe: Probe;
}

export type Resolved = { ok: true; path: string } | { ok: false; message: string };

export const DEFAULT_SERVER = "kernel-lsp";

const INSTALL_HINT =
  "Install it (in a kernel-lsp checkout: `cargo install --path server`, which puts it in ~/.cargo/bin) " +
  "or set `kernelLsp.serverPath` to the binary's full path, then run \"kernel-lsp: Restart server\".";

/** Reads the file system: whether `file` is a file we may run. */
export const fsProbe: Probe = (file) => {
  let st: fs.Stats;
  try {
    st = fs.statSync(file);
  } catch {
    return "missing";
  }
  if (st.isDirectory()) return "directory";
  if (process.platform === "win32") return "executable";
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return "executable";
  } catch {
    return "notExecutable";
  }
};

function pathApi(platform: NodeJS.Platform): path.PlatformPath {
  return platform === "win32" ? path.win32 : path.posix;
}

function hasSeparator(s: string, platform: NodeJS.Platform): boolean {
  return s.includes("/") || (platform === "win32" && s.includes("\\"));
}

/** Candidate file names for a bare command: on Windows `name` with each PATHEXT. */
function namesFor(name: string, env: ResolveEnv): string[] {
  if (env.platform !== "win32") return [name];
  const exts = (env.env.PATHEXT ?? ".EXE;.CMD;.BAT;.COM").split(";").filter((e) => e !== "");
  if (exts.some((e) => name.toLowerCase().endsWith(e.toLowerCase()))) return [name];
  return [name, ...exts.map((e) => name + e.toLowerCase())];
}

/** Looks `name` up in PATH; returns the first runnable match and the folders searched. */
export function searchPath(name: string, env: ResolveEnv): { found?: string; searched: string[] } {
  const p = pathApi(env.platform);
  const raw = env.env.PATH ?? env.env.Path ?? "";
  const dirs = raw.split(env.platform === "win32" ? ";" : ":").filter((d) => d !== "");
  for (const dir of dirs) {
    for (const n of namesFor(name, env)) {
      const file = p.join(dir, n);
      if (env.probe(file) === "executable") return { found: file, searched: dirs };
    }
  }
  return { searched: dirs };
}

function describeSearch(dirs: string[]): string {
  if (dirs.length === 0) return "PATH is empty";
  const shown = dirs.slice(0, 6).join(", ");
  return `searched ${shown}${dirs.length > 6 ? ` and ${dirs.length - 6} more` : ""}`;
}

/** Resolves the server binary from the setting (empty: `kernel-lsp` on PATH). */
export function resolveServerPath(setting: string | undefined, env: ResolveEnv): Resolved {
  const p = pathApi(env.platform);
  let value = (setting ?? "").trim();
  if (value === "") {
    const { found, searched } = searchPath(DEFAULT_SERVER, env);
    if (found) return { ok: true, path: found };
    return {
      ok: false,
      message: `kernel-lsp: the server binary \`${DEFAULT_SERVER}\` is not on PATH (${describeSearch(searched)}). ${INSTALL_HINT}`,
    };
  }
  if (env.workspaceFolder !== undefined) {
    value = value.split("${workspaceFolder}").join(env.workspaceFolder);
  }
  if (env.home !== undefined && (value === "~" || value.startsWith("~/") || value.startsWith("~\\"))) {
    value = env.home + value.slice(1);
  }
  if (!hasSeparator(value, env.platform) && !p.isAbsolute(value)) {
    // A bare name, like a shell would run it: look it up on PATH.
    const { found, searched } = searchPath(value, env);
    if (found) return { ok: true, path: found };
    return {
      ok: false,
      message: `kernel-lsp: \`kernelLsp.serverPath\` is \`${value}\`, which is not on PATH (${describeSearch(searched)}). ${INSTALL_HINT}`,
    };
  }
  let file = value;
  if (!p.isAbsolute(file)) {
    if (env.workspaceFolder === undefined) {
      return {
        ok: false,
        message: `kernel-lsp: \`kernelLsp.serverPath\` is the relative path \`${value}\`, but no workspace folder is open to resolve it against. Use an absolute path.`,
      };
    }
    file = p.resolve(env.workspaceFolder, file);
  }
  switch (env.probe(file)) {
    case "executable":
      return { ok: true, path: file };
    case "notExecutable":
      return {
        ok: false,
        message: `kernel-lsp: \`kernelLsp.serverPath\` points at \`${file}\`, which is not executable. Run \`chmod +x ${file}\` or point the setting at the kernel-lsp binary.`,
      };
    case "directory":
      return {
        ok: false,
        message: `kernel-lsp: \`kernelLsp.serverPath\` points at the folder \`${file}\`; it must name the kernel-lsp binary itself (e.g. \`${p.join(file, DEFAULT_SERVER)}\`).`,
      };
    case "missing":
      return {
        ok: false,
        message: `kernel-lsp: \`kernelLsp.serverPath\` points at \`${file}\`, which does not exist. Fix the setting, or clear it to use \`${DEFAULT_SERVER}\` from PATH.`,
      };
  }
}

/**
 * How the client starts the server: `kernel-lsp` with no arguments serves LSP on stdio.
 * No `transport` on purpose: with `TransportKind.stdio` vscode-languageclient appends
 * `--stdio` to the arguments, and kernel-lsp rejects unknown arguments.
 */
export function serverExecutable(binary: string, cwd: string | undefined): {
  command: string;
  args: string[];
  options: { cwd?: string };
} {
  return { command: binary, args: [], options: cwd === undefined ? {} : { cwd } };
}
