/**
 * A small, deterministic tar writer and a header-only tar reader (ustar + pax), and
 * reading one member of an archive.
 *
 * Layers of the images the project builds must be bit-for-bit reproducible, because
 * their digests are pinned in registry-seed/. Host tar versions differ in header
 * details, so the bytes are written here: entries sorted by path, one fixed mtime,
 * numeric owners only (no user/group names), pax records only when a field does not
 * fit ustar (long paths, large sizes/ids) or carries extended attributes.
 */
import { createReadStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import type { Writable } from "node:stream";

export const BLOCK = 512;
/** The mtime of every entry of a built layer (1970-01-01). */
export const FIXED_MTIME = 0;

export type EntryType = "file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo";

export interface TarEntry {
  /** Relative path, no leading "./" or "/", no trailing "/". */
  path: string;
  type: EntryType;
  mode: number;
  uid: number;
  gid: number;
  /** Data size (files only). */
  size: number;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
  /** Extended attributes as pax records (SCHILY.xattr.*), written as they are. */
  xattrs?: Record<string, string>;
  /** Where the data comes from (files only). */
  data?: { file: string; offset?: number };
}

const TYPEFLAG: Record<EntryType, string> = { file: "0", hardlink: "1", symlink: "2", char: "3", block: "4", dir: "5", fifo: "6" };

function octal(value: number, width: number): string {
  // width includes the terminating NUL
  return value.toString(8).padStart(width - 1, "0") + "\0";
}

function fitsOctal(value: number, width: number): boolean {
  return value >= 0 && value < 8 ** (width - 1);
}

/** Splits a path into ustar prefix/name, or undefined when it needs a pax record. */
function splitUstar(path: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(path) <= 100) return { prefix: "", name: path };
  for (let i = path.indexOf("/"); i >= 0; i = path.indexOf("/", i + 1)) {
    const prefix = path.slice(0, i);
    const name = path.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(name) <= 100 && name.length > 0) return { prefix, name };
  }
  return undefined;
}

function header(fields: {
  name: string;
  prefix: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  typeflag: string;
  linkname: string;
  devmajor: number;
  devminor: number;
}): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(fields.name, 0, 100, "utf8");
  block.write(octal(fields.mode & 0o7777, 8), 100, 8, "ascii");
  block.write(octal(fields.uid, 8), 108, 8, "ascii");
  block.write(octal(fields.gid, 8), 116, 8, "ascii");
  block.write(octal(fields.size, 12), 124, 12, "ascii");
  block.write(octal(FIXED_MTIME, 12), 136, 12, "ascii");
  block.write("        ", 148, 8, "ascii");
  block.write(fields.typeflag, 156, 1, "ascii");
  block.write(fields.linkname, 157, 100, "utf8");
  block.write("ustar\0", 257, 6, "ascii");
  block.write("00", 263, 2, "ascii");
  block.write(octal(fields.devmajor, 8), 329, 8, "ascii");
  block.write(octal(fields.devminor, 8), 337, 8, "ascii");
  block.write(fields.prefix, 345, 155, "utf8");
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(octal(sum, 7) + " ", 148, 8, "ascii");
  return block;
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = Buffer.byteLength(body) + 1;
  while (String(length).length + Buffer.byteLength(body) !== length) length = String(length).length + Buffer.byteLength(body);
  return `${length}${body}`;
}

function pad(size: number): Buffer {
  const rest = size % BLOCK;
  return Buffer.alloc(rest === 0 ? 0 : BLOCK - rest);
}

/** The header block(s) of one entry: an optional pax 'x' header, then the ustar header. */
export function entryHeader(entry: TarEntry): Buffer {
  const path = entry.type === "dir" ? `${entry.path}/` : entry.path;
  const records: string[] = [];
  let split = splitUstar(path);
  if (!split) {
    records.push(paxRecord("path", path));
    split = { prefix: "", name: path.slice(0, 99) };
  }
  let linkname = entry.linkname ?? "";
  if (Buffer.byteLength(linkname) > 100) {
    records.push(paxRecord("linkpath", linkname));
    linkname = linkname.slice(0, 99);
  }
  const size = entry.type === "file" ? entry.size : 0;
  if (!fitsOctal(size, 12)) records.push(paxRecord("size", String(size)));
  if (!fitsOctal(entry.uid, 8)) records.push(paxRecord("uid", String(entry.uid)));
  if (!fitsOctal(entry.gid, 8)) records.push(paxRecord("gid", String(entry.gid)));
  for (const key of Object.keys(entry.xattrs ?? {}).sort()) records.push(paxRecord(key, entry.xattrs![key]!));
  const main = header({
    name: split.name,
    prefix: split.prefix,
    mode: entry.mode,
    uid: fitsOctal(entry.uid, 8) ? entry.uid : 0,
    gid: fitsOctal(entry.gid, 8) ? entry.gid : 0,
    size: fitsOctal(size, 12) ? size : 0,
    typeflag: TYPEFLAG[entry.type],
    linkname,
    devmajor: entry.devmajor ?? 0,
    devminor: entry.devminor ?? 0,
  });
  if (records.length === 0) return main;
  const body = Buffer.from(records.join(""), "utf8");
  const paxName = `PaxHeaders/${split.name}`.slice(0, 100);
  const pax = header({ name: paxName, prefix: "", mode: 0o644, uid: 0, gid: 0, size: body.length, typeflag: "x", linkname: "", devmajor: 0, devminor: 0 });
  return Buffer.concat([pax, body, pad(body.length), main]);
}

function write(out: Writable, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    if (out.write(chunk)) resolve();
    else {
      const onDrain = () => {
        out.off("error", onError);
        resolve();
      };
      const onError = (error: Error) => {
        out.off("drain", onDrain);
        reject(error);
      };
      out.once("drain", onDrain);
      out.once("error", onError);
    }
  });
}

/**
 * Writes the entries, in the order given (callers sort), and the end-of-archive
 * marker. File data is streamed from disk, never held whole in memory.
 */
export async function writeTar(entries: Iterable<TarEntry>, out: Writable): Promise<void> {
  for (const entry of entries) {
    await write(out, entryHeader(entry));
    if (entry.type !== "file" || entry.size === 0) continue;
    if (!entry.data) throw new Error(`tar entry ${entry.path} has no data source`);
    let remaining = entry.size;
    const stream = createReadStream(entry.data.file, {
      start: entry.data.offset ?? 0,
      end: (entry.data.offset ?? 0) + entry.size - 1,
      highWaterMark: 1024 * 1024,
    });
    for await (const chunk of stream) {
      const buffer = chunk as Buffer;
      remaining -= buffer.length;
      await write(out, buffer);
    }
    if (remaining !== 0) throw new Error(`tar entry ${entry.path}: ${entry.data.file} changed while it was read`);
    await write(out, pad(entry.size));
  }
  await write(out, Buffer.alloc(2 * BLOCK));
}

export function compareTarPaths(a: string, b: string): number {
  // Byte order, like `tar --sort=name` in the C locale.
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** Normalises a member name: no "./" prefix, no leading or trailing "/". */
export function cleanPath(path: string): string {
  return path
    .replace(/^(\.\/)+/, "")
    .replace(/^\/+/, "")
    .replace(/\/+$/, "");
}

function parseOctal(buffer: Buffer, start: number, length: number): number {
  const field = buffer.subarray(start, start + length);
  if (field[0]! & 0x80) {
    // base-256 (GNU): big-endian, the first byte's top bit set
    let value = field[0]! & 0x7f;
    for (let i = 1; i < field.length; i++) value = value * 256 + field[i]!;
    return value;
  }
  const text = field.toString("ascii").replace(/\0.*$/s, "").trim();
  return text ? parseInt(text, 8) : 0;
}

function parseString(buffer: Buffer, start: number, length: number): string {
  const field = buffer.subarray(start, start + length);
  const end = field.indexOf(0);
  return field.subarray(0, end === -1 ? field.length : end).toString("utf8");
}

/**
 * pax records ("LEN key=value\n", LEN counting bytes) read on the bytes: a value may be
 * binary (an ACL in SCHILY.xattr.system.posix_acl_access), which a decoded string would
 * no longer measure in bytes. A record whose length does not fit is an error, not a loop.
 */
function parsePax(body: Buffer): Record<string, string> {
  const records: Record<string, string> = {};
  let at = 0;
  while (at < body.length) {
    const space = body.indexOf(0x20, at);
    if (space <= at) break; // padding (NULs) after the last record
    const length = Number(body.toString("ascii", at, space));
    if (!Number.isInteger(length) || length <= space - at + 1 || at + length > body.length)
      throw new Error(`malformed pax record at byte ${at} of a pax header`);
    const text = body.subarray(space + 1, at + length - 1); // without its newline
    const eq = text.indexOf(0x3d);
    if (eq > 0) records[text.toString("utf8", 0, eq)] = text.toString("utf8", eq + 1);
    at += length;
  }
  return records;
}

const TYPES: Record<string, EntryType> = {
  "0": "file",
  "\0": "file",
  "7": "file",
  "1": "hardlink",
  "2": "symlink",
  "3": "char",
  "4": "block",
  "5": "dir",
  "6": "fifo",
};

/**
 * Reads the headers of an uncompressed tar file and returns its entries with the
 * offset of each file's data, so they can be re-emitted in another order without
 * extracting anything (ownership is kept without privileges).
 */
export async function indexTar(file: string): Promise<TarEntry[]> {
  const handle: FileHandle = await open(file, "r");
  const entries: TarEntry[] = [];
  try {
    const block = Buffer.alloc(BLOCK);
    let offset = 0;
    let pax: Record<string, string> = {};
    let longName: string | undefined;
    let longLink: string | undefined;
    for (;;) {
      const { bytesRead } = await handle.read(block, 0, BLOCK, offset);
      if (bytesRead < BLOCK || block.every((b) => b === 0)) break;
      const size = parseOctal(block, 124, 12);
      const typeflag = String.fromCharCode(block[156]!);
      const dataOffset = offset + BLOCK;
      const next = dataOffset + Math.ceil(size / BLOCK) * BLOCK;
      if (typeflag === "x" || typeflag === "g" || typeflag === "L" || typeflag === "K") {
        const body = Buffer.alloc(size);
        await handle.read(body, 0, size, dataOffset);
        if (typeflag === "x") pax = { ...pax, ...parsePax(body) };
        else if (typeflag === "L") longName = body.toString("utf8").replace(/\0+$/, "");
        else if (typeflag === "K") longLink = body.toString("utf8").replace(/\0+$/, "");
        offset = next;
        continue;
      }
      const magic = block.subarray(257, 263).toString("ascii");
      const prefix = magic.startsWith("ustar") ? parseString(block, 345, 155) : "";
      const name = parseString(block, 0, 100);
      const path = cleanPath(pax.path ?? longName ?? (prefix ? `${prefix}/${name}` : name));
      const type = TYPES[typeflag];
      if (!type) throw new Error(`${file}: unsupported tar entry type '${typeflag}' for ${path}`);
      const realSize = pax.size !== undefined ? Number(pax.size) : size;
      const xattrs = Object.fromEntries(Object.entries(pax).filter(([k]) => k.startsWith("SCHILY.xattr.")));
      if (path !== "") {
        entries.push({
          path,
          type,
          mode: parseOctal(block, 100, 8),
          uid: pax.uid !== undefined ? Number(pax.uid) : parseOctal(block, 108, 8),
          gid: pax.gid !== undefined ? Number(pax.gid) : parseOctal(block, 116, 8),
          size: type === "file" ? realSize : 0,
          linkname:
            type === "symlink" || type === "hardlink"
              ? type === "hardlink"
                ? cleanPath(pax.linkpath ?? longLink ?? parseString(block, 157, 100))
                : (pax.linkpath ?? longLink ?? parseString(block, 157, 100))
              : undefined,
          devmajor: type === "char" || type === "block" ? parseOctal(block, 329, 8) : undefined,
          devminor: type === "char" || type === "block" ? parseOctal(block, 337, 8) : undefined,
          xattrs: Object.keys(xattrs).length ? xattrs : undefined,
          data: type === "file" ? { file, offset: dataOffset } : undefined,
        });
      }
      offset = dataOffset + Math.ceil(realSize / BLOCK) * BLOCK;
      pax = {};
      longName = undefined;
      longLink = undefined;
    }
  } finally {
    await handle.close();
  }
  return entries;
}

/**
 * Reads one member of an uncompressed tar file into memory (members are small text files
 * here): undefined when the archive has no such member (directories are not members here),
 * "" for a link or device. The member is named with or without a leading "./"; the last
 * entry of that name wins.
 */
export async function readTarMember(archive: string, member: string): Promise<string | undefined> {
  const wanted = cleanPath(member);
  let found: TarEntry | undefined;
  for (const entry of await indexTar(archive)) if (entry.path === wanted && entry.type !== "dir") found = entry;
  if (!found) return undefined;
  if (found.type !== "file" || found.size === 0) return "";
  const content = Buffer.alloc(found.size);
  const handle = await open(archive, "r");
  try {
    for (let done = 0; done < found.size;) {
      const { bytesRead } = await handle.read(content, done, found.size - done, found.data!.offset! + done);
      if (bytesRead === 0) throw new Error(`${archive} ends inside its member ${found.path}`);
      done += bytesRead;
    }
  } finally {
    await handle.close();
  }
  return content.toString("utf8");
}

/**
 * Sorts entries by path and makes hard links order-independent: in each group of
 * linked paths the first one (in sorted order) carries the data and the others link
 * to it. Later duplicates of a path replace earlier ones (as extraction would).
 */
export function normalizeEntries(entries: TarEntry[]): TarEntry[] {
  const byPath = new Map<string, TarEntry>();
  for (const entry of entries) byPath.set(entry.path, entry);
  const groups = new Map<string, string[]>();
  for (const entry of byPath.values()) {
    if (entry.type !== "hardlink") continue;
    const target = byPath.get(entry.linkname!);
    if (!target || target.type !== "file") throw new Error(`hard link ${entry.path} points at ${entry.linkname}, which is not a regular file of the archive`);
    const members = groups.get(target.path) ?? [target.path];
    members.push(entry.path);
    groups.set(target.path, members);
  }
  for (const [target, members] of groups) {
    const source = byPath.get(target)!;
    const sorted = [...members].sort(compareTarPaths);
    const first = sorted[0]!;
    for (const member of sorted) {
      const original = byPath.get(member)!;
      byPath.set(
        member,
        member === first
          ? {
              ...original,
              type: "file",
              size: source.size,
              data: source.data,
              linkname: undefined,
              mode: original.type === "hardlink" ? source.mode : original.mode,
            }
          : { ...original, type: "hardlink", size: 0, data: undefined, linkname: first },
      );
    }
  }
  return [...byPath.values()].sort((a, b) => compareTarPaths(a.path, b.path));
}
