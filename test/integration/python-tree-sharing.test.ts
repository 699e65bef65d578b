/**
 * Builds running at once (two terminals, the image tests two files at a time) make the
 * images' Python trees with one pip venv and one wheels folder in the shared cache: they
 * must take turns. Two trees asked for at the same moment from an empty cache, with PyPI
 * (which the first build of any image needs anyway). And a tree does not depend on where
 * the cache is (ICN_BOOTSTRAP_CACHE, or the user's home): an image's digest would.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensurePythonTree } from "../../builder/sources/pypi.js";

/** A small wheel with a console script (pyflakes). */
const PYFLAKES = "pyflakes==3.2.0 --hash=sha256:84b5be138a2dfbb40689ca07e2152deb896a65c3a3e24c251c5c62489568074a\n";
const SIX = "six==1.17.0 --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n";

/** Every file of a tree by its path relative to the tree, with its sha256. */
async function fileDigests(dir: string): Promise<Record<string, string>> {
  const entries = (await readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
  const digests: Record<string, string> = {};
  for (const e of entries) {
    const path = join(e.parentPath, e.name);
    digests[relative(dir, path)] = createHash("sha256")
      .update(await readFile(path))
      .digest("hex");
  }
  return digests;
}

describe("Python trees made by builds at once", () => {
  let work: string;
  const saved = process.env.ICN_BOOTSTRAP_CACHE;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "icn-python-trees-"));
    process.env.ICN_BOOTSTRAP_CACHE = join(work, "cache");
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.ICN_BOOTSTRAP_CACHE;
    else process.env.ICN_BOOTSTRAP_CACHE = saved;
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("two trees asked for together from an empty cache: one venv, both trees complete", { timeout: 5 * 60_000 }, async () => {
    const files = [join(work, "a.txt"), join(work, "b.txt")];
    await writeFile(files[0]!, `# first\n${SIX}`);
    await writeFile(files[1]!, `# second\n${SIX}`);
    const messages: string[] = [];
    const trees = await Promise.all(files.map((file, i) => ensurePythonTree(file, "3.13", `tree ${i}`, (m) => messages.push(`${i}: ${m}`))));
    expect(trees[0]!.dir).not.toBe(trees[1]!.dir);
    for (const tree of trees) {
      expect(existsSync(join(tree.dir, ".complete")), tree.dir).toBe(true);
      expect(await readdir(join(tree.sitePackages))).toContain("six.py");
    }
    expect(messages.filter((m) => m.includes("creating the build's pip"))).toHaveLength(1);
    // Nothing half-made is left beside them.
    expect((await readdir(join(work, "cache", "python", "trees"))).filter((n) => n.includes(".partial-"))).toEqual([]);
  });

  it("is the same tree, byte for byte, wherever the cache is (pip's RECORD names the scripts as rewritten)", { timeout: 5 * 60_000 }, async () => {
    const requirements = join(work, "scripts.txt");
    await writeFile(requirements, PYFLAKES);
    const made: Record<string, string>[] = [];
    for (const cache of [join(work, "c"), join(work, "a-cache-at-a-longer-path")]) {
      process.env.ICN_BOOTSTRAP_CACHE = cache;
      const tree = await ensurePythonTree(requirements, "3.13", "tree", () => undefined);
      made.push(await fileDigests(tree.dir));
    }
    expect(Object.keys(made[0]!)).toContain("bin/pyflakes");
    expect(made[1]).toEqual(made[0]);
    // The RECORD line of the script is the script as it is in the tree.
    const tree = await ensurePythonTree(requirements, "3.13", "tree", () => undefined);
    const record = (await readFile(join(tree.sitePackages, "pyflakes-3.2.0.dist-info", "RECORD"), "utf8"))
      .split("\n")
      .find((l) => l.endsWith(",") === false && /bin\/pyflakes,/.test(l))!;
    const script = await readFile(join(tree.bin, "pyflakes"));
    expect(script.toString()).toMatch(/^#!\/usr\/bin\/python3\n/);
    expect(record.split(",").slice(1)).toEqual([`sha256=${createHash("sha256").update(script).digest("base64url")}`, String(script.length)]);
  });
});
