/**
 * A verified container image archive into the appliance's registry: an OCI image layout
 * (a tar of oci-layout, index.json, blobs/) or a `docker save` archive (manifest.json;
 * Docker 25+ archives are OCI layouts too). Unpacked into work/<id>, every blob's digest
 * checked against its bytes, then pushed: blobs, child manifests by digest, and the
 * top manifest under the tag the client named. Returns the pullable reference by digest.
 */
import { createHash } from "node:crypto";
import { mkdir, readFile, rm, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { x as untar } from "tar";
import { RequestError, parseImageName } from "./kinds.js";
import { RegistryClient } from "./registry.js";
import { sha256File } from "./store.js";

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

/** A blob of the layout, checked: its bytes must have its digest and size. */
async function checkedBlob(layout: string, d: Descriptor): Promise<string> {
  if (!DIGEST.test(d.digest)) throw new RequestError(422, `the image archive names a blob "${d.digest}": only sha256 digests are supported`);
  const path = join(layout, "blobs", "sha256", d.digest.slice(7));
  const size = await stat(path).then((s) => s.size, () => -1);
  if (size < 0) throw new RequestError(422, `the image archive lacks blob ${d.digest} (blobs/sha256/${d.digest.slice(7)}): export the whole image (skopeo copy ... oci-archive:FILE, or docker save)`);
  if (size !== d.size) throw new RequestError(422, `blob ${d.digest} of the image archive has ${size} bytes, its descriptor says ${d.size}`);
  const actual = await sha256File(path);
  if (`sha256:${actual}` !== d.digest) throw new RequestError(422, `blob ${d.digest} of the image archive has digest sha256:${actual}: the archive is damaged`);
  return path;
}

class Pusher {
  constructor(
    private readonly registry: RegistryClient,
    private readonly repository: string,
    private readonly layout: string,
  ) {}

  /** Pushes one manifest (recursively for indexes) by its descriptor; returns its bytes. */
  async push(d: Descriptor, reference: string): Promise<void> {
    const bytes = await readFile(await checkedBlob(this.layout, d));
    const manifest = JSON.parse(bytes.toString("utf8")) as Manifest;
    const mediaType = manifest.mediaType ?? d.mediaType;
    if (mediaType === OCI_INDEX || mediaType === DOCKER_LIST) {
      for (const child of manifest.manifests ?? []) await this.push(child, child.digest);
    } else if (mediaType === OCI_MANIFEST || mediaType === DOCKER_MANIFEST) {
      for (const blob of [manifest.config!, ...(manifest.layers ?? [])]) {
        await this.registry.pushBlob(this.repository, blob.digest, blob.size, await checkedBlob(this.layout, blob));
      }
    } else {
      throw new RequestError(422, `the image archive's manifest ${d.digest} has media type "${mediaType}": expected an OCI or Docker v2 manifest or index`);
    }
    await this.registry.pushManifest(this.repository, reference, mediaType, bytes);
  }
}

/** A `docker save` archive (manifest.json, layers as tar files): made into a layout entry. */
async function fromDockerSave(dir: string): Promise<{ manifest: Buffer; files: Map<string, string> }> {
  const list = JSON.parse(await readFile(join(dir, "manifest.json"), "utf8")) as { Config: string; Layers: string[] }[];
  if (list.length !== 1) throw new RequestError(422, `the docker save archive holds ${list.length} images: upload one image per archive (docker save IMAGE)`);
  const files = new Map<string, string>();
  const describe = async (relative: string, mediaType: string): Promise<Descriptor> => {
    // Only files of the archive itself: a path out of it would push the server's own files.
    const path = resolve(dir, relative);
    if (typeof relative !== "string" || !path.startsWith(`${resolve(dir)}/`)) {
      throw new RequestError(422, `the docker save archive's manifest.json names "${String(relative)}", which is not a file of the archive`);
    }
    const info = await stat(path).catch(() => undefined);
    if (!info?.isFile()) throw new RequestError(422, `the docker save archive lacks "${relative}" (named in its manifest.json): export the whole image with docker save IMAGE -o FILE`);
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
      // Regular files and directories only: no links that could point out of the archive.
      await untar({ file: archive, cwd: workDir, strict: true, preservePaths: false, filter: (_path, entry) => "type" in entry && (entry.type === "File" || entry.type === "OldFile" || entry.type === "Directory") });
    } catch (error) {
      throw new RequestError(422, `the container image upload is not a tar archive (${(error as Error).message}): upload an OCI layout as a tar (skopeo copy IMAGE oci-archive:FILE) or a docker save archive`);
    }
    const has = (f: string) => stat(join(workDir, f)).then(() => true, () => false);
    let top: Descriptor;
    if (await has("index.json")) {
      const index = JSON.parse(await readFile(join(workDir, "index.json"), "utf8")) as Manifest;
      const manifests = index.manifests ?? [];
      if (manifests.length !== 1) {
        throw new RequestError(422, `the OCI layout's index.json lists ${manifests.length} manifests: upload a layout with exactly one image (or one image index)`);
      }
      top = manifests[0]!;
      await new Pusher(registry, repository, workDir).push(top, tag);
    } else if (await has("manifest.json")) {
      const { manifest, files } = await fromDockerSave(workDir);
      const parsed = JSON.parse(manifest.toString()) as Manifest;
      for (const blob of [parsed.config!, ...parsed.layers!]) await registry.pushBlob(repository, blob.digest, blob.size, files.get(blob.digest)!);
      await registry.pushManifest(repository, tag, OCI_MANIFEST, manifest);
      top = { mediaType: OCI_MANIFEST, digest: `sha256:${createHash("sha256").update(manifest).digest("hex")}`, size: manifest.length };
    } else {
      throw new RequestError(422, "the container image archive has neither index.json (OCI layout) nor manifest.json (docker save): upload skopeo copy IMAGE oci-archive:FILE or docker save IMAGE -o FILE");
    }
    return { digest: top.digest, url: `${pullHost}/${repository}@${top.digest}` };
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
}
