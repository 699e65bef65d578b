import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { applyEntries } from "../disk/contents.js";
import { debugfsErrors, debugfsScript, listTree, type TreeEntry } from "../disk/debugfs.js";
import { SECTOR, type DiskLayout } from "../disk/layout.js";
import { MANIFESTS_README, SITE_SCRIPT, makeSiteFilesystem, writeSiteFiles } from "../disk/site-partition.js";
import type { Stage, StageResult } from "../stage.js";
import { BASE_CONTENTS, DISK_IMAGE, SYSTEMD_SHADOW, readLayout, readRootDirs } from "./disk.js";
import { TREE, UNITS_JSON } from "./overlays.js";

/** The root filesystem's contents manifest (builder/disk/contents.ts). */
export const CONTENTS = "contents.txt";

export interface ImageDeps {
  disk: StageResult;
  overlays: StageResult;
  /** SOURCE_DATE_EPOCH: the times of every inode debugfs writes or removes. */
  epoch: number;
}

/**
 * The finished disk: a copy of the base disk with the rendered overlays and their unit
 * enablement written into the root filesystem by debugfs. Changing an overlay re-runs
 * only this (seconds), not the root filesystem or the base disk.
 */
export const imageStage: Stage<ImageDeps> = {
  name: "image",
  sources: [
    import.meta.filename,
    join(import.meta.dirname, "../disk/debugfs.ts"),
    join(import.meta.dirname, "../disk/contents.ts"),
    join(import.meta.dirname, "../disk/site-partition.ts"),
  ],
  inputs: ({ disk, overlays, epoch }) => ({ disk: disk.key, overlays: overlays.key, epoch }),
  async build(run, { disk, overlays, epoch }) {
    const image = join(run.out, DISK_IMAGE);
    await run.exec("cp", ["--sparse=always", "--reflink=auto", join(disk.dir, DISK_IMAGE), image]);
    const tree = join(overlays.dir, TREE);
    const units: string[] = JSON.parse(await readFile(join(overlays.dir, UNITS_JSON), "utf8"));
    const entries = [...(await listTree(tree)), ...(await enablementLinks(run.exec, disk.dir, tree, units))];

    const layout = await readLayout(disk.dir);
    const rootfs = `${image}?offset=${layout.root.start * SECTOR}`;
    const script = join(run.out, "overlay.debugfs");
    await writeFile(script, debugfsScript(entries, await readRootDirs(disk.dir)));
    run.log(`writing ${entries.length} overlay entries (${units.length} units enabled) into the root filesystem`);
    const output = await run.exec("sh", ["-c", 'exec debugfs -w -f "$1" "$2" 2>&1', "debugfs", script, rootfs], {
      env: { E2FSPROGS_FAKE_TIME: String(epoch) },
    });
    const errors = debugfsErrors(output);
    if (errors.length > 0) throw new Error(`debugfs could not write the overlays:\n  ${errors.slice(0, 10).join("\n  ")}`);
    await rm(script);
    // A consistency check of the filesystem the overlays were written into.
    await run.exec("e2fsck", ["-f", "-n", rootfs]);
    await writeFile(join(run.out, CONTENTS), await applyEntries(await readFile(join(disk.dir, BASE_CONTENTS), "utf8"), entries));
    if (layout.site) {
      run.log("writing the site partition (ICN-SITE) with the documented site.yaml template");
      await writeSitePartition(run.exec, image, layout, join(tree, SITE_SCRIPT), epoch, run.out);
    }
  },
};

/** The site partition as shipped: an empty site (the template, every setting commented out) and a README in manifests/. */
async function writeSitePartition(
  exec: (file: string, args: string[], options?: { env?: Record<string, string> }) => Promise<string>,
  image: string,
  layout: DiskLayout,
  siteScript: string,
  epoch: number,
  work: string,
): Promise<void> {
  const site = layout.site!;
  const fs = join(work, "site.vfat");
  const template = join(work, "site.yaml");
  const readme = join(work, "manifests-README.txt");
  await writeFile(template, await exec("python3", [siteScript, "template"]));
  await writeFile(readme, MANIFESTS_README);
  await makeSiteFilesystem(exec, fs, site.sectors * SECTOR, site.guid.slice(0, 8), epoch);
  await writeSiteFiles(
    exec,
    fs,
    [
      { path: "site.yaml", source: template },
      { path: "manifests/README.txt", source: readme },
    ],
    epoch,
  );
  await exec("dd", [`if=${fs}`, `of=${image}`, "bs=1M", `seek=${(site.start * SECTOR) / (1024 * 1024)}`, "conv=notrunc,sparse", "status=none"]);
  await rm(fs);
  await rm(template);
  await rm(readme);
}

/**
 * The links `systemctl enable` makes for the units, computed by running systemctl on a
 * small copy of the root's unit directories plus the overlay's units.
 */
async function enablementLinks(exec: (file: string, args: string[]) => Promise<string>, diskDir: string, tree: string, units: string[]): Promise<TreeEntry[]> {
  if (units.length === 0) return [];
  const shadow = await mkdtemp(join(tmpdir(), "icn-units-"));
  try {
    await cp(join(diskDir, SYSTEMD_SHADOW), shadow, { recursive: true, verbatimSymlinks: true });
    const overlayUnits = join(tree, "etc/systemd/system");
    await cp(overlayUnits, join(shadow, "etc/systemd/system"), { recursive: true, verbatimSymlinks: true, force: true }).catch(() => undefined);
    const before = new Set((await listTree(join(shadow, "etc/systemd/system"))).map((e) => e.path));
    await exec("systemctl", [`--root=${shadow}`, "enable", ...units]);
    const after = await listTree(join(shadow, "etc/systemd/system"));
    const created = after.filter((e) => !before.has(e.path));
    return created.map((e) => ({ ...e, path: `etc/systemd/system/${e.path}`, source: "" }));
  } finally {
    await rm(shadow, { recursive: true, force: true });
  }
}
