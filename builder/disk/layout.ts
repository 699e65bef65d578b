import { createHash } from "node:crypto";
import { UserError } from "../errors.js";

export const SECTOR = 512;
const MIB_SECTORS = (1024 * 1024) / SECTOR;

export interface Partition {
  number: number;
  name: string;
  /** sgdisk type code */
  type: string;
  start: number; // sectors
  sectors: number;
  guid: string;
}

export interface DiskLayout {
  diskGuid: string;
  totalSectors: number;
  bios: Partition;
  esp: Partition;
  /** The site partition (FAT, label ICN-SITE): absent in layouts written before it existed. */
  site?: Partition;
  root: Partition;
  rootFsUuid: string;
}

/** The site partition's size: site.yaml and the manifests of a large site fit many times over. */
export const SITE_PARTITION_BYTES = 32 * 1024 * 1024;

/**
 * The partitions the first boot adds to an appliance's disk where it has room
 * (overlays/usr/lib/icn-bootstrap/disk-layout): the root becomes system slot A, grown to
 * the slot size; slot B follows it, empty, for the upgrade to write; then the data
 * partition (ext4, label ICN-DATA) with the appliance's state, to the end of the disk.
 * The built image holds only slot A (number 3): both formats stay small.
 */
export const SLOT_A = { number: 3, name: "root-a" } as const;
export const SLOT_B = { number: 5, name: "root-b" } as const;
/** The built root must fit a slot: an upgrade writes the next image's root into the other one. */
export function checkRootFitsSlot(layout: DiskLayout, slotBytes: number, slotSize: string): void {
  const rootBytes = layout.root.sectors * SECTOR;
  if (rootBytes > slotBytes)
    throw new UserError(
      `the root filesystem needs ${Math.ceil(rootBytes / 1024 ** 2)} MiB, more than a system slot (disk.slotSize ${slotSize})`,
      `raise disk.slotSize in the appliance definition to at least ${Math.ceil(rootBytes / 1024 ** 3)}GiB, or make the image smaller`,
    );
}

/** The ESP's FAT volume id as GRUB and blkid print it (xxxx-xxxx): GRUB finds the ESP, and with it the slots, by it. */
export function espFsUuid(layout: DiskLayout): string {
  return `${layout.esp.guid.slice(0, 4)}-${layout.esp.guid.slice(4, 8)}`;
}

/** A UUID derived from a seed, so the same inputs give the same image. */
export function stableUuid(seed: string, purpose: string): string {
  const hex = createHash("sha256").update(`${seed}:${purpose}`).digest("hex");
  // version 4 layout (random-looking), variant 10xx
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * GPT: 1 MiB BIOS boot partition (GRUB core.img), the EFI system partition, the site
 * partition (the appliance's; not on a compute node's OS image), then the root
 * filesystem, last so it can grow into the disk at first boot.
 * The site partition is number 4 although it comes before the root, which keeps number 3.
 * Everything 1 MiB aligned, 1 MiB left at the end for the backup GPT.
 */
export function planLayout(seed: string, espBytes: number, rootBytes: number, { site: withSite = true } = {}): DiskLayout {
  const mib = (bytes: number) => Math.ceil(bytes / (1024 * 1024)) * MIB_SECTORS;
  const bios: Partition = { number: 1, name: "BIOS boot", type: "EF02", start: MIB_SECTORS, sectors: MIB_SECTORS, guid: stableUuid(seed, "bios") };
  const esp: Partition = {
    number: 2,
    name: "EFI system",
    type: "EF00",
    start: bios.start + bios.sectors,
    sectors: mib(espBytes),
    guid: stableUuid(seed, "esp"),
  };
  // 0700: "Microsoft basic data", which every laptop mounts when the stick is plugged in.
  const site: Partition = {
    number: 4,
    name: "ICN-SITE",
    type: "0700",
    start: esp.start + esp.sectors,
    sectors: mib(SITE_PARTITION_BYTES),
    guid: stableUuid(seed, "site"),
  };
  // 8304: "Linux x86-64 root (/)" from the Discoverable Partitions Specification
  const rootStart = withSite ? site.start + site.sectors : esp.start + esp.sectors;
  const root: Partition = { number: 3, name: "root", type: "8304", start: rootStart, sectors: mib(rootBytes), guid: stableUuid(seed, "root") };
  return {
    diskGuid: stableUuid(seed, "disk"),
    totalSectors: root.start + root.sectors + MIB_SECTORS,
    bios,
    esp,
    ...(withSite ? { site } : {}),
    root,
    rootFsUuid: stableUuid(seed, "rootfs"),
  };
}

/** The partitions in the order they lie on the disk. */
export function partitionsOf(layout: DiskLayout): Partition[] {
  return [layout.bios, layout.esp, ...(layout.site ? [layout.site] : []), layout.root];
}

export function sgdiskArgs(layout: DiskLayout): string[] {
  const args = ["--clear", `--disk-guid=${layout.diskGuid}`];
  for (const p of partitionsOf(layout)) {
    args.push(
      `--new=${p.number}:${p.start}:${p.start + p.sectors - 1}`,
      `--typecode=${p.number}:${p.type}`,
      `--change-name=${p.number}:${p.name}`,
      `--partition-guid=${p.number}:${p.guid}`,
    );
  }
  return args;
}
