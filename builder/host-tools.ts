import { access, constants } from "node:fs/promises";
import { delimiter, join } from "node:path";
import { UserError } from "./errors.js";

/** Debian package that provides each host tool the builder runs. */
const PROVIDERS: Record<string, string> = {
  mmdebstrap: "mmdebstrap",
  fakeroot: "fakeroot",
  "mkfs.ext4": "e2fsprogs",
  debugfs: "e2fsprogs",
  e2fsck: "e2fsprogs",
  "mkfs.vfat": "dosfstools",
  mcopy: "mtools",
  mmd: "mtools",
  sgdisk: "gdisk",
  "grub-mkimage": "grub-common",
  systemctl: "systemd",
  "qemu-img": "qemu-utils",
  "qemu-system-x86_64": "qemu-system-x86",
  skopeo: "skopeo",
  "docker-registry": "docker-registry",
  gzip: "gzip",
  time: "time",
  "apt-ftparchive": "apt-utils",
  gpgv: "gpgv",
  xorriso: "xorriso",
  blkid: "util-linux",
  bwrap: "bubblewrap",
};

const SEARCH = [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin", "/sbin"];

export async function findTool(name: string): Promise<string | undefined> {
  for (const dir of SEARCH) {
    const candidate = join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  return undefined;
}

/** Fails with one message naming every missing tool and the packages that provide them. */
export async function requireTools(names: string[]): Promise<Record<string, string>> {
  const found: Record<string, string> = {};
  const missing: string[] = [];
  for (const name of names) {
    const path = await findTool(name);
    if (path) found[name] = path;
    else missing.push(name);
  }
  if (missing.length > 0) {
    const packages = [...new Set(missing.map((m) => PROVIDERS[m] ?? m))];
    throw new UserError(
      `missing host tool${missing.length > 1 ? "s" : ""}: ${missing.join(", ")}`,
      `install them with 'apt-get install ${packages.join(" ")}' (or run scripts/setup-host.sh as root)`,
    );
  }
  return found;
}

export async function requireFile(path: string, debianPackage: string): Promise<string> {
  try {
    await access(path, constants.R_OK);
    return path;
  } catch {
    throw new UserError(`missing host file ${path}`, `install it with 'apt-get install ${debianPackage}' (or run scripts/setup-host.sh as root)`);
  }
}
