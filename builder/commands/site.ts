import { access, mkdir, mkdtemp, open, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { execa } from "execa";
import { parseCommandArgs } from "../args.js";
import { SECTOR, SITE_PARTITION_BYTES, stableUuid } from "../disk/layout.js";
import { MANIFESTS_README, REPO_SITE_SCRIPT, SITE_LABEL, makeSiteFilesystem, writeSiteFiles } from "../disk/site-partition.js";
import { UserError } from "../errors.js";
import { requireTools } from "../host-tools.js";
import type { Command } from "./command.js";

const INVALID = 3;

export const siteCommand: Command = {
  name: "site",
  summary: "make, check and write a site's settings (site.yaml, manifests/) without a rebuild",
  usage: `usage: icn-bootstrap site init FOLDER
       icn-bootstrap site check FOLDER
       icn-bootstrap site write FOLDER TARGET
       icn-bootstrap site write FOLDER --new FILE
       icn-bootstrap site write FOLDER --iso FILE

One image serves every site: what differs per site lives on the image's site partition
(FAT, label ${SITE_LABEL}), which any computer mounts after the image was written to a
stick, or on a second drive or ISO with the same label. The appliance reads it at every
boot: site.yaml (network, provisioning network, SSH keys, host name) is applied before
the network comes up, the Kubernetes objects of manifests/ once the BPA is ready. A bad
site.yaml never stops the boot: the appliance comes up with the defaults and reports
ICN-BOOTSTRAP-FAILED unit=icn-site with each error on the console and in /etc/issue.

  init FOLDER          make FOLDER with a documented site.yaml (every setting commented
                       out) and manifests/README.txt; refuses to overwrite a site.yaml
  check FOLDER         validate FOLDER (or a site.yaml): every error on a line with its
                       path (network.interfaces[0].address: ...); exit status ${INVALID} if invalid
  write FOLDER TARGET  validate, then replace the site partition's contents of TARGET: an
                       image built by 'icn-bootstrap build' (.img) or a stick's device
                       (/dev/sdX: unmount it first; needs write access, e.g. sudo), or
                       a site disk of its own (made with --new, or its device)
  write FOLDER --new FILE
                       make FILE, a ${SITE_PARTITION_BYTES / 1024 / 1024} MiB FAT disk image labelled ${SITE_LABEL} holding the
                       site: attach it to a VM as a second disk (the qcow2 image) or
                       to a server as BMC virtual media
  write FOLDER --iso FILE
                       make FILE, an ISO 9660 image with the volume label ${SITE_LABEL}: for
                       BMC virtual media and VM CD drives. It is read-only: the appliance
                       cannot delete Secret files from it and says so (see manifests/README.txt)

A FOLDER holds site.yaml and, optionally, manifests/*.yaml. Needs python3 with PyYAML
(Debian: python3-yaml), mtools + dosfstools for write, xorriso for --iso.`,
  async run(argv) {
    const { values, positionals } = parseCommandArgs("site", argv, { new: { type: "string" }, iso: { type: "string" }, force: { type: "boolean" } }, true);
    const [action, folder, target, ...rest] = positionals;
    if (!action) throw new UserError("site needs an action: init, check or write", "icn-bootstrap site --help");
    if (!folder) throw new UserError(`site ${action} needs a FOLDER`, "icn-bootstrap site --help");
    if (rest.length > 0) throw new UserError(`site ${action}: unexpected argument ${rest[0]}`, "icn-bootstrap site --help");
    if (action === "init") return init(resolve(folder), values.force ?? false);
    if (action === "check") return check(resolve(folder));
    if (action === "write") {
      const given = [target, values.new, values.iso].filter((x) => x !== undefined);
      if (given.length !== 1)
        throw new UserError("site write needs exactly one of TARGET, --new FILE and --iso FILE", "e.g. icn-bootstrap site write mysite out/icn-bootstrap.img");
      return write(
        resolve(folder),
        values.new !== undefined ? { newFile: resolve(values.new) } : values.iso !== undefined ? { iso: resolve(values.iso) } : { target: resolve(target!) },
      );
    }
    throw new UserError(`site: unknown action ${action}`, "the actions are init, check and write");
  },
};

async function runSiteScript(args: string[]) {
  await requireTools(["python3"]);
  const result = await execa("python3", [REPO_SITE_SCRIPT, ...args], { reject: false, all: true });
  if (/No module named 'yaml'/.test(String(result.all)))
    throw new UserError("python3 has no YAML module (PyYAML)", "install it: sudo apt-get install python3-yaml (or pip install pyyaml)");
  return result;
}

async function init(folder: string, force: boolean): Promise<number> {
  const siteFile = join(folder, "site.yaml");
  if (!force && (await exists(siteFile)))
    throw new UserError(`${siteFile} already exists`, "check it with 'icn-bootstrap site check', or pass --force to replace it with the template");
  const template = await runSiteScript(["template"]);
  if (template.exitCode !== 0) throw new Error(`site.py template failed: ${template.all}`);
  await mkdir(join(folder, "manifests"), { recursive: true });
  await writeFile(siteFile, template.stdout + "\n");
  await writeFile(join(folder, "manifests", "README.txt"), MANIFESTS_README);
  console.log(`wrote ${siteFile} and ${join(folder, "manifests", "README.txt")}: edit them, then 'icn-bootstrap site check ${folder}'`);
  return 0;
}

async function check(folder: string): Promise<number> {
  const result = await runSiteScript(["check", folder]);
  if (result.exitCode === 0) {
    const [valid, ...explained] = result.stdout.split("\n").filter(Boolean);
    console.log(`${folder}: ${valid}`);
    for (const line of explained) console.log(`  ${line}`);
    return 0;
  }
  if (result.exitCode !== INVALID) throw new Error(`site.py check failed: ${result.all}`);
  const errors = result.stdout.split("\n").filter(Boolean);
  console.log(`${folder}: ${errors.length} error${errors.length === 1 ? "" : "s"}`);
  for (const line of errors) console.log(`  ${line}`);
  return INVALID;
}

/** The files of a valid site folder, as paths inside the partition. */
async function siteFiles(folder: string): Promise<{ path: string; source: string }[]> {
  const files = [{ path: "site.yaml", source: join(folder, "site.yaml") }];
  const manifests = join(folder, "manifests");
  if (await exists(manifests)) {
    for (const name of (await readdir(manifests)).sort()) {
      if ((await stat(join(manifests, name))).isFile()) files.push({ path: `manifests/${name}`, source: join(manifests, name) });
    }
  }
  return files;
}

async function write(folder: string, where: { target: string } | { newFile: string } | { iso: string }): Promise<number> {
  if ((await check(folder)) !== 0) {
    console.log("nothing was written: fix the errors above first");
    return INVALID;
  }
  if ("iso" in where) return writeIso(await siteFiles(folder), where.iso);
  await requireTools(["mkfs.vfat", "mcopy", "mdir", "sgdisk"]);
  const files = await siteFiles(folder);
  const work = await mkdtemp(join(tmpdir(), "icn-site-"));
  const exec = async (file: string, args: string[], options: { env?: Record<string, string> } = {}) => (await execa(file, args, { env: options.env })).stdout;
  try {
    const fs = join(work, "site.vfat");
    const epoch = Math.floor(Date.now() / 1000);
    if ("newFile" in where) {
      await makeSiteFilesystem(exec, fs, SITE_PARTITION_BYTES, stableUuid(basename(where.newFile), "site").slice(0, 8), epoch);
      await writeSiteFiles(exec, fs, files);
      const partial = join(dirname(where.newFile), `.${basename(where.newFile)}.partial`);
      await execa("cp", ["--sparse=always", fs, partial]);
      await rename(partial, where.newFile);
      console.log(
        `wrote ${where.newFile}: a FAT disk labelled ${SITE_LABEL} with ${files.length} file${files.length === 1 ? "" : "s"}; attach it as a second disk or virtual media`,
      );
      return 0;
    }
    const site = await sitePartition(where.target);
    await refuseMounted(where.target);
    // The new filesystem is made aside and written in one piece: a failure leaves the old one whole.
    await makeSiteFilesystem(exec, fs, site.sectors * SECTOR, site.guid.replace(/-/g, "").slice(0, 8).toLowerCase(), epoch);
    await writeSiteFiles(exec, fs, files);
    const result = await execa(
      "dd",
      [`if=${fs}`, `of=${where.target}`, "bs=1M", `seek=${(site.start * SECTOR) / (1024 * 1024)}`, "conv=notrunc,fsync", "status=none"],
      { reject: false, all: true },
    );
    if (result.failed)
      throw new UserError(
        `cannot write ${where.target}: ${String(result.all).trim()}`,
        where.target.startsWith("/dev/") ? "run it as root (sudo), with the stick's partitions unmounted" : "check that the file is writable",
      );
    console.log(
      `wrote ${site.number === 0 ? "the site disk" : `the site partition (partition ${site.number}, ${SITE_LABEL}) of`} ${where.target}: ${files.map((f) => f.path).join(", ")}`,
    );
    return 0;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** An ISO 9660 image (Rock Ridge and Joliet names) labelled ICN-SITE, written under a temporary name first. */
async function writeIso(files: { path: string; source: string }[], iso: string): Promise<number> {
  await requireTools(["xorriso"]);
  const partial = join(dirname(iso), `.${basename(iso)}.partial`);
  const graft = files.map((f) => `${f.path}=${f.source}`);
  const result = await execa("xorriso", ["-as", "mkisofs", "-quiet", "-V", SITE_LABEL, "-R", "-J", "-graft-points", "-o", partial, ...graft], {
    reject: false,
    all: true,
  });
  if (result.failed) {
    await rm(partial, { force: true });
    throw new UserError(
      `xorriso could not make ${iso}: ${String(result.all).trim().split("\n").slice(-3).join("; ")}`,
      "check that the folder's files are readable and the target folder writable",
    );
  }
  await rename(partial, iso);
  console.log(
    `wrote ${iso}: an ISO 9660 image labelled ${SITE_LABEL} with ${files.length} file${files.length === 1 ? "" : "s"}; attach it as virtual media or a CD drive (read-only: Secret files stay on it)`,
  );
  return 0;
}

interface SitePartition {
  number: number;
  start: number;
  sectors: number;
  guid: string;
}

async function sitePartition(target: string): Promise<SitePartition> {
  if (!(await exists(target)))
    throw new UserError(`${target} does not exist`, "give an image built by 'icn-bootstrap build' (out/<name>.img) or a stick's device (/dev/sdX)");
  const head = Buffer.alloc(4);
  const handle = await open(target, "r");
  await handle.read(head, 0, 4, 0).finally(() => handle.close());
  if (head.toString("latin1") === "QFI\xfb")
    throw new UserError(
      `${target} is a qcow2 image, whose partitions cannot be written in place`,
      "make a site disk with 'icn-bootstrap site write FOLDER --new site.img' and attach it to the VM as a second disk",
    );
  // A site disk of its own (`--new`, a second drive, a stick's partition device): FAT labelled ICN-SITE throughout.
  const probe = await execa("blkid", ["-p", "-o", "export", target], { reject: false });
  const fields = Object.fromEntries(probe.stdout.split("\n").map((l) => l.split("=", 2) as [string, string]));
  if (fields.TYPE === "vfat" && fields.LABEL === SITE_LABEL) {
    const bytes = target.startsWith("/dev/") ? Number((await execa("blockdev", ["--getsize64", target])).stdout) : (await stat(target)).size;
    return { number: 0, start: 0, sectors: Math.floor(bytes / SECTOR), guid: (fields.UUID ?? "").replace(/-/g, "") };
  }
  const table = await execa("sgdisk", ["-p", target], { reject: false, all: true });
  for (const m of table.stdout.matchAll(/^\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+ \S+\s+[0-9A-F]{4}\s+(.*)$/gm)) {
    if (m[4]!.trim() !== SITE_LABEL) continue;
    const info = (await execa("sgdisk", ["-i", m[1]!, target])).stdout;
    return { number: Number(m[1]), start: Number(m[2]), sectors: Number(m[3]) - Number(m[2]) + 1, guid: /Partition unique GUID: (\S+)/.exec(info)?.[1] ?? "" };
  }
  throw new UserError(
    `${target} has no partition named ${SITE_LABEL}`,
    "images built before the site partition existed have none: rebuild with 'icn-bootstrap build', or use 'site write FOLDER --new site.img' as a second drive",
  );
}

/** A stick whose partition a laptop mounted would be corrupted by writing under it. */
async function refuseMounted(target: string): Promise<void> {
  if (!target.startsWith("/dev/")) return;
  const mounts = (await readFile("/proc/mounts", "utf8"))
    .split("\n")
    .map((l) => l.split(" "))
    .filter((f) => f[0]?.startsWith(target));
  if (mounts.length > 0)
    throw new UserError(`${mounts.map((m) => `${m[0]} is mounted at ${m[1]}`).join(", ")}`, `unmount first: sudo umount ${mounts.map((m) => m[0]).join(" ")}`);
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
