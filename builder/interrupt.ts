import { rmSync } from "node:fs";

/**
 * Paths removed if the build is interrupted (Ctrl-C, SIGTERM), so nothing partial is
 * left behind. Removal is synchronous: the process exits right after.
 */
const partials = new Set<string>();

/** Called once by the CLI: a library user (or a test runner) keeps its own signal handling. */
export function installInterruptHandlers(): void {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => {
      for (const p of partials) rmSync(p, { recursive: true, force: true });
      process.stderr.write(`\ninterrupted (${signal}): partial outputs removed\n`);
      process.exit(130);
    });
  }
}

export function removeOnInterrupt(path: string): () => void {
  partials.add(path);
  return () => partials.delete(path);
}
