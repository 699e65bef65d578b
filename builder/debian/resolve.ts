/**
 * Resolution (`icn-bootstrap lock`, `lock-images`): apt picks the newest versions in the
 * archives' suites (mmdebstrap, as the build installs), then every installed package is
 * pinned as the file the verified index lists for it.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { sha256Text } from "../cache.js";
import type { ApplianceDefinition } from "../definition.js";
import { debianSource } from "../stages/image-debian.js";
import { loadOsRecipe, requestedOsPackages } from "../images/os.js";
import { runStages } from "../pipeline.js";
import { TOOLCHAIN_PACKAGES, type ImagesLock } from "../images/lock.js";
import type { LockFile, PreviousLock } from "../lockfile.js";
import { log } from "../log.js";
import { runStage } from "../stage.js";
import { imageRootStage, PACKAGES_JSON as IMAGE_PACKAGES_JSON } from "../stages/image-debian.js";
import { PACKAGES_JSON, requestedPackages, rootfsStage } from "../stages/rootfs.js";
import { readIndexes, type SuiteIndex } from "./index.js";
import { pinInstalled } from "./pins.js";
import { DEFAULT_SNAPSHOT, defaultArchives, type DebianSources } from "./schema.js";

export interface SourceOptions {
  mirror?: string;
  securityMirror?: string;
  snapshot?: string;
}

/** The archives to resolve against: the definition's switches, the options, else what the previous lock used. */
export function sourcesFor(definition: ApplianceDefinition, previous: PreviousLock | undefined, opts: SourceOptions): Omit<DebianSources, "indexes"> {
  const before = previous?.lock?.debian;
  const securityUrl = before?.archives.find((a) => a.name === "security")?.url;
  return {
    suite: definition.debian.suite,
    architecture: before?.architecture ?? "amd64",
    components: before?.components ?? ["main"],
    archives: defaultArchives(definition.debian.suite, {
      mirror: opts.mirror ?? previous?.mirror,
      securityMirror: opts.securityMirror ?? securityUrl,
      updates: definition.debian.updates,
      security: definition.debian.security,
    }),
    snapshot: opts.snapshot ?? before?.snapshot ?? DEFAULT_SNAPSHOT,
    ...(before?.keyring ? { keyring: before.keyring } : {}),
  };
}

export interface Resolution {
  sources: DebianSources;
  indexes: SuiteIndex[];
}

export async function readArchives(sources: Omit<DebianSources, "indexes">): Promise<Resolution> {
  log("lock", `reading the signed indexes of ${sources.archives.flatMap((a) => a.suites).join(", ")}`);
  const indexes = await readIndexes(sources.archives, sources);
  for (const index of indexes) log("lock", `${index.suite} (${index.archive.url}): ${index.date}, ${index.packages.size} packages`);
  return { sources: { ...sources, indexes: Object.fromEntries(indexes.map((i) => [i.suite, i.date])) }, indexes };
}

/** The root filesystem's package set, newest versions, pinned as files. */
export async function resolveRootfs(definition: ApplianceDefinition, { sources, indexes }: Resolution, stagesDir: string): Promise<LockFile["debian"]> {
  const requested = requestedPackages(definition);
  log("lock", `resolving ${requested.length} requested packages for the root filesystem`);
  const state = sha256Text(JSON.stringify(sources));
  const result = await runStage(rootfsStage, { definition, lock: { ...sources, requested, packages: {} }, resolve: state }, stagesDir);
  const installed: Record<string, string> = JSON.parse(await readFile(join(result.dir, PACKAGES_JSON), "utf8"));
  return { ...sources, requested, packages: pinInstalled(installed, indexes) };
}

/** The images' base and toolchain sets, newest versions, pinned as files. */
export async function resolveImageSets(
  definition: ApplianceDefinition,
  lock: LockFile,
  lockPath: string,
  { sources, indexes }: Resolution,
  stagesDir: string,
): Promise<ImagesLock> {
  log(
    "lock",
    `resolving the Debian packages of the images (shared base, C toolchain${definition.osImages.length ? `, OS images ${definition.osImages.join(", ")}` : ""})`,
  );
  const state = sha256Text(JSON.stringify(sources));
  const content = await runStages({
    definition,
    lock: { ...lock, debian: { ...lock.debian, ...sources } },
    lockPath,
    stagesDir,
    sections: ["content"],
    resolve: state,
    record: true,
  });
  const plan = content.plan!;
  const read = async (dir?: string): Promise<Record<string, string>> => (dir ? JSON.parse(await readFile(join(dir, IMAGE_PACKAGES_JSON), "utf8")) : {});
  const os = await resolveOsSets(definition, definition.osImages, lock, { sources, indexes }, stagesDir);
  return {
    debian: {
      base: { requested: plan.basePackages, packages: pinInstalled(await read(content.imageBase?.dir), indexes) },
      toolchain: { requested: TOOLCHAIN_PACKAGES, packages: pinInstalled(await read(content.imageCompile?.dir), indexes) },
      ...(Object.keys(os).length > 0 ? { os } : {}),
      ...(plan.ownRoots.length > 0
        ? {
            own: Object.fromEntries(
              await Promise.all(
                plan.ownRoots.map(
                  async (root) =>
                    [root.name, { requested: root.packages, packages: pinInstalled(await read(content.imageRoots[root.name]?.dir), indexes) }] as const,
                ),
              ),
            ),
          }
        : {}),
    },
  };
}

/** The named own roots (recipes with base: own-debian), newest versions, pinned as files. */
export async function resolveOwnSets(
  roots: { name: string; packages: string[] }[],
  lock: LockFile,
  { sources, indexes }: Resolution,
  stagesDir: string,
): Promise<Record<string, ImagesLock["debian"]["base"]>> {
  const state = sha256Text(JSON.stringify(sources));
  const debian = debianSource({ debian: { ...lock.debian, ...sources } });
  const own: Record<string, ImagesLock["debian"]["base"]> = {};
  for (const root of roots) {
    log("lock", `resolving the Debian root of image ${root.name}: ${root.packages.join(", ")}`);
    const result = await runStage(imageRootStage, { debian, set: { requested: root.packages, packages: {} }, resolve: state, recipe: root.name }, stagesDir);
    const installed: Record<string, string> = JSON.parse(await readFile(join(result.dir, IMAGE_PACKAGES_JSON), "utf8"));
    own[root.name] = { requested: root.packages, packages: pinInstalled(installed, indexes) };
  }
  return own;
}

/** The named OS images' Debian sets, newest versions, pinned as files. */
export async function resolveOsSets(
  definition: ApplianceDefinition,
  names: string[],
  lock: LockFile,
  { sources, indexes }: Resolution,
  stagesDir: string,
): Promise<Record<string, ImagesLock["debian"]["base"]>> {
  const state = sha256Text(JSON.stringify(sources));
  const os: Record<string, ImagesLock["debian"]["base"]> = {};
  const only = { ...definition, osImages: names };
  for (const image of (
    await runStages({ definition: only, lock: { ...lock, debian: { ...lock.debian, ...sources } }, stagesDir, sections: ["os-images"], resolve: state })
  ).osImages) {
    const installed: Record<string, string> = JSON.parse(await readFile(join(image.rootfs.dir, IMAGE_PACKAGES_JSON), "utf8"));
    os[image.name] = { requested: requestedOsPackages(await loadOsRecipe(image.name)), packages: pinInstalled(installed, indexes) };
  }
  return os;
}
