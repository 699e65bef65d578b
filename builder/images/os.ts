/**
 * The definition's OS images (`osImages`): recipes with `os:` (a compute node's disk
 * image, stages/os-image.ts) or `ramdisk:` (a network-boot kernel and initramfs, such as
 * Ironic's deploy ramdisk, stages/ramdisk.ts), both from a root made by stage
 * os-rootfs. Their stages run in builder/pipeline.ts's list (the build's file-server
 * layers, and `lock-images` resolving their Debian sets); this module says what they take.
 */
import { join } from "node:path";
import { sha256File } from "../../common/hash.js";
import { UserError } from "../errors.js";
import type { LockFile } from "../lockfile.js";
import { sourceDateEpoch } from "../reproducible.js";
import type { StageResult } from "../stage.js";
import { debianSource } from "../stages/image-debian.js";
import { readOsImage, type OsFile } from "../stages/os-image.js";
import { readRamdisk } from "../stages/ramdisk.js";
import { ensurePythonTree, pythonTreeCopies } from "../sources/pypi.js";
import { log } from "../log.js";
import { loadRecipe, type Recipe } from "./recipe.js";

export interface BuiltOsImage {
  name: string;
  /** disk: stage os-image (a qcow2 for a node's disk); ramdisk: stage ramdisk (kernel + initramfs). */
  kind: "disk" | "ramdisk";
  rootfs: StageResult;
  /** Absent when resolving (only the root is made, to read what was installed). */
  image?: StageResult;
  /** The Python distributions its `python:` installed (for the SBOM). */
  pythonPackages: { name: string; version: string }[];
}

export async function loadOsRecipe(name: string): Promise<Recipe> {
  const recipe = await loadRecipe(name, `OS image ${name}`);
  if (!recipe.os && !recipe.ramdisk)
    throw new UserError(
      `osImages names '${name}', but images/${name}/recipe.yaml is a container image recipe (no 'os:' or 'ramdisk:')`,
      "list only OS image and ramdisk recipes in osImages, or add an os: section to the recipe",
    );
  return recipe;
}

/** A `python:` section's tree, as two directory copies into the root. */
async function pythonFiles(recipe: Recipe): Promise<{ files: OsFile[]; packages: { name: string; version: string }[] }> {
  if (!recipe.python) return { files: [], packages: [] };
  const { requirements, version, leaveOut } = recipe.python;
  if (leaveOut.length > 0) throw new UserError(`${recipe.file}: python.leaveOut is for container images with base: own-debian`, "leave python.leaveOut out");
  const tree = await ensurePythonTree(join(recipe.dir, requirements), version, `OS image ${recipe.name}`, (message) =>
    log("os-image", `${recipe.name}: ${message}`),
  );
  return { files: pythonTreeCopies(tree, version).map((copy) => ({ ...copy, mode: "0755", directory: true })), packages: tree.packages };
}

async function recipeFiles(recipe: Recipe): Promise<OsFile[]> {
  return Promise.all(
    recipe.copy.map(async (copy) => {
      if (!copy.from.startsWith("recipe:"))
        throw new UserError(
          `${recipe.file}: an OS image copies only files beside its recipe (recipe:<file>), not '${copy.from}'`,
          "put the file beside the recipe and copy it as recipe:<file>",
        );
      const from = join(recipe.dir, copy.from.slice("recipe:".length));
      const sha256 = await sha256File(from).catch(() => {
        throw new UserError(`${recipe.file} copies ${copy.from}, which does not exist (${from})`, "add the file beside the recipe");
      });
      return { from, to: copy.to, mode: copy.mode ?? "0644", sha256 };
    }),
  );
}

/** The Debian packages an OS recipe asks for, as its lock set records them (`requested`). */
export function requestedOsPackages(recipe: Recipe): string[] {
  return [...new Set(recipe.debian.packages)].sort();
}

/** The named OS images whose set the lock does not pin as their recipes ask. */
export async function unpinnedOsImages(names: string[], lock: LockFile): Promise<string[]> {
  const unpinned: string[] = [];
  for (const name of names) {
    const requested = requestedOsPackages(await loadOsRecipe(name)); // first: a container recipe is named as such
    const pinned = lock.images?.debian.os?.[name];
    if (!pinned || JSON.stringify([...pinned.requested].sort()) !== JSON.stringify(requested)) unpinned.push(name);
  }
  return unpinned;
}

/** Building (not resolving): fails naming the first OS image whose set the lock does not pin as its recipe asks. */
export async function assertOsImagesPinned(names: string[], lock: LockFile): Promise<void> {
  const [unpinned] = await unpinnedOsImages(names, lock);
  if (unpinned)
    throw new UserError(
      `the OS image ${unpinned} asks for Debian packages that the lock file does not pin as they are (images.debian.os.${unpinned})`,
      "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
    );
}

/**
 * What stage os-rootfs takes for one OS image: its recipe's Debian set (pinned, or empty
 * when resolving), the files it copies in, its Python tree, and, for a ramdisk, what the
 * root needs to boot from memory. The stages themselves run in builder/pipeline.ts.
 */
export async function osRootfsInputs(name: string, lock: LockFile, resolve: string | undefined) {
  const recipe = await loadOsRecipe(name);
  const set = { requested: requestedOsPackages(recipe), packages: resolve ? {} : lock.images!.debian.os![name]!.packages };
  const python = await pythonFiles(recipe);
  const ramdisk = recipe.ramdisk ? { enable: recipe.ramdisk.enable, dropModules: recipe.ramdisk.dropModules } : undefined;
  const files = [...(await recipeFiles(recipe)), ...python.files];
  const inputs = { debian: debianSource(lock), set, resolve, name, files, epoch: sourceDateEpoch(lock.debian), ...(ramdisk ? { ramdisk } : {}) };
  return { recipe, inputs, pythonPackages: python.packages };
}

/** The files an OS image puts on the file server (path under its root), for the SBOM. */
export async function servedOsFiles(
  os: BuiltOsImage,
): Promise<{ name: string; path: string; sha256: string; pythonPackages: { name: string; version: string }[] }[]> {
  const { pythonPackages } = os;
  if (os.kind === "disk") return [{ ...(await readOsImage(os.image!)), pythonPackages }];
  const { kernel, initramfs } = await readRamdisk(os.image!);
  return [kernel, initramfs].map(({ path, sha256 }) => ({ name: os.name, path, sha256, pythonPackages }));
}
