/**
 * The builder's own Go compile cache: go commands run with it, a build empties it when it
 * outgrows ICN_BOOTSTRAP_GO_CACHE_LIMIT, never while another live build compiles with it,
 * and never a GOCACHE the caller chose.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { goBuildCache, goBuildCacheLimit, trimGoBuildCache, withGoBuildCache } from "../../builder/sources/go-cache.js";
import { goEnv, runGo } from "../../builder/sources/go.js";

const saved = { ...process.env };
let root: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-go-cache-"));
  process.env.ICN_BOOTSTRAP_CACHE = root;
  delete process.env.GOCACHE;
  delete process.env.ICN_BOOTSTRAP_GO_CACHE_LIMIT;
});
afterEach(async () => {
  process.env = { ...saved };
  await rm(root, { recursive: true, force: true });
});

async function fill(dir: string, bytes: number): Promise<void> {
  await mkdir(join(dir, "ab"), { recursive: true });
  await writeFile(join(dir, "ab", "entry-d"), Buffer.alloc(bytes, 1));
}

describe("Go's compile cache", () => {
  it("is the builder's own unless GOCACHE is set, and go commands use it", async () => {
    expect(goBuildCache()).toEqual({ dir: join(root, "go-build"), managed: true });
    expect(goEnv().GOCACHE).toBe(join(root, "go-build"));
    expect((await runGo(["env", "GOCACHE"], { what: "test" })).trim()).toBe(join(root, "go-build"));
    process.env.GOCACHE = join(root, "mine");
    expect(goBuildCache()).toEqual({ dir: join(root, "mine"), managed: false });
    expect(goEnv().GOCACHE).toBe(join(root, "mine"));
  });

  it("is marked in use by this process only while a go command runs", async () => {
    const lease = `${join(root, "go-build")}.in-use-${process.pid}`;
    const seen = await withGoBuildCache(async () => (await readdir(root)).includes(lease.slice(root.length + 1)));
    expect(seen).toBe(true);
    expect(await readdir(root)).not.toContain(lease.slice(root.length + 1));
    await runGo(["env", "GOCACHE"], { what: "test" });
    expect(await readdir(root)).not.toContain(lease.slice(root.length + 1));
  });

  it("is emptied when it holds more than the limit, and kept when it holds less", async () => {
    process.env.ICN_BOOTSTRAP_GO_CACHE_LIMIT = "1MiB";
    const dir = join(root, "go-build");
    await fill(dir, 512 * 1024);
    expect(await trimGoBuildCache()).toBe(0);
    await fill(dir, 3 * 1024 * 1024);
    expect(await trimGoBuildCache()).toBeGreaterThan(2 * 1024 * 1024);
    expect(await readdir(root)).not.toContain("go-build");
    expect((await readdir(root)).filter((n) => n.startsWith("go-build"))).toEqual([]);
  });

  it("is left alone while another live build compiles with it", async () => {
    process.env.ICN_BOOTSTRAP_GO_CACHE_LIMIT = "0";
    const dir = join(root, "go-build");
    await fill(dir, 64 * 1024);
    const other = execa("sleep", ["60"]);
    try {
      await writeFile(`${dir}.in-use-${other.pid}`, "");
      expect(await trimGoBuildCache()).toBe(0);
      expect(await readdir(join(dir, "ab"))).toEqual(["entry-d"]);
    } finally {
      other.kill();
      await other.catch(() => undefined);
    }
    expect(await trimGoBuildCache()).toBeGreaterThan(0);
  });

  it("never empties a GOCACHE the caller set", async () => {
    process.env.ICN_BOOTSTRAP_GO_CACHE_LIMIT = "0";
    process.env.GOCACHE = join(root, "mine");
    await fill(process.env.GOCACHE, 64 * 1024);
    expect(await trimGoBuildCache()).toBe(0);
    expect(await readdir(join(root, "mine", "ab"))).toEqual(["entry-d"]);
  });

  it("names a bad limit and the fix", () => {
    process.env.ICN_BOOTSTRAP_GO_CACHE_LIMIT = "lots";
    expect(() => goBuildCacheLimit()).toThrow(/ICN_BOOTSTRAP_GO_CACHE_LIMIT is 'lots', not a size/);
  });
});
