import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { execa } from "execa";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { pruneStageCache, runStage, stageCacheLimit, type Stage } from "../../builder/stage.js";
import { isSharingFile, withOutputLock } from "../../builder/cache-sharing.js";

/** A stage's cached outputs and their logs, without the files that coordinate builds running at once. */
async function cacheEntries(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((e) => !isSharingFile(e));
}

async function fixture() {
  const dir = await mkdtemp(join(tmpdir(), "icn-stage-"));
  const source = join(dir, "stage-source.ts");
  await writeFile(source, "// version 1\n");
  return { cache: join(dir, "cache"), source };
}

function countingStage(source: string, calls: { n: number }, fail = false): Stage<{ value: string }> {
  return {
    name: "demo",
    sources: [source],
    inputs: ({ value }) => ({ value }),
    async build(run, { value }) {
      calls.n++;
      await writeFile(join(run.out, "output.txt"), value);
      await run.exec("true", []);
      if (fail) await run.exec("sh", ["-c", "echo something broke >&2; exit 3"]);
    },
  };
}

describe("stage cache", () => {
  it("reuses a stage whose inputs did not change", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    const first = await runStage(countingStage(source, calls), { value: "a" }, cache);
    const second = await runStage(countingStage(source, calls), { value: "a" }, cache);
    expect(calls.n).toBe(1);
    expect(first.reused).toBe(false);
    expect(second.reused).toBe(true);
    expect(second.key).toBe(first.key);
    expect(await readFile(join(second.dir, "output.txt"), "utf8")).toBe("a");
  });

  it("re-runs when an input changes, and when the stage's source changes", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    const a = await runStage(countingStage(source, calls), { value: "a" }, cache);
    const b = await runStage(countingStage(source, calls), { value: "b" }, cache);
    expect(b.key).not.toBe(a.key);
    await writeFile(source, "// version 2\n");
    const c = await runStage(countingStage(source, calls), { value: "b" }, cache);
    expect(c.key).not.toBe(b.key);
    expect(calls.n).toBe(3);
  });

  it("leaves nothing that looks complete when a stage fails, and names the failing command", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    await expect(runStage(countingStage(source, calls, true), { value: "x" }, cache)).rejects.toThrow(
      /stage demo: 'sh' failed \(exit code 3\):\s+something broke/,
    );
    const entries = await cacheEntries(join(cache, "demo"));
    expect(entries.filter((e) => !e.endsWith(".log"))).toEqual([]);
    // The next run builds again instead of reusing a broken output.
    const retry = await runStage(countingStage(source, calls), { value: "x" }, cache);
    expect(retry.reused).toBe(false);
  });
});

describe("stage cache pruning", () => {
  it("keeps only the most recently used outputs of a stage", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    const keys: string[] = [];
    for (const value of ["a", "b", "c", "d", "e"]) keys.push((await runStage(countingStage(source, calls), { value }, cache)).key);
    // "a" was pruned after the fourth build; using "c" again makes it newer than "d" and "e".
    await new Promise((r) => setTimeout(r, 20));
    expect((await runStage(countingStage(source, calls), { value: "c" }, cache)).reused).toBe(true);
    await runStage(countingStage(source, calls), { value: "f" }, cache);
    const left = (await cacheEntries(join(cache, "demo"))).filter((e) => !e.endsWith(".log")).sort();
    expect(left).toEqual([keys[2], keys[4], (await runStage(countingStage(source, calls), { value: "f" }, cache)).key].sort());
  });
});

describe("stage cache size limit", () => {
  function sizedStage(name: string, source: string, bytes: number): Stage<{ value: string }> {
    return {
      name,
      sources: [source],
      inputs: ({ value }) => ({ value, bytes }),
      async build(run, { value }) {
        await writeFile(join(run.out, "output.bin"), Buffer.alloc(bytes, value));
      },
    };
  }

  it("removes the least recently used outputs of any stage until the cache fits, never the running build's", async () => {
    const { cache, source } = await fixture();
    const oldRootfs = await runStage(sizedStage("rootfs", source, 256 * 1024), { value: "a" }, cache);
    await new Promise((r) => setTimeout(r, 20));
    const oldDisk = await runStage(sizedStage("disk", source, 512 * 1024), { value: "a" }, cache);
    await new Promise((r) => setTimeout(r, 20));
    const newRootfs = await runStage(sizedStage("rootfs", source, 256 * 1024), { value: "b" }, cache);
    const newDisk = await runStage(sizedStage("disk", source, 512 * 1024), { value: "b" }, cache);
    // 1.5 MiB cached; a 900 KiB limit keeps the running build's two outputs (768 KiB) only.
    const removed = await pruneStageCache(cache, 900 * 1024, new Set([newRootfs.dir, newDisk.dir]));
    expect(removed.map((r) => r.dir)).toEqual([oldRootfs.dir, oldDisk.dir]);
    expect((await cacheEntries(join(cache, "rootfs"))).filter((e) => !e.endsWith(".log"))).toEqual([newRootfs.key]);
    expect((await cacheEntries(join(cache, "disk"))).filter((e) => !e.endsWith(".log"))).toEqual([newDisk.key]);
    // Over the limit by the running build's own outputs alone: nothing of it goes.
    expect(await pruneStageCache(cache, 1024, new Set([newRootfs.dir, newDisk.dir]))).toEqual([]);
    // A build that does not use it any more lets the older one go first.
    expect((await pruneStageCache(cache, 600 * 1024, new Set([newDisk.dir]))).map((r) => r.dir)).toEqual([newRootfs.dir]);
  });

  it("takes its limit from ICN_BOOTSTRAP_STAGE_CACHE_LIMIT and names a bad value", () => {
    const saved = process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT;
    try {
      delete process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT;
      expect(stageCacheLimit()).toBe(20 * 1024 ** 3);
      process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT = "500MiB";
      expect(stageCacheLimit()).toBe(500 * 1024 ** 2);
      process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT = "lots";
      expect(() => stageCacheLimit()).toThrow(/ICN_BOOTSTRAP_STAGE_CACHE_LIMIT is 'lots', not a size/);
    } finally {
      if (saved === undefined) delete process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT;
      else process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT = saved;
    }
  });
});

describe("one stage cache shared by builds running at once", () => {
  function slowStage(source: string, calls: { n: number }): Stage<{ value: string }> {
    return {
      name: "shared",
      sources: [source],
      inputs: ({ value }) => ({ value }),
      async build(run, { value }) {
        calls.n++;
        await new Promise((r) => setTimeout(r, 300));
        await writeFile(join(run.out, "output.txt"), `${value} #${calls.n}`);
      },
    };
  }

  /** A process id that is certainly not running: a child that has exited. */
  async function deadPid(): Promise<number> {
    const child = execa("true");
    await child;
    return child.pid!;
  }

  it("makes an output once when two builds need it at the same moment; the second waits and reuses it", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    const [a, b] = await Promise.all([runStage(slowStage(source, calls), { value: "v" }, cache), runStage(slowStage(source, calls), { value: "v" }, cache)]);
    expect(calls.n).toBe(1);
    expect([a.reused, b.reused].sort()).toEqual([false, true]);
    expect(b.dir).toBe(a.dir);
    expect(await readFile(join(a.dir, "output.txt"), "utf8")).toBe("v #1");
    // The lock is gone once the output is there.
    expect((await readdir(join(cache, "shared"))).filter((e) => e.endsWith(".lock"))).toEqual([]);
  });

  it("makes an artifact in one process at a time: the other waits for the lock, then runs", async () => {
    const { cache } = await fixture();
    const spans: number[][] = [];
    const make = async () => {
      const start = Date.now();
      await new Promise((r) => setTimeout(r, 200));
      spans.push([start, Date.now()]);
    };
    const lock = join(cache, "locks", "artifact-default-demo");
    const waits: number[] = [];
    await Promise.all([withOutputLock(lock, make, (holder) => waits.push(holder)), withOutputLock(lock, make, (holder) => waits.push(holder))]);
    spans.sort((a, b) => a[0]! - b[0]!);
    expect(spans[1]![0]).toBeGreaterThanOrEqual(spans[0]![1]!);
    expect(waits).toEqual([process.pid]);
  });

  it("never lets two makers in at once, however many ask at the same moment (a lock is never seen empty)", async () => {
    const { cache } = await fixture();
    const lock = join(cache, "locks", "artifact-crowd");
    let inside = 0;
    let most = 0;
    const make = async () => {
      most = Math.max(most, ++inside);
      await new Promise((r) => setTimeout(r, 20));
      inside--;
    };
    await Promise.all(Array.from({ length: 12 }, () => withOutputLock(lock, make, () => undefined)));
    expect(most).toBe(1);
    expect((await readdir(join(cache, "locks"))).filter(isSharingFile)).toEqual([]);
  });

  it("takes over the lock of a build that was killed, and makes the output", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    const first = await runStage(slowStage(source, calls), { value: "w" }, cache);
    await rm(first.dir, { recursive: true });
    await writeFile(`${first.dir}.lock`, String(await deadPid()));
    const again = await runStage(slowStage(source, calls), { value: "w" }, cache);
    expect(again.reused).toBe(false);
    expect(calls.n).toBe(2);
    expect(await readFile(join(again.dir, "output.txt"), "utf8")).toBe("w #2");
  });

  it("never prunes an output another running build reads; a lease whose build is gone does not count", async () => {
    const { cache, source } = await fixture();
    const calls = { n: 0 };
    const output = await runStage(slowStage(source, calls), { value: "x" }, cache);
    const reader = execa("sleep", ["60"]);
    try {
      await writeFile(`${output.dir}.in-use-${reader.pid}`, "");
      expect(await pruneStageCache(cache, 0, new Set())).toEqual([]);
      expect(await readFile(join(output.dir, "output.txt"), "utf8")).toBe("x #1");
    } finally {
      reader.kill();
      await reader.catch(() => undefined);
    }
    await writeFile(`${output.dir}.in-use-${await deadPid()}`, "");
    expect((await pruneStageCache(cache, 0, new Set())).map((r) => r.dir)).toEqual([output.dir]);
    expect(await readdir(join(cache, "shared"))).toEqual([]);
  });
});
