/**
 * Layers: a deterministic tar stream, stored uncompressed (OCI `tar` media type: the blob's
 * digest is its diff_id), written into the content store under its digest. Nothing is held
 * in memory whole.
 *
 * Uncompressed because the appliance unpacks its own images at first boot, and a pull of a
 * gzip layer there costs an inflate on top of the hashing: under software emulation that
 * doubled the CPU of each pull (Ironic's pod waited minutes in ContainerCreating). The
 * USB image and the registry hold more bytes for it; the qcow2 is compressed as a whole.
 *
 * A layer index (`<cache>/oci-layers/<key>.json`) maps the hash of a layer's inputs to
 * its digest, so an unchanged layer is not rebuilt.
 */
import { createHash, type Hash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { lstat, mkdir, readdir, readFile, readlink, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { PassThrough, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { cacheRoot, ContentStore, sha256Text, tempSibling } from "../cache.js";
import { compareTarPaths, normalizeEntries, writeTar, type TarEntry } from "./tar.js";

export const LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar";
/** Part of every layer index key: a layer recorded in another format is never reused. */
const LAYER_FORMAT = "tar-uncompressed";

export interface LayerInfo {
  /** sha256:<hex> of the blob. */
  digest: string;
  /** sha256:<hex> of the tar: the digest, layers being stored uncompressed. */
  diffId: string;
  size: number;
  /** What the layer is, for the report (e.g. "debian base", "kube-apiserver"). */
  what: string;
}

function hashing(hash: Hash): Transform {
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      hash.update(chunk);
      callback(null, chunk);
    },
  });
}

export function layerIndexDir(): string {
  return join(cacheRoot(), "oci-layers");
}

/**
 * Returns the layer for `key` from the index when its blob is still in the store
 * (re-hashed), else writes it from `entries()` and records it.
 */
export async function cachedLayer(
  key: string,
  what: string,
  entries: () => Promise<TarEntry[]>,
  store = new ContentStore(),
): Promise<LayerInfo & { reused: boolean }> {
  const indexPath = join(layerIndexDir(), `${sha256Text(`${LAYER_FORMAT}\n${key}`)}.json`);
  try {
    const record = JSON.parse(await readFile(indexPath, "utf8")) as LayerInfo;
    if (await store.get(record.digest, `layer ${what}`)) return { ...record, what, reused: true };
  } catch {
    // not indexed, or the blob is gone or corrupted (removed by store.get): rebuild
  }
  const layer = await writeLayer(await entries(), what, store);
  await mkdir(dirname(indexPath), { recursive: true });
  const temp = tempSibling(indexPath);
  await writeFile(temp, JSON.stringify(layer, null, 2));
  await rename(temp, indexPath);
  return { ...layer, reused: false };
}

/** Writes one layer into the store. */
export async function writeLayer(entries: TarEntry[], what: string, store = new ContentStore()): Promise<LayerInfo> {
  const tmp = join(cacheRoot(), "tmp");
  await mkdir(tmp, { recursive: true });
  const blob = tempSibling(join(tmp, "layer.tar"));
  const hash = createHash("sha256");
  const tarStream = new PassThrough({ highWaterMark: 1024 * 1024 });
  try {
    const draining = pipeline(tarStream, hashing(hash), createWriteStream(blob));
    await Promise.all([writeTar(entries, tarStream).then(() => tarStream.end()), draining]);
    const digest = hash.digest("hex");
    const size = (await stat(blob)).size;
    await store.put(blob, { expected: digest, move: true, what: `layer ${what}` });
    return { digest: `sha256:${digest}`, diffId: `sha256:${digest}`, size, what };
  } finally {
    await rm(blob, { force: true });
  }
}

/** One file put into a layer from the build host (owned by root). */
export interface LayerFile {
  to: string;
  from: string;
  mode?: number;
}

/**
 * Entries for files copied from the build host: each file (or directory tree) at its
 * target path, parent directories 0755, everything owned by 0:0. Executable bits come
 * from the source unless `mode` is given.
 */
export async function fileEntries(files: LayerFile[]): Promise<TarEntry[]> {
  const entries = new Map<string, TarEntry>();
  const addParents = (path: string) => {
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join("/");
      if (!entries.has(dir)) entries.set(dir, { path: dir, type: "dir", mode: 0o755, uid: 0, gid: 0, size: 0 });
    }
  };
  const add = async (source: string, target: string, mode?: number) => {
    const info = await lstat(source);
    addParents(target);
    if (info.isDirectory()) {
      entries.set(target, { path: target, type: "dir", mode: 0o755, uid: 0, gid: 0, size: 0 });
      for (const name of (await readdir(source)).sort(compareTarPaths)) await add(join(source, name), `${target}/${name}`);
    } else if (info.isSymbolicLink()) {
      entries.set(target, { path: target, type: "symlink", mode: 0o777, uid: 0, gid: 0, size: 0, linkname: await readlink(source) });
    } else if (info.isFile()) {
      const bits = mode ?? (info.mode & 0o111 ? 0o755 : 0o644);
      entries.set(target, { path: target, type: "file", mode: bits, uid: 0, gid: 0, size: info.size, data: { file: source } });
    }
  };
  for (const file of files) await add(file.from, file.to.replace(/^\/+/, "").replace(/\/+$/, ""), file.mode);
  return normalizeEntries([...entries.values()]);
}
