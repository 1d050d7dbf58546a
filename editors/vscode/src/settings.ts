// The `kernelLsp.*` settings of VS Code -> the settings object kernel-lsp reads
// (initializationOptions, workspace/didChangeConfiguration, workspace/configuration).
// Pure: no `vscode` import, so `node --test` runs it. The server's names and meanings are
// in docs/configuration.md and the editor contract; this file only decides what is sent.
//
// Rules:
// - An empty string means "not set, the server decides" (its search or its default), so
//   it is left out: the server would take "" as a path.
// - Every other value is sent as the user wrote it, even with the wrong type: the server
//   names a bad field in a warning, where a client that dropped it would hide the mistake.
// - A leading `~` and `${workspaceFolder}` are expanded in the path settings (the
//   server runs them as given); the worker command is left alone, as it may run remotely.
// - An LLM role (`llm.strategy`, `llm.coder`) is sent only when its `url` or `model` is
//   set: a provider alone does not configure an endpoint.

/** Reads one setting below `kernelLsp.`, e.g. `get("llm.coder.url")`. */
export type ConfigReader = (key: string) => unknown;

export interface PathContext {
  home?: string;
  workspaceFolder?: string;
}

export type JsonObject = { [key: string]: unknown };

/** Top-level settings sent to the server, each with how its value is treated. */
export const SERVER_SETTINGS: Readonly<Record<string, "path" | "value">> = {
  nvrtcPath: "path",
  ptxasPath: "path",
  cudaInclude: "path",
  arch: "value",
  compileOnType: "value",
  compileDebounceMs: "value",
  maxFileBytes: "value",
  analysisBudgetMs: "value",
  sms: "value",
  worker: "value",
  workers: "value",
  python: "path",
  applyMode: "value",
  benchOnSave: "value",
  stepsPerAction: "value",
  optimizeBudgetS: "value",
  useLlm: "value",
  sharedPolicy: "value",
  hintSpeedupVs: "value",
};

/** Settings under `llm.` other than the two roles. */
export const LLM_SETTINGS: Readonly<Record<string, "path" | "value">> = {
  callsPerStep: "value",
  repairRounds: "value",
  promptsDir: "path",
};

export const LLM_ROLES = ["strategy", "coder"] as const;
export const LLM_ROLE_FIELDS = ["provider", "url", "model", "apiKeyEnv"] as const;

/** Settings the extension itself uses; never sent to the server. */
export const CLIENT_ONLY_SETTINGS = ["serverPath", "trace.server"] as const;

/** Every `kernelLsp.*` key the server gets (flattened), for checks against package.json. */
export function serverSettingKeys(): string[] {
  const keys = Object.keys(SERVER_SETTINGS);
  for (const k of Object.keys(LLM_SETTINGS)) keys.push(`llm.${k}`);
  for (const role of LLM_ROLES) {
    for (const f of LLM_ROLE_FIELDS) keys.push(`llm.${role}.${f}`);
  }
  return keys;
}

/** Expands a leading `~` and `${workspaceFolder}`; other text is kept as is. */
export function expandPath(value: string, ctx: PathContext): string {
  let v = value;
  if (ctx.workspaceFolder !== undefined) {
    v = v.split("${workspaceFolder}").join(ctx.workspaceFolder);
  }
  if (ctx.home !== undefined && (v === "~" || v.startsWith("~/") || v.startsWith("~\\"))) {
    v = ctx.home + v.slice(1);
  }
  return v;
}

function isUnset(v: unknown): boolean {
  return v === undefined || v === null || (typeof v === "string" && v.trim() === "");
}

function take(
  out: JsonObject,
  name: string,
  value: unknown,
  kind: "path" | "value",
  ctx: PathContext,
): void {
  if (isUnset(value)) return;
  out[name] = kind === "path" && typeof value === "string" ? expandPath(value.trim(), ctx) : value;
}

/** The settings object for the server, from the `kernelLsp.*` settings. */
export function toServerSettings(get: ConfigReader, ctx: PathContext = {}): JsonObject {
  const out: JsonObject = {};
  for (const [name, kind] of Object.entries(SERVER_SETTINGS)) {
    take(out, name, get(name), kind, ctx);
  }
  const llm: JsonObject = {};
  for (const role of LLM_ROLES) {
    const r: JsonObject = {};
    for (const f of LLM_ROLE_FIELDS) take(r, f, get(`llm.${role}.${f}`), "value", ctx);
    if ("url" in r || "model" in r) llm[role] = r;
  }
  for (const [name, kind] of Object.entries(LLM_SETTINGS)) {
    take(llm, name, get(`llm.${name}`), kind, ctx);
  }
  if (Object.keys(llm).length > 0) out.llm = llm;
  return out;
}

/** The `settings` of workspace/didChangeConfiguration: nested under the section name. */
export function didChangeConfigurationSettings(settings: JsonObject): JsonObject {
  return { kernelLsp: settings };
}

/**
 * The answer to one item of a server's workspace/configuration request, or undefined
 * when the section is not ours (the client library answers those from VS Code).
 */
export function configurationItem(section: string | undefined, settings: JsonObject): unknown {
  if (section === "kernelLsp" || section === "kernel-lsp") return settings;
  const prefix = ["kernelLsp.", "kernel-lsp."].find((p) => section?.startsWith(p));
  if (prefix === undefined || section === undefined) return undefined;
  let v: unknown = settings;
  for (const part of section.slice(prefix.length).split(".")) {
    if (typeof v !== "object" || v === null) return null;
    v = (v as JsonObject)[part];
  }
  return v === undefined ? null : v;
}

/** Whether a settings change needs the server restarted rather than told. */
export function needsRestart(affects: (key: string) => boolean): boolean {
  return affects("kernelLsp.serverPath");
}
