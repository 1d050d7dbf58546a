// Reads the extension's package.json for the tests (from out/test/ or src/test/).
import * as fs from "node:fs";
import * as path from "node:path";

export interface ConfigProperty {
  type: string;
  default: unknown;
  enum?: unknown[];
  description?: string;
  markdownDescription?: string;
}

export interface Manifest {
  name: string;
  version: string;
  license: string;
  engines: { vscode: string };
  main: string;
  activationEvents: string[];
  contributes: {
    commands: { command: string; title: string; category: string }[];
    menus: { commandPalette: { command: string; when: string }[] };
    configuration: { properties: Record<string, ConfigProperty> };
  };
  scripts: Record<string, string>;
  devDependencies: Record<string, string>;
}

export const EXTENSION_DIR = path.resolve(__dirname, "..", "..");

export function manifest(): Manifest {
  return JSON.parse(fs.readFileSync(path.join(EXTENSION_DIR, "package.json"), "utf8")) as Manifest;
}

/** The default of every `kernelLsp.*` setting, keyed without the prefix. */
export function manifestDefaults(): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, prop] of Object.entries(manifest().contributes.configuration.properties)) {
    out[key.replace(/^kernelLsp\./, "")] = prop.default;
  }
  return out;
}
