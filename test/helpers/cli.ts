import { resolve } from "node:path";
import { execa } from "execa";

export const REPO = resolve(import.meta.dirname, "..", "..");
const CLI = ["--import", "tsx", resolve(REPO, "builder/cli.ts")];

export interface CliResult {
  exitCode: number | undefined;
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved, for failure messages */
  all: string;
}

/** Runs the real CLI (as the icn-bootstrap wrapper does, minus the host setup). */
export async function runCli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const result = await spawnCli(args, env);
  return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr), all: String(result.all) };
}

/** The CLI as a child process, for tests that signal it. */
export function spawnCli(args: string[], env: Record<string, string> = {}) {
  return execa("node", [...CLI, ...args], { cwd: REPO, reject: false, all: true, env });
}
