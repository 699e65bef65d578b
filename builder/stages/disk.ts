import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { ApplianceDefinition } from "../definition.js";
import { parseSize } from "../definition.js";
import { ASSEMBLE_SOURCES, DIRS_JSON, LAYOUT_JSON, assembleDisk } from "../disk/assemble.js";
import type { DiskLayout } from "../disk/layout.js";
import type { Stage, StageResult } from "../stage.js";
import { rootfsTar } from "./rootfs.js";

export { BASE_CONTENTS, DISK_IMAGE, SYSTEMD_SHADOW } from "../disk/assemble.js";
/** Room kept in the root filesystem for the overlays, which are written into it later. */
const OVERLAY_ROOM = 64 * 1024 * 1024;

export interface DiskDeps {
  definition: ApplianceDefinition;
  /** SOURCE_DATE_EPOCH (builder/reproducible.ts): every time written into the disk. */
  epoch: number;
  rootfs: StageResult;
  /**
   * Content layers: outputs of stages that put large, rarely changing trees into the root
   * (binaries, the seeded registry, the file server's tree). Each has a `tree/` directory,
   * copied over the root in order, owned by root.
   */
  layers?: StageResult[];
}

export const LAYER_TREE = "tree";

/**
 * The appliance's bootable base disk (builder/disk/assemble.ts): GPT with the BIOS boot
 * partition, the EFI system partition (GRUB and the system slots' selector), the site
 * partition and the ext4 root (system slot A) made from the root filesystem and the
 * content layers; the first boot adds slot B and the data partition where the disk has
 * room. Overlays are not in here: they change often and are written later (stages/image.ts).
 */
export const diskStage: Stage<DiskDeps> = {
  name: "disk",
  sources: [import.meta.filename, ...ASSEMBLE_SOURCES],
  inputs: ({ definition, epoch, rootfs, layers = [] }) => ({
    epoch,
    rootfs: rootfs.key,
    layers: layers.map((l) => `${l.name}:${l.key}`),
    disk: definition.disk,
    console: definition.console,
    name: definition.name,
  }),
  async build(run, { definition, epoch, rootfs, layers = [] }) {
    await assembleDisk(run, {
      seed: [rootfs.key, ...layers.map((l) => l.key)].join(":"),
      epoch,
      rootfsTar: rootfsTar(rootfs.dir),
      layers: layers.map((l) => join(l.dir, LAYER_TREE)),
      title: definition.name,
      serial: definition.console.serial,
      espBytes: parseSize(definition.disk.espSize),
      rootFreeBytes: OVERLAY_ROOM + parseSize(definition.disk.rootFree),
      site: true,
      slots: { slotBytes: parseSize(definition.disk.slotSize), slotSize: definition.disk.slotSize },
      records: true,
    });
  },
};

export async function readLayout(diskDir: string): Promise<DiskLayout> {
  return JSON.parse(await readFile(join(diskDir, LAYOUT_JSON), "utf8"));
}

export async function readRootDirs(diskDir: string): Promise<Set<string>> {
  return new Set(JSON.parse(await readFile(join(diskDir, DIRS_JSON), "utf8")));
}
