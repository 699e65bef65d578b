/**
 * Publishing a verified file on the appliance's file server: a rename from the upload
 * store into published/ (one file system), so the final name only ever holds complete,
 * verified bytes. Files go to uploads/<name> with <name>.sha256; OS images to
 * os-images/<name> with <name>.sha256sum, their checksum (what a BareMetalHost's
 * spec.image.checksum takes) and their format read from the first bytes. Appliance images
 * go to the store's appliance-images/<name> with <name>.sha256, outside what is served.
 */
import { randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, open, rename, rm, writeFile } from "node:fs/promises";
import { syncDir, syncFile } from "./durable.js";
import { dirname, join } from "node:path";
import { RequestError, type UploadRecord } from "../../common/uploads.js";
import type { Store } from "./store.js";

/** qcow2 files start with "QFI\xfb"; anything else is served as raw. */
export async function imageFormat(path: string): Promise<"qcow2" | "raw"> {
  const handle = await open(path, "r");
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(4), 0, 4, 0);
    return bytesRead === 4 && buffer.equals(Buffer.from([0x51, 0x46, 0x49, 0xfb])) ? "qcow2" : "raw";
  } finally {
    await handle.close();
  }
}

/** A name that clashes with the published tree (a file where a directory is, or the reverse) is the client's to change. */
function clash(error: unknown, name: string): never {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === "EISDIR" || code === "ENOTDIR" || code === "ENOTEMPTY" || code === "EEXIST") {
    throw new RequestError(
      409,
      `name "${name}" clashes with what is published (a directory where the file or its checksum file would go, or a file where a directory is): nothing was published; choose another name`,
    );
  }
  throw error;
}

/** Moves the verified upload at `source` to its published name; returns what the record gains (paths on the file server). */
export async function publishFile(store: Store, record: UploadRecord, source: string): Promise<Partial<UploadRecord>> {
  return place(store, record, source).catch((error: unknown) => clash(error, record.name));
}

/**
 * The file and its checksum file, each renamed into place: the checksum is written under a
 * dot-name (which the file server does not serve) first, the file renamed, then the
 * checksum. A failed rename leaves the published pair as it was. Both are flushed to disk
 * before they are renamed, and the directory after, so "published" survives a power cut.
 */
async function placePair(source: string, target: string, checksumTarget: string, checksumLine: string): Promise<void> {
  await mkdir(dirname(target), { recursive: true, mode: 0o755 });
  // Both names must be free for files before either is renamed: else the file would be published without its checksum.
  for (const path of [target, checksumTarget]) {
    const existing = await lstat(path).catch(() => undefined);
    if (existing && !existing.isFile()) throw Object.assign(new Error(`${path} is a directory`), { code: "EISDIR" });
  }
  const pending = join(dirname(target), `.pending-${randomBytes(6).toString("hex")}`);
  await writeFile(pending, checksumLine, { mode: 0o644 });
  try {
    await chmod(source, 0o644);
    await syncFile(source);
    await syncFile(pending);
    await rename(source, target);
    await rename(pending, checksumTarget);
    await syncDir(dirname(target));
  } finally {
    await rm(pending, { force: true });
  }
}

async function place(store: Store, record: UploadRecord, source: string): Promise<Partial<UploadRecord>> {
  if (record.kind === "appliance-image") {
    const target = join(store.applianceImages, record.name);
    await placePair(source, target, `${target}.sha256`, `${record.sha256}  ${record.name.split("/").pop()}\n`);
    return { digest: `sha256:${record.sha256}` };
  }
  if (record.kind === "file") {
    const target = join(store.published, "uploads", record.name);
    await placePair(source, target, `${target}.sha256`, `${record.sha256}  ${record.name.split("/").pop()}\n`);
    return { path: `/uploads/${record.name}`, digest: `sha256:${record.sha256}` };
  }
  const target = join(store.published, "os-images", record.name);
  const format = await imageFormat(source);
  await placePair(source, target, `${target}.sha256sum`, `${record.sha256}  ${record.name}\n`);
  return {
    path: `/os-images/${record.name}`,
    checksum: record.sha256,
    checksumType: "sha256",
    checksumPath: `/os-images/${record.name}.sha256sum`,
    digest: `sha256:${record.sha256}`,
    format,
  };
}
