#!/usr/bin/env node
// A test double for the server side of the editor contract (the part of kernel-lsp that
// is being built now): it lists the kernel-lsp.* commands, reports `kernel-lsp/status`,
// answers documentSymbol with the kernels of the open file, and runs a command as a long
// job with $/progress until it is cancelled (optimize, tune, bench, fix) or answers at
// once (the others, with window/showMessage as the contract says). Everything the client
// sends it is appended as JSON lines to $KLS_CONTRACT_RECORD for the test to check.
// It never touches a GPU; e2e-contract.test.js starts it through kernelLsp.serverPath.
"use strict";
const fs = require("node:fs");
const { createMessageConnection, StreamMessageReader, StreamMessageWriter, ResponseError } = require("vscode-jsonrpc/node");

const RECORD = process.env.KLS_CONTRACT_RECORD;
if (!RECORD) {
  process.stderr.write("contract-server.js: set KLS_CONTRACT_RECORD to the file to record into\n");
  process.exit(2);
}
const record = (kind, data) => fs.appendFileSync(RECORD, JSON.stringify({ kind, data }) + "\n");

const COMMANDS = ["optimize", "tune", "bench", "pinBaseline", "revert", "showHistory", "applyRewrite", "fix"].map(
  (c) => `kernel-lsp.${c}`,
);
const LONG = new Set(["kernel-lsp.optimize", "kernel-lsp.tune", "kernel-lsp.bench", "kernel-lsp.fix"]);
const GPU = "NVIDIA H100 80GB HBM3";
const WORK_DONE_PROGRESS = "$/progress";

const conn = createMessageConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));
const docs = new Map();

/** Kernels of a CUDA text: from the `__global__ void name(` line to the next `}` line. */
function kernels(text) {
  const lines = text.split("\n");
  const out = [];
  lines.forEach((line, i) => {
    const m = /__global__\s+void\s+(\w+)\s*\(/.exec(line);
    if (!m) return;
    let end = i;
    while (end < lines.length - 1 && lines[end].trim() !== "}") end++;
    const col = line.indexOf(m[1]);
    out.push({
      name: m[1],
      kind: 12,
      range: { start: { line: i, character: 0 }, end: { line: end, character: 1 } },
      selectionRange: { start: { line: i, character: col }, end: { line: i, character: col + m[1].length } },
    });
  });
  return out;
}

conn.onRequest("initialize", (params) => {
  record("initialize", { initializationOptions: params.initializationOptions });
  return {
    capabilities: {
      textDocumentSync: 1,
      documentSymbolProvider: true,
      executeCommandProvider: { commands: COMMANDS },
    },
    serverInfo: { name: "kernel-lsp contract double", version: "0.0.0-test" },
  };
});
conn.onNotification("initialized", () => {
  void conn.sendNotification("kernel-lsp/status", { worker: GPU, message: "", job: null });
});
conn.onNotification("workspace/didChangeConfiguration", (params) => record("didChangeConfiguration", params.settings));
conn.onNotification("textDocument/didOpen", (p) => docs.set(p.textDocument.uri, p.textDocument.text));
conn.onNotification("textDocument/didChange", (p) => {
  const full = p.contentChanges.at(-1);
  if (full && !("range" in full)) docs.set(p.textDocument.uri, full.text);
});
conn.onNotification("window/workDoneProgress/cancel", (p) => record("progressCancel", p));
conn.onRequest("textDocument/documentSymbol", (p) => kernels(docs.get(p.textDocument.uri) ?? ""));
conn.onRequest("shutdown", () => null);
conn.onNotification("exit", () => process.exit(0));

conn.onRequest("workspace/executeCommand", async (params, token) => {
  record("executeCommand", params);
  const [args] = params.arguments ?? [];
  const kernel = args?.kernel ?? "?";
  if (!LONG.has(params.command)) {
    const message = `${params.command} done for ${kernel}`;
    void conn.sendNotification("window/showMessage", { type: 3, message });
    return { message, outcome: "ok" };
  }
  const job = `${params.command.replace("kernel-lsp.", "")} ${kernel}: verifying 2/7`;
  const t = params.workDoneToken;
  if (t !== undefined) {
    void conn.sendNotification(WORK_DONE_PROGRESS, {
      token: t,
      value: { kind: "begin", title: "kernel-lsp", message: "step 1: restrict_const", cancellable: true, percentage: 0 },
    });
    void conn.sendNotification(WORK_DONE_PROGRESS, {
      token: t,
      value: { kind: "report", message: "verifying block=(32, 8) (2/7)", percentage: 30 },
    });
  }
  void conn.sendNotification("kernel-lsp/status", { worker: GPU, message: "", job });
  // The job runs until the client cancels it (or 60 s pass).
  const cancelled = await new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), 60000);
    token.onCancellationRequested(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
  if (t !== undefined) void conn.sendNotification(WORK_DONE_PROGRESS, { token: t, value: { kind: "end" } });
  void conn.sendNotification("kernel-lsp/status", { worker: GPU, message: "", job: null });
  record(cancelled ? "cancelled" : "finished", { command: params.command });
  if (cancelled) return new ResponseError(-32800, "cancelled");
  return { message: `${params.command}: no gain`, outcome: "no_gain" };
});

conn.listen();
