import { mkdir, readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { cacheRoot } from "./cache.js";
import { parseSize, type ApplianceDefinition, type OutputFormat } from "./definition.js";
import { requireFile, requireTools } from "./host-tools.js";
import { buildContent } from "./images/pipeline.js";
import { lockPathFor, type LockFile } from "./lockfile.js";
import { Publisher, type PublishedImage } from "./publish.js";
import { runStage, type StageResult } from "./stage.js";
import { diskStage } from "./stages/disk.js";
import { imageStage } from "./stages/image.js";
import { FORMAT_EXTENSIONS, formatSource, qcow2Stage } from "./stages/formats.js";
import { BUILTIN_OVERLAYS, overlaysStage } from "./stages/overlays.js";
import { SEEDED_JSON } from "./stages/registry.js";
import { PACKAGES_JSON, rootfsStage } from "./stages/rootfs.js";

export interface BuildRequest {
  definition: ApplianceDefinition;
  definitionPath: string;
  lock: LockFile;
  formats: OutputFormat[];
  outDir: string;
  /** The lock file (default: the definition's `<name>.lock.yaml`). */
  lockPath?: string;
}

export interface BuildResult {
  stages: StageResult[];
  images: Record<string, PublishedImage>;
  packages: Record<string, string>;
  /** The container images seeded into the registry (reference, digest, built or pulled). */
  containerImages?: { ref: string; digest: string; source: string }[];
}

export const BUILD_TOOLS = ["skopeo", "docker-registry", "gzip", "mmdebstrap", "fakeroot", "mkfs.ext4", "debugfs", "e2fsck", "mkfs.vfat", "mmd", "mcopy", "sgdisk", "grub-mkimage", "systemctl"];

export function stagesDir(): string {
  return join(cacheRoot(), "stages");
}

/** The stage list, in order; each stage is skipped when its inputs are unchanged. */
export async function build(request: BuildRequest): Promise<BuildResult> {
  const { definition, lock, formats } = request;
  await requireTools([...BUILD_TOOLS, ...(formats.includes("qcow2") ? ["qemu-img"] : [])]);
  await requireFile("/usr/lib/grub/i386-pc/boot.img", "grub-pc-bin");
  await requireFile("/usr/lib/grub/x86_64-efi/linux.mod", "grub-efi-amd64-bin");
  const cache = stagesDir();
  const overlayDirs = [BUILTIN_OVERLAYS, ...definition.overlays.map((dir) => resolve(dirname(request.definitionPath), dir))];

  const rootfs = await runStage(rootfsStage, { definition, lock: lock.debian }, cache);
  // --- issue 6: stages 3-5 (files + kubespray, images, seeded registry) -> content layers
  const content = await buildContent({ definition, lock, lockPath: request.lockPath ?? lockPathFor(request.definitionPath), stagesDir: cache });
  const contentLayers = [content.registry!, content.files];
  const contentStages = [content.files, ...(content.imageBase ? [content.imageBase] : []), ...(content.imageCompile ? [content.imageCompile] : []), content.images, content.registry!];
  // --- end issue 6
  const overlays = await runStage(overlaysStage, { definition, directories: overlayDirs }, cache);
  const disk = await runStage(diskStage, { definition, rootfs, layers: [...contentLayers] }, cache);
  const image = await runStage(imageStage, { disk, overlays }, cache);

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
  const seeded = JSON.parse(await readFile(join(content.registry!.dir, SEEDED_JSON), "utf8")) as { images: { ref: string; digest: string; source: string }[] };
  const containerImages = seeded.images.map(({ ref, digest, source }) => ({ ref, digest, source }));
  return { stages, images, packages, containerImages };
}
