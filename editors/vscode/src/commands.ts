// The palette commands and what they send: each `kernelLsp.X` palette command forwards to
// the server's `kernel-lsp.X` (workspace/executeCommand) with one argument object
// `{uri, kernel?, position?}` (editor contract). Pure: no `vscode` import.
//
// The palette ids differ from the server's on purpose: vscode-languageclient registers a
// VS Code command for every id in the server's executeCommandProvider (that is what runs
// the commands code actions carry), and two registrations of one id fail.

export interface CommandSpec {
  /** The palette command, contributed in package.json. */
  id: string;
  /** The server command it forwards to. */
  server: string;
  /** Noun phrase for messages: "Optimize" -> "Optimize failed: ...". */
  title: string;
  /** Long jobs get a cancellable progress notification fed by the server's $/progress. */
  long: boolean;
}

export const COMMANDS: readonly CommandSpec[] = [
  { id: "kernelLsp.optimize", server: "kernel-lsp.optimize", title: "Optimize", long: true },
  { id: "kernelLsp.tune", server: "kernel-lsp.tune", title: "Tune parameters", long: true },
  { id: "kernelLsp.bench", server: "kernel-lsp.bench", title: "Benchmark", long: true },
  { id: "kernelLsp.pinBaseline", server: "kernel-lsp.pinBaseline", title: "Pin as baseline", long: false },
  { id: "kernelLsp.revert", server: "kernel-lsp.revert", title: "Revert", long: false },
  { id: "kernelLsp.showHistory", server: "kernel-lsp.showHistory", title: "Show history", long: false },
  { id: "kernelLsp.applyRewrite", server: "kernel-lsp.applyRewrite", title: "Apply verified rewrite", long: false },
  { id: "kernelLsp.fix", server: "kernel-lsp.fix", title: "Fix", long: true },
  { id: "kernelLsp.profile", server: "kernel-lsp.profile", title: "Profile", long: true },
];

/** Commands of the extension itself (not forwarded). */
export const CLIENT_COMMANDS = ["kernelLsp.restartServer", "kernelLsp.showOutput"] as const;

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

/** A kernel as textDocument/documentSymbol reports it (the server lists kernels only). */
export interface KernelSymbol {
  name: string;
  range: Range;
}

export interface CommandArgs {
  uri: string;
  kernel?: string;
  position?: Position;
}

function before(a: Position, b: Position): boolean {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

export function contains(r: Range, p: Position): boolean {
  return !before(p, r.start) && !before(r.end, p);
}

/** Which kernel a palette command means, given the cursor and the file's kernels. */
export type KernelChoice =
  | { kind: "at"; name: string } // the cursor is inside this kernel
  | { kind: "only"; name: string } // the cursor is outside, but the file has one kernel
  | { kind: "choose"; names: string[] } // outside, and several: ask
  | { kind: "none" }; // the server listed none: let it answer for the position

export function chooseKernel(symbols: readonly KernelSymbol[], cursor: Position): KernelChoice {
  // Innermost first, should kernels ever nest (Triton helpers do not, but be exact).
  const hits = symbols.filter((s) => contains(s.range, cursor));
  if (hits.length > 0) {
    hits.sort((a, b) => (before(a.range.start, b.range.start) ? 1 : -1));
    return { kind: "at", name: hits[0]!.name };
  }
  const names = [...new Set(symbols.map((s) => s.name))];
  if (names.length === 1) return { kind: "only", name: names[0]! };
  if (names.length > 1) return { kind: "choose", names };
  return { kind: "none" };
}

export function buildArgs(uri: string, position: Position, kernel?: string): CommandArgs {
  const args: CommandArgs = { uri, position: { line: position.line, character: position.character } };
  if (kernel !== undefined) args.kernel = kernel;
  return args;
}

/**
 * An argument object given to a palette command directly (keybinding `args`, another
 * extension's executeCommand) is forwarded as is, when it names a document.
 */
export function explicitArgs(arg: unknown): CommandArgs | undefined {
  if (typeof arg !== "object" || arg === null) return undefined;
  const a = arg as Record<string, unknown>;
  if (typeof a.uri !== "string" || a.uri === "") return undefined;
  const out: CommandArgs = { uri: a.uri };
  if (typeof a.kernel === "string") out.kernel = a.kernel;
  const p = a.position as Record<string, unknown> | undefined;
  if (p && typeof p.line === "number" && typeof p.character === "number") {
    out.position = { line: p.line, character: p.character };
  }
  return out;
}

export interface CommandResult {
  message: string;
  outcome?: "accepted" | "no_gain" | "failed" | "ok";
}

/** Reads the result of a command; undefined when it is not shaped as the contract says. */
export function parseResult(result: unknown): CommandResult | undefined {
  if (typeof result !== "object" || result === null) return undefined;
  const r = result as Record<string, unknown>;
  if (typeof r.message !== "string") return undefined;
  const outcomes = ["accepted", "no_gain", "failed", "ok"];
  if (typeof r.outcome === "string" && outcomes.includes(r.outcome)) {
    return { message: r.message, outcome: r.outcome as CommandResult["outcome"] };
  }
  return { message: r.message };
}

/**
 * When the running server does not list the command, the message that says so and what
 * to do; undefined when it does. `serverCommands` is undefined when the server announced
 * no executeCommandProvider at all.
 */
export function unsupportedMessage(
  spec: CommandSpec,
  serverCommands: readonly string[] | undefined,
  serverVersion: string | undefined,
): string | undefined {
  if (serverCommands?.includes(spec.server)) return undefined;
  const which = serverVersion ? `kernel-lsp ${serverVersion}` : "This kernel-lsp server";
  return (
    `${spec.title}: ${which} does not provide the command \`${spec.server}\`. ` +
    "Update kernel-lsp (or point kernelLsp.serverPath at a newer build) and run \"kernel-lsp: Restart server\"."
  );
}
