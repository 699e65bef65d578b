import { unlinkSync } from "node:fs";
import { link, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Several builds may share one cache at once (two terminals, or the test suite's files two
 * at a time). Files beside an output keep them out of each other's way, each holding or
 * named by the id of the process that owns it:
 * - `<output>.lock`: the one build making this output (a stage's, a Go binary); the others
 *   wait for it, then reuse what it made;
 * - `<output>.in-use-<pid>`: a build that reads this stage output; pruning leaves it alone.
 * A file whose process is gone (killed, the machine restarted) counts as absent.
 */
const LOCK_SUFFIX = ".lock";
const LEASE_MARK = ".in-use-";
const WAIT_POLL_MS = 2_000;

/** Names beside the outputs that are not outputs. */
export function isSharingFile(name: string): boolean {
  return name.endsWith(LOCK_SUFFIX) || name.includes(LEASE_MARK);
}

export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Takes the lock on making `output`, waiting while another live process holds it.
 * `stillNeeded` is asked after every wait: when it says no (the other build finished the
 * output), returns undefined without taking the lock. Otherwise returns the release.
 */
export async function lockOutput(
  output: string,
  stillNeeded: () => Promise<boolean>,
  onWait: (holder: number) => void,
): Promise<(() => Promise<void>) | undefined> {
  const lock = `${output}${LOCK_SUFFIX}`;
  let announced = false;
  for (;;) {
    if (!(await stillNeeded())) return undefined;
    if (await createHolding(lock, String(process.pid))) {
      const release = () => unlinkIfOurs(lock);
      leases.add(lock);
      return async () => {
        leases.delete(lock);
        await release();
      };
    }
    const holder = Number((await readFile(lock, "utf8").catch(() => "")).trim());
    if (!processAlive(holder)) {
      // Its build was killed: nothing of it is complete (outputs are renamed into place last).
      await rm(lock, { force: true });
      continue;
    }
    if (!announced) onWait(holder);
    announced = true;
    await new Promise((resolve) => setTimeout(resolve, WAIT_POLL_MS));
  }
}

let claims = 0;

/**
 * Creates `path` holding `content`, or returns false when it exists. Written beside it,
 * then hard-linked into place: the lock never exists empty, so a build reading it at that
 * moment does not take its holder for a killed one and make the output a second time.
 */
async function createHolding(path: string, content: string): Promise<boolean> {
  const claim = `${path.slice(0, -LOCK_SUFFIX.length)}.claim-${process.pid}-${++claims}${LOCK_SUFFIX}`;
  await writeFile(claim, content);
  try {
    await link(claim, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    await rm(claim, { force: true });
  }
}

/** Runs `make` holding the lock on `output`: one process at a time makes it, the others wait and then find it made. */
export async function withOutputLock<T>(output: string, make: () => Promise<T>, onWait: (holder: number) => void): Promise<T> {
  await mkdir(dirname(output), { recursive: true });
  const unlock = (await lockOutput(output, async () => true, onWait))!;
  try {
    return await make();
  } finally {
    await unlock();
  }
}

async function unlinkIfOurs(path: string): Promise<void> {
  const holder = Number((await readFile(path, "utf8").catch(() => "")).trim());
  if (holder === process.pid) await rm(path, { force: true });
}

/** This process's lock and lease files, removed when it exits however it exits (short of SIGKILL). */
const leases = new Set<string>();
process.once("exit", () => {
  for (const path of leases) {
    try {
      unlinkSync(path);
    } catch {
      // already gone
    }
  }
});

/** Marks `output` as read by this process until it exits. */
export async function leaseStageOutput(output: string): Promise<void> {
  const lease = `${output}${LEASE_MARK}${process.pid}`;
  if (leases.has(lease)) return;
  await writeFile(lease, "");
  leases.add(lease);
}

/** Ends this process's lease of `output` (its stage failed: there is nothing to read). */
export async function endLease(output: string): Promise<void> {
  const lease = `${output}${LEASE_MARK}${process.pid}`;
  leases.delete(lease);
  await rm(lease, { force: true });
}

/** Whether a live process other than this one reads `output` (stale leases are removed on the way). */
export async function leasedByAnotherProcess(output: string): Promise<boolean> {
  const prefix = `${basename(output)}${LEASE_MARK}`;
  let leased = false;
  for (const name of await readdir(dirname(output)).catch(() => [] as string[])) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length));
    if (pid === process.pid) continue;
    if (processAlive(pid)) leased = true;
    else await rm(join(dirname(output), name), { force: true });
  }
  return leased;
}

/** Removes every lease file of `output` (it is being deleted). */
export async function forgetLeases(output: string): Promise<void> {
  const prefix = `${basename(output)}${LEASE_MARK}`;
  for (const name of await readdir(dirname(output)).catch(() => [] as string[])) {
    if (name.startsWith(prefix)) await rm(join(dirname(output), name), { force: true });
  }
}
