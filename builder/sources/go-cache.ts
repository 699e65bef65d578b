import { mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { cacheRoot } from "../cache.js";
import { endLease, leasedByAnotherProcess, leaseStageOutput } from "../cache-sharing.js";
import { parseSize } from "../definition.js";
import { UserError } from "../errors.js";
import { treeBytes } from "../stage.js";

/**
 * Go's compile cache for the builder's go commands. Every Go binary a build makes is kept
 * in the artifact cache, so once a build is done the compile cache only speeds up the
 * rebuild of a binary whose pin changed, and it holds 10–15 GiB after a cold build. The
 * builder keeps its own (beside its other caches) so that it may empty it; a GOCACHE the
 * caller set is used as it is and never emptied.
 */
const DEFAULT_LIMIT = "2GiB";

export function goBuildCache(): { dir: string; managed: boolean } {
  if (process.env.GOCACHE) return { dir: process.env.GOCACHE, managed: false };
  return { dir: join(cacheRoot(), "go-build"), managed: true };
}

/** go commands of this process running now: the lease on the compile cache is held while there is one. */
let running = 0;

/**
 * Runs `go` (a go command) with the compile cache marked as in use by this process: another
 * build's trim leaves it alone meanwhile. Only while go commands run: a long-lived process
 * (a test worker) that built once does not keep every later build from trimming.
 */
export async function withGoBuildCache<T>(go: () => Promise<T>): Promise<T> {
  const { dir, managed } = goBuildCache();
  if (!managed) return go();
  await mkdir(dir, { recursive: true });
  running++;
  await leaseStageOutput(dir);
  try {
    return await go();
  } finally {
    if (--running === 0) await endLease(dir);
  }
}

/** ICN_BOOTSTRAP_GO_CACHE_LIMIT (a size such as '2GiB'; '0' empties it after every build), else 2 GiB. */
export function goBuildCacheLimit(): number {
  const value = process.env.ICN_BOOTSTRAP_GO_CACHE_LIMIT || DEFAULT_LIMIT;
  if (value === "0") return 0;
  if (!/^\d+(\.\d+)?\s*(KiB|MiB|GiB|TiB)$/.test(value)) {
    throw new UserError(`ICN_BOOTSTRAP_GO_CACHE_LIMIT is '${value}', not a size`, `set it to a size such as '8GiB' or '0', or unset it for ${DEFAULT_LIMIT}`);
  }
  return parseSize(value);
}

/**
 * Empties the builder's compile cache when it holds more than the limit and no other live
 * build is compiling with it (Go's cache has no partial trim of its own). It is moved
 * aside first, so a build that starts compiling meanwhile gets a new, empty one.
 * Returns the bytes freed.
 */
export async function trimGoBuildCache(): Promise<number> {
  const { dir, managed } = goBuildCache();
  if (!managed) return 0;
  const bytes = await treeBytes(dir).catch(() => 0);
  if (bytes <= goBuildCacheLimit() || (await leasedByAnotherProcess(dir))) return 0;
  const aside = `${dir}.trash-${process.pid}`;
  try {
    await rename(dir, aside);
  } catch {
    return 0; // gone already, or another build moved it
  }
  await rm(aside, { recursive: true, force: true });
  return bytes;
}
