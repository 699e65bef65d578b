/**
 * Stage `ramdisk`: a network-boot kernel and initramfs from a `ramdisk:` recipe's root
 * (stage os-rootfs), laid out as a content layer of the appliance's file server:
 * boot/<kernel> and boot/<initramfs>, each with its .sha256sum. The initramfs is the
 * whole root but /boot, as a gzip-compressed newc cpio (builder/disk/cpio.ts); the
 * kernel is the root's /boot/vmlinuz-*.
 */
import { createWriteStream } from "node:fs";
import { mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { PassThrough } from "node:stream";
import { createGzip, constants as zlib } from "node:zlib";
import { sha256File } from "../../common/hash.js";
import { tarToCpio } from "../disk/cpio.js";
import type { Stage, StageResult } from "../stage.js";
import { FILES_ROOT } from "./files.js";
import { rootfsTar } from "./rootfs.js";

/** Where the file server serves ramdisks: http://<appliance>:8080/boot/<file>. */
export const BOOT_FILES_PATH = "boot";
export const RAMDISK_JSON = "ramdisk.json";

export interface RamdiskDeps {
  name: string;
  kernel: string;
  initramfs: string;
  epoch: number;
  rootfs: StageResult;
}

export interface ServedFile {
  path: string;
  sha256: string;
  size: number;
}

export interface RamdiskFiles {
  name: string;
  kernel: ServedFile;
  initramfs: ServedFile;
  /** The kernel's release (from its file name), for the log and the SBOM. */
  kernelRelease: string;
}

async function served(dir: string, file: string): Promise<ServedFile> {
  const target = join(dir, file);
  const sha256 = await sha256File(target);
  await writeFile(`${target}.sha256sum`, `${sha256}  ${file}\n`);
  return { path: `${BOOT_FILES_PATH}/${file}`, sha256, size: (await stat(target)).size };
}

export const ramdiskStage: Stage<RamdiskDeps> = {
  name: "ramdisk",
  sources: [import.meta.filename, join(import.meta.dirname, "../disk/cpio.ts")],
  inputs: ({ name, kernel, initramfs, epoch, rootfs }) => ({ name, kernel, initramfs, epoch, rootfs: rootfs.key }),
  async build(run, { name, kernel, initramfs, epoch, rootfs }) {
    const dir = join(run.out, "tree", FILES_ROOT, BOOT_FILES_PATH);
    await mkdir(dir, { recursive: true });
    run.log(`packing the root as ${BOOT_FILES_PATH}/${initramfs} (newc cpio, gzip)`);
    const cpio = new PassThrough({ highWaterMark: 4 * 1024 * 1024 });
    const written = pipeline(cpio, createGzip({ level: zlib.Z_BEST_COMPRESSION }), createWriteStream(join(dir, initramfs)));
    const isKernel = (path: string) => /^boot\/vmlinuz-[^/]+$/.test(path);
    const { entries, taken } = await tarToCpio(rootfsTar(rootfs.dir), cpio, {
      epoch,
      exclude: (path) => path === "boot" || path.startsWith("boot/"),
      take: isKernel,
    });
    cpio.end();
    await written;
    const kernels = [...taken.keys()];
    if (kernels.length !== 1)
      throw new Error(
        `the ${name} root has ${kernels.length} kernels in /boot (${kernels.join(", ") || "none"}); a ramdisk needs exactly one (linux-image-amd64 among its packages)`,
      );
    await writeFile(join(dir, kernel), taken.get(kernels[0]!)!);
    const files: RamdiskFiles = {
      name,
      kernel: await served(dir, kernel),
      initramfs: await served(dir, initramfs),
      kernelRelease: kernels[0]!.slice("boot/vmlinuz-".length),
    };
    await writeFile(join(run.out, RAMDISK_JSON), JSON.stringify(files, null, 2));
    const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
    run.log(
      `${files.kernel.path} (Linux ${files.kernelRelease}): ${mib(files.kernel.size)}; ${files.initramfs.path}: ${entries} entries, ${mib(files.initramfs.size)}`,
    );
  },
};

export async function readRamdisk(result: StageResult): Promise<RamdiskFiles> {
  return JSON.parse(await readFile(join(result.dir, RAMDISK_JSON), "utf8"));
}
