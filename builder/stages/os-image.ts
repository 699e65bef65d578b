/**
 * The compute nodes' OS images (image recipes with `os:`, images/compute-node/):
 * - `os-rootfs`: the recipe's pinned Debian set (lock file images.debian.os.<name>)
 *   installed by mmdebstrap, with the recipe's files, made offline-ready (apt without
 *   sources, systemd-networkd and -resolved on) and with no per-machine identity;
 * - `os-image`: that root as a bootable GPT disk (builder/disk/assemble.ts, no site
 *   partition), converted to compressed qcow2 and laid out as a content layer of the
 *   appliance's file server: os-images/<file> and <file>.sha256sum, announced to the
 *   REST API by a ConfigMap among the first-boot manifests (common/os-images.ts).
 */
import { mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sha256File } from "../../common/hash.js";
import { parseSize } from "../definition.js";
import { ASSEMBLE_SOURCES, DISK_IMAGE, assembleDisk } from "../disk/assemble.js";
import { MMDEBSTRAP_MODULE, mmdebstrap } from "../debian/mmdebstrap.js";
import type { Stage, StageResult } from "../stage.js";
import { parseDpkgStatus } from "../debian/dpkg-status.js";
import { readTarMember } from "../oci/tar.js";
import { PACKAGES_JSON, checkPinned, choice, pinnedInputs, type ImageBaseDeps } from "./image-debian.js";
import { builtOsImageManifest } from "../../common/os-images.js";
import { FILES_ROOT } from "./files.js";
import { convertToQcow2 } from "./formats.js";
import { MANIFESTS_TARGET } from "./overlays.js";
import { DPKG_EXCLUDES, rootfsTar } from "./rootfs.js";

/** The served images, under the file server's root. */
export const OS_IMAGES_PATH = "os-images";
export const OS_IMAGE_JSON = "os-image.json";

export interface OsFile {
  /** Host path. */
  from: string;
  to: string;
  mode: string;
  sha256: string;
  /** A directory whose contents go into `to` (a `python:` tree). */
  directory?: boolean;
}

/** What a `ramdisk:` recipe asks of its root (builder/images/recipe.ts). */
export interface RamdiskRoot {
  enable: string[];
  dropModules: string[];
}

export interface OsRootfsDeps extends ImageBaseDeps {
  name: string;
  files: OsFile[];
  epoch: number;
  ramdisk?: RamdiskRoot;
}

/** After the packages and the recipe's files: offline apt, the network units, no identity baked in. */
const FINISH = [
  // No apt sources: a compute node has no Internet. `apt-get update` then has nothing to fetch and succeeds.
  `printf '%s\\n' '# A compute node of an ICN site: no Internet, every package it needs is installed.' > "$1"/etc/apt/sources.list`,
  'chroot "$1" systemctl enable systemd-networkd.service systemd-resolved.service',
  'ln -sfn ../run/systemd/resolve/stub-resolv.conf "$1"/etc/resolv.conf',
  'rm -f "$1"/etc/ssh/ssh_host_* "$1"/var/lib/dbus/machine-id "$1"/etc/hostname',
  ': > "$1"/etc/machine-id',
  'rm -rf "$1"/var/lib/cloud/* "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log',
  'find "$1"/usr -depth -type d -name __pycache__ -exec rm -rf {} +',
].join(" && ");

/**
 * A ramdisk's root: its units enabled, the kernel's module trees it does not need left
 * out (then depmod), and systemd as the initramfs's /init (the kernel runs /init from a
 * tmpfs root; nothing is switched to).
 */
function ramdiskHooks({ enable, dropModules }: RamdiskRoot): string[] {
  const modules = '"$1"/usr/lib/modules/*/kernel';
  return [
    ...(enable.length ? [`chroot "$1" systemctl enable ${enable.join(" ")}`] : []),
    ...dropModules.map((dir) => `for tree in ${modules}/${dir}; do rm -rf "$tree"; done`),
    'for dir in "$1"/usr/lib/modules/*; do chroot "$1" depmod "${dir##*/}"; done',
    'ln -sfn usr/lib/systemd/systemd "$1"/init',
  ];
}

export const osRootfsStage: Stage<OsRootfsDeps> = {
  name: "os-rootfs",
  sources: [import.meta.filename, MMDEBSTRAP_MODULE],
  inputs: (deps) => ({
    ...pinnedInputs(deps),
    name: deps.name,
    files: deps.files.map(({ to, mode, sha256, directory }) => ({ to, mode, sha256, ...(directory ? { directory } : {}) })),
    epoch: deps.epoch,
    ...(deps.ramdisk ? { ramdisk: deps.ramdisk } : {}),
  }),
  async build(run, deps) {
    const { debian, set, resolve, files, name, epoch, ramdisk } = deps;
    const tar = rootfsTar(run.out);
    // A directory's modes are decided here, not by the umask its tree (a cache) was made under.
    const copies = files.flatMap((f) =>
      f.directory
        ? [`mkdir -p "$1"${f.to}`, `sync-in ${f.from} ${f.to}`, `chmod -R u=rwX,go=rX "$1"${f.to}`]
        : [`upload ${f.from} ${f.to}`, `chroot "$1" chmod ${f.mode} ${f.to}`],
    );
    run.log(`mmdebstrap ${name}: ${set.requested.length} requested packages${resolve ? " (resolving)" : ""}`);
    await mmdebstrap(
      run.exec,
      {
        sources: debian,
        variant: "apt",
        format: "tar",
        target: tar,
        dpkgOptions: DPKG_EXCLUDES,
        customizeHooks: [...files.map((f) => `mkdir -p "$1"${f.to.replace(/\/[^/]+$/, "")}`), ...copies, FINISH, ...(ramdisk ? ramdiskHooks(ramdisk) : [])],
        env: { SOURCE_DATE_EPOCH: String(epoch) },
      },
      choice(set, resolve, `os.${name}`),
    );
    const status = await readTarMember(tar, "var/lib/dpkg/status");
    if (!status) throw new Error(`mmdebstrap produced the ${name} root without /var/lib/dpkg/status`);
    const installed = parseDpkgStatus(status);
    if (!resolve) checkPinned(installed, set, `os.${name}`);
    await writeFile(join(run.out, PACKAGES_JSON), JSON.stringify(installed, null, 2));
    run.log(`${Object.keys(installed).length} packages installed`);
  },
};

export interface OsImageDeps {
  name: string;
  file: string;
  rootFree: string;
  epoch: number;
  rootfs: StageResult;
}

export const osImageStage: Stage<OsImageDeps> = {
  name: "os-image",
  sources: [import.meta.filename, join(import.meta.dirname, "../../common/os-images.ts"), join(import.meta.dirname, "formats.ts"), ...ASSEMBLE_SOURCES],
  inputs: ({ name, file, rootFree, epoch, rootfs }) => ({ name, file, rootFree, epoch, rootfs: rootfs.key }),
  async build(run, { name, file, rootFree, epoch, rootfs }) {
    await assembleDisk(run, {
      seed: `${name}:${rootfs.key}`,
      epoch,
      rootfsTar: rootfsTar(rootfs.dir),
      layers: [],
      title: name,
      serial: "ttyS0,115200",
      espBytes: 64 * 1024 * 1024,
      rootFreeBytes: parseSize(rootFree),
      site: false,
      records: false,
    });
    const dir = join(run.out, "tree", FILES_ROOT, OS_IMAGES_PATH);
    await mkdir(dir, { recursive: true });
    const target = join(dir, file);
    run.log(`converting to compressed qcow2: ${OS_IMAGES_PATH}/${file}`);
    await convertToQcow2(run, join(run.out, DISK_IMAGE), target);
    await rm(join(run.out, DISK_IMAGE));
    const sha256 = await sha256File(target);
    await writeFile(`${target}.sha256sum`, `${sha256}  ${file}\n`);
    const { size } = await stat(target);
    await writeFile(join(run.out, OS_IMAGE_JSON), JSON.stringify({ name, path: `${OS_IMAGES_PATH}/${file}`, sha256, size }, null, 2));
    // Announced to the REST API (GET /api/v1/os-images) by a ConfigMap among the manifests applied at first boot.
    const manifests = join(run.out, "tree", MANIFESTS_TARGET, "bpa");
    await mkdir(manifests, { recursive: true });
    await writeFile(
      join(manifests, `os-image-${name}.yaml`),
      builtOsImageManifest({ name: file, path: `/${OS_IMAGES_PATH}/${file}`, sha256, size, format: "qcow2" }, name),
    );
    run.log(`${OS_IMAGES_PATH}/${file}: ${Math.round(size / 1024 / 1024)} MiB, sha256 ${sha256.slice(0, 12)}`);
  },
};

export async function readOsImage(result: StageResult): Promise<{ name: string; path: string; sha256: string; size: number }> {
  return JSON.parse(await readFile(join(result.dir, OS_IMAGE_JSON), "utf8"));
}
