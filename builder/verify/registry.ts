/**
 * Checks a registry storage tree (docker-registry's filesystem layout) against the images
 * the build seeded: every tag names the pinned manifest, and every blob those manifests
 * reach (manifests, configs, layers, index entries) is there with the bytes its digest names.
 */
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { sha256File } from "../../common/hash.js";
import { blobPath } from "../stages/registry.js";

export interface ExpectedImage {
  ref: string;
  repository: string;
  tags: string[];
  digest: string;
}

async function fileDigest(path: string): Promise<string | undefined> {
  try {
    return `sha256:${await sha256File(path)}`;
  } catch {
    return undefined;
  }
}

const repoDir = (storage: string, repository: string) => join(storage, "docker/registry/v2/repositories", repository);

/** Problems found, each naming the image and the blob or tag; empty when the storage serves exactly the pinned images. */
export async function checkRegistry(storage: string, images: ExpectedImage[]): Promise<{ problems: string[]; blobs: number }> {
  const problems: string[] = [];
  const checked = new Map<string, string | undefined>(); // digest -> actual digest of its data
  const blobOk = async (image: ExpectedImage, digest: string, what: string): Promise<boolean> => {
    if (!checked.has(digest)) checked.set(digest, await fileDigest(join(storage, blobPath(digest))));
    const actual = checked.get(digest);
    if (actual === undefined) problems.push(`${image.ref}: ${what} ${digest} is missing`);
    else if (actual !== digest) problems.push(`${image.ref}: ${what} ${digest} has different content (sha256 of its data: ${actual})`);
    return actual === digest;
  };
  const walkManifest = async (image: ExpectedImage, digest: string, what: string): Promise<void> => {
    if (!(await blobOk(image, digest, what))) return;
    const manifest = JSON.parse(await readFile(join(storage, blobPath(digest)), "utf8")) as {
      config?: { digest: string };
      layers?: { digest: string }[];
      manifests?: { digest: string }[];
    };
    const layersDir = join(repoDir(storage, image.repository), "_layers/sha256");
    for (const [kind, d] of [
      ...(manifest.config ? [["config", manifest.config.digest] as const] : []),
      ...(manifest.layers ?? []).map((l) => ["layer", l.digest] as const),
    ]) {
      if (await blobOk(image, d, kind)) {
        const linked = await stat(join(layersDir, d.replace(/^sha256:/, ""), "link")).catch(() => undefined);
        if (!linked) problems.push(`${image.ref}: ${kind} ${d} is not linked into repository ${image.repository}`);
      }
    }
    for (const m of manifest.manifests ?? []) await walkManifest(image, m.digest, "index entry");
  };
  for (const image of images) {
    for (const tag of image.tags) {
      const link = (await readFile(join(repoDir(storage, image.repository), "_manifests/tags", tag, "current/link"), "utf8").catch(() => undefined))?.trim();
      if (link === undefined) problems.push(`${image.ref}: tag ${image.repository}:${tag} is missing`);
      else if (link !== image.digest) problems.push(`${image.ref}: tag ${image.repository}:${tag} names ${link}, expected ${image.digest}`);
    }
    await walkManifest(image, image.digest, "manifest");
  }
  return { problems, blobs: checked.size };
}
