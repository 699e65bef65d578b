import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { compareFigures, readRecord, writeRecord } from "../../scripts/bench-record.js";

const dir = await mkdtemp(join(tmpdir(), "icn-bench-record-"));
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("a benchmark against the last run on the same machine", () => {
  it("flags a figure that grew more than 1.5x, and only that one", () => {
    const compared = compareFigures({ "manifests applied": 920, "api ready": 300, "new step": 40 }, { "manifests applied": 302, "api ready": 227 });
    const byName = Object.fromEntries(compared.map((c) => [c.name, c]));
    expect(byName["manifests applied"]).toMatchObject({ last: 302, grewTooMuch: true });
    expect(byName["manifests applied"]!.growth).toBeCloseTo(920 / 302);
    expect(byName["api ready"]).toMatchObject({ grewTooMuch: false });
    expect(byName["new step"]).toMatchObject({ last: undefined, grewTooMuch: false });
  });

  it("does not call a few seconds' noise a regression", () => {
    expect(compareFigures({ runner: 4 }, { runner: 1 })[0]!.grewTooMuch).toBe(false);
    expect(compareFigures({ runner: 16 }, { runner: 10 })[0]!.grewTooMuch).toBe(true);
  });

  it("keeps a run's figures whole and reads them back; no record is a first run, a damaged one an error naming it", async () => {
    const path = join(dir, "bench", "appliance-test.json");
    expect(await readRecord(path)).toBeUndefined();
    await writeRecord(path, { machine: "test CPU, 2 cores, tcg", at: "2026-12-01T00:00:00Z", figures: { boot: 436 } });
    expect(await readRecord(path)).toEqual({ machine: "test CPU, 2 cores, tcg", at: "2026-12-01T00:00:00Z", figures: { boot: 436 } });
    await writeFile(path, "{ half");
    await expect(readRecord(path)).rejects.toThrow(/appliance-test\.json: not a benchmark record.*remove it/);
    expect(await readFile(path, "utf8")).toBe("{ half");
  });
});
