/**
 * Digests of the disk regions outside the root filesystem that decide how it boots:
 * the MBR sector (GRUB's boot.img and the protective partition table), the BIOS boot
 * partition (GRUB's core.img) and the EFI system partition.
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { SECTOR, type DiskLayout } from "../disk/layout.js";

export interface BootDigests {
  mbr: string;
  biosBoot: string;
  esp: string;
}

/** sha256 of `length` bytes at `offset` of a file (or block device). */
export async function rangeDigest(path: string, offset: number, length: number): Promise<string> {
  const handle = await open(path, "r");
  try {
    const hash = createHash("sha256");
    const buffer = Buffer.alloc(4 * 1024 * 1024);
    let done = 0;
    while (done < length) {
      const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, length - done), offset + done);
      if (bytesRead === 0) throw new Error(`${path} ends at ${offset + done} bytes, before the ${length} bytes from ${offset}`);
      hash.update(buffer.subarray(0, bytesRead));
      done += bytesRead;
    }
    return hash.digest("hex");
  } finally {
    await handle.close();
  }
}

export async function bootDigests(disk: string, layout: DiskLayout): Promise<BootDigests> {
  return {
    mbr: await rangeDigest(disk, 0, SECTOR),
    biosBoot: await rangeDigest(disk, layout.bios.start * SECTOR, layout.bios.sectors * SECTOR),
    esp: await rangeDigest(disk, layout.esp.start * SECTOR, layout.esp.sectors * SECTOR),
  };
}

/**
 * sha256 of the disk's first `total` bytes with the site partition left out (the bytes
 * before it, then those after it): what stays as built when `site write` changed the site.
 */
export async function digestOutsideSite(path: string, layout: DiskLayout, total: number): Promise<string | undefined> {
  if (!layout.site) return undefined;
  const hash = createHash("sha256");
  const handle = await open(path, "r");
  try {
    const buffer = Buffer.alloc(4 * 1024 * 1024);
    const siteStart = layout.site.start * SECTOR;
    const siteEnd = siteStart + layout.site.sectors * SECTOR;
    for (const [from, to] of [
      [0, siteStart],
      [siteEnd, total],
    ] as const) {
      for (let at = from; at < to;) {
        const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, to - at), at);
        if (bytesRead === 0) throw new Error(`${path} ends at ${at} bytes, before ${to}`);
        hash.update(buffer.subarray(0, bytesRead));
        at += bytesRead;
      }
    }
    return hash.digest("hex");
  } finally {
    await handle.close();
  }
}
