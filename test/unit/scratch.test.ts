import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SCRATCH_PREFIX, removeStaleScratch } from "../setup/scratch.global.js";

const parent = mkdtempSync(join(tmpdir(), "scratch-parent-"));
afterAll(() => rmSync(parent, { recursive: true, force: true }));

function scratch(name: string, owner?: number, kept = false): string {
  const dir = join(parent, `${SCRATCH_PREFIX}${name}`);
  mkdirSync(dir);
  writeFileSync(join(dir, "big.img"), "x");
  if (owner !== undefined) writeFileSync(join(dir, ".owner-pid"), String(owner));
  if (kept) writeFileSync(join(dir, ".kept"), "");
  return dir;
}

describe("the test runs' scratch directories", () => {
  it("removes those of killed runs only: not a live run's, a kept one, one without an owner, or anything else", () => {
    const exited = spawnSync("true").pid!; // a process that is gone
    const killed = scratch("killed", exited);
    const live = scratch("live", process.pid);
    const kept = scratch("kept", exited, true);
    const unowned = scratch("unowned");
    const other = join(parent, "something-else");
    mkdirSync(other);
    writeFileSync(join(other, ".owner-pid"), String(exited));

    expect(removeStaleScratch(parent)).toEqual([killed]);
    expect(existsSync(killed)).toBe(false);
    for (const dir of [live, kept, unowned, other]) expect(existsSync(dir), dir).toBe(true);
  });
});
