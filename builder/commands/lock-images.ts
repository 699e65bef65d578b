import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { ensureLockedDebs } from "../debian/fetch.js";
import { describeMoved, movedPackages } from "../debian/pins.js";
import type { PinnedPackage } from "../debian/schema.js";
import { readArchives, resolveImageSets, resolveOsSets, resolveOwnSets, sourcesFor } from "../debian/resolve.js";
import { unpinnedOsImages } from "../images/os.js";
import { DEFAULT_DEFINITION, loadDefinition, withExtraKubernetes, type ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import { requireTools } from "../host-tools.js";
import { listedOwnRoots, unpinnedOwnRoots } from "../images/content-sets.js";
import { runStages } from "../pipeline.js";
import { REPO_ROOT } from "../images/plan.js";
import { loadSeedLists, writeDigests } from "../images/seed.js";
import { loadLock, loadPreviousLock, lockPathFor, saveLock, type LockFile } from "../lockfile.js";
import { stagesDir } from "../pipeline.js";
import { IMAGES_JSON, type BuiltImage } from "../stages/images.js";
import type { Command } from "./command.js";

export const lockImagesCommand: Command = {
  name: "lock-images",
  summary: "pin the images' Debian packages and write the built images' digests into registry-seed/",
  usage: `usage: icn-bootstrap lock-images [--definition FILE] [--keep-packages] [--upstream] [--also-kubernetes V ...]

Re-pins the container images the project builds (images/<name>/recipe.yaml):
1. resolves the Debian packages of the shared image base (the union of the recipes'
   debian.packages), of the C toolchain (gcc, libc6-dev) and of each OS image of the
   definition (osImages) and of each image with a Debian root of its own (recipe
   base: own-debian) against the lock's archives and pins each as a file
   (images.debian), printing what moved (old -> new);
   --keep-packages keeps the pinned ones (an OS image or an own root whose set is
   not pinned as its recipe asks is still resolved);
2. builds every image of the definition's lists (registry-seed/*.yaml) and writes each
   built image's manifest digest into its list (digest: sha256:...). Layers are cached
   by their inputs: only images whose inputs changed are rebuilt.
Run it after changing a recipe, a pinned artifact or a package list, check the diff,
and commit it. A build fails when a built image's digest differs from its pin.

--also-kubernetes V also builds and pins the control-plane images of Kubernetes V, an
extra served version (registry-seed/kubernetes-V.yaml; lock-artifacts --also-kubernetes
pins its binaries). Repeatable. Every extra version the lock already pins and lists
(registry-seed/kubernetes-V.yaml) is re-pinned without it.

--upstream additionally resolves the upstream digest of every listed reference
(skopeo inspect; needs access to the upstream registries) into upstreamDigest.`,
  async run(argv) {
    const { values } = parseCommandArgs("lock-images", argv, {
      definition: { type: "string" },
      "keep-packages": { type: "boolean" },
      upstream: { type: "boolean" },
      "also-kubernetes": { type: "string", multiple: true },
    });
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const lockPath = lockPathFor(definitionPath);
    let lock = await loadLock(lockPath);
    const extras = [...new Set([...(values["also-kubernetes"] ?? []), ...pinnedExtraKubernetes(lock)])];
    const definition = withExtraKubernetes(await loadDefinition(definitionPath), extras);
    await requireTools(["mmdebstrap", "skopeo", "gzip", "apt-ftparchive", "gpgv"]);
    if (!values["keep-packages"] || !lock.images) {
      const previous = await loadPreviousLock(lockPath);
      const resolution = await readArchives(sourcesFor(definition, previous, {}));
      const images = await resolveImageSets(definition, lock, lockPath, resolution, stagesDir());
      printImageMoves(
        {
          base: lock.images?.debian.base.packages ?? {},
          toolchain: lock.images?.debian.toolchain.packages ?? {},
          os: osPackagesOf(lock.images),
          own: ownPackagesOf(lock.images),
        },
        images,
      );
      lock = { ...lock, images };
      await saveLock(lockPath, lock);
    } else {
      // --keep-packages keeps what is pinned; an OS image or an image's own root whose set is not pinned (as it is asked for) is resolved.
      const unpinned = await unpinnedOsImages(definition.osImages, lock);
      const unpinnedRoots = unpinnedOwnRoots(await listedOwnRoots(definition), lock);
      if (unpinned.length > 0 || unpinnedRoots.length > 0) {
        const resolution = await readArchives(sourcesFor(definition, await loadPreviousLock(lockPath), {}));
        const os = { ...(lock.images.debian.os ?? {}), ...(unpinned.length ? await resolveOsSets(definition, unpinned, lock, resolution, stagesDir()) : {}) };
        const own = { ...(lock.images.debian.own ?? {}), ...(unpinnedRoots.length ? await resolveOwnSets(unpinnedRoots, lock, resolution, stagesDir()) : {}) };
        const images = {
          ...lock.images,
          debian: { ...lock.images.debian, ...(Object.keys(os).length ? { os } : {}), ...(Object.keys(own).length ? { own } : {}) },
        };
        printImageMoves(
          {
            base: lock.images.debian.base.packages,
            toolchain: lock.images.debian.toolchain.packages,
            os: osPackagesOf(lock.images),
            own: ownPackagesOf(lock.images),
          },
          images,
        );
        lock = { ...lock, images };
        await saveLock(lockPath, lock);
      }
    }
    await recordImageDigests(definition, lock, lockPath);
    if (values.upstream) await recordUpstreamDigests(definition);
  },
};

/**
 * The extra Kubernetes versions the lock pins (artifacts kubernetes-vX.Y.Z) whose image list
 * exists: re-pinned with the others, so that a changed toolchain cannot leave their digests stale.
 */
function pinnedExtraKubernetes(lock: LockFile): string[] {
  const versions = Object.keys(lock.artifacts)
    .filter((name) => /^kubernetes-v\d+\.\d+\.\d+$/.test(name))
    .map((name) => name.slice("kubernetes-".length));
  return versions.filter((v) => existsSync(join(REPO_ROOT, "registry-seed", `kubernetes-${v}.yaml`)));
}

export type PinnedBefore = Record<string, { version: string; sha256?: string }>;

/** The OS images' pinned sets, by recipe name. */
export function osPackagesOf(images: LockFile["images"]): Record<string, PinnedBefore> {
  return Object.fromEntries(Object.entries(images?.debian.os ?? {}).map(([name, set]) => [name, set.packages]));
}

/** The images' own roots' pinned sets, by recipe name. */
export function ownPackagesOf(images: LockFile["images"]): Record<string, PinnedBefore> {
  return Object.fromEntries(Object.entries(images?.debian.own ?? {}).map(([name, set]) => [name, set.packages]));
}

/** Prints what moved in the images' sets (old -> new); true when anything did. */
export function printImageMoves(
  before: { base: PinnedBefore; toolchain: PinnedBefore; os?: Record<string, PinnedBefore>; own?: Record<string, PinnedBefore> },
  images: NonNullable<LockFile["images"]>,
): boolean {
  const sets: [string, PinnedBefore, Record<string, PinnedPackage>][] = [
    ["base", before.base, images.debian.base.packages],
    ["toolchain", before.toolchain, images.debian.toolchain.packages],
    ...Object.entries(images.debian.os ?? {}).map(([name, set]): [string, PinnedBefore, Record<string, PinnedPackage>] => [
      `os.${name}`,
      before.os?.[name] ?? {},
      set.packages,
    ]),
    ...Object.entries(images.debian.own ?? {}).map(([name, set]): [string, PinnedBefore, Record<string, PinnedPackage>] => [
      `own.${name}`,
      before.own?.[name] ?? {},
      set.packages,
    ]),
  ];
  let any = false;
  for (const [name, old, now] of sets) {
    const moved = movedPackages(old, now);
    console.log(`images.debian.${name}: ${Object.keys(now).length} packages pinned, ${moved.length} moved`);
    for (const line of describeMoved(moved)) console.log(`  ${line}`);
    any ||= moved.length > 0;
  }
  return any;
}

/** Builds every listed image from the pinned packages and writes the digests into registry-seed/. */
export async function recordImageDigests(definition: ApplianceDefinition, lock: LockFile, lockPath: string): Promise<void> {
  await ensureLockedDebs(lock);
  const content = await runStages({ definition, lock, lockPath, stagesDir: stagesDir(), sections: ["content"], record: true, stopAfterImages: true });
  const built: BuiltImage[] = JSON.parse(await readFile(join(content.images!.dir, IMAGES_JSON), "utf8"));
  const listOf = new Map((await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)))).map((i) => [i.ref, i.list]));
  const byList = new Map<string, Record<string, string>>();
  for (const image of built.filter((b) => b.source === "recipe")) {
    const list = listOf.get(image.ref)!;
    const digests = byList.get(list) ?? {};
    digests[image.ref] = image.digest;
    byList.set(list, digests);
    console.log(`${image.ref} ${image.digest}`);
  }
  for (const [list, digests] of byList) {
    const changed = await writeDigests(list, digests);
    console.log(`${list.replace(`${REPO_ROOT}/`, "")}: ${Object.keys(digests).length} digests, ${changed} changed`);
  }
}

async function recordUpstreamDigests(definition: ApplianceDefinition): Promise<void> {
  const lists = definition.registry.lists.map((l) => resolve(REPO_ROOT, l));
  const { execa } = await import("execa");
  const upstream = new Map<string, Record<string, string>>();
  for (const image of await loadSeedLists(lists)) {
    if (image.ref.startsWith("bootstrap.icn")) continue;
    const result = await execa("skopeo", ["inspect", "--format", "{{.Digest}}", "--no-tags", `docker://${image.ref}`], { reject: false });
    if (result.failed)
      throw new UserError(
        `${image.list}: cannot resolve ${image.ref} upstream: ${String(result.stderr).trim()}`,
        "the upstream profile needs access to the image's registry",
      );
    const digests = upstream.get(image.list) ?? {};
    digests[image.ref] = String(result.stdout).trim();
    upstream.set(image.list, digests);
  }
  for (const [list, digests] of upstream) await writeDigests(list, digests, "upstreamDigest");
}
