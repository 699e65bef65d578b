/**
 * Vitest global setup of every project: one scratch directory per test run, made the
 * process's TMPDIR so that every `mkdtemp(tmpdir())` of a test, and every tool a test
 * starts, writes under it. It is removed when the run ends, passed or failed, so runs
 * on a shared machine do not fill its disk (built images are gigabytes).
 * ICN_KEEP_TEST_TMP=1 keeps it for a post-mortem.
 *
 * A run that was killed (SIGKILL, a machine restart) never reaches its teardown: the
 * next run removes such directories, those whose owner process is gone and that were
 * not kept on purpose.
 *
 * Listed in the root config, it is also inherited by each project (`extends: true`):
 * the first call makes the directory, the others find it in ICN_TEST_SCRATCH.
 */
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const SCRATCH_PREFIX = "icn-test-run-";
const OWNER = ".owner-pid";
const KEPT = ".kept";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Removes the scratch directories under `parent` left by runs that were killed; returns their paths. */
export function removeStaleScratch(parent: string): string[] {
  const removed: string[] = [];
  for (const name of readdirSync(parent).filter((n) => n.startsWith(SCRATCH_PREFIX))) {
    const dir = join(parent, name);
    const ownerFile = join(dir, OWNER);
    // Without an owner (older runs) or kept for a post-mortem: not ours to judge.
    if (!existsSync(ownerFile) || existsSync(join(dir, KEPT))) continue;
    const pid = Number(readFileSync(ownerFile, "utf8"));
    if (!Number.isInteger(pid) || pid <= 0 || alive(pid)) continue;
    rmSync(dir, { recursive: true, force: true });
    removed.push(dir);
  }
  return removed;
}

export default function setup(): (() => void) | undefined {
  if (process.env.ICN_TEST_SCRATCH) return undefined;
  const parent = tmpdir();
  for (const dir of removeStaleScratch(parent)) console.log(`removed the scratch of a killed test run: ${dir}`);
  const scratch = mkdtempSync(join(parent, SCRATCH_PREFIX));
  // Searchable, not listable: a test that runs an image as its pods' user (nobody) reaches
  // the directory it made for that (mode 0755) by its random name; mkdtemp's 0700 would stop it.
  chmodSync(scratch, 0o711);
  writeFileSync(join(scratch, OWNER), String(process.pid));
  process.env.ICN_TEST_SCRATCH = scratch;
  process.env.TMPDIR = scratch;
  return () => {
    process.env.TMPDIR = parent;
    delete process.env.ICN_TEST_SCRATCH;
    if (process.env.ICN_KEEP_TEST_TMP === "1") {
      writeFileSync(join(scratch, KEPT), "");
      console.log(`test scratch kept: ${scratch}`);
    } else rmSync(scratch, { recursive: true, force: true });
  };
}
