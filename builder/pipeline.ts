import { mkdir, readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { parseSize, type ApplianceDefinition, type OutputFormat } from "./definition.js";
import { requireFile, requireTools } from "./host-tools.js";
import { contentDebianSets, selectContent } from "./images/content-sets.js";
import { planImages, type ImagesPlan } from "./images/plan.js";
import { applianceImageNames, type Selection } from "./images/seed.js";
import { type LockFile } from "./lockfile.js";
import { Publisher, type PublishedImage } from "./publish.js";
import { runStage, stageCacheLimit, stagesDir, type Stage, type StageResult } from "./stage.js";
import { filesStage, KUBESPRAY_TREE } from "./stages/files.js";
import { debianSource, imageBaseStage, imageCompileStage, imageRootStage } from "./stages/image-debian.js";
import { imagesStage } from "./stages/images.js";
import { osImageStage, osRootfsStage } from "./stages/os-image.js";
import { ramdiskStage } from "./stages/ramdisk.js";
import { diskStage, readLayout } from "./stages/disk.js";
import { SECTOR, type DiskLayout } from "./disk/layout.js";
import { collectSbomInput } from "./sbom/collect.js";
import { bootDigests, digestOutsideSite, type BootDigests } from "./verify/regions.js";
import type { SbomInput } from "./sbom/cyclonedx.js";
import { sha256Text } from "./cache.js";
import { APPLIANCE_TOOLS, kubernetesStage, NODE_BINARIES } from "./stages/kubernetes.js";
import { ensureArtifacts, loadArtifacts, selectTargets, type ArtifactResult } from "./sources/index.js";
import { UserError } from "./errors.js";
import { ensureLockedDebs, type DebOrigin } from "./debian/fetch.js";
import { CONTENTS, imageStage } from "./stages/image.js";
import { FORMAT_EXTENSIONS, formatSource, qcow2Stage } from "./stages/formats.js";
import { BUILTIN_OVERLAYS, overlaysStage, type OverlaySource } from "./stages/overlays.js";
import { REGISTRY_STORAGE, registryStage, SEEDED_JSON, seededChartFile } from "./stages/registry.js";
import { CONTROLLER_CHART_REPOSITORY } from "../common/controller-chart.js";
import { assertLockFits, PACKAGES_JSON, rootfsStage } from "./stages/rootfs.js";
import { sourceDateEpoch } from "./reproducible.js";
import { assertOsImagesPinned, osRootfsInputs, servedOsFiles, type BuiltOsImage } from "./images/os.js";
import { controllerChartStage } from "./stages/controller-chart.js";
import { goBuildCacheLimit, trimGoBuildCache } from "./sources/go-cache.js";
import { formatBytes, log } from "./log.js";

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
  /** The components' Helm chart, beside the images (<name>-<version>.tgz), when the build seeds it. */
  charts: PublishedImage[];
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
  return ensureArtifacts({ lockPath, only: [...NODE_BINARIES, ...APPLIANCE_TOOLS] });
}

export const BUILD_TOOLS = [
  "apt-ftparchive",
  "skopeo",
  "docker-registry",
  "gzip",
  "mmdebstrap",
  "fakeroot",
  "mkfs.ext4",
  "debugfs",
  "e2fsck",
  "mkfs.vfat",
  "mmd",
  "mcopy",
  "sgdisk",
  "grub-mkimage",
  "systemctl",
];

/**
 * Stage outputs: `$ICN_BOOTSTRAP_STAGE_CACHE`, else `<cache>/stages`. Pointing only the
 * stage cache elsewhere gives a build with no stage output to reuse while the artifact,
 * download and .deb caches stay shared (the reproducibility test does this).
 */
export { stagesDir };

/** Parts of the stage list: a build runs all four; other commands and tests run some. */
export type Section = "appliance-root" | "content" | "os-images" | "appliance-disk";
export const ALL_SECTIONS: readonly Section[] = ["appliance-root", "content", "os-images", "appliance-disk"];

export interface StagesRequest {
  definition: ApplianceDefinition;
  lock: LockFile;
  /** The lock file's path (its registry-seed/ and artifact lists are beside it); needed by all but os-images. */
  lockPath?: string;
  stagesDir: string;
  sections: readonly Section[];
  /** The definition file (its overlay directories are relative to it); needed by appliance-disk. */
  definitionPath?: string;
  /** lock: make only the Debian roots, from the newest packages (value: the archives' state). */
  resolve?: string;
  /** lock-images: images not pinned yet are built and their digests recorded, not checked. */
  record?: boolean;
  /** lock-images: stop after the images stage. */
  stopAfterImages?: boolean;
  formats?: OutputFormat[];
  /** Called with the finished disk image before the qcow2 conversion (the USB copy overlaps it). */
  onDiskImage?: (image: StageResult) => void;
}

export interface StagesBuilt {
  rootfs?: StageResult;
  nodeBinaries: ArtifactResult[];
  kubernetes?: StageResult;
  selection?: Selection;
  plan?: ImagesPlan;
  files?: StageResult;
  imageBase?: StageResult;
  imageCompile?: StageResult;
  /** The Debian roots of recipes with `base: own-debian`, by recipe name. */
  imageRoots: Record<string, StageResult>;
  images?: StageResult;
  registry?: StageResult;
  osImages: BuiltOsImage[];
  controllerChart?: StageResult;
  overlays?: StageResult;
  disk?: StageResult;
  image?: StageResult;
  qcow2?: StageResult;
  /** Every stage that ran or was reused, in order (the report's list). */
  ran: StageResult[];
}

/**
 * Every stage of a build, in the order they run (numbered as in docs/design.md); each is reused when its inputs are
 * unchanged. `build` runs the four sections; `lock-images` runs "content" up to the
 * images (recording their digests), and with `resolve` only the Debian roots of
 * "content" and "os-images" (`lock`); tests run single sections.
 */
export async function runStages(request: StagesRequest): Promise<StagesBuilt> {
  const { definition, lock, stagesDir: dir, sections, resolve: resolving } = request;
  const lockPath = request.lockPath ?? "";
  const built: StagesBuilt = { nodeBinaries: [], imageRoots: {}, osImages: [], ran: [] };
  const run = async <Deps>(stage: Stage<Deps>, deps: Deps): Promise<StageResult> => {
    const result = await runStage(stage, deps, dir);
    built.ran.push(result);
    return result;
  };

  if (sections.includes("appliance-root")) {
    // 1. The appliance's Debian root, from exactly the lock's .deb files.
    built.rootfs = await run(rootfsStage, { definition, lock: lock.debian });
    // 2. kubeadm, kubelet and kubectl at the lock's one Kubernetes version.
    if (definition.kubernetes.enabled) {
      built.nodeBinaries = await kubernetesArtifacts(definition, lockPath);
      built.kubernetes = await run(kubernetesStage, { binaries: built.nodeBinaries });
    }
  }

  if (sections.includes("content")) {
    const kubespray = definition.kubespray.enabled;
    const selection = (built.selection = await selectContent(definition, Boolean(request.record)));
    // 3. The file server's tree: kubespray and every file it downloads, the nodes' binaries.
    const files = (built.files = await run(filesStage, {
      lock,
      lockPath,
      kubespray,
      images: selection.images.map((i) => i.ref),
      archives: !resolving,
      extraKubernetesVersions: kubespray ? definition.kubespray.extraKubernetesVersions : [],
    }));
    const plan = (built.plan = await planImages(selection.images, {
      kubesprayTree: kubespray ? resolve(files.dir, KUBESPRAY_TREE) : undefined,
      filesDir: files.dir,
      lockPath,
    }));
    const sets = await contentDebianSets(definition, plan, lock, Boolean(resolving));
    const debian = debianSource(lock);
    // 4-6. The container images' Debian roots: the shared base, the C toolchain (static programs), each own root.
    if (plan.basePackages.length > 0) built.imageBase = await run(imageBaseStage, { debian, set: sets.base, resolve: resolving });
    if (plan.programs.length > 0)
      built.imageCompile = await run(imageCompileStage, { debian, set: sets.toolchain, resolve: resolving, programs: plan.programs });
    for (const root of plan.ownRoots)
      built.imageRoots[root.name] = await run(imageRootStage, {
        debian,
        set: sets.own[root.name]!,
        resolve: resolving,
        recipe: root.name,
        ...(root.python && !resolving ? { python: root.python } : {}),
      });
    if (!resolving) {
      // 7. Every listed container image, built from its recipe or pulled by digest, as one OCI layout.
      built.images = await run(imagesStage, { plan, base: built.imageBase, roots: built.imageRoots, compiled: built.imageCompile, record: request.record });
      if (request.stopAfterImages) return built;
      // 8. The local registry's storage, seeded with them.
      built.registry = await run(registryStage, { images: built.images });
    }
  }

  if (sections.includes("os-images")) {
    // 9. The compute nodes' OS images and Ironic's deploy ramdisk, each from a root of its own.
    if (!resolving) await assertOsImagesPinned(definition.osImages, lock);
    for (const name of definition.osImages) {
      const { recipe, inputs, pythonPackages } = await osRootfsInputs(name, lock, resolving);
      const kind = recipe.ramdisk ? "ramdisk" : "disk";
      const rootfs = await run(osRootfsStage, inputs);
      if (resolving) {
        built.osImages.push({ name, kind, rootfs, pythonPackages });
        continue;
      }
      const image = recipe.ramdisk
        ? await run(ramdiskStage, { name, kernel: recipe.ramdisk.kernel, initramfs: recipe.ramdisk.initramfs, epoch: inputs.epoch, rootfs })
        : await run(osImageStage, { name, file: recipe.os!.file, rootFree: recipe.os!.rootFree, epoch: inputs.epoch, rootfs });
      built.osImages.push({ name, kind, rootfs, image, pythonPackages });
    }
  }

  if (sections.includes("appliance-disk")) {
    const layers = [...(built.kubernetes ? [built.kubernetes] : []), built.registry!, built.files!, ...built.osImages.map((os) => os.image!)];
    // 10. The infra-local-controller chart the first boot installs (the BPA, Metal3, Ironic), as the registry seeded it.
    if (definition.kubernetes.enabled && definition.kubernetes.components) {
      const chart = await seededChartFile(built.registry!.dir, CONTROLLER_CHART_REPOSITORY);
      if (!chart)
        throw new UserError(
          `the appliance installs itself from the ${CONTROLLER_CHART_REPOSITORY} chart, but this build's registry does not hold it`,
          "keep registry-seed/bootstrap.yaml (which lists it) in the definition's registry.lists, or set kubernetes.components: false",
        );
      built.controllerChart = await run(controllerChartStage, { file: chart.source, digest: chart.digest });
      layers.push(built.controllerChart);
    }
    // 11. The overlays (handlebars rendered), 12. the bootable disk, 13. the overlays written into it, 14. the qcow2.
    built.overlays = await run(overlaysStage, {
      definition,
      directories: overlaySources(definition, request.definitionPath!),
      images: built.selection?.images.map((i) => i.ref),
      applianceImages: built.selection && applianceImageNames(built.selection.images),
    });
    const epoch = sourceDateEpoch(lock.debian);
    built.disk = await run(diskStage, { definition, epoch, rootfs: built.rootfs!, layers });
    built.image = await run(imageStage, { disk: built.disk, overlays: built.overlays, epoch });
    request.onDiskImage?.(built.image);
    if (request.formats?.includes("qcow2")) built.qcow2 = await run(qcow2Stage, { image: built.image, virtualBytes: parseSize(definition.disk.vmDiskSize) });
  }
  return built;
}

function overlaySources(definition: ApplianceDefinition, definitionPath: string): OverlaySource[] {
  return [{ dir: BUILTIN_OVERLAYS, target: "" }, ...definition.overlays.map((overlay) => ({ dir: resolve(dirname(definitionPath), overlay), target: "" }))];
}

/** Builds the image: the whole stage list, then the images published under their final names, the SBOM and what verify checks. */
export async function build(request: BuildRequest): Promise<BuildResult> {
  const { definition, lock, formats } = request;
  await requireTools([...BUILD_TOOLS, ...(formats.includes("qcow2") ? ["qemu-img"] : [])]);
  await requireFile("/usr/lib/grub/i386-pc/boot.img", "grub-pc-bin");
  await requireFile("/usr/lib/grub/x86_64-efi/linux.mod", "grub-efi-amd64-bin");
  const cache = stagesDir();
  stageCacheLimit(); // a bad ICN_BOOTSTRAP_STAGE_CACHE_LIMIT fails here, not after the first stage
  goBuildCacheLimit(); // likewise ICN_BOOTSTRAP_GO_CACHE_LIMIT
  assertLockFits(definition, lock.debian);
  // Every pinned .deb, by its record, before any stage: a missing file fails here, naming each one.
  const debianFiles = await ensureLockedDebs(lock, { snapshot: request.snapshot });

  await mkdir(request.outDir, { recursive: true });
  const target = (format: OutputFormat) => join(request.outDir, `${definition.name}${FORMAT_EXTENSIONS[format]}`);
  const publisher = new Publisher();
  let built: StagesBuilt;
  try {
    built = await runStages({
      definition,
      lock,
      lockPath: request.lockPath,
      stagesDir: cache,
      sections: ALL_SECTIONS,
      definitionPath: request.definitionPath,
      formats,
      // The USB image is copied out while the qcow2 conversion runs.
      onDiskImage: (image) => {
        if (formats.includes("usb")) publisher.stage(formatSource("usb", image), target("usb"));
      },
    });
    if (built.qcow2) publisher.stage(formatSource("qcow2", built.image!, built.qcow2), target("qcow2"));
    const chart = built.registry && (await seededChartFile(built.registry.dir, CONTROLLER_CHART_REPOSITORY));
    if (chart) publisher.stage(chart.source, join(request.outDir, chart.file));
  } catch (error) {
    await publisher.abandon();
    throw error;
  }
  const published = await publisher.commit();
  // Every Go binary is in the artifact cache now; the compile cache behind them is 10+ GiB after a cold build.
  const freed = await trimGoBuildCache();
  if (freed > 0) log("build", `emptied Go's compile cache (${formatBytes(freed)}; ICN_BOOTSTRAP_GO_CACHE_LIMIT keeps more)`);
  const images: Record<string, PublishedImage> = Object.fromEntries(
    published.flatMap((p) => formats.filter((f) => p.path === target(f)).map((f) => [f, p] as const)),
  );
  const charts = published.filter((p) => !formats.some((f) => p.path === target(f)));
  const { rootfs, image, disk, registry, files, plan, osImages } = built as Required<StagesBuilt>;
  const packages = JSON.parse(await readFile(join(rootfs.dir, PACKAGES_JSON), "utf8"));
  const seeded = JSON.parse(await readFile(join(registry.dir, SEEDED_JSON), "utf8")) as {
    images: { ref: string; repository: string; tag: string; tags: string[]; digest: string; source: string }[];
  };
  const containerImages = seeded.images.map(({ ref, digest, source }) => ({ ref, digest, source }));
  const sbom = await collectSbomInput({
    name: definition.name,
    epoch: sourceDateEpoch(lock.debian),
    lock,
    rootfsDir: rootfs.dir,
    sets: [
      "rootfs",
      ...(built.imageBase ? (["base"] as const) : []),
      ...(built.imageCompile ? (["toolchain"] as const) : []),
      ...osImages.map((os) => `os:${os.name}` as const),
      ...Object.keys(built.imageRoots).map((name) => `own:${name}` as const),
    ],
    nodeBinaries: built.nodeBinaries,
    plan,
    seeded: seeded.images,
    filesDir: files.dir,
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
    registry: {
      storage: REGISTRY_STORAGE,
      images: seeded.images.map(({ ref, repository, tag, tags, digest }) => ({ ref, repository, tags: [tag, ...tags], digest })),
    },
  };
  return { stages: built.ran, images, charts, packages, debianFiles, containerImages, sbom, verification };
}
