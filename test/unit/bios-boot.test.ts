import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { installBiosBoot } from "../../builder/disk/bios-boot.js";
import { planLayout, stableUuid } from "../../builder/disk/layout.js";

describe("BIOS boot code installation", () => {
  it("patches boot.img and core.img like grub-bios-setup and keeps the partition table", async () => {
    const dir = await mkdtemp(join(tmpdir(), "icn-bios-"));
    const disk = join(dir, "disk.raw");
    const image = Buffer.alloc(4 * 1024 * 1024);
    image.fill(0xab, 0x1b8, 0x1fe); // stands for the disk signature + protective MBR entries
    await writeFile(disk, image);
    const bootImg = Buffer.alloc(512, 0x11);
    const coreImg = Buffer.alloc(3 * 512 + 100, 0x22);

    await installBiosBoot(disk, bootImg, coreImg, 2048, 2048);
    const out = await readFile(disk);
    expect(out.readBigUInt64LE(0x5c)).toBe(2048n); // where core.img starts
    expect([out[0x66], out[0x67]]).toEqual([0x90, 0x90]); // drive check disabled for hard disks
    expect(out.subarray(0x1b8, 0x1fe).every((b) => b === 0xab)).toBe(true);
    expect(out[0x100]).toBe(0x11); // boot code itself
    expect(out[0x10]).toBe(0); // the BPB comes from the disk, as grub-bios-setup does
    expect(out.readBigUInt64LE(2048 * 512 + 500)).toBe(2049n); // rest of core.img follows sector 2048
    expect(out[2048 * 512 + 512]).toBe(0x22);
  });

  it("refuses a core image larger than the BIOS boot partition", async () => {
    const dir = await mkdtemp(join(tmpdir(), "icn-bios-"));
    const disk = join(dir, "disk.raw");
    await writeFile(disk, Buffer.alloc(1024 * 1024));
    await expect(installBiosBoot(disk, Buffer.alloc(512), Buffer.alloc(10 * 512), 1, 4)).rejects.toThrow(/needs 10 sectors but the BIOS boot partition has 4/);
  });
});

describe("disk layout", () => {
  it("aligns partitions to 1 MiB and leaves room for the backup GPT", () => {
    const layout = planLayout("seed", 64 * 1024 * 1024, 1000 * 1024 * 1024 + 1);
    for (const p of [layout.bios, layout.esp, layout.site!, layout.root]) expect(p.start % 2048).toBe(0);
    expect(layout.root.sectors).toBe(1001 * 2048);
    expect(layout.totalSectors).toBe(layout.root.start + layout.root.sectors + 2048);
    expect(layout.esp.start).toBe(layout.bios.start + layout.bios.sectors);
    // The site partition lies between the ESP and the root, which stays last to grow at first boot.
    expect(layout.site).toMatchObject({ number: 4, name: "ICN-SITE", type: "0700", start: layout.esp.start + layout.esp.sectors, sectors: 32 * 2048 });
    expect(layout.root.start).toBe(layout.site!.start + layout.site!.sectors);
    expect(layout.root.number).toBe(3);
  });

  it("derives stable, distinct UUIDs from the seed", () => {
    expect(stableUuid("a", "root")).toBe(stableUuid("a", "root"));
    expect(stableUuid("a", "root")).not.toBe(stableUuid("b", "root"));
    expect(stableUuid("a", "root")).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
});
