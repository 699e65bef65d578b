import { mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runStage, type Stage } from "../../builder/stage.js";

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
    await expect(runStage(countingStage(source, calls, true), { value: "x" }, cache)).rejects.toThrow(/stage demo: 'sh' failed \(exit code 3\):\s+something broke/);
    const entries = await readdir(join(cache, "demo"));
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
    const left = (await readdir(join(cache, "demo"))).filter((e) => !e.endsWith(".log")).sort();
    expect(left).toEqual([keys[2], keys[4], (await runStage(countingStage(source, calls), { value: "f" }, cache)).key].sort());
  });
});
