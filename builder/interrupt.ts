import { rmSync } from "node:fs";

/**
 * Paths removed if the build is interrupted (Ctrl-C, SIGTERM), so nothing partial is
 * left behind. Removal is synchronous: the process exits right after.
 */
const partials = new Set<string>();
let installed = false;

export function removeOnInterrupt(path: string): () => void {
  if (!installed) {
    installed = true;
    for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
      process.once(signal, () => {
        for (const p of partials) rmSync(p, { recursive: true, force: true });
        process.stderr.write(`\ninterrupted (${signal}): partial outputs removed\n`);
        process.exit(130);
      });
    }
  }
  partials.add(path);
  return () => partials.delete(path);
}
