import { mkdir, readFile, rm, stat, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ApplianceDefinition } from "../definition.js";
import { parseSize } from "../definition.js";
import { installBiosBoot } from "../disk/bios-boot.js";
import { GRUB_BIOS_MODULES, GRUB_EFI_MODULES, earlyConfig, grubConfig } from "../disk/grub.js";
import { SECTOR, planLayout, sgdiskArgs, type DiskLayout } from "../disk/layout.js";
import type { Stage, StageResult } from "../stage.js";
import { TREE, UNITS_JSON } from "./overlays.js";
import { rootfsTar } from "./rootfs.js";

export const DISK_IMAGE = "disk.raw";
export const LAYOUT_JSON = "layout.json";
const GRUB_LIB = "/usr/lib/grub";

export interface DiskDeps {
  definition: ApplianceDefinition;
  rootfs: StageResult;
  overlays: StageResult;
}

/**
 * Composes the root tree (rootfs + overlays + enabled units + grub.cfg) under fakeroot,
 * so ownership is right without privileges, makes the ext4 and EFI filesystems from
 * directories (no loop devices, no mounts), and assembles the GPT disk with GRUB for
 * BIOS and UEFI.
 */
export const diskStage: Stage<DiskDeps> = {
  name: "disk",
  sources: [import.meta.filename, join(import.meta.dirname, "../disk/layout.ts"), join(import.meta.dirname, "../disk/grub.ts"), join(import.meta.dirname, "../disk/bios-boot.ts")],
  inputs: ({ definition, rootfs, overlays }) => ({ rootfs: rootfs.key, overlays: overlays.key, disk: definition.disk, console: definition.console, name: definition.name }),
  async build(run, { definition, rootfs, overlays }) {
    const work = join(run.out, "work");
    const staging = join(work, "root");
    const fakerootState = join(work, "fakeroot.state");
    await mkdir(staging, { recursive: true });
    const seed = `${rootfs.key}:${overlays.key}`;
    const rootFsUuid = planLayout(seed, 0, 0).rootFsUuid;

    run.log("composing the root tree (rootfs + overlays)");
    const units: string[] = JSON.parse(await readFile(join(overlays.dir, UNITS_JSON), "utf8"));
    await writeFile(join(work, "grub.cfg"), grubConfig({ rootFsUuid, serial: definition.console.serial, title: definition.name }));
    // One fakeroot session: extraction, overlay copy and unit enabling all see root ownership.
    await run.exec("fakeroot", ["-s", fakerootState, "--", "sh", "-euc", COMPOSE, "compose", rootfsTar(rootfs.dir), staging, join(overlays.dir, TREE), join(work, "grub.cfg"), ...units]);

    const usedBytes = Number((await run.exec("du", ["-s", "--block-size=1", "--apparent-size", staging])).split(/\s/)[0]);
    const rootBytes = Math.ceil(usedBytes * 1.12) + 64 * 1024 * 1024 + parseSize(definition.disk.rootFree);
    const layout = planLayout(seed, parseSize(definition.disk.espSize), rootBytes);
    const rootImage = join(work, "root.ext4");
    run.log(`making ext4 root filesystem (${Math.round(rootBytes / 1024 / 1024)} MiB for ${Math.round(usedBytes / 1024 / 1024)} MiB of files)`);
    await run.exec("fakeroot", ["-i", fakerootState, "--", "mkfs.ext4", "-q", "-F", "-L", "icn-root", "-U", layout.rootFsUuid, "-E", `root_owner=0:0,hash_seed=${layout.rootFsUuid}`, "-d", staging, rootImage, `${layout.root.sectors / 2}k`]);
    await rm(staging, { recursive: true, force: true });

    run.log("making GRUB images and the EFI system partition");
    const efiBinary = join(work, "BOOTX64.EFI");
    const coreImg = join(work, "core.img");
    await writeFile(join(work, "early.cfg"), earlyConfig(layout.rootFsUuid));
    await run.exec("grub-mkimage", ["-O", "x86_64-efi", "-d", `${GRUB_LIB}/x86_64-efi`, "-o", efiBinary, "-p", "/boot/grub", "-c", join(work, "early.cfg"), ...GRUB_EFI_MODULES]);
    await run.exec("grub-mkimage", ["-O", "i386-pc", "-d", `${GRUB_LIB}/i386-pc`, "-o", coreImg, "-p", "/boot/grub", "-c", join(work, "early.cfg"), ...GRUB_BIOS_MODULES]);
    const espImage = join(work, "esp.vfat");
    await run.exec("mkfs.vfat", ["-F", "32", "-n", "ESP", "-i", layout.esp.guid.slice(0, 8), "-C", espImage, String(layout.esp.sectors / 2)]);
    await run.exec("mmd", ["-i", espImage, "::/EFI", "::/EFI/BOOT"]);
    // The removable-media path: firmware boots it from any USB stick without NVRAM entries.
    await run.exec("mcopy", ["-i", espImage, efiBinary, "::/EFI/BOOT/BOOTX64.EFI"]);

    run.log("assembling the GPT disk");
    const disk = join(run.out, DISK_IMAGE);
    await writeFile(disk, "");
    await truncate(disk, layout.totalSectors * SECTOR);
    await run.exec("sgdisk", [...sgdiskArgs(layout), disk]);
    await writePartition(run.exec, espImage, disk, layout.esp.start);
    await writePartition(run.exec, rootImage, disk, layout.root.start);
    await installBiosBoot(disk, await readFile(`${GRUB_LIB}/i386-pc/boot.img`), await readFile(coreImg), layout.bios.start, layout.bios.sectors);
    await rm(work, { recursive: true, force: true });
    await writeFile(join(run.out, LAYOUT_JSON), JSON.stringify(layout, null, 2));
    const info = await stat(disk);
    run.log(`disk image ${Math.round(info.size / 1024 / 1024)} MiB (${Math.round((info.blocks * 512) / 1024 / 1024)} MiB allocated)`);
  },
};

function writePartition(exec: (file: string, args: string[]) => Promise<string>, image: string, disk: string, startSector: number) {
  // 1 MiB blocks (partitions are 1 MiB aligned); conv=sparse keeps the image's holes.
  return exec("dd", [`if=${image}`, `of=${disk}`, "bs=1M", `seek=${(startSector * SECTOR) / (1024 * 1024)}`, "conv=notrunc,sparse", "status=none"]);
}

export async function readLayout(dir: string): Promise<DiskLayout> {
  return JSON.parse(await readFile(join(dir, LAYOUT_JSON), "utf8"));
}

/**
 * $1 rootfs tar, $2 staging dir, $3 overlay tree, $4 grub.cfg, $5... units to enable.
 * Runs inside fakeroot: new files are owned by root whatever user builds.
 */
const COMPOSE = `
tar --numeric-owner -xpf "$1" -C "$2"
cp -r --preserve=mode,links --no-preserve=ownership "$3"/. "$2"/
mkdir -p "$2"/boot/grub
cp "$4" "$2"/boot/grub/grub.cfg
if [ -d "$2"/root/.ssh ]; then chmod 700 "$2"/root/.ssh; chmod 600 "$2"/root/.ssh/* 2>/dev/null || true; fi
root="$2"
shift 4
if [ "$#" -gt 0 ]; then systemctl --root="$root" enable "$@"; fi
`;
