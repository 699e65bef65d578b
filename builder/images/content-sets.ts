/**
 * What the content stages of builder/pipeline.ts build (the file server's tree, the
 * container images and their Debian roots): which images a definition selects, and the
 * Debian sets their roots are made from, checked against the lock's pins. No stage runs
 * here; the stage list is builder/pipeline.ts.
 */
import { resolve } from "node:path";
import type { ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import type { LockFile } from "../lockfile.js";
import { log } from "../log.js";
import { TOOLCHAIN_PACKAGES, type ImagesLock } from "./lock.js";
import { REPO_ROOT, type ImagesPlan } from "./plan.js";
import { loadRecipe, recipeBase } from "./recipe.js";
import { loadSeedLists, selectImages, type Selection } from "./seed.js";

/** A Debian set as a root stage takes it: the packages asked for, and their pins (empty when resolving). */
export interface DebianSet {
  requested: string[];
  packages: ImagesLock["debian"]["base"]["packages"];
}

/** The images a definition seeds (skipped ones logged with the reason). */
export async function selectContent(definition: ApplianceDefinition, allowUnpinned: boolean): Promise<Selection> {
  const listed = await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)));
  const selection = selectImages(listed, { profile: definition.registry.profile, kubespray: definition.kubespray.enabled, allowUnpinned });
  for (const s of selection.skipped) log("images", `not included: ${s.ref}: ${s.reason}`);
  return selection;
}

/**
 * The Debian sets of the images' roots: the shared base (the packages of EVERY listed
 * recipe, selected or not, so that enabling kubespray or another profile does not change
 * the other images' digests), the C toolchain, and each `base: own-debian` recipe's own
 * root. Building (not resolving), every set must be pinned as asked, or this fails naming
 * the packages and `lock-images`.
 */
export async function contentDebianSets(
  definition: ApplianceDefinition,
  plan: ImagesPlan,
  lock: LockFile,
  resolving: boolean,
): Promise<{ base: DebianSet; toolchain: DebianSet; own: Record<string, DebianSet> }> {
  const allPackages = new Set(plan.basePackages);
  for (const image of await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)))) {
    if (!image.recipe) continue;
    const recipe = await loadRecipe(image.recipe, image.ref);
    if (recipeBase(recipe) === "debian") recipe.debian.packages.forEach((p) => allPackages.add(p));
  }
  plan.basePackages = [...allPackages].sort();
  const pins: ImagesLock["debian"] | undefined = lock.images?.debian;
  const base = { requested: plan.basePackages, packages: resolving ? {} : (pins?.base.packages ?? {}) };
  const toolchain = { requested: TOOLCHAIN_PACKAGES, packages: resolving ? {} : (pins?.toolchain.packages ?? {}) };
  if (!resolving) {
    const locked = new Set(pins?.base.requested ?? []);
    const added = plan.basePackages.filter((p) => !locked.has(p));
    if (plan.basePackages.length > 0 && (added.length > 0 || !pins)) {
      throw new UserError(
        `the image recipes ask for Debian packages that the lock file does not pin (images.debian.base): ${(added.length ? added : plan.basePackages).join(", ")}`,
        "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
      );
    }
    // The shared base is the pinned set, even if fewer recipes are selected (one base layer for every build).
    if (pins) base.requested = pins.base.requested;
  }
  const own: Record<string, DebianSet> = {};
  for (const root of plan.ownRoots) {
    if (!resolving && unpinnedOwnRoots([root], lock).length > 0) {
      throw new UserError(
        `images/${root.name}/recipe.yaml asks for Debian packages that the lock file does not pin as its own root (images.debian.own.${root.name}): ${root.packages.join(", ")}`,
        "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
      );
    }
    own[root.name] = { requested: root.packages, packages: resolving ? {} : pins!.own![root.name]!.packages };
  }
  return { base, toolchain, own };
}

/** The listed recipes with `base: own-debian` (every list of the definition, selected or not) and their packages. */
export async function listedOwnRoots(definition: ApplianceDefinition): Promise<{ name: string; packages: string[] }[]> {
  const listed = await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)));
  const roots = new Map<string, string[]>();
  for (const image of listed) {
    if (!image.recipe || roots.has(image.recipe)) continue;
    const recipe = await loadRecipe(image.recipe, image.ref);
    if (recipe.base === "own-debian") roots.set(recipe.name, [...recipe.debian.packages].sort());
  }
  return [...roots].map(([name, packages]) => ({ name, packages }));
}

/** The own roots whose pinned set is missing or was pinned for other packages. */
export function unpinnedOwnRoots(roots: { name: string; packages: string[] }[], lock: LockFile): { name: string; packages: string[] }[] {
  return roots.filter((root) => lock.images?.debian.own?.[root.name]?.requested.join(" ") !== root.packages.join(" "));
}
