/**
 * Publishing a verified file on the appliance's file server: a rename from the upload
 * store into published/ (one file system), so the final name only ever holds complete,
 * verified bytes. Files go to uploads/<name> with <name>.sha256; OS images to
 * os-images/<name> with <name>.sha256sum (what a BareMetalHost's spec.image.checksum
 * points at) and their format read from the first bytes.
 */
import { chmod, mkdir, open, rename } from "node:fs/promises";
import { dirname, join } from "node:path";
import { writeAtomically, type Store, type UploadRecord } from "./store.js";

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

/** Moves the verified upload at `source` to its published name; returns what the record gains (paths on the file server). */
export async function publishFile(store: Store, record: UploadRecord, source: string): Promise<Partial<UploadRecord>> {
  if (record.kind === "file") {
    const target = join(store.published, "uploads", record.name);
    await mkdir(dirname(target), { recursive: true, mode: 0o755 });
    // The checksum file first: a reader that sees the new file can check it against it.
    await writeAtomically(`${target}.sha256`, `${record.sha256}  ${record.name.split("/").pop()}\n`);
    await chmod(source, 0o644);
    await rename(source, target);
    return { path: `/uploads/${record.name}`, digest: `sha256:${record.sha256}` };
  }
  const target = join(store.published, "os-images", record.name);
  const format = await imageFormat(source);
  await writeAtomically(`${target}.sha256sum`, `${record.sha256}  ${record.name}\n`);
  await chmod(source, 0o644);
  await rename(source, target);
  return {
    path: `/os-images/${record.name}`,
    checksumPath: `/os-images/${record.name}.sha256sum`,
    digest: `sha256:${record.sha256}`,
    format,
  };
}
