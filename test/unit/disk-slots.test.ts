/**
 * The system slots: the first boot's layout plan (the shipped disk-layout script, run
 * with `plan`), the slot size the build checks, and the definition's field.
 */
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { parseDefinition, parseSize } from "../../builder/definition.js";
import { UserError } from "../../builder/errors.js";
import { SECTOR, checkRootFitsSlot, planLayout } from "../../builder/disk/layout.js";
import { REPO } from "../helpers/cli.js";

const DISK_LAYOUT = join(REPO, "overlays/usr/lib/icn-bootstrap/disk-layout");
const MIB = (1024 * 1024) / SECTOR;
const GIB = 1024 * MIB;
const SLOT = 8 * GIB;

/** The plan for a disk of `diskSectors` with the image's root where the build puts it. */
async function plan(diskSectors: number, rootBytes = 1.2 * 1024 ** 3, slot = SLOT) {
  const { root } = planLayout("seed", 64 * 1024 * 1024, rootBytes);
  const { stdout } = await execa("sh", [DISK_LAYOUT, "plan", String(diskSectors), String(root.start), String(root.sectors), String(slot)]);
  const [kind, ...numbers] = stdout.trim().split(" ");
  if (kind !== "slots") return { kind, root };
  const [aEnd, bStart, bEnd, dataStart, dataEnd] = numbers.map(Number) as [number, number, number, number, number];
  return { kind, root, aEnd, bStart, bEnd, dataStart, dataEnd };
}

describe("the first boot's disk layout plan", () => {
  it("a 32 GiB disk: slot A grown to the slot size in place, slot B of the same size behind it, the data partition to the end", async () => {
    const p = await plan(32 * GIB);
    expect(p.kind).toBe("slots");
    expect(p.aEnd! - p.root.start + 1).toBe(SLOT);
    expect(p.bStart).toBe(p.aEnd! + 1);
    expect(p.bEnd! - p.bStart! + 1).toBe(SLOT);
    expect(p.dataStart).toBe(p.bEnd! + 1);
    // The last MiB stays free for the backup GPT; every partition starts and ends on a MiB.
    expect(p.dataEnd).toBe(32 * GIB - MIB - 1);
    for (const sector of [p.root.start, p.bStart!, p.dataStart!, p.aEnd! + 1, p.bEnd! + 1, p.dataEnd! + 1]) expect(sector % MIB).toBe(0);
    expect((p.dataEnd! - p.dataStart! + 1) / GIB).toBeCloseTo(32 - 16 - (p.root.start + MIB) / GIB, 6);
  });

  it("a disk whose size is no whole number of MiB: the data partition still ends on a MiB boundary before the backup GPT", async () => {
    const p = await plan(100 * GIB + 777);
    expect(p.kind).toBe("slots");
    expect((p.dataEnd! + 1) % MIB).toBe(0);
    expect(p.dataEnd!).toBeLessThan(100 * GIB + 777 - 34);
  });

  it("the small-disk fallback: a 16 GiB stick, or a disk a MiB short of the 4 GiB data partition, gets the root grown instead", async () => {
    expect((await plan(16 * GIB)).kind).toBe("grow");
    const { root } = planLayout("seed", 64 * 1024 * 1024, 1.2 * 1024 ** 3);
    const exactly = root.start + 2 * SLOT + 4 * GIB + MIB; // the least disk with slots
    expect((await plan(exactly)).kind).toBe("slots");
    expect((await plan(exactly - MIB)).kind).toBe("grow");
  });

  it("a root larger than a slot is never shrunk: the root is grown instead", async () => {
    expect((await plan(64 * GIB, 9 * 1024 ** 3)).kind).toBe("grow");
    expect((await plan(64 * GIB, 9 * 1024 ** 3, 10 * GIB)).kind).toBe("slots");
  });
});

describe("the slot size", () => {
  it("the build refuses a root filesystem larger than disk.slotSize, naming the field and the size it needs", () => {
    const layout = planLayout("seed", 64 * 1024 * 1024, 5 * 1024 ** 3);
    expect(() => checkRootFitsSlot(layout, 8 * 1024 ** 3, "8GiB")).not.toThrow();
    let error: unknown;
    try {
      checkRootFitsSlot(layout, 4 * 1024 ** 3, "4GiB");
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toMatch(/needs 5120 MiB, more than a system slot \(disk\.slotSize 4GiB\)/);
    expect((error as UserError).hint).toMatch(/disk\.slotSize .* at least 5GiB/);
  });

  it("the definition has disk.slotSize, 8GiB by default, at least 1GiB", () => {
    expect(parseDefinition("name: x\ndebian:\n  suite: trixie\n", "a.yaml").disk.slotSize).toBe("8GiB");
    expect(parseSize(parseDefinition("name: x\ndebian:\n  suite: trixie\ndisk:\n  slotSize: 12GiB\n", "a.yaml").disk.slotSize)).toBe(12 * 1024 ** 3);
    expect(() => parseDefinition("name: x\ndebian:\n  suite: trixie\ndisk:\n  slotSize: 512MiB\n", "a.yaml")).toThrow(/disk\.slotSize: at least 1GiB/);
    expect(() => parseDefinition("name: x\ndebian:\n  suite: trixie\ndisk:\n  slotSize: big\n", "a.yaml")).toThrow(/disk\.slotSize: expected a size/);
  });
});
