/**
 * Reads the files of a zip archive (a Go module zip) straight from its bytes: the central
 * directory gives each entry's name, method and offset; stored and deflated entries are
 * what module zips hold. No extraction on disk, no unzip tool on the host.
 */
import { inflateRawSync } from "node:zlib";
import { UserError } from "../errors.js";

export function readZipEntries(zip: Buffer, wanted: (name: string) => boolean, what: string): Map<string, Buffer> {
  const end = zip.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  if (end < 0) throw new UserError(`${what}: not a zip archive (no end of central directory)`, "remove it from the cache and fetch it again");
  const count = zip.readUInt16LE(end + 10);
  let at = zip.readUInt32LE(end + 16);
  const files = new Map<string, Buffer>();
  for (let i = 0; i < count; i++) {
    if (zip.readUInt32LE(at) !== 0x02014b50)
      throw new UserError(`${what}: damaged zip central directory at entry ${i}`, "remove it from the cache and fetch it again");
    const method = zip.readUInt16LE(at + 10);
    const compressedSize = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const extraLength = zip.readUInt16LE(at + 30);
    const commentLength = zip.readUInt16LE(at + 32);
    const localOffset = zip.readUInt32LE(at + 42);
    const name = zip.toString("utf8", at + 46, at + 46 + nameLength);
    at += 46 + nameLength + extraLength + commentLength;
    if (!wanted(name)) continue;
    const dataStart = localOffset + 30 + zip.readUInt16LE(localOffset + 26) + zip.readUInt16LE(localOffset + 28);
    const data = zip.subarray(dataStart, dataStart + compressedSize);
    if (method === 0) files.set(name, data);
    else if (method === 8) files.set(name, inflateRawSync(data));
    else throw new UserError(`${what}: ${name} uses zip method ${method}`, "only stored and deflated entries are read (Go module zips use those)");
  }
  return files;
}
