import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import type { ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import { chrootParent, MMDEBSTRAP_MODULE, mmdebstrap } from "../debian/mmdebstrap.js";
import { withLocalRepo } from "../debian/local-repo.js";
import { versionsOf, type PinnedPackage } from "../debian/schema.js";
import type { DebianLock } from "../lockfile.js";
import { sourceDateEpoch } from "../reproducible.js";
import type { Stage } from "../stage.js";
import { parseDpkgStatus } from "../debian/dpkg-status.js";
import { readTarMember } from "../oci/tar.js";

/** What the first-boot units and the boot loader need, whatever the definition asks for. */
export const BASE_PACKAGES = [
  "linux-image-amd64",
  "initramfs-tools",
  "systemd",
  "systemd-sysv",
  "systemd-resolved",
  "udev",
  "dbus",
  "kmod",
  "iproute2",
  "openssh-server",
  "cloud-guest-utils", // growpart
  "gdisk", // sgdisk -e: move the backup GPT header to the end of a larger disk
  "e2fsprogs",
  "procps",
  "ca-certificates",
];

export interface RootfsDeps {
  definition: ApplianceDefinition;
  lock: DebianLock;
  /**
   * Resolve mode (`icn-bootstrap lock`): install the newest versions of the archives'
   * suites instead of the pinned files. The value identifies the archives' state (their
   * index dates), so a resolution is reused only while the archives have not changed.
   */
  resolve?: string;
}

export function requestedPackages(definition: ApplianceDefinition): string[] {
  return [...new Set([...BASE_PACKAGES, ...definition.debian.packages])].sort();
}

const ROOTFS_TAR = "rootfs.tar";
export const PACKAGES_JSON = "packages.json";

/** Files that must not be baked into an image: first boot creates them per machine. */
const CUSTOMIZE = [
  'rm -f "$1"/etc/ssh/ssh_host_*',
  ': > "$1"/etc/machine-id',
  'rm -f "$1"/var/lib/dbus/machine-id "$1"/etc/hostname "$1"/etc/resolv.conf',
  'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log',
  // Debian's nginx enables a welcome page on port 80: the appliance serves only what it must.
  'rm -f "$1"/etc/nginx/sites-enabled/default',
].join(" && ");

/** Documentation is dropped to keep the image small; copyright files stay. */
export const DPKG_EXCLUDES = [
  "path-exclude=/usr/share/man/*",
  "path-exclude=/usr/share/info/*",
  "path-exclude=/usr/share/doc/*",
  "path-include=/usr/share/doc/*/copyright",
  "path-exclude=/usr/share/locale/*",
  "path-include=/usr/share/locale/locale.alias",
];

export const rootfsStage: Stage<RootfsDeps> = {
  name: "rootfs",
  sources: [import.meta.filename, MMDEBSTRAP_MODULE],
  inputs: ({ definition, lock, resolve }) => {
    const requested = requestedPackages(definition);
    if (!resolve) assertLockFits(definition, lock);
    const { suite, components, archives } = lock;
    return { suite, components, archives, requested, pinned: resolve ? { newestAt: resolve } : fileDigests(lock.packages), epoch: sourceDateEpoch(lock) };
  },
  async build(run, { definition, lock, resolve }) {
    const requested = requestedPackages(definition);
    const tarPath = join(run.out, ROOTFS_TAR);
    run.log(
      `mmdebstrap ${lock.suite}: ${requested.length} requested packages${resolve ? ` (resolving the newest versions in ${lock.archives.flatMap((a) => a.suites).join(", ")})` : `, ${Object.keys(lock.packages).length} pinned files`}`,
    );
    await mmdebstrap(
      run.exec,
      // SOURCE_DATE_EPOCH: mmdebstrap clamps the tarball's mtimes to it, dpkg, shadow and
      // mkinitramfs take their times from it, so two builds of the same lock give the same tree.
      {
        sources: lock,
        variant: "apt",
        format: "tar",
        target: tarPath,
        dpkgOptions: DPKG_EXCLUDES,
        customizeHooks: [CUSTOMIZE],
        env: { SOURCE_DATE_EPOCH: String(sourceDateEpoch(lock)) },
      },
      resolve ? { resolve: requested } : { pinned: lock.packages },
    );
    const status = await readTarMember(tarPath, "var/lib/dpkg/status");
    if (!status) throw new Error("mmdebstrap produced a root filesystem without /var/lib/dpkg/status");
    const installed = parseDpkgStatus(status);
    if (!resolve) assertMatchesLock(installed, versionsOf(lock.packages));
    await writeFile(join(run.out, PACKAGES_JSON), JSON.stringify(installed, null, 2));
    run.log(`${Object.keys(installed).length} packages installed`);
  },
};

/**
 * The pins a shorter package list keeps: apt installs the definition's packages from the
 * pinned files alone, and the pins of what it installed stay. `lock --update` of a package
 * the definition no longer lists drops it and what only it needed, moving nothing else.
 */
export async function pinsStillNeeded(definition: ApplianceDefinition, lock: DebianLock): Promise<Record<string, PinnedPackage>> {
  const installed = await installedFromPins(lock, requestedPackages(definition), { variant: "apt", mode: "unshare" });
  return Object.fromEntries(Object.entries(lock.packages).filter(([name]) => installed.has(name)));
}

/**
 * The names of what apt installs for `names` from a repository of exactly the pinned files
 * (dpkg's status afterwards). Its own mmdebstrap run: nothing of it enters an image.
 */
export async function installedFromPins(
  lock: Pick<DebianLock, "suite" | "packages">,
  names: string[],
  opts: { variant: "apt" | "custom"; mode: "unshare" | "chrootless" },
): Promise<Set<string>> {
  const dir = await mkdtemp(join(tmpdir(), "icn-lock-keep-"));
  try {
    const tarPath = join(dir, ROOTFS_TAR);
    await withLocalRepo(lock.suite, lock.packages, async (line) => {
      const args = [`--mode=${opts.mode}`, `--variant=${opts.variant}`, "--format=tar", `--include=${names.join(",")}`, lock.suite, tarPath, line];
      const result = await execa("mmdebstrap", args, { all: true, reject: false, env: { TMPDIR: await chrootParent() } });
      if (result.exitCode !== 0)
        throw new Error(`mmdebstrap of ${names.join(", ")} from the pinned files failed:\n${String(result.all).split("\n").slice(-20).join("\n")}`);
    });
    const status = await readTarMember(tarPath, "var/lib/dpkg/status");
    if (!status) throw new Error("mmdebstrap produced a root filesystem without /var/lib/dpkg/status");
    return new Set(Object.keys(parseDpkgStatus(status)));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** name -> sha256 of the pinned files: what a pinned install depends on. */
export function fileDigests(packages: Record<string, PinnedPackage>): Record<string, string> {
  return Object.fromEntries(Object.entries(packages).map(([name, pin]) => [name, pin.sha256]));
}

/** The definition's suite and packages are what the lock pins (checked before anything is fetched or built). */
export function assertLockFits(definition: ApplianceDefinition, lock: DebianLock): void {
  if (definition.debian.suite !== lock.suite) {
    throw new UserError(
      `the definition asks for Debian '${definition.debian.suite}' but the lock file pins '${lock.suite}'`,
      "run 'icn-bootstrap lock' to re-pin for the definition's suite",
    );
  }
  assertLockCovers(requestedPackages(definition), lock);
}

function assertLockCovers(requested: string[], lock: DebianLock): void {
  const locked = new Set(lock.requested);
  const added = requested.filter((name) => !locked.has(name));
  const removed = lock.requested.filter((name) => !requested.includes(name));
  if (added.length === 0 && removed.length === 0) return;
  const parts = [];
  if (added.length > 0) parts.push(`asks for Debian package${added.length > 1 ? "s" : ""} that the lock file does not pin: ${added.join(", ")}`);
  if (removed.length > 0) parts.push(`no longer asks for ${removed.join(", ")}, which the lock file still pins`);
  const fix =
    removed.length === 0
      ? `run 'icn-bootstrap lock --update ${added.join(" ")}' to pin ${added.length > 1 ? "them" : "it"} with what ${added.length > 1 ? "they need" : "it needs"}, or 'icn-bootstrap lock' to re-resolve the whole set`
      : added.length === 0
        ? `run 'icn-bootstrap lock --update ${removed.join(" ")}' to drop ${removed.length > 1 ? "them" : "it"} and what only ${removed.length > 1 ? "they" : "it"} needed, or 'icn-bootstrap lock' to re-resolve the whole set`
        : "run 'icn-bootstrap lock' to re-resolve and pin the package set";
  throw new UserError(`the definition ${parts.join("; and ")}`, `${fix} (nothing enters an image unpinned)`);
}

function assertMatchesLock(installed: Record<string, string>, pinned: Record<string, string>): void {
  const drift: string[] = [];
  for (const [name, version] of Object.entries(installed)) {
    if (pinned[name] !== version) drift.push(pinned[name] ? `${name} ${version} (locked ${pinned[name]})` : `${name} ${version} (not in the lock)`);
  }
  for (const name of Object.keys(pinned)) if (!(name in installed)) drift.push(`${name} (locked, not installed)`);
  if (drift.length > 0) {
    throw new UserError(
      `the installed package set differs from the lock file: ${drift.slice(0, 10).join("; ")}${drift.length > 10 ? `; and ${drift.length - 10} more` : ""}`,
      "run 'icn-bootstrap lock' to re-pin the package set",
    );
  }
}

export function rootfsTar(dir: string): string {
  return join(dir, ROOTFS_TAR);
}
