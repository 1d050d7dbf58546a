// The status bar item's text and tooltip, from the server's `kernel-lsp/status`
// notification and the client's state. Pure: no `vscode` import.

/** Params of the `kernel-lsp/status` notification (editor contract). */
export interface WorkerStatus {
  /** GPU name, e.g. "NVIDIA H100 80GB HBM3"; null when there is no worker. */
  worker: string | null;
  /** "no GPU: <reason>", or "". */
  message: string;
  /** "optimize matmul: verifying 2/7" while a job runs, else null. */
  job: string | null;
}

/** Where the language client is. `notFound`: the server binary could not be resolved. */
export type ClientState = "starting" | "running" | "stopped" | "notFound";

export interface StatusView {
  text: string;
  tooltip: string;
  /** Whether to draw the item with the error background. */
  error: boolean;
}

export const STATUS_NOTIFICATION = "kernel-lsp/status";

/** Longest job text shown in the status bar; the tooltip has all of it. */
export const MAX_JOB_CHARS = 48;

function optString(v: unknown): string | null | undefined {
  if (v === null || v === undefined) return null;
  return typeof v === "string" ? v : undefined;
}

/** Reads the notification's params; undefined when they are not shaped as the contract says. */
export function parseStatus(params: unknown): WorkerStatus | undefined {
  if (typeof params !== "object" || params === null) return undefined;
  const p = params as Record<string, unknown>;
  const worker = optString(p.worker);
  const job = optString(p.job);
  const message = p.message === undefined || p.message === null ? "" : p.message;
  if (worker === undefined || job === undefined || typeof message !== "string") return undefined;
  return {
    worker: worker === "" ? null : worker,
    job: job === "" ? null : job,
    message,
  };
}

export function truncate(s: string, max: number): string {
  return s.length <= max ? s : s.slice(0, max - 1) + "…";
}

/** Status bar codicons (`$(name)`) come from the text; a job's own text must not make one. */
function escapeIcons(s: string): string {
  return s.replace(/\$\(/g, "$\u200b(");
}

export function formatStatus(state: ClientState, status: WorkerStatus | undefined): StatusView {
  const hint = "Click to show the kernel-lsp output.";
  switch (state) {
    case "notFound":
      return {
        text: "$(error) kernel-lsp: server not found",
        tooltip: "The kernel-lsp binary was not found. Set kernelLsp.serverPath or put kernel-lsp on PATH, then run \"kernel-lsp: Restart server\".",
        error: true,
      };
    case "stopped":
      return {
        text: "$(error) kernel-lsp: stopped",
        tooltip: `The kernel-lsp server is not running. Run "kernel-lsp: Restart server". ${hint}`,
        error: true,
      };
    case "starting":
      return { text: "$(loading~spin) kernel-lsp", tooltip: "kernel-lsp is starting.", error: false };
    case "running":
      break;
  }
  if (status === undefined) {
    return {
      text: "$(check) kernel-lsp",
      tooltip: `kernel-lsp is running; it has not reported a GPU worker yet. ${hint}`,
      error: false,
    };
  }
  const lines: string[] = [];
  lines.push(status.worker !== null ? `GPU worker: ${status.worker}` : "No GPU worker.");
  if (status.message !== "") lines.push(status.message);
  if (status.job !== null) lines.push(`Running: ${status.job}`);
  lines.push(hint);
  const tooltip = lines.join("\n");
  if (status.job !== null) {
    return { text: `$(sync~spin) ${escapeIcons(truncate(status.job, MAX_JOB_CHARS))}`, tooltip, error: false };
  }
  if (status.worker !== null) {
    return { text: `$(chip) ${escapeIcons(status.worker)}`, tooltip, error: false };
  }
  return { text: "$(circle-slash) kernel-lsp: no GPU", tooltip, error: false };
}
