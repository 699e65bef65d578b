/**
 * The Debian parts of the images the project builds, made by mmdebstrap from pinned
 * package versions (lock file `images.debian`):
 * - `image-base`: one minbase root with the union of the recipes' packages, as a tar
 *   whose files are turned into ONE shared layer (see stages/images.ts);
 * - `image-compile`: static C programs (the pause container) compiled with the pinned
 *   gcc inside a throwaway root, so their bytes do not depend on the build host.
 */
import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { UserError } from "../errors.js";
import type { PackageSet } from "../images/lock.js";
import type { Stage } from "../stage.js";
import { parseDpkgStatus, readTarMember } from "../tar-read.js";

export const BASE_TAR = "base.tar";
export const PACKAGES_JSON = "packages.json";
/** Every timestamp mmdebstrap and the maintainer scripts write (2025-01-01; shadow's "last change" day too). */
export const SOURCE_DATE_EPOCH = "1735689600";

/** Files that differ from run to run, or that a container image does not need. */
const CLEANUP = [
  'rm -rf "$1"/var/log/* "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/lib/apt/extended_states "$1"/var/cache/ldconfig/aux-cache',
  'rm -f "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/etc/hostname "$1"/etc/resolv.conf "$1"/etc/ssh/ssh_host_*',
  'find "$1" -depth -type d -name __pycache__ -exec rm -rf {} +',
  ': > "$1"/etc/machine-id',
].join(" && ");

const DPKG_EXCLUDES = ["path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*", "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright", "path-exclude=/usr/share/locale/*"];

export interface DebianSource {
  mirror: string;
  suite: string;
  components: string[];
}

export interface ImageBaseDeps {
  debian: DebianSource;
  set: PackageSet;
  /** Resolve mode (lock-images): newest versions of `set.requested`; the value names the mirror state. */
  resolve?: string;
}

function include(set: PackageSet, resolve: string | undefined, what: string): string[] {
  if (resolve) return set.requested;
  const missing = set.requested.filter((name) => !(name in set.packages));
  if (missing.length > 0 || Object.keys(set.packages).length === 0) {
    throw new UserError(
      `the image recipes ask for Debian package${missing.length === 1 ? "" : "s"} that the lock file does not pin in images.debian.${what}: ${missing.join(", ") || "(none pinned)"}`,
      "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
    );
  }
  return Object.entries(set.packages).map(([name, version]) => `${name}=${version}`);
}

function mmdebstrapArgs(debian: DebianSource, packages: string[], hooks: string[], format: string, target: string): string[] {
  return [
    "--mode=unshare",
    "--variant=minbase",
    `--format=${format}`,
    `--components=${debian.components.join(",")}`,
    `--include=${packages.join(",")}`,
    ...DPKG_EXCLUDES.map((rule) => `--dpkgopt=${rule}`),
    ...hooks.map((hook) => `--customize-hook=${hook}`),
    debian.suite,
    target,
    debian.mirror,
  ];
}

function checkPinned(installed: Record<string, string>, set: PackageSet, what: string): void {
  const drift = Object.entries(installed).filter(([n, v]) => set.packages[n] !== v).map(([n, v]) => `${n} ${v} (locked ${set.packages[n] ?? "-"})`);
  if (drift.length > 0) throw new UserError(`the image ${what} set differs from the lock file: ${drift.slice(0, 8).join("; ")}`, "run 'icn-bootstrap lock-images' to re-pin it");
}

export const imageBaseStage: Stage<ImageBaseDeps> = {
  name: "image-base",
  sources: [import.meta.filename],
  inputs: ({ debian, set, resolve }) => ({ debian, requested: set.requested, pinned: resolve ? { newestAt: resolve } : set.packages, epoch: SOURCE_DATE_EPOCH }),
  async build(run, { debian, set, resolve }) {
    const tar = join(run.out, BASE_TAR);
    const packages = include(set, resolve, "base");
    run.log(`mmdebstrap minbase + ${set.requested.join(", ")}`);
    await run.exec("mmdebstrap", mmdebstrapArgs(debian, packages, [CLEANUP], "tar", tar), { env: { SOURCE_DATE_EPOCH } });
    const status = await readTarMember(tar, "var/lib/dpkg/status");
    if (!status) throw new Error("mmdebstrap produced an image base without /var/lib/dpkg/status");
    const installed = parseDpkgStatus(status);
    if (!resolve) checkPinned(installed, set, "base");
    await writeFile(join(run.out, PACKAGES_JSON), JSON.stringify(installed, null, 2));
    run.log(`${Object.keys(installed).length} packages`);
  },
};

export interface CompileProgram {
  name: string;
  /** Host path of the C source. */
  file: string;
  sha256: string;
  cflags: string[];
}

export interface ImageCompileDeps extends ImageBaseDeps {
  programs: CompileProgram[];
}

export const imageCompileStage: Stage<ImageCompileDeps> = {
  name: "image-compile",
  sources: [import.meta.filename],
  inputs: ({ debian, set, resolve, programs }) => ({
    debian,
    requested: set.requested,
    pinned: resolve ? { newestAt: resolve } : set.packages,
    programs: programs.map(({ name, sha256, cflags }) => ({ name, sha256, cflags })),
  }),
  async build(run, { debian, set, resolve, programs }) {
    const packages = include(set, resolve, "toolchain");
    const src = join(run.out, "src");
    const bin = join(run.out, "bin");
    await mkdir(src, { recursive: true });
    await mkdir(bin, { recursive: true });
    const quote = (word: string) => `'${word.replace(/'/g, "'\\''")}'`;
    const script = ["set -eu", "cd /build", ...programs.map((p) => ["gcc", ...p.cflags, "-o", p.name, `${p.name}.c`].map(quote).join(" "))].join("\n");
    for (const p of programs) await copyFile(p.file, join(src, `${p.name}.c`));
    await writeFile(join(src, "build.sh"), `${script}\n`);
    const hooks = [
      'mkdir -p "$1"/build',
      ...["build.sh", ...programs.map((p) => `${p.name}.c`)].map((f) => `copy-in ${join(src, f)} /build`),
      'chroot "$1" sh /build/build.sh',
      ...programs.map((p) => `copy-out /build/${p.name} ${bin}`),
      `chroot "$1" dpkg-query -W -f '\${Package} \${Version} \${db:Status-Abbrev}\\n' > ${join(run.out, "dpkg.txt")}`,
    ];
    run.log(`compiling ${programs.map((p) => p.name).join(", ")} with the pinned gcc`);
    await run.exec("mmdebstrap", mmdebstrapArgs(debian, packages, hooks, "null", "/dev/null"), { env: { SOURCE_DATE_EPOCH } });
    const installed: Record<string, string> = {};
    for (const line of (await readFile(join(run.out, "dpkg.txt"), "utf8")).split("\n")) {
      const [name, version, state] = line.split(" ");
      if (name && version && state?.startsWith("ii")) installed[name.replace(/:.*$/, "")] = version;
    }
    if (!resolve) checkPinned(installed, set, "toolchain");
    await writeFile(join(run.out, PACKAGES_JSON), JSON.stringify(Object.fromEntries(Object.entries(installed).sort()), null, 2));
  },
};
