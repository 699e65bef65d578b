/**
 * OCI image layouts (image-spec "image-layout"): `oci-layout`, `index.json` and
 * `blobs/sha256/<hex>`. One layout holds every image of a build, so a blob shared by
 * several images (the Debian base layer) is there once; each manifest carries its
 * reference name (`org.opencontainers.image.ref.name`), which `skopeo copy
 * oci:<dir>:<name>` selects.
 */
import { createHash } from "node:crypto";
import { copyFile, link, mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ContentStore, normalizeDigest, tempSibling } from "../cache.js";
import { LAYER_MEDIA_TYPE, type LayerInfo } from "./layer.js";
import { chartConfig, chartManifest, OCI_MANIFEST_MEDIA_TYPE, type ChartMetadata } from "../../common/helm-chart.js";

export const MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json";
export const CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json";
export const INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json";
export const REF_NAME = "org.opencontainers.image.ref.name";
export const CREATED = "1970-01-01T00:00:00Z";

export interface ImageConfig {
  entrypoint?: string[];
  cmd?: string[];
  env?: Record<string, string>;
  user?: string;
  workingDir?: string;
  labels?: Record<string, string>;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

function digestOf(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** The image config and manifest JSON, byte-for-byte deterministic. */
export function imageDocuments(layers: LayerInfo[], config: ImageConfig): { config: Buffer; manifest: Buffer } {
  const env = { PATH: DEFAULT_PATH, ...(config.env ?? {}) };
  const configJson = {
    created: CREATED,
    architecture: "amd64",
    os: "linux",
    config: {
      ...(config.user ? { User: config.user } : {}),
      Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      ...(config.entrypoint ? { Entrypoint: config.entrypoint } : {}),
      ...(config.cmd ? { Cmd: config.cmd } : {}),
      ...(config.workingDir ? { WorkingDir: config.workingDir } : {}),
      ...(config.labels && Object.keys(config.labels).length ? { Labels: Object.fromEntries(Object.entries(config.labels).sort()) } : {}),
    },
    rootfs: { type: "layers", diff_ids: layers.map((l) => l.diffId) },
    history: layers.map((l) => ({ created: CREATED, created_by: `icn-bootstrap: ${l.what}` })),
  };
  const configBytes = Buffer.from(JSON.stringify(configJson));
  const manifest = {
    schemaVersion: 2,
    mediaType: MANIFEST_MEDIA_TYPE,
    config: { mediaType: CONFIG_MEDIA_TYPE, digest: digestOf(configBytes), size: configBytes.length },
    layers: layers.map((l) => ({ mediaType: LAYER_MEDIA_TYPE, digest: l.digest, size: l.size })),
  };
  return { config: configBytes, manifest: Buffer.from(JSON.stringify(manifest)) };
}

export class OciLayout {
  private readonly manifests: Descriptor[] = [];
  constructor(
    readonly dir: string,
    private readonly store = new ContentStore(),
  ) {}

  blobPath(digest: string): string {
    return join(this.dir, "blobs", "sha256", normalizeDigest(digest));
  }

  private async putBytes(bytes: Buffer): Promise<string> {
    const digest = digestOf(bytes);
    await mkdir(join(this.dir, "blobs", "sha256"), { recursive: true });
    await writeFile(this.blobPath(digest), bytes);
    return digest;
  }

  /** Adds a blob from the content store: a hard link when possible, else a copy. */
  async putStoredBlob(digest: string): Promise<void> {
    const target = this.blobPath(digest);
    try {
      await stat(target);
      return;
    } catch {
      // not there yet
    }
    await mkdir(join(this.dir, "blobs", "sha256"), { recursive: true });
    const source = this.store.pathOf(digest);
    const temp = tempSibling(target);
    try {
      await link(source, temp);
    } catch {
      await copyFile(source, temp);
    }
    await rename(temp, target);
  }

  /** Writes an image (its layers must be in the store) and returns its manifest digest. */
  async addImage(name: string, layers: LayerInfo[], config: ImageConfig): Promise<Descriptor> {
    for (const layer of layers) await this.putStoredBlob(layer.digest);
    const docs = imageDocuments(layers, config);
    await this.putBytes(docs.config);
    const digest = await this.putBytes(docs.manifest);
    const descriptor = { mediaType: MANIFEST_MEDIA_TYPE, digest, size: docs.manifest.length, annotations: { [REF_NAME]: name } };
    this.manifests.push(descriptor);
    return descriptor;
  }

  /** Writes a packaged Helm chart (.tgz) as Helm's OCI artifact and returns its manifest digest. */
  async addChart(name: string, meta: ChartMetadata, tgz: string): Promise<Descriptor> {
    const archive = await readFile(tgz);
    const config = chartConfig(meta);
    const configDigest = await this.putBytes(config);
    const chartDigest = await this.putBytes(archive);
    const manifest = chartManifest(meta, { digest: configDigest, size: config.length }, { digest: chartDigest, size: archive.length });
    const digest = await this.putBytes(manifest);
    const descriptor = { mediaType: OCI_MANIFEST_MEDIA_TYPE, digest, size: manifest.length, annotations: { [REF_NAME]: name } };
    this.manifests.push(descriptor);
    return descriptor;
  }

  /** Adds an image that is already in the layout (pulled by skopeo into it). */
  async adopt(name: string): Promise<Descriptor | undefined> {
    const index = await readIndex(this.dir).catch(() => undefined);
    const found = index?.manifests.find((m) => m.annotations?.[REF_NAME] === name);
    if (found) this.manifests.push(found);
    return found;
  }

  async writeIndex(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    await writeFile(join(this.dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
    const seen = new Map<string, Descriptor>();
    for (const m of this.manifests) seen.set(m.annotations![REF_NAME]!, m);
    const manifests = [...seen.values()].sort((a, b) => a.annotations![REF_NAME]!.localeCompare(b.annotations![REF_NAME]!));
    await writeFile(join(this.dir, "index.json"), JSON.stringify({ schemaVersion: 2, mediaType: INDEX_MEDIA_TYPE, manifests }, null, 1));
  }
}

export async function readIndex(dir: string): Promise<{ manifests: Descriptor[] }> {
  return JSON.parse(await readFile(join(dir, "index.json"), "utf8"));
}
