/**
 * Builds running at once (two terminals, the image tests two files at a time) make the
 * images' Python trees with one pip venv and one wheels folder in the shared cache: they
 * must take turns. Two trees asked for at the same moment from an empty cache, with PyPI
 * (which the first build of any image needs anyway).
 */
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensurePythonTree } from "../../builder/sources/pypi.js";

const SIX = "six==1.17.0 --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n";

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
});
