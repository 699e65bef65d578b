/**
 * The API's directory on the appliance's disk (a hostPath PersistentVolume,
 * /var/lib/icn-bootstrap/bpa-api): it survives pod restarts and reboots.
 *
 *   incoming/            tus uploads in progress (<id> and <id>.json), never served
 *   work/<id>/           a container image archive unpacked for its push
 *   published/uploads/   files, served by the file server at /uploads/
 *   published/os-images/ OS images and their .sha256sum files, served at /os-images/
 *   appliance-images/    what an upgrade of the appliance reads (images, reports, their
 *                        signatures), with .sha256 files; never served
 *   records/<id>.json    the outcome of every finished upload (published, rejected, failed)
 *   appliance-upgrade/   an upgrade request for the host (request.json) and the host's
 *                        mirror of the upgrade's state (state.json)
 *
 * All on one file system, so that publishing is a rename: a file appears under its final
 * name complete and verified, or not at all.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, statfs, writeFile } from "node:fs/promises";
import { syncDir, syncFile } from "./durable.js";
import { dirname, join } from "node:path";
import type { UploadRecord } from "../../common/uploads.js";

export class Store {
  readonly incoming: string;
  readonly work: string;
  readonly published: string;
  readonly records: string;
  readonly applianceImages: string;
  readonly applianceUpgrade: string;

  constructor(readonly root: string) {
    this.incoming = join(root, "incoming");
    this.work = join(root, "work");
    this.published = join(root, "published");
    this.records = join(root, "records");
    this.applianceImages = join(root, "appliance-images");
    this.applianceUpgrade = join(root, "appliance-upgrade");
  }

  async init(): Promise<void> {
    for (const dir of [
      this.incoming,
      this.work,
      join(this.published, "uploads"),
      join(this.published, "os-images"),
      this.records,
      this.applianceImages,
      this.applianceUpgrade,
    ]) {
      await mkdir(dir, { recursive: true, mode: 0o755 }).catch((error: NodeJS.ErrnoException) => {
        throw new Error(
          `cannot use the upload store ${this.root} (${error.code ?? error.message}) as uid ${process.getuid?.()}: ` +
            `on the appliance systemd-tmpfiles makes /var/lib/icn-bootstrap/bpa-api owned by 65532 (/usr/lib/tmpfiles.d/icn-bootstrap-bpa-api.conf); elsewhere pass a writable --state-dir`,
        );
      });
    }
    // Unpacked archives of pushes that a restart interrupted: their uploads are redone or failed.
    for (const entry of await readdir(this.work)) await rm(join(this.work, entry), { recursive: true, force: true });
  }

  uploadPath(id: string): string {
    return join(this.incoming, id);
  }

  /** Bytes the file system can still give to this directory's writer. */
  async freeBytes(): Promise<number> {
    const s = await statfs(this.root);
    return s.bavail * s.bsize;
  }

  async writeRecord(record: UploadRecord): Promise<void> {
    await writeAtomically(join(this.records, `${record.id}.json`), `${JSON.stringify(record, null, 2)}\n`);
  }

  async readRecords(): Promise<UploadRecord[]> {
    const out: UploadRecord[] = [];
    for (const entry of await readdir(this.records)) {
      if (!entry.endsWith(".json")) continue;
      try {
        out.push(JSON.parse(await readFile(join(this.records, entry), "utf8")) as UploadRecord);
      } catch {
        // a record being replaced: the next listing has it
      }
    }
    return out;
  }
}

/** Writes a file under a temporary name beside it, flushed, then renames it into place (durably). */
export async function writeAtomically(path: string, data: string | Buffer, mode = 0o644): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  const tmp = join(dirname(path), `.tmp-${randomBytes(6).toString("hex")}`);
  try {
    await writeFile(tmp, data, { mode });
    await syncFile(tmp);
    await rename(tmp, path);
    await syncDir(dirname(path));
  } catch (error) {
    await rm(tmp, { force: true });
    throw error;
  }
}

/** Adds the file server's URLs to a record: `filesBase` is e.g. http://192.168.1.10:8080. */
export function withUrls(record: UploadRecord, filesBase: string): UploadRecord {
  const base = filesBase.replace(/\/+$/, "");
  return {
    ...record,
    ...(record.path ? { url: `${base}${record.path}` } : {}),
    ...(record.checksumPath ? { checksumUrl: `${base}${record.checksumPath}` } : {}),
  };
}
