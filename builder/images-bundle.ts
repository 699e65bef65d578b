/**
 * The build's container images and charts as one file, for a Kubernetes of one's own
 * without the appliance's registry (docs/developer-path.md): the images stage's OCI image
 * layout (every image and chart the appliance's registry serves, named by the path it
 * serves them under, e.g. `icn/bpa:latest`) and the list of their tags, in one tar with
 * fixed times and owners. `pushImagesBundle` copies them into a registry by digest.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { execa } from "execa";
import * as tar from "tar";
import { sha256File } from "../common/hash.js";
import { tempSibling } from "./cache.js";
import { ensureLockedDebs } from "./debian/fetch.js";
import type { ApplianceDefinition } from "./definition.js";
import { UserError } from "./errors.js";
import { FILES_BUNDLE_SUFFIX, writeFilesBundle } from "./files-bundle.js";
import { removeOnInterrupt } from "./interrupt.js";
import type { LockFile } from "./lockfile.js";
import { runStages } from "./pipeline.js";
import { stagesDir } from "./stage.js";
import { IMAGES_JSON, layoutName, OCI_DIR } from "./stages/images.js";

export const BUNDLE_SUFFIX = "-images.tar";

/** The bundle's list of what it holds (beside the layout's oci-layout, index.json, blobs/). */
export const BUNDLE_IMAGES = "icn-images.json";

export interface BundledImage {
  repository: string;
  tag: string;
  /** More tags of the same manifest. */
  tags: string[];
  digest: string;
}

export interface BundleRequest {
  definition: ApplianceDefinition;
  lock: LockFile;
  lockPath: string;
  /** Where `<name>-images.tar` and `<name>-files.tar` go. */
  outDir: string;
  snapshot?: string;
}

export interface WrittenBundle {
  path: string;
  sha256: string;
  bytes: number;
}

/**
 * Runs the build's stages up to the images and the OS images (reusing the cache: after a
 * build, nothing is made again) and writes the two bundles, each under its final name only
 * when complete: the images (and charts) and the file server's tree (builder/files-bundle.ts).
 */
export async function buildBundles(
  request: BundleRequest,
): Promise<{ images: WrittenBundle & { images: BundledImage[] }; files: WrittenBundle & { files: number } }> {
  await ensureLockedDebs(request.lock, { snapshot: request.snapshot });
  const built = await runStages({
    definition: request.definition,
    lock: request.lock,
    lockPath: request.lockPath,
    stagesDir: stagesDir(),
    sections: ["content", "os-images"],
  });
  await mkdir(request.outDir, { recursive: true });
  const name = request.definition.name;
  const images = await writeUnderFinalName(join(request.outDir, `${name}${BUNDLE_SUFFIX}`), (temp) => writeImagesBundle(built.images!.dir, temp));
  const served = [built.files!.dir, ...built.osImages.map((os) => os.image!.dir)];
  const files = await writeUnderFinalName(join(request.outDir, `${name}${FILES_BUNDLE_SUFFIX}`), (temp) => writeFilesBundle(served, temp));
  return { images: { ...images.written, images: images.result }, files: { ...files.written, files: files.result.files } };
}

async function writeUnderFinalName<T>(path: string, write: (temp: string) => Promise<T>): Promise<{ written: WrittenBundle; result: T }> {
  const temp = tempSibling(path);
  const forget = removeOnInterrupt(temp);
  try {
    const result = await write(temp);
    const sha256 = await sha256File(temp);
    await rename(temp, path);
    return { written: { path, sha256, bytes: (await stat(path)).size }, result };
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  } finally {
    forget();
  }
}

/** Writes the images stage's layout and image list into `file` (a tar; same bytes for the same layout). */
export async function writeImagesBundle(imagesStageDir: string, file: string): Promise<BundledImage[]> {
  const layout = join(imagesStageDir, OCI_DIR);
  const built = JSON.parse(await readFile(join(imagesStageDir, IMAGES_JSON), "utf8")) as BundledImage[];
  const images = built.map(({ repository, tag, tags, digest }) => ({ repository, tag, tags: tags ?? [], digest }));
  const work = await mkdtemp(join(tmpdir(), "icn-bundle-"));
  try {
    await writeFile(join(work, BUNDLE_IMAGES), JSON.stringify(images, null, 2));
    const members = (await filesUnder(layout)).map((path) => relative(layout, path)).sort();
    await tar.create({ file, portable: true, mtime: new Date(0), cwd: layout, noDirRecurse: true }, members);
    // The list goes last, from another directory: tar's append keeps the same fixed fields.
    await tar.replace({ file, portable: true, mtime: new Date(0), cwd: work }, [BUNDLE_IMAGES]);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return images;
}

async function filesUnder(dir: string): Promise<string[]> {
  const files: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...(await filesUnder(path)));
    else files.push(path);
  }
  return files;
}

export interface PushOptions {
  /** host[:port] of the registry to push into. */
  registry: string;
  /** Plain HTTP or a certificate not to verify (a registry on loopback, a lab). */
  insecure?: boolean;
  /** containers-auth.json credentials (what `skopeo login` / `podman login` writes). */
  authfile?: string;
  /** A directory with the registry's CA as ca.crt (containers-certs.d). */
  certDir?: string;
  log: (message: string) => void;
}

/** Copies every image of the bundle into the registry under the same path and tags, keeping digests; checks each digest back. */
export async function pushImagesBundle(bundle: string, options: PushOptions): Promise<BundledImage[]> {
  await stat(bundle).catch(() => {
    throw new UserError(`images bundle ${bundle} does not exist`, "write one with './icn-bootstrap bundle' (out/<name>-images.tar)");
  });
  const dir = await mkdtemp(join(tmpdir(), "icn-bundle-push-"));
  try {
    try {
      await tar.extract({ file: bundle, cwd: dir, strict: true });
    } catch (error) {
      throw new UserError(`${bundle} is not an images bundle: ${(error as Error).message}`, "write it again with './icn-bootstrap bundle'");
    }
    const images = JSON.parse(await readFile(join(dir, BUNDLE_IMAGES), "utf8").catch(() => "null")) as BundledImage[] | null;
    if (!Array.isArray(images))
      throw new UserError(`${bundle} holds no ${BUNDLE_IMAGES}: not an images bundle`, "write it again with './icn-bootstrap bundle'");
    const destination = [
      ...(options.insecure ? ["--dest-tls-verify=false"] : []),
      ...(options.authfile ? ["--dest-authfile", options.authfile] : []),
      ...(options.certDir ? ["--dest-cert-dir", options.certDir] : []),
    ];
    const source = [
      ...(options.insecure ? ["--tls-verify=false"] : []),
      ...(options.authfile ? ["--authfile", options.authfile] : []),
      ...(options.certDir ? ["--cert-dir", options.certDir] : []),
    ];
    for (const [index, image] of images.entries()) {
      for (const tag of [image.tag, ...image.tags]) {
        const target = `${options.registry}/${image.repository}:${tag}`;
        await skopeo(
          ["copy", "--quiet", "--preserve-digests", ...destination, `oci:${dir}:${layoutName(image)}`, `docker://${target}`],
          target,
          options.registry,
        );
        const manifest = await skopeo(["inspect", "--raw", ...source, `docker://${target}`], target, options.registry);
        const digest = `sha256:${createHash("sha256").update(manifest).digest("hex")}`;
        if (digest !== image.digest)
          throw new UserError(
            `${target} has manifest ${digest} after the push, the bundle ${image.digest}`,
            "the registry rewrote the manifest: push into a registry that stores manifests as given (CNCF distribution, Harbor, Zot)",
          );
      }
      options.log(`${index + 1}/${images.length} ${image.repository}:${[image.tag, ...image.tags].join(",")} ${image.digest.slice(0, 19)} pushed`);
    }
    return images;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function skopeo(args: string[], what: string, registry: string): Promise<string> {
  const result = await execa("skopeo", args, { reject: false, all: true, stripFinalNewline: false, encoding: "buffer" });
  if (result.exitCode === 0) return Buffer.from(result.stdout as Uint8Array).toString("utf8");
  const last =
    Buffer.from((result.all ?? new Uint8Array()) as Uint8Array)
      .toString("utf8")
      .trim()
      .split("\n")
      .pop() ?? "";
  // skopeo logs `time=... level=fatal msg="..."`: the message is what matters.
  const said = /msg="(.*)"$/.exec(last)?.[1]?.replace(/\\"/g, '"') ?? last;
  throw new UserError(
    `cannot push ${what}: ${said}`,
    `check that ${registry} is a registry that answers (a registry over plain HTTP needs --push-insecure; one that asks for credentials, --push-authfile FILE written by 'skopeo login')`,
  );
}
