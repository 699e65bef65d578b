/**
 * The Debian parts of the images the project builds, made by mmdebstrap from pinned
 * package versions (lock file `images.debian`):
 * - `image-base`: one minbase root with the union of the recipes' packages, as a tar
 *   whose files are turned into ONE shared layer (see stages/images.ts);
 * - `image-root`: the same for one recipe with `base: own-debian` (its own root and layer);
 * - `image-compile`: static C programs (the pause container) compiled with the pinned
 *   gcc inside a throwaway root, so their bytes do not depend on the build host;
 * - `cgo-toolchain`: the same pinned toolchain kept as a directory, the C compiler of Go
 *   programs that need cgo (runc, flanneld: builder/sources/cgo.ts).
 */
import { copyFile, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { UserError } from "../errors.js";
import { MMDEBSTRAP_MODULE, mmdebstrap, type PackageChoice } from "../debian/mmdebstrap.js";
import { versionsOf, type DebianSources } from "../debian/schema.js";
import type { PackageSet } from "../images/lock.js";
import type { LockFile } from "../lockfile.js";
import type { Stage, StageRun } from "../stage.js";
import { parseDpkgStatus } from "../debian/dpkg-status.js";
import { readTarMember } from "../oci/tar.js";
import { fileDigests } from "./rootfs.js";

export const BASE_TAR = "base.tar";
export const PACKAGES_JSON = "packages.json";
/** Every timestamp mmdebstrap and the maintainer scripts write (2025-01-01; shadow's "last change" day too). */
export const SOURCE_DATE_EPOCH = "1735689600";

/**
 * Python's bytecode, made again reproducibly: the maintainer scripts' (py3compile, in
 * parallel) differs from run to run, and without any, every start of a container with a
 * read-only root (Ironic) compiles every module it imports again (Ironic's imports: 4.4 s
 * without bytecode, 1.3 s with it, natively; under emulation minutes). One process in a fixed
 * order (compileall sorts), a fixed hash seed and hash-checked .pyc: the same bytes each run.
 */
const pythonBytecode = (dirs: string) =>
  'if [ -x "$1"/usr/bin/python3 ]; then env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONHASHSEED=0 SOURCE_DATE_EPOCH=' +
  SOURCE_DATE_EPOCH +
  ` chroot "$1" sh -c 'python3 -m compileall -qq --invalidation-mode checked-hash ${dirs}' || true; fi`;
const PYTHON_BYTECODE = pythonBytecode("/usr/lib/python3 /usr/lib/python3.[0-9]*");

/** Files that differ from run to run, or that a container image does not need. */
const cleanup = (bytecode: string) =>
  [
    'rm -rf "$1"/var/log/* "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/lib/apt/extended_states "$1"/var/cache/ldconfig/aux-cache',
    'rm -f "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/etc/hostname "$1"/etc/resolv.conf "$1"/etc/ssh/ssh_host_*',
    'find "$1" -depth -type d -name __pycache__ -exec rm -rf {} +',
    bytecode,
    ': > "$1"/etc/machine-id',
  ].join(" && ");
const CLEANUP = cleanup(PYTHON_BYTECODE);

/**
 * A recipe's `python:` tree (builder/sources/pypi.ts) in its own root, where Debian's own
 * python3 would look for it (/usr/local/lib/python3.X/dist-packages, /usr/local/bin), with
 * bytecode made like Debian's modules' (the image's root is read-only: without it every
 * start compiles again what it imports).
 */
export interface RootPythonTree {
  /** The tree's cache key (a pure function of its hash-pinned requirements and the Python version). */
  key: string;
  sitePackages: string;
  bin: string;
  /** "3.13". */
  version: string;
  /** Package directories left out (the recipe's python.leaveOut: code the image never imports, such as a package's tests). */
  leaveOut: string[];
}

function pythonTreeHooks(tree: RootPythonTree): string[] {
  const lib = `/usr/local/lib/python${tree.version}`;
  return [
    // Debian's python3 makes an empty dist-packages there: the tree takes its place (rmdir fails on a non-empty one).
    `mkdir -p "$1"${lib} && if [ -d "$1"${lib}/dist-packages ]; then rmdir "$1"${lib}/dist-packages; fi`,
    `copy-in ${tree.sitePackages} ${lib}`,
    `mv "$1"${lib}/site-packages "$1"${lib}/dist-packages`,
    ...tree.leaveOut.map((dir) => `rm -r "$1"${lib}/dist-packages/${dir}`),
    `copy-in ${tree.bin} /usr/local`,
    // The tree's files carry the time pip wrote them on this machine. Python writes a
    // timestamp .pyc of what a .pth imports at start-up (setuptools' _distutils_hack) before
    // compileall runs, and compileall keeps it: with that time in it, Ironic's image had
    // another digest on each machine.
    `find "$1"${lib}/dist-packages "$1"/usr/local/bin -exec touch -h -d @${SOURCE_DATE_EPOCH} {} +`,
  ];
}

const DPKG_EXCLUDES = [
  "path-exclude=/usr/share/man/*",
  "path-exclude=/usr/share/info/*",
  "path-exclude=/usr/share/doc/*",
  "path-include=/usr/share/doc/*/copyright",
  "path-exclude=/usr/share/locale/*",
];

/** The archives (the stages' inputs), and where a pinned file missing from the cache is fetched from (not inputs: the file's sha256 is). */
export type DebianSource = Pick<DebianSources, "suite" | "components" | "archives" | "keyring"> & Partial<Pick<DebianSources, "snapshot" | "indexes">>;

/** The lock file's Debian archives, as the image stages take them. */
export function debianSource(lock: Pick<LockFile, "debian">): DebianSource {
  const { suite, components, archives, keyring, snapshot, indexes } = lock.debian;
  return { suite, components, archives, ...(keyring ? { keyring } : {}), snapshot, indexes };
}

export interface ImageBaseDeps {
  debian: DebianSource;
  set: PackageSet;
  /** Resolve mode (lock): newest versions of `set.requested`; the value names the archives' state. */
  resolve?: string;
}

export function choice(set: PackageSet, resolve: string | undefined, what: string): PackageChoice {
  if (resolve) return { resolve: set.requested };
  const missing = set.requested.filter((name) => !(name in set.packages));
  if (missing.length > 0 || Object.keys(set.packages).length === 0) {
    throw new UserError(
      `the image recipes ask for Debian package${missing.length === 1 ? "" : "s"} that the lock file does not pin in images.debian.${what}: ${missing.join(", ") || "(none pinned)"}`,
      "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
    );
  }
  return { pinned: set.packages };
}

export function pinnedInputs({ debian, set, resolve }: ImageBaseDeps) {
  const { suite, components, archives } = debian;
  return { suite, components, archives, requested: set.requested, pinned: resolve ? { newestAt: resolve } : fileDigests(set.packages) };
}

export function checkPinned(installed: Record<string, string>, set: PackageSet, what: string): void {
  const pinned = versionsOf(set.packages);
  const drift = Object.entries(installed)
    .filter(([n, v]) => pinned[n] !== v)
    .map(([n, v]) => `${n} ${v} (locked ${pinned[n] ?? "-"})`);
  if (drift.length > 0)
    throw new UserError(`the image ${what} set differs from the lock file: ${drift.slice(0, 8).join("; ")}`, "run 'icn-bootstrap lock-images' to re-pin it");
}

/** A minbase root with a pinned set as a tar (run.out/<file>), checked against the pins; its packages in PACKAGES_JSON. */
async function pinnedRootTar(run: StageRun, { debian, set, resolve }: ImageBaseDeps, what: string, file: string, python?: RootPythonTree): Promise<string> {
  const tar = join(run.out, file);
  run.log(`mmdebstrap minbase + ${set.requested.join(", ")}${python ? ` + the Python tree ${python.key.slice(0, 12)} for python${python.version}` : ""}`);
  const hooks = python
    ? [...pythonTreeHooks(python), cleanup(pythonBytecode(`/usr/lib/python3 /usr/lib/python3.[0-9]* /usr/local/lib/python${python.version}/dist-packages`))]
    : [CLEANUP];
  await mmdebstrap(
    run.exec,
    { sources: debian, variant: "minbase", format: "tar", target: tar, dpkgOptions: DPKG_EXCLUDES, customizeHooks: hooks, env: { SOURCE_DATE_EPOCH } },
    choice(set, resolve, what),
  );
  const status = await readTarMember(tar, "var/lib/dpkg/status");
  if (!status) throw new Error(`mmdebstrap produced an image ${what} without /var/lib/dpkg/status`);
  const installed = parseDpkgStatus(status);
  if (!resolve) checkPinned(installed, set, what);
  await writeFile(join(run.out, PACKAGES_JSON), JSON.stringify(installed, null, 2));
  run.log(`${Object.keys(installed).length} packages`);
  return tar;
}

export const imageBaseStage: Stage<ImageBaseDeps> = {
  name: "image-base",
  sources: [import.meta.filename, MMDEBSTRAP_MODULE],
  inputs: (deps) => ({ ...pinnedInputs(deps), epoch: SOURCE_DATE_EPOCH }),
  async build(run, deps) {
    await pinnedRootTar(run, deps, "base", BASE_TAR);
  },
};

export interface ImageRootDeps extends ImageBaseDeps {
  /** The recipe whose own root this is (lock file images.debian.own.<recipe>). */
  recipe: string;
  /** The recipe's `python:` tree, installed into this root with its bytecode. */
  python?: RootPythonTree;
}

export const imageRootStage: Stage<ImageRootDeps> = {
  name: "image-root",
  sources: [import.meta.filename, MMDEBSTRAP_MODULE],
  inputs: (deps) => ({
    ...pinnedInputs(deps),
    epoch: SOURCE_DATE_EPOCH,
    ...(deps.python ? { python: { key: deps.python.key, version: deps.python.version, leaveOut: deps.python.leaveOut } } : {}),
  }),
  async build(run, deps) {
    await pinnedRootTar(run, deps, `own.${deps.recipe}`, BASE_TAR, deps.python);
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
  sources: [import.meta.filename, MMDEBSTRAP_MODULE],
  inputs: (deps) => ({ ...pinnedInputs(deps), programs: deps.programs.map(({ name, sha256, cflags }) => ({ name, sha256, cflags })) }),
  async build(run, { debian, set, resolve, programs }) {
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
    await mmdebstrap(
      run.exec,
      {
        sources: debian,
        variant: "minbase",
        format: "null",
        target: "/dev/null",
        dpkgOptions: DPKG_EXCLUDES,
        customizeHooks: hooks,
        env: { SOURCE_DATE_EPOCH },
      },
      choice(set, resolve, "toolchain"),
    );
    const installed: Record<string, string> = {};
    for (const line of (await readFile(join(run.out, "dpkg.txt"), "utf8")).split("\n")) {
      const [name, version, state] = line.split(" ");
      if (name && version && state?.startsWith("ii")) installed[name.replace(/:.*$/, "")] = version;
    }
    if (!resolve) checkPinned(installed, set, "toolchain");
    await writeFile(join(run.out, PACKAGES_JSON), JSON.stringify(Object.fromEntries(Object.entries(installed).sort()), null, 2));
  },
};

/** The cgo toolchain's root directory, inside the stage output. */
export const CGO_ROOT = "root";

/** The pinned toolchain set (gcc, libc6-dev, libseccomp-dev, pkg-config) as a directory, for cgo builds. */
export const cgoToolchainStage: Stage<ImageBaseDeps> = {
  name: "cgo-toolchain",
  sources: [import.meta.filename, MMDEBSTRAP_MODULE],
  inputs: (deps) => ({ ...pinnedInputs(deps), epoch: SOURCE_DATE_EPOCH }),
  async build(run, deps) {
    const tar = await pinnedRootTar(run, deps, "toolchain", "toolchain.tar");
    const root = join(run.out, CGO_ROOT);
    await mkdir(root);
    await run.exec("tar", ["-xf", tar, "-C", root, "--no-same-owner", "--exclude=./dev/*"]);
    await rm(tar);
  },
};
