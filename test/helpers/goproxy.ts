/**
 * A Go module proxy on the file system (GOPROXY=file://…): the real go command
 * resolves, downloads, checksums and builds from it, with no network. Tests use it
 * to drive the gomod source end to end on a tiny module in seconds.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { crc32 } from "node:zlib";

export interface FakeModule {
  path: string;
  version: string;
  /** File name -> content, relative to the module root (go.mod is required). */
  files: Record<string, string>;
}

export async function writeFileProxy(root: string, modules: FakeModule[]): Promise<string> {
  const byPath = new Map<string, string[]>();
  for (const mod of modules) {
    const dir = join(root, mod.path, "@v");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, `${mod.version}.info`), JSON.stringify({ Version: mod.version, Time: "2026-01-01T00:00:00Z" }));
    await writeFile(join(dir, `${mod.version}.mod`), mod.files["go.mod"]!);
    await writeFile(
      join(dir, `${mod.version}.zip`),
      zipStored(Object.entries(mod.files).map(([name, text]) => [`${mod.path}@${mod.version}/${name}`, Buffer.from(text)])),
    );
    byPath.set(mod.path, [...(byPath.get(mod.path) ?? []), mod.version]);
  }
  for (const [path, versions] of byPath) await writeFile(join(root, path, "@v", "list"), versions.join("\n") + "\n");
  return `file://${root}`;
}

/** A minimal zip archive (stored, no compression), as the module zip format allows. */
export function zipStored(entries: [string, Buffer][]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const [name, data] of entries) {
    const nameBuf = Buffer.from(name);
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x0800, 6); // UTF-8 names
    local.writeUInt16LE(0, 8); // stored
    local.writeUInt32LE(0, 10); // time/date
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(nameBuf.length, 26);
    local.writeUInt16LE(0, 28);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(0x0800, 8);
    central.writeUInt16LE(0, 10);
    central.writeUInt32LE(0, 12);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(data.length, 24);
    central.writeUInt16LE(nameBuf.length, 28);
    central.writeUInt32LE(offset, 42);
    locals.push(local, nameBuf, data);
    centrals.push(central, nameBuf);
    offset += local.length + nameBuf.length + data.length;
  }
  const centralSize = centrals.reduce((n, b) => n + b.length, 0);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(centralSize, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, ...centrals, end]);
}
