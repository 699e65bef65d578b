/**
 * Stages 3-5 of the build (DESIGN.md): kubespray + the offline files tree, the images,
 * the seeded registry. Called by builder/pipeline.ts (whose disk stage takes the
 * registry and files trees as content layers) and by `icn-bootstrap lock-images`.
 */
import { dirname, resolve } from "node:path";
import type { ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import type { LockFile } from "../lockfile.js";
import { log } from "../log.js";
import { runStage, type StageResult } from "../stage.js";
import { filesStage, KUBESPRAY_TREE } from "../stages/files.js";
import { debianSource, imageBaseStage, imageCompileStage, imageRootStage } from "../stages/image-debian.js";
import { imagesStage } from "../stages/images.js";
import { registryStage } from "../stages/registry.js";
import { TOOLCHAIN_PACKAGES, type ImagesLock } from "./lock.js";
import { planImages, REPO_ROOT, type ImagesPlan } from "./plan.js";
import { loadRecipe, recipeBase } from "./recipe.js";
import { loadSeedLists, selectImages, type Selection } from "./seed.js";

export interface ContentOptions {
  definition: ApplianceDefinition;
  lock: LockFile;
  lockPath: string;
  stagesDir: string;
  /** lock: resolve the Debian sets anew (value: the archives' state); stops after them (the images need pins). */
  resolve?: string;
  record?: boolean;
  /** Stop after the images stage (lock-images). */
  imagesOnly?: boolean;
}

export interface ContentResult {
  files: StageResult;
  imageBase?: StageResult;
  imageCompile?: StageResult;
  /** The Debian roots of recipes with `base: own-debian`, by recipe name. */
  imageRoots: Record<string, StageResult>;
  /** Absent when resolving (the images are built from pinned packages only). */
  images?: StageResult;
  registry?: StageResult;
  selection: Selection;
  plan: ImagesPlan;
}

export { debianSource };

export async function buildContent(opts: ContentOptions): Promise<ContentResult> {
  const { definition, lock, stagesDir } = opts;
  const kubespray = definition.kubespray.enabled;
  const lists = definition.registry.lists.map((l) => resolve(REPO_ROOT, l));
  const listed = await loadSeedLists(lists);
  const selection = selectImages(listed, { profile: definition.registry.profile, kubespray, allowUnpinned: opts.record });
  for (const s of selection.skipped) log("images", `not included: ${s.ref}: ${s.reason}`);
  const files = await runStage(
    filesStage,
    { lock, lockPath: opts.lockPath, kubespray, images: selection.images.map((i) => i.ref), archives: !opts.resolve, extraKubernetesVersions: kubespray ? definition.kubespray.extraKubernetesVersions : [] },
    stagesDir,
  );
  const plan = await planImages(selection.images, { kubesprayTree: kubespray ? resolve(files.dir, KUBESPRAY_TREE) : undefined, filesDir: files.dir, lockPath: opts.lockPath });

  // The shared base has the packages of EVERY listed recipe, selected or not, so that
  // enabling kubespray (or another profile) does not change the other images' digests.
  const allPackages = new Set(plan.basePackages);
  for (const image of listed) {
    if (!image.recipe) continue;
    const recipe = await loadRecipe(image.recipe, image.ref);
    if (recipeBase(recipe) === "debian") recipe.debian.packages.forEach((p) => allPackages.add(p));
  }
  plan.basePackages = [...allPackages].sort();
  const pins: ImagesLock["debian"] | undefined = lock.images?.debian;
  const debian = debianSource(lock);
  const baseSet = { requested: plan.basePackages, packages: opts.resolve ? {} : (pins?.base.packages ?? {}) };
  const toolchainSet = { requested: TOOLCHAIN_PACKAGES, packages: opts.resolve ? {} : (pins?.toolchain.packages ?? {}) };
  if (!opts.resolve) {
    const locked = new Set(pins?.base.requested ?? []);
    const added = plan.basePackages.filter((p) => !locked.has(p));
    if (plan.basePackages.length > 0 && (added.length > 0 || !pins)) {
      throw new UserError(
        `the image recipes ask for Debian packages that the lock file does not pin (images.debian.base): ${(added.length ? added : plan.basePackages).join(", ")}`,
        "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
      );
    }
    // The shared base is the pinned set, even if fewer recipes are selected (one base layer for every build).
    if (pins) baseSet.requested = pins.base.requested;
  }
  const imageBase = plan.basePackages.length > 0 ? await runStage(imageBaseStage, { debian, set: baseSet, resolve: opts.resolve }, stagesDir) : undefined;
  const imageCompile = plan.programs.length > 0 ? await runStage(imageCompileStage, { debian, set: toolchainSet, resolve: opts.resolve, programs: plan.programs }, stagesDir) : undefined;
  const imageRoots: Record<string, StageResult> = {};
  for (const root of plan.ownRoots) {
    if (!opts.resolve && unpinnedOwnRoots([root], lock).length > 0) {
      throw new UserError(
        `images/${root.name}/recipe.yaml asks for Debian packages that the lock file does not pin as its own root (images.debian.own.${root.name}): ${root.packages.join(", ")}`,
        "run 'icn-bootstrap lock-images' to resolve and pin them (nothing enters an image unpinned)",
      );
    }
    const set = { requested: root.packages, packages: opts.resolve ? {} : pins!.own![root.name]!.packages };
    imageRoots[root.name] = await runStage(imageRootStage, { debian, set, resolve: opts.resolve, recipe: root.name }, stagesDir);
  }
  if (opts.resolve) return { files, imageBase, imageCompile, imageRoots, selection, plan };
  const images = await runStage(imagesStage, { plan, base: imageBase, roots: imageRoots, compiled: imageCompile, record: opts.record }, stagesDir);
  if (opts.imagesOnly) return { files, imageBase, imageCompile, imageRoots, images, selection, plan };
  const registry = await runStage(registryStage, { images }, stagesDir);
  return { files, imageBase, imageCompile, imageRoots, images, registry, selection, plan };
}

export const lockDir = (lockPath: string) => dirname(lockPath);

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
