/**
 * A root filesystem tar as a Linux initramfs: the kernel's "newc" cpio format
 * (Documentation/driver-api/early-userspace/buffer-format.rst), written in one pass
 * over the archive after a first pass that finds its hard links. Deterministic: inode
 * numbers follow the archive's order, mtimes are clamped to the build's epoch and
 * owners are the archive's numeric ids.
 *
 * Hard links follow the kernel's reading: the first entry of a linked file carries
 * nlink >= 2 and the data, later ones the same inode and no data.
 */
import type { Writable } from "node:stream";
import * as tar from "tar";

const TYPE_BITS: Record<string, number> = {
  File: 0o100000,
  OldFile: 0o100000,
  ContiguousFile: 0o100000,
  Directory: 0o040000,
  SymbolicLink: 0o120000,
  CharacterDevice: 0o020000,
  BlockDevice: 0o060000,
  FIFO: 0o010000,
};

export interface CpioOptions {
  /** Newest mtime any entry keeps (SOURCE_DATE_EPOCH). */
  epoch: number;
  /** Leaves an entry (path without "./", no trailing slash) out of the archive. */
  exclude?: (path: string) => boolean;
  /** Return true for a regular file whose data the caller wants (in `taken`), whether or not it is left out. */
  take?: (path: string) => boolean;
}

export interface CpioResult {
  entries: number;
  /** The data of the files `take` asked for, by path. */
  taken: Map<string, Buffer>;
}

/** "./usr/bin/" -> "usr/bin"; "./" -> "". */
export function archivePath(path: string): string {
  return path
    .replace(/^\.?\//, "")
    .replace(/^\.$/, "")
    .replace(/\/+$/, "");
}

const hex = (n: number) => Math.max(0, Math.floor(n)).toString(16).padStart(8, "0").slice(-8);
const pad4 = (n: number) => (4 - (n % 4)) % 4;

interface Header {
  name: string;
  ino: number;
  mode: number;
  uid: number;
  gid: number;
  nlink: number;
  mtime: number;
  size: number;
  rdevMajor?: number;
  rdevMinor?: number;
}

export function cpioHeader(h: Header): Buffer {
  const name = Buffer.from(`${h.name}\0`, "utf8");
  const fields = [h.ino, h.mode, h.uid, h.gid, h.nlink, h.mtime, h.size, 0, 0, h.rdevMajor ?? 0, h.rdevMinor ?? 0, name.length, 0];
  const head = Buffer.from(`070701${fields.map(hex).join("")}`, "ascii");
  return Buffer.concat([head, name, Buffer.alloc(pad4(head.length + name.length))]);
}

/** The paths that other entries hard-link to, with how many names each has. */
async function hardLinkCounts(archive: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  await tar.t({
    file: archive,
    onReadEntry: (entry) => {
      if (entry.type === "Link" && entry.linkpath) {
        const target = archivePath(entry.linkpath);
        counts.set(target, (counts.get(target) ?? 1) + 1);
      }
      entry.resume();
    },
  });
  return counts;
}

/** Writes the archive's entries as a newc cpio stream to `out` (not ended: the caller ends it). */
export async function tarToCpio(archive: string, out: Writable, opts: CpioOptions): Promise<CpioResult> {
  const links = await hardLinkCounts(archive);
  const inodes = new Map<string, number>();
  const taken = new Map<string, Buffer>();
  let ino = 0;
  let entries = 0;
  const write = (chunk: Buffer) =>
    new Promise<void>((resolve, reject) => {
      if (out.write(chunk)) resolve();
      else {
        // Each wait takes its listeners off again: thousands of waits left their error
        // listeners behind (Node's MaxListenersExceededWarning).
        const drained = () => (out.off("error", failed), resolve());
        const failed = (error: Error) => (out.off("drain", drained), reject(error));
        out.once("drain", drained);
        out.once("error", failed);
      }
    });
  // tar's parser does not wait for async handlers: entries are queued and written in order.
  let chain = Promise.resolve();
  await tar.t({
    file: archive,
    onReadEntry: (entry) => {
      const path = archivePath(entry.path);
      const excluded = path === "" || (opts.exclude?.(path) ?? false);
      const regular = entry.type === "File" || entry.type === "OldFile" || entry.type === "ContiguousFile";
      const wanted = regular && (opts.take?.(path) ?? false);
      const chunks: Buffer[] = [];
      if (regular && (!excluded || wanted)) entry.on("data", (chunk: Buffer) => chunks.push(chunk));
      else entry.resume();
      const done = new Promise<void>((resolve) => entry.on("end", resolve));
      chain = chain.then(async () => {
        await done;
        if (wanted) taken.set(path, Buffer.concat(chunks));
        if (excluded) return;
        const mtime = Math.min(Math.floor((entry.mtime?.getTime() ?? 0) / 1000), opts.epoch);
        const base = { name: path, uid: entry.uid ?? 0, gid: entry.gid ?? 0, mtime };
        const perm = (entry.mode ?? 0) & 0o7777;
        if (entry.type === "Link") {
          const target = archivePath(entry.linkpath ?? "");
          const targetIno = inodes.get(target);
          if (targetIno === undefined) throw new Error(`${archive}: ${path} links to ${target}, which is not in the archive before it (or was left out)`);
          await write(cpioHeader({ ...base, ino: targetIno, mode: TYPE_BITS.File! | perm, nlink: links.get(target) ?? 2, size: 0 }));
          entries++;
          return;
        }
        const type = TYPE_BITS[entry.type];
        if (type === undefined) throw new Error(`${archive}: ${path}: entry type ${entry.type} has no place in an initramfs`);
        ino++;
        inodes.set(path, ino);
        const data = entry.type === "SymbolicLink" ? Buffer.from(entry.linkpath ?? "", "utf8") : Buffer.concat(chunks);
        const device =
          entry.type === "CharacterDevice" || entry.type === "BlockDevice" ? { rdevMajor: entry.header.devmaj ?? 0, rdevMinor: entry.header.devmin ?? 0 } : {};
        const size = type === TYPE_BITS.Directory || device.rdevMajor !== undefined || entry.type === "FIFO" ? 0 : data.length;
        await write(cpioHeader({ ...base, ino, mode: type | perm, nlink: type === TYPE_BITS.Directory ? 2 : (links.get(path) ?? 1), size, ...device }));
        if (size > 0) await write(Buffer.concat([data, Buffer.alloc(pad4(size))]));
        entries++;
      });
      chain.catch(() => undefined);
    },
  });
  await chain;
  await write(cpioHeader({ name: "TRAILER!!!", ino: 0, mode: 0, uid: 0, gid: 0, nlink: 1, mtime: 0, size: 0 }));
  return { entries, taken };
}
