import { resolve } from "node:path";
import { execa, type Options } from "execa";

export const REPO = resolve(import.meta.dirname, "..", "..");

/** Runs the real CLI (as the icn-bootstrap wrapper does, minus the host setup). */
export function runCli(args: string[], options: Options = {}) {
  return execa("node", ["--import", "tsx", resolve(REPO, "builder/cli.ts"), ...args], { cwd: REPO, reject: false, all: true, ...options });
}
