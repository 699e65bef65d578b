/**
 * Vitest global setup of every project: one scratch directory per test run, made the
 * process's TMPDIR so that every `mkdtemp(tmpdir())` of a test, and every tool a test
 * starts, writes under it. It is removed when the run ends, passed or failed, so runs
 * on a shared machine do not fill its disk (built images are gigabytes).
 * ICN_KEEP_TEST_TMP=1 keeps it for a post-mortem.
 *
 * Listed in the root config, it is also inherited by each project (`extends: true`):
 * the first call makes the directory, the others find it in ICN_TEST_SCRATCH.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export default function setup(): (() => void) | undefined {
  if (process.env.ICN_TEST_SCRATCH) return undefined;
  const parent = tmpdir();
  const scratch = mkdtempSync(join(parent, "icn-test-run-"));
  process.env.ICN_TEST_SCRATCH = scratch;
  process.env.TMPDIR = scratch;
  return () => {
    process.env.TMPDIR = parent;
    delete process.env.ICN_TEST_SCRATCH;
    if (process.env.ICN_KEEP_TEST_TMP === "1") console.log(`test scratch kept: ${scratch}`);
    else rmSync(scratch, { recursive: true, force: true });
  };
}
