import { mkdir, readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { parseSize, type ApplianceDefinition, type OutputFormat } from "./definition.js";
import { requireFile, requireTools } from "./host-tools.js";
import { buildContent } from "./images/pipeline.js";
import { type LockFile } from "./lockfile.js";
import { Publisher, type PublishedImage } from "./publish.js";
import { runStage, stageCacheLimit, stagesDir, type StageResult } from "./stage.js";
import { diskStage, readLayout } from "./stages/disk.js";
import { SECTOR, type DiskLayout } from "./disk/layout.js";
import { collectSbomInput } from "./sbom/collect.js";
import { bootDigests, digestOutsideSite, type BootDigests } from "./verify/regions.js";
import type { SbomInput } from "./sbom/cyclonedx.js";
import { sha256Text } from "./cache.js";
import { kubernetesStage, NODE_BINARIES } from "./stages/kubernetes.js";
import { ensureArtifacts, loadArtifacts, selectTargets, type ArtifactResult } from "./sources/index.js";
import { UserError } from "./errors.js";
import { ensureLockedDebs, type DebOrigin } from "./debian/fetch.js";
import { CONTENTS, imageStage } from "./stages/image.js";
import { FORMAT_EXTENSIONS, formatSource, qcow2Stage } from "./stages/formats.js";
import { BUILTIN_OVERLAYS, MANIFESTS, MANIFESTS_TARGET, overlaysStage, type OverlaySource } from "./stages/overlays.js";
import { REGISTRY_STORAGE, SEEDED_JSON } from "./stages/registry.js";
import { assertLockFits, PACKAGES_JSON, rootfsStage } from "./stages/rootfs.js";
import { sourceDateEpoch } from "./reproducible.js";
import { buildOsImages, servedOsFiles } from "./images/os.js";
import { readMetal3Manifests } from "./metal3/manifests.js";
import { metal3Stage } from "./stages/metal3.js";

export interface BuildRequest {
  definition: ApplianceDefinition;
  definitionPath: string;
  lock: LockFile;
  lockPath: string;
  formats: OutputFormat[];
  outDir: string;
  /** Snapshot archive base URL, instead of the lock's (build --snapshot). */
  snapshot?: string;
}

/** What `icn-bootstrap verify` checks an image against (written into the report). */
export interface Verification {
  layout: DiskLayout;
  boot: BootDigests;
  /** The root filesystem's contents manifest (builder/disk/contents.ts) and its sha256. */
  contents: string;
  contentsDigest: string;
  /** The USB image's bytes without its site partition (verify after `site write`). */
  outsideSite?: string;
  /** Where the registry's storage is in the root, and what it must serve. */
  registry: { storage: string; images: { ref: string; repository: string; tags: string[]; digest: string }[] };
}

export interface BuildResult {
  stages: StageResult[];
  images: Record<string, PublishedImage>;
  packages: Record<string, string>;
  /** Where each pinned .deb came from in this build (cache, pool, snapshot). */
  debianFiles: DebOrigin[];
  /** The container images seeded into the registry (reference, digest, built or pulled). */
  containerImages?: { ref: string; digest: string; source: string }[];
  sbom: SbomInput;
  verification: Verification;
}

/** The node binaries at the lock file's one Kubernetes version, built or fetched into the artifact cache. */
async function kubernetesArtifacts(definition: ApplianceDefinition, lockPath: string): Promise<ArtifactResult[]> {
  const targets = selectTargets(await loadArtifacts(lockPath), { only: [...NODE_BINARIES] });
  const pinned = targets[0]?.entry.version;
  if (definition.kubernetes.version && definition.kubernetes.version !== pinned) {
    throw new UserError(
      `the definition asks for Kubernetes ${definition.kubernetes.version} but the lock file pins ${pinned}`,
      `run 'icn-bootstrap lock-artifacts --kubernetes ${definition.kubernetes.version}' to pin it, or remove kubernetes.version from the definition`,
    );
  }
  return ensureArtifacts({ lockPath, only: [...NODE_BINARIES] });
}

export const BUILD_TOOLS = ["apt-ftparchive", "skopeo", "docker-registry", "gzip", "mmdebstrap", "fakeroot", "mkfs.ext4", "debugfs", "e2fsck", "mkfs.vfat", "mmd", "mcopy", "sgdisk", "grub-mkimage", "systemctl"];

/**
 * Stage outputs: `$ICN_BOOTSTRAP_STAGE_CACHE`, else `<cache>/stages`. Pointing only the
 * stage cache elsewhere gives a build with no stage output to reuse while the artifact,
 * download and .deb caches stay shared (the reproducibility test does this).
 */
export { stagesDir };

/** The stage list, in order; each stage is skipped when its inputs are unchanged. */
export async function build(request: BuildRequest): Promise<BuildResult> {
  const { definition, lock, formats } = request;
  await requireTools([...BUILD_TOOLS, ...(formats.includes("qcow2") ? ["qemu-img"] : [])]);
  await requireFile("/usr/lib/grub/i386-pc/boot.img", "grub-pc-bin");
  await requireFile("/usr/lib/grub/x86_64-efi/linux.mod", "grub-efi-amd64-bin");
  const cache = stagesDir();
  stageCacheLimit(); // a bad ICN_BOOTSTRAP_STAGE_CACHE_LIMIT fails here, not after the first stage
  const overlayDirs: OverlaySource[] = [
    { dir: BUILTIN_OVERLAYS, target: "" },
    ...(definition.kubernetes.enabled ? [{ dir: MANIFESTS, target: MANIFESTS_TARGET }] : []),
    ...definition.overlays.map((dir) => ({ dir: resolve(dirname(request.definitionPath), dir), target: "" })),
  ];

  assertLockFits(definition, lock.debian);
  // Every pinned .deb, by its record, before any stage: a missing file fails here, naming each one.
  const debianFiles = await ensureLockedDebs(lock, { snapshot: request.snapshot });
  const rootfs = await runStage(rootfsStage, { definition, lock: lock.debian }, cache);
  const layers: StageResult[] = [];
  const contentStages: StageResult[] = [];
  let nodeBinaries: ArtifactResult[] = [];
  if (definition.kubernetes.enabled) {
    nodeBinaries = await kubernetesArtifacts(definition, request.lockPath);
    const kubernetes = await runStage(kubernetesStage, { binaries: nodeBinaries }, cache);
    layers.push(kubernetes);
    contentStages.push(kubernetes);
  }
  // Stages 3-5: the file server's tree (kubespray + binaries), the container images and the seeded registry.
  const content = await buildContent({ definition, lock, lockPath: request.lockPath, stagesDir: cache });
  layers.push(content.registry!, content.files);
  contentStages.push(content.files, ...(content.imageBase ? [content.imageBase] : []), ...(content.imageCompile ? [content.imageCompile] : []), ...Object.values(content.imageRoots), content.images!, content.registry!);
  // The compute nodes' OS images, served by the file server beside kubespray's files.
  const osImages = await buildOsImages({ definition, lock, stagesDir: cache });
  for (const os of osImages) {
    layers.push(os.image!);
    contentStages.push(os.rootfs, os.image!);
  }
  if (definition.kubernetes.enabled) {
    // Metal3's CRDs and the operator's ClusterRole, from the pinned baremetal-operator module.
    const metal3 = await runStage(metal3Stage, { manifests: await readMetal3Manifests(request.lockPath) }, cache);
    layers.push(metal3);
    contentStages.push(metal3);
  }
  const overlays = await runStage(overlaysStage, { definition, directories: overlayDirs }, cache);
  const epoch = sourceDateEpoch(lock.debian);
  const disk = await runStage(diskStage, { definition, epoch, rootfs, layers }, cache);
  const image = await runStage(imageStage, { disk, overlays, epoch }, cache);

  await mkdir(request.outDir, { recursive: true });
  const target = (format: OutputFormat) => join(request.outDir, `${definition.name}${FORMAT_EXTENSIONS[format]}`);
  const publisher = new Publisher();
  let qcow2: StageResult | undefined;
  try {
    // The USB image is copied out while the qcow2 conversion runs.
    if (formats.includes("usb")) publisher.stage(formatSource("usb", image), target("usb"));
    if (formats.includes("qcow2")) {
      qcow2 = await runStage(qcow2Stage, { image, virtualBytes: parseSize(definition.disk.vmDiskSize) }, cache);
      publisher.stage(formatSource("qcow2", image, qcow2), target("qcow2"));
    }
  } catch (error) {
    await publisher.abandon();
    throw error;
  }
  const published = await publisher.commit();
  const images: Record<string, PublishedImage> = Object.fromEntries(published.map((p) => [formats.find((f) => p.path === target(f))!, p]));
  const stages = [rootfs, ...contentStages, overlays, disk, image, ...(qcow2 ? [qcow2] : [])];
  const packages = JSON.parse(await readFile(join(rootfs.dir, PACKAGES_JSON), "utf8"));
  const seeded = JSON.parse(await readFile(join(content.registry!.dir, SEEDED_JSON), "utf8")) as { images: { ref: string; repository: string; tag: string; tags: string[]; digest: string; source: string }[] };
  const containerImages = seeded.images.map(({ ref, digest, source }) => ({ ref, digest, source }));
  const sbom = await collectSbomInput({
    name: definition.name,
    epoch,
    lock,
    rootfsDir: rootfs.dir,
    sets: ["rootfs", ...(content.imageBase ? (["base"] as const) : []), ...(content.imageCompile ? (["toolchain"] as const) : []), ...osImages.map((os) => `os:${os.name}` as const), ...Object.keys(content.imageRoots).map((name) => `own:${name}` as const)],
    nodeBinaries,
    plan: content.plan,
    seeded: seeded.images,
    filesDir: content.files.dir,
    images: Object.entries(images).map(([format, image]) => ({ format, sha256: image.sha256 })),
    osImages: (await Promise.all(osImages.map(servedOsFiles))).flat(),
  });
  const contents = await readFile(join(image.dir, CONTENTS), "utf8");
  const layout = await readLayout(disk.dir);
  const verification: Verification = {
    layout,
    boot: await bootDigests(formatSource("usb", image), layout),
    contents,
    contentsDigest: sha256Text(contents),
    outsideSite: await digestOutsideSite(formatSource("usb", image), layout, layout.totalSectors * SECTOR),
    registry: { storage: REGISTRY_STORAGE, images: seeded.images.map(({ ref, repository, tag, tags, digest }) => ({ ref, repository, tags: [tag, ...tags], digest })) },
  };
  return { stages, images, packages, debianFiles, containerImages, sbom, verification };
}
