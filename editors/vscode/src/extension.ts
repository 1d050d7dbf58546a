// The VS Code side of kernel-lsp: starts the server over stdio with
// vscode-languageclient, feeds it the `kernelLsp.*` settings, forwards the palette
// commands, and shows the worker status. The decisions (what settings to send, what a
// command sends, what the status bar says, where the binary is) live in the pure modules
// next to this file; this one is only glue to the VS Code API.

import * as os from "node:os";
import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  DocumentSymbol,
  DocumentSymbolRequest,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ResponseError,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  SymbolInformation,
  WorkDoneProgress,
  WorkDoneProgressCancelNotification,
} from "vscode-languageclient/node";

import {
  buildArgs,
  chooseKernel,
  CommandArgs,
  COMMANDS,
  CommandSpec,
  explicitArgs,
  KernelSymbol,
  parseResult,
  unsupportedMessage,
} from "./commands";
import { fsProbe, resolveServerPath, serverExecutable } from "./serverPath";
import {
  configurationItem,
  didChangeConfigurationSettings,
  JsonObject,
  needsRestart,
  toServerSettings,
} from "./settings";
import { ClientState, formatStatus, parseStatus, STATUS_NOTIFICATION, WorkerStatus } from "./status";

const LANGUAGES = ["cuda-cpp", "python"];
const REQUEST_CANCELLED = -32800;

let client: LanguageClient | undefined;
let output: vscode.OutputChannel;
let statusItem: vscode.StatusBarItem;
let clientState: ClientState = "starting";
let workerStatus: WorkerStatus | undefined;
let progressCounter = 0;

function workspaceFolder(): string | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

function currentSettings(): JsonObject {
  const cfg = vscode.workspace.getConfiguration("kernelLsp");
  return toServerSettings((key) => cfg.get(key), { home: os.homedir(), workspaceFolder: workspaceFolder() });
}

function renderStatus(): void {
  const view = formatStatus(clientState, workerStatus);
  statusItem.text = view.text;
  statusItem.tooltip = view.tooltip;
  statusItem.backgroundColor = view.error ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  statusItem.show();
}

function setState(state: ClientState): void {
  clientState = state;
  renderStatus();
}

function log(line: string): void {
  output.appendLine(`[client ${new Date().toISOString()}] ${line}`);
}

async function showError(message: string, ...extra: string[]): Promise<void> {
  log(message);
  const picked = await vscode.window.showErrorMessage(message, ...extra, "Show Output");
  if (picked === "Show Output") output.show(true);
  if (picked === "Open Settings") {
    await vscode.commands.executeCommand("workbench.action.openSettings", "kernelLsp.serverPath");
  }
}

async function startClient(): Promise<void> {
  workerStatus = undefined;
  setState("starting");
  const cfg = vscode.workspace.getConfiguration("kernelLsp");
  const resolved = resolveServerPath(cfg.get<string>("serverPath"), {
    platform: process.platform,
    env: process.env,
    home: os.homedir(),
    workspaceFolder: workspaceFolder(),
    probe: fsProbe,
  });
  if (!resolved.ok) {
    setState("notFound");
    void showError(resolved.message, "Open Settings");
    return;
  }
  log(`starting ${resolved.path}`);

  const serverOptions: ServerOptions = serverExecutable(resolved.path, workspaceFolder());
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      ...LANGUAGES.flatMap((language) => [
        { scheme: "file", language },
        { scheme: "untitled", language },
      ]),
      { scheme: "file", pattern: "**/*.{cu,cuh}" },
      // Headers: the server serves those with device code (__global__/__device__).
      { scheme: "file", pattern: "**/*.{h,hpp,hh,hxx,inl}" },
    ],
    initializationOptions: () => currentSettings(),
    outputChannel: output,
    traceOutputChannel: output,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    middleware: {
      workspace: {
        // A server that pulls its settings gets the same object as initializationOptions.
        configuration: async (params, token, next) => {
          const settings = currentSettings();
          const ours = params.items.map((item) => configurationItem(item.section, settings));
          if (ours.every((v) => v !== undefined)) return ours;
          const theirs = await next(params, token);
          if (theirs instanceof ResponseError) return theirs;
          return ours.map((v, i) => (v !== undefined ? v : theirs[i]));
        },
      },
    },
  };

  const c = new LanguageClient("kernelLsp", "kernel-lsp", serverOptions, clientOptions);
  client = c;
  c.onDidChangeState((e) => {
    if (client !== c) return;
    if (e.newState === State.Running) setState("running");
    else if (e.newState === State.Starting) setState("starting");
    else setState("stopped");
  });
  c.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
    const parsed = parseStatus(params);
    if (parsed === undefined) {
      log(`ignored a ${STATUS_NOTIFICATION} notification that is not {worker, message, job}: ${JSON.stringify(params)}`);
      return;
    }
    workerStatus = parsed;
    renderStatus();
  });
  try {
    await c.start();
    const info = c.initializeResult?.serverInfo;
    log(`connected to ${info?.name ?? "server"} ${info?.version ?? ""}`.trimEnd());
  } catch (e) {
    setState("stopped");
    void showError(
      `kernel-lsp: the server at ${resolved.path} failed to start: ${e instanceof Error ? e.message : String(e)}. ` +
        "The kernel-lsp output has its log.",
      "Open Settings",
    );
  }
}

async function stopClient(): Promise<void> {
  const c = client;
  client = undefined;
  if (c === undefined) return;
  try {
    if (c.isRunning()) await c.stop(5000);
  } catch (e) {
    log(`stopping the server: ${e instanceof Error ? e.message : String(e)}`);
  }
}

async function restartClient(): Promise<void> {
  await stopClient();
  await startClient();
}

function isKernelFile(doc: vscode.TextDocument): boolean {
  return (
    LANGUAGES.includes(doc.languageId) ||
    /\.(cu|cuh)$/i.test(doc.fileName) ||
    (/\.(h|hpp|hh|hxx|inl)$/i.test(doc.fileName) && /\b__(global|device)__\b/.test(doc.getText()))
  );
}

function toKernelSymbols(result: DocumentSymbol[] | SymbolInformation[] | null): KernelSymbol[] {
  return (result ?? []).map((s) => ({ name: s.name, range: "location" in s ? s.location.range : s.range }));
}

/** The argument object for a palette command run in the active editor; undefined if cancelled. */
async function argsFromEditor(c: LanguageClient, spec: CommandSpec): Promise<CommandArgs | undefined> {
  const editor = vscode.window.activeTextEditor;
  if (editor === undefined || !isKernelFile(editor.document)) {
    void showError(`kernel-lsp: ${spec.title} works on a kernel: open a CUDA (.cu, .cuh) or Triton (.py) file and put the cursor in the kernel.`);
    return undefined;
  }
  const uri = c.code2ProtocolConverter.asUri(editor.document.uri);
  const position = c.code2ProtocolConverter.asPosition(editor.selection.active);
  const symbols = toKernelSymbols(await c.sendRequest(DocumentSymbolRequest.type, { textDocument: { uri } }));
  const choice = chooseKernel(symbols, position);
  switch (choice.kind) {
    case "at":
    case "only":
      return buildArgs(uri, position, choice.name);
    case "none":
      return buildArgs(uri, position);
    case "choose": {
      const name = await vscode.window.showQuickPick(choice.names, {
        title: `kernel-lsp: ${spec.title}`,
        placeHolder: "The cursor is not in a kernel; which kernel?",
      });
      return name === undefined ? undefined : buildArgs(uri, position, name);
    }
  }
}

async function execute(c: LanguageClient, spec: CommandSpec, args: CommandArgs): Promise<unknown> {
  const params = { command: spec.server, arguments: [args] };
  if (!spec.long) return c.sendRequest(ExecuteCommandRequest.type, params);
  const token = `kernelLsp/${spec.server}/${Date.now()}/${++progressCounter}`;
  const title = `kernel-lsp: ${spec.title}${args.kernel ? ` \`${args.kernel}\`` : ""}`;
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title, cancellable: true },
    async (progress, cancel) => {
      let lastPercent = 0;
      const sub = c.onProgress(WorkDoneProgress.type, token, (v) => {
        if (v.kind === "end") return;
        const increment = v.percentage !== undefined ? Math.max(0, v.percentage - lastPercent) : undefined;
        if (v.percentage !== undefined) lastPercent = v.percentage;
        progress.report({ message: v.message, increment });
      });
      const onCancel = cancel.onCancellationRequested(() => {
        void c.sendNotification(WorkDoneProgressCancelNotification.type, { token });
      });
      try {
        return await c.sendRequest(ExecuteCommandRequest.type, { ...params, workDoneToken: token }, cancel);
      } finally {
        sub.dispose();
        onCancel.dispose();
      }
    },
  );
}

async function forward(spec: CommandSpec, arg: unknown): Promise<void> {
  const c = client;
  if (c === undefined || !c.isRunning()) {
    void showError(`kernel-lsp: ${spec.title}: the server is not running. Run "kernel-lsp: Restart server"; the kernel-lsp output says why it stopped.`);
    return;
  }
  const unsupported = unsupportedMessage(
    spec,
    c.initializeResult?.capabilities.executeCommandProvider?.commands,
    c.initializeResult?.serverInfo?.version,
  );
  if (unsupported !== undefined) {
    void showError(unsupported);
    return;
  }
  try {
    const args = explicitArgs(arg) ?? (await argsFromEditor(c, spec));
    if (args === undefined) return;
    log(`${spec.server} ${JSON.stringify(args)}`);
    const raw = await execute(c, spec, args);
    const result = parseResult(raw);
    // The server shows the message itself (window/showMessage); keep a record here.
    log(result ? `${spec.server}: ${result.outcome ?? "done"}: ${result.message}` : `${spec.server}: ${JSON.stringify(raw)}`);
  } catch (e) {
    if (e instanceof ResponseError && e.code === REQUEST_CANCELLED) {
      log(`${spec.server}: cancelled`);
      return;
    }
    if (e instanceof vscode.CancellationError) {
      log(`${spec.server}: cancelled`);
      return;
    }
    void showError(`kernel-lsp: ${spec.title} failed: ${e instanceof Error ? e.message : String(e)}`);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("kernel-lsp");
  statusItem = vscode.window.createStatusBarItem("kernelLsp.status", vscode.StatusBarAlignment.Left, 0);
  statusItem.name = "kernel-lsp";
  statusItem.command = "kernelLsp.showOutput";
  context.subscriptions.push(output, statusItem);

  for (const spec of COMMANDS) {
    context.subscriptions.push(vscode.commands.registerCommand(spec.id, (arg: unknown) => forward(spec, arg)));
  }
  context.subscriptions.push(
    vscode.commands.registerCommand("kernelLsp.restartServer", restartClient),
    vscode.commands.registerCommand("kernelLsp.showOutput", () => output.show(true)),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration("kernelLsp")) return;
      if (needsRestart((key) => e.affectsConfiguration(key)) || client === undefined) {
        await restartClient();
        return;
      }
      if (client.isRunning()) {
        await client.sendNotification(DidChangeConfigurationNotification.type, {
          settings: didChangeConfigurationSettings(currentSettings()),
        });
      }
    }),
  );
  await startClient();
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
