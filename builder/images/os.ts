/**
 * The definition's OS images (`osImages`: recipes with `os:`, built by
 * stages/os-image.ts). Used by the build (their file-server layers) and by
 * `lock-images` (resolving their Debian sets).
 */
import { join } from "node:path";
import { sha256File } from "../cache.js";
import type { ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import type { LockFile } from "../lockfile.js";
import { sourceDateEpoch } from "../reproducible.js";
import { runStage, type StageResult } from "../stage.js";
import { debianSource } from "../stages/image-debian.js";
import { osImageStage, osRootfsStage, type OsFile } from "../stages/os-image.js";
import { loadRecipe, type Recipe } from "./recipe.js";

export interface BuiltOsImage {
  name: string;
  rootfs: StageResult;
  /** Absent when resolving (only the root is made, to read what was installed). */
  image?: StageResult;
}

export async function loadOsRecipe(name: string): Promise<Recipe & { os: NonNullable<Recipe["os"]> }> {
  const recipe = await loadRecipe(name, `OS image ${name}`);
  if (!recipe.os) throw new UserError(`osImages names '${name}', but images/${name}/recipe.yaml is a container image recipe (no 'os:')`, "list only OS image recipes in osImages, or add an os: section to the recipe");
  return recipe as Recipe & { os: NonNullable<Recipe["os"]> };
}

async function recipeFiles(recipe: Recipe): Promise<OsFile[]> {
  return Promise.all(
    recipe.copy.map(async (copy) => {
      if (!copy.from.startsWith("recipe:")) throw new UserError(`${recipe.file}: an OS image copies only files beside its recipe (recipe:<file>), not '${copy.from}'`, "put the file beside the recipe and copy it as recipe:<file>");
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

/** Builds each OS image of the definition from its pinned set (or, resolving, only its root with the newest packages). */
export async function buildOsImages(opts: { definition: ApplianceDefinition; lock: LockFile; stagesDir: string; resolve?: string }): Promise<BuiltOsImage[]> {
  const built: BuiltOsImage[] = [];
  const [unpinned] = opts.resolve ? [] : await unpinnedOsImages(opts.definition.osImages, opts.lock);
  if (unpinned) throw new UserError(`the OS image ${unpinned} asks for Debian packages that the lock file does not pin as they are (images.debian.os.${unpinned})`, "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)");
  for (const name of opts.definition.osImages) {
    const recipe = await loadOsRecipe(name);
    const set = { requested: requestedOsPackages(recipe), packages: opts.resolve ? {} : opts.lock.images!.debian.os![name]!.packages };
    const epoch = sourceDateEpoch(opts.lock.debian);
    const rootfs = await runStage(osRootfsStage, { debian: debianSource(opts.lock), set, resolve: opts.resolve, name, files: await recipeFiles(recipe), epoch }, opts.stagesDir);
    if (opts.resolve) {
      built.push({ name, rootfs });
      continue;
    }
    const image = await runStage(osImageStage, { name, file: recipe.os.file, rootFree: recipe.os.rootFree, epoch, rootfs }, opts.stagesDir);
    built.push({ name, rootfs, image });
  }
  return built;
}
