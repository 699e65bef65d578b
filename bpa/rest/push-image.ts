/**
 * A verified container image archive into the appliance's registry: an OCI image layout
 * (a tar of oci-layout, index.json, blobs/) or a `docker save` archive (manifest.json;
 * Docker 25+ archives are OCI layouts too). Unpacked into work/<id>, every blob's digest
 * checked against its bytes, then pushed: blobs, child manifests by digest, and the
 * top manifest under the tag the client named. Returns the pullable reference by digest.
 *
 * The archive is untrusted: its JSON documents are read whole only up to MAX_JSON_BYTES (the
 * API runs in 256 MiB), it may unpack to no more than its own size, which the upload's
 * creation reserved on the disk for unpacking it (a compressed archive could hold far more),
 * and its manifests are checked and pushed once each, within caps (ManifestPlan).
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, readFile, rm, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { Unpack } from "tar";
import { RequestError, parseImageName } from "../../common/uploads.js";
import { RegistryClient } from "./registry.js";
import { sha256File } from "../../common/hash.js";

const OCI_INDEX = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json";

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

interface Manifest {
  mediaType?: string;
  config?: Descriptor;
  layers?: Descriptor[];
  manifests?: Descriptor[];
}

const DIGEST = /^sha256:[a-f0-9]{64}$/;

/** The largest JSON document of an archive read into memory (distribution refuses larger manifests too). */
const MAX_JSON_BYTES = 4 * 1024 * 1024;
/** An image archive has a few files per layer; more entries than this are no image. */
const MAX_ARCHIVE_ENTRIES = 100_000;
/**
 * An image is one manifest, or an index of one per platform (and attestations): a few
 * dozen. Indexes of indexes are rare; each level could multiply the pushes, so manifests
 * are pushed once by digest, and the levels, their number and their bytes are capped.
 */
const MAX_INDEX_DEPTH = 4;
const MAX_MANIFESTS = 256;
const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;

const mib = (n: number) => `${(n / 1024 ** 2).toFixed(1)} MiB`;

/** A JSON document of the archive, its size checked before it is read; `member` names it in errors. */
async function readJsonMember<T>(path: string, member: string): Promise<{ bytes: Buffer; value: T }> {
  const size = (await stat(path)).size;
  if (size > MAX_JSON_BYTES) {
    throw new RequestError(
      422,
      `the image archive's ${member} is ${mib(size)} (${size} bytes), over the ${mib(MAX_JSON_BYTES)} this API reads of a JSON document: not an image export (skopeo copy IMAGE oci-archive:FILE, or docker save)`,
    );
  }
  const bytes = await readFile(path);
  try {
    return { bytes, value: JSON.parse(bytes.toString("utf8")) as T };
  } catch (error) {
    throw new RequestError(422, `the image archive's ${member} is not JSON: ${(error as Error).message}`);
  }
}

/** A blob of the layout, checked: its bytes must have its digest and size. */
async function checkedBlob(layout: string, d: Descriptor): Promise<string> {
  if (!DIGEST.test(d.digest)) throw new RequestError(422, `the image archive names a blob "${d.digest}": only sha256 digests are supported`);
  const path = join(layout, "blobs", "sha256", d.digest.slice(7));
  const size = await stat(path).then(
    (s) => s.size,
    () => -1,
  );
  if (size < 0)
    throw new RequestError(
      422,
      `the image archive lacks blob ${d.digest} (blobs/sha256/${d.digest.slice(7)}): export the whole image (skopeo copy ... oci-archive:FILE, or docker save)`,
    );
  if (size !== d.size) throw new RequestError(422, `blob ${d.digest} of the image archive has ${size} bytes, its descriptor says ${d.size}`);
  const actual = await sha256File(path);
  if (`sha256:${actual}` !== d.digest) throw new RequestError(422, `blob ${d.digest} of the image archive has digest sha256:${actual}: the archive is damaged`);
  return path;
}

/** A manifest of the archive, checked, with the blobs it is the first to name (each blob is pushed once). */
interface PlannedManifest {
  digest: string;
  mediaType: string;
  path: string;
  blobs: { digest: string; size: number; path: string }[];
}

/**
 * The manifests under the top descriptor, each checked once (by digest: an index may name
 * a child many times, and children may share indexes), children before their parents,
 * within MAX_INDEX_DEPTH, MAX_MANIFESTS and MAX_MANIFEST_BYTES: what is pushed is decided
 * and checked before anything reaches the registry.
 */
class ManifestPlan {
  readonly manifests: PlannedManifest[] = [];
  private readonly seen = new Set<string>();
  private readonly blobs = new Set<string>();
  private bytes = 0;

  constructor(private readonly layout: string) {}

  async add(d: Descriptor, indexDepth = 0): Promise<void> {
    if (this.seen.has(d.digest)) return;
    this.seen.add(d.digest);
    if (this.seen.size > MAX_MANIFESTS) {
      throw new RequestError(
        422,
        `the image archive has more than ${MAX_MANIFESTS} distinct manifests: this API pushes at most ${MAX_MANIFESTS} per upload; upload the image's platforms separately`,
      );
    }
    const path = await checkedBlob(this.layout, d);
    this.bytes += d.size;
    if (this.bytes > MAX_MANIFEST_BYTES) {
      throw new RequestError(
        422,
        `the image archive's manifests together are over ${mib(MAX_MANIFEST_BYTES)}, the most this API reads per upload: not an image export (skopeo copy IMAGE oci-archive:FILE, or docker save)`,
      );
    }
    const { value: manifest } = await readJsonMember<Manifest>(path, `manifest ${d.digest}`);
    const mediaType = manifest.mediaType ?? d.mediaType;
    const blobs: PlannedManifest["blobs"] = [];
    if (mediaType === OCI_INDEX || mediaType === DOCKER_LIST) {
      if (indexDepth >= MAX_INDEX_DEPTH) {
        throw new RequestError(
          422,
          `the image archive nests image indexes more than ${MAX_INDEX_DEPTH} deep (index ${d.digest}): this API pushes indexes at most ${MAX_INDEX_DEPTH} deep`,
        );
      }
      for (const child of manifest.manifests ?? []) await this.add(child, indexDepth + 1);
    } else if (mediaType === OCI_MANIFEST || mediaType === DOCKER_MANIFEST) {
      if (!manifest.config) throw new RequestError(422, `the image archive's manifest ${d.digest} has no config`);
      for (const blob of [manifest.config, ...(manifest.layers ?? [])]) {
        if (this.blobs.has(blob.digest)) continue;
        blobs.push({ digest: blob.digest, size: blob.size, path: await checkedBlob(this.layout, blob) });
        this.blobs.add(blob.digest);
      }
    } else {
      throw new RequestError(422, `the image archive's manifest ${d.digest} has media type "${mediaType}": expected an OCI or Docker v2 manifest or index`);
    }
    this.manifests.push({ digest: d.digest, mediaType, path, blobs });
  }

  /** Pushes blobs and manifests, children by digest, the top one (the last) under `tag`. */
  async push(registry: RegistryClient, repository: string, tag: string): Promise<void> {
    for (const [i, m] of this.manifests.entries()) {
      for (const blob of m.blobs) await registry.pushBlob(repository, blob.digest, blob.size, blob.path);
      const last = i === this.manifests.length - 1;
      await registry.pushManifest(repository, last ? tag : m.digest, m.mediaType, await readFile(m.path));
    }
  }
}

/** A `docker save` archive (manifest.json, layers as tar files): made into a layout entry. */
async function fromDockerSave(dir: string): Promise<{ manifest: Buffer; files: Map<string, string> }> {
  const { value: list } = await readJsonMember<{ Config: string; Layers: string[] }[]>(join(dir, "manifest.json"), "manifest.json");
  const images = Array.isArray(list) ? list.length : 0;
  if (images !== 1) throw new RequestError(422, `the docker save archive holds ${images} images: upload one image per archive (docker save IMAGE)`);
  const files = new Map<string, string>();
  const describe = async (relative: string, mediaType: string): Promise<Descriptor> => {
    // Only files of the archive itself: a path out of it would push the server's own files.
    const path = resolve(dir, relative);
    if (typeof relative !== "string" || !path.startsWith(`${resolve(dir)}/`)) {
      throw new RequestError(422, `the docker save archive's manifest.json names "${String(relative)}", which is not a file of the archive`);
    }
    const info = await stat(path).catch(() => undefined);
    if (!info?.isFile())
      throw new RequestError(
        422,
        `the docker save archive lacks "${relative}" (named in its manifest.json): export the whole image with docker save IMAGE -o FILE`,
      );
    const digest = `sha256:${await sha256File(path)}`;
    files.set(digest, path);
    return { mediaType, digest, size: info.size };
  };
  const config = await describe(list[0]!.Config, "application/vnd.oci.image.config.v1+json");
  const layers: Descriptor[] = [];
  // Layers of `docker save` are uncompressed tars: their digest is the config's diff_id.
  for (const layer of list[0]!.Layers) layers.push(await describe(layer, "application/vnd.oci.image.layer.v1.tar"));
  return { manifest: Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers })), files };
}

/**
 * Unpacks regular files and directories only (no links that could point out of the
 * archive), counting each entry as it takes in a tar stream (a 512-byte header, the data in
 * 512-byte blocks): past `budget` bytes, or MAX_ARCHIVE_ENTRIES entries, it stops at once.
 * An uncompressed archive always fits its own size; a compressed one only if it does too.
 */
async function unpackWithin(archive: string, workDir: string, budget: number): Promise<void> {
  let unpacked = 0;
  let entries = 0;
  const unpack: Unpack = new Unpack({
    cwd: workDir,
    strict: true,
    preservePaths: false,
    filter: (_path, entry) => {
      if (!("type" in entry)) return false;
      unpacked += 512 + Math.ceil(entry.size / 512) * 512;
      entries += 1;
      if (unpacked > budget || entries > MAX_ARCHIVE_ENTRIES) {
        const what =
          entries > MAX_ARCHIVE_ENTRIES
            ? `more than ${MAX_ARCHIVE_ENTRIES} entries`
            : `more than its own ${budget} bytes (the space its upload reserved for unpacking it)`;
        unpack.abort(
          new RequestError(
            422,
            `the container image archive unpacks to ${what}: a compressed archive or no image export; upload the uncompressed tar that skopeo copy IMAGE oci-archive:FILE or docker save writes`,
          ),
        );
        return false;
      }
      return entry.type === "File" || entry.type === "OldFile" || entry.type === "Directory";
    },
  });
  const input = createReadStream(archive);
  await new Promise<void>((done, fail) => {
    const stop = (error: Error) => {
      input.destroy();
      fail(error);
    };
    unpack.on("error", stop);
    input.on("error", stop);
    unpack.on("close", () => done());
    input.pipe(unpack);
  });
}

export interface PushResult {
  /** The manifest's digest in the registry. */
  digest: string;
  /** host:port/repository@digest */
  url: string;
}

export async function pushImageArchive(archive: string, workDir: string, name: string, registry: RegistryClient, pullHost: string): Promise<PushResult> {
  const { repository, tag } = parseImageName(name);
  await rm(workDir, { recursive: true, force: true });
  await mkdir(workDir, { recursive: true });
  try {
    try {
      await unpackWithin(archive, workDir, (await stat(archive)).size);
    } catch (error) {
      if (error instanceof RequestError) throw error;
      throw new RequestError(
        422,
        `the container image upload is not a tar archive (${(error as Error).message}): upload an OCI layout as a tar (skopeo copy IMAGE oci-archive:FILE) or a docker save archive`,
      );
    }
    const has = (f: string) =>
      stat(join(workDir, f)).then(
        () => true,
        () => false,
      );
    let top: Descriptor;
    if (await has("index.json")) {
      const { value: index } = await readJsonMember<Manifest>(join(workDir, "index.json"), "index.json");
      const manifests = index.manifests ?? [];
      if (manifests.length !== 1) {
        throw new RequestError(
          422,
          `the OCI layout's index.json lists ${manifests.length} manifests: upload a layout with exactly one image (or one image index)`,
        );
      }
      top = manifests[0]!;
      const plan = new ManifestPlan(workDir);
      await plan.add(top);
      await plan.push(registry, repository, tag);
    } else if (await has("manifest.json")) {
      const { manifest, files } = await fromDockerSave(workDir);
      const parsed = JSON.parse(manifest.toString()) as Manifest;
      for (const blob of [parsed.config!, ...parsed.layers!]) await registry.pushBlob(repository, blob.digest, blob.size, files.get(blob.digest)!);
      await registry.pushManifest(repository, tag, OCI_MANIFEST, manifest);
      top = { mediaType: OCI_MANIFEST, digest: `sha256:${createHash("sha256").update(manifest).digest("hex")}`, size: manifest.length };
    } else {
      throw new RequestError(
        422,
        "the container image archive has neither index.json (OCI layout) nor manifest.json (docker save): upload skopeo copy IMAGE oci-archive:FILE or docker save IMAGE -o FILE",
      );
    }
    return { digest: top.digest, url: `${pullHost}/${repository}@${top.digest}` };
  } finally {
    // Retried: after a stopped unpack, writes of entries read before the stop may still be finishing.
    await rm(workDir, { recursive: true, force: true, maxRetries: 10 });
  }
}
