/**
 * A bootable GPT disk from a root filesystem tar: a BIOS boot partition (GRUB core.img),
 * the EFI system partition (GRUB at the removable-media path), optionally the site
 * partition, and the ext4 root. The root tree is composed under fakeroot so ownership is
 * right without privileges; filesystems are made from directories (no loop devices or
 * mounts); every time in them is the epoch. The appliance's disk (stages/disk.ts) and the
 * compute nodes' OS images (stages/os-image.ts) are both made here.
 */
import { mkdir, readFile, rm, stat, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { StageRun } from "../stage.js";
import { installBiosBoot } from "./bios-boot.js";
import { ext4Manifest } from "./contents.js";
import { debugfsErrors, timesScript } from "./debugfs.js";
import {
  ESP_SLOT_DIR,
  GRUB_BIOS_MODULES,
  GRUB_EFI_MODULES,
  GRUB_SLOT_MODULES,
  SLOT_GRUBENV,
  SLOT_SELECTOR,
  earlyConfig,
  grubConfig,
  grubenvBlock,
  slotSelectorConfig,
  slotsEarlyConfig,
} from "./grub.js";
import { SECTOR, checkRootFitsSlot, espFsUuid, planLayout, sgdiskArgs, type DiskLayout } from "./layout.js";

export const DISK_IMAGE = "disk.raw";
/** The root filesystem's contents manifest before the overlays (builder/disk/contents.ts). */
export const BASE_CONTENTS = "contents.txt";
export const LAYOUT_JSON = "layout.json";
export const DIRS_JSON = "dirs.json";
/** Unit files and enablement links of the root, so later stages can run `systemctl --root` on a small copy. */
export const SYSTEMD_SHADOW = "systemd-shadow";
const GRUB_LIB = "/usr/lib/grub";

export interface DiskPlan {
  /** Derives the disk's and partitions' GUIDs and the root filesystem's UUID. */
  seed: string;
  /** SOURCE_DATE_EPOCH (builder/reproducible.ts): every time written into the disk. */
  epoch: number;
  rootfsTar: string;
  /** Trees copied over the root in order, owned by root. */
  layers: string[];
  /** GRUB's menu entry. */
  title: string;
  /** The serial console, e.g. ttyS0,115200. */
  serial: string;
  espBytes: number;
  /** Room left in the root filesystem beyond its files. */
  rootFreeBytes: number;
  /** The appliance's ICN-SITE partition. */
  site: boolean;
  /**
   * System slots (the appliance's): GRUB boots the slot the ESP's selector picks, and the
   * root must fit a slot of this size. Absent: GRUB boots the one root (the compute nodes' OS images).
   */
  slots?: { slotBytes: number; slotSize: string };
  /**
   * What the appliance's later stages and `verify` read besides the disk: DIRS_JSON,
   * BASE_CONTENTS (a debugfs pass over the whole root) and SYSTEMD_SHADOW.
   */
  records: boolean;
}

/** The modules a disk depends on: part of the cache key of every stage that assembles one. */
export const ASSEMBLE_SOURCES = [
  import.meta.filename,
  ...["contents.ts", "debugfs.ts", "grub.ts", "layout.ts", "bios-boot.ts"].map((f) => join(import.meta.dirname, f)),
];

/** Writes DISK_IMAGE and LAYOUT_JSON into run.out, with `records` also DIRS_JSON, BASE_CONTENTS and SYSTEMD_SHADOW. */
export async function assembleDisk(run: StageRun, plan: DiskPlan): Promise<DiskLayout> {
  const work = join(run.out, "work");
  const staging = join(work, "root");
  const fakerootState = join(work, "fakeroot.state");
  await mkdir(staging, { recursive: true });
  // TZ: mtools write FAT times in local time.
  const timeEnv = { SOURCE_DATE_EPOCH: String(plan.epoch), E2FSPROGS_FAKE_TIME: String(plan.epoch), TZ: "UTC" };
  const rootFsUuid = planLayout(plan.seed, 0, 0, { site: plan.site }).rootFsUuid;

  run.log("unpacking the root filesystem");
  await writeFile(join(work, "grub.cfg"), grubConfig({ rootFsUuid, serial: plan.serial, title: plan.title, slots: Boolean(plan.slots) }));
  await run.exec(
    "fakeroot",
    [
      "-s",
      fakerootState,
      "--",
      "bash",
      "-euo",
      "pipefail",
      "-c",
      COMPOSE,
      "compose",
      plan.rootfsTar,
      staging,
      join(work, "grub.cfg"),
      join(plan.records ? run.out : work, SYSTEMD_SHADOW),
      ...plan.layers,
    ],
    { env: timeEnv },
  );
  if (plan.layers.length > 0) run.log(`added ${plan.layers.length} content layer${plan.layers.length === 1 ? "" : "s"}`);
  const dirs = (await run.exec("find", [staging, "-type", "d", "-printf", "%P\\n"])).split("\n").filter(Boolean);
  const paths = (await run.exec("find", [staging, "-mindepth", "1", "-printf", "%P\\n"])).split("\n").filter(Boolean);
  if (plan.records) await writeFile(join(run.out, DIRS_JSON), JSON.stringify(dirs));

  // The files' sizes plus a block per directory: not `du`, whose directory sizes depend on the build host's file system.
  const fileSizes = (await run.exec("find", [staging, "-type", "f", "-printf", "%s\\n"])).split("\n").filter(Boolean);
  const usedBytes = fileSizes.reduce((sum, size) => sum + Number(size), 0) + 4096 * dirs.length;
  const rootBytes = Math.ceil(usedBytes * 1.12) + 64 * 1024 * 1024 + plan.rootFreeBytes;
  const layout = planLayout(plan.seed, plan.espBytes, rootBytes, { site: plan.site });
  if (plan.slots) checkRootFitsSlot(layout, plan.slots.slotBytes, plan.slots.slotSize);
  const rootImage = join(work, "root.ext4");
  run.log(`making the ext4 root filesystem (${Math.round(rootBytes / 1024 / 1024)} MiB for ${Math.round(usedBytes / 1024 / 1024)} MiB of files)`);
  await run.exec(
    "fakeroot",
    [
      "-i",
      fakerootState,
      "--",
      "mkfs.ext4",
      "-q",
      "-F",
      "-L",
      "icn-root",
      "-U",
      layout.rootFsUuid,
      "-E",
      `root_owner=0:0,hash_seed=${layout.rootFsUuid}`,
      "-d",
      staging,
      rootImage,
      `${layout.root.sectors / 2}k`,
    ],
    { env: timeEnv },
  );
  await rm(staging, { recursive: true, force: true });
  // mkfs.ext4 -d copies each file's atime and ctime from the build host (E2FSPROGS_FAKE_TIME
  // covers only what mkfs makes itself): set both to the epoch in every inode.
  const timesFile = join(work, "times.debugfs");
  await writeFile(timesFile, timesScript(["", ...paths], plan.epoch));
  const timesOutput = await run.exec("sh", ["-c", 'exec debugfs -w -f "$1" "$2" 2>&1', "debugfs", timesFile, rootImage], { env: timeEnv });
  const timeErrors = debugfsErrors(timesOutput);
  if (timeErrors.length > 0) throw new Error(`debugfs could not set the root filesystem's times:\n  ${timeErrors.slice(0, 10).join("\n  ")}`);
  if (plan.records) {
    run.log("recording the root filesystem's contents (for verify)");
    await writeFile(join(run.out, BASE_CONTENTS), await ext4Manifest(rootImage, join(work, "contents")));
  }

  run.log("making GRUB images and the EFI system partition");
  const efiBinary = join(work, "BOOTX64.EFI");
  const coreImg = join(work, "core.img");
  await writeFile(join(work, "early.cfg"), plan.slots ? slotsEarlyConfig(espFsUuid(layout)) : earlyConfig(layout.rootFsUuid));
  const slotModules = plan.slots ? GRUB_SLOT_MODULES : [];
  await run.exec("grub-mkimage", [
    "-O",
    "x86_64-efi",
    "-d",
    `${GRUB_LIB}/x86_64-efi`,
    "-o",
    efiBinary,
    "-p",
    "/boot/grub",
    "-c",
    join(work, "early.cfg"),
    ...GRUB_EFI_MODULES,
    ...slotModules,
  ]);
  await run.exec("grub-mkimage", [
    "-O",
    "i386-pc",
    "-d",
    `${GRUB_LIB}/i386-pc`,
    "-o",
    coreImg,
    "-p",
    "/boot/grub",
    "-c",
    join(work, "early.cfg"),
    ...GRUB_BIOS_MODULES,
    ...slotModules,
  ]);
  const espImage = join(work, "esp.vfat");
  // --invariant: no creation time in the volume label entry; the serial is derived (-i); mtools takes file times from SOURCE_DATE_EPOCH.
  await run.exec("mkfs.vfat", ["--invariant", "-F", "32", "-n", "ESP", "-i", layout.esp.guid.slice(0, 8), "-C", espImage, String(layout.esp.sectors / 2)], {
    env: timeEnv,
  });
  await run.exec("mmd", ["-i", espImage, "::/EFI", "::/EFI/BOOT"], { env: timeEnv });
  // The removable-media path: firmware boots it from any disk without NVRAM entries.
  await run.exec("mcopy", ["-i", espImage, efiBinary, "::/EFI/BOOT/BOOTX64.EFI"], { env: timeEnv });
  if (plan.slots) {
    await writeFile(join(work, "selector.cfg"), slotSelectorConfig(plan.serial));
    await writeFile(join(work, "grubenv"), grubenvBlock({ default_slot: "a" }));
    await run.exec("mmd", ["-i", espImage, `::/${ESP_SLOT_DIR}`], { env: timeEnv });
    await run.exec("mcopy", ["-i", espImage, join(work, "selector.cfg"), `::/${SLOT_SELECTOR}`], { env: timeEnv });
    await run.exec("mcopy", ["-i", espImage, join(work, "grubenv"), `::/${SLOT_GRUBENV}`], { env: timeEnv });
  }

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
  run.log(`base disk ${Math.round(info.size / 1024 / 1024)} MiB (${Math.round((info.blocks * 512) / 1024 / 1024)} MiB allocated)`);
  return layout;
}

function writePartition(exec: (file: string, args: string[]) => Promise<string>, image: string, disk: string, startSector: number) {
  // 1 MiB blocks (partitions are 1 MiB aligned); conv=sparse keeps the image's holes.
  return exec("dd", [`if=${image}`, `of=${disk}`, "bs=1M", `seek=${(startSector * SECTOR) / (1024 * 1024)}`, "conv=notrunc,sparse", "status=none"]);
}

/**
 * $1 rootfs tar, $2 staging dir, $3 grub.cfg, $4 systemd shadow dir, $5... layer trees.
 * Runs inside fakeroot: files are owned by root whatever user builds. Every mtime newer
 * than SOURCE_DATE_EPOCH (the layers' files, grub.cfg, the directories they went into)
 * is clamped to it. Modes do not depend on the host's umask (issue 34): a layer's
 * directories are 0755, its files 0755 when executable, else 0644, whatever modes they
 * have in the stage cache; a directory the root already has keeps its own (/etc, /var/lib),
 * and a symbolic link to one stays one.
 */
const COMPOSE = `
umask 022
root="$2"; grubcfg="$3"; shadow="$4"
tar --numeric-owner -xpf "$1" -C "$root"
shift 4
for layer in "$@"; do
  tar -C "$layer" --mode=u=rwX,go=rX -cf - . | tar -C "$root" -xpf - --no-same-owner --no-overwrite-dir --keep-directory-symlink --touch
done
install -d -m 0755 "$root"/boot/grub
install -m 0644 "$grubcfg" "$root"/boot/grub/grub.cfg
mkdir -p "$shadow"/usr/lib/systemd "$shadow"/etc/systemd
cp -a "$root"/usr/lib/systemd/system "$shadow"/usr/lib/systemd/
cp -a "$root"/etc/systemd/system "$shadow"/etc/systemd/
ln -s usr/lib "$shadow"/lib
find "$root" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
`;
