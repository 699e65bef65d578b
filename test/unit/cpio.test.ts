import { mkdir, mkdtemp, rm, symlink, writeFile, link, utimes } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import * as tar from "tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tarToCpio } from "../../builder/disk/cpio.js";

interface Entry {
  name: string;
  ino: number;
  mode: number;
  nlink: number;
  mtime: number;
  data: Buffer;
}

/** Reads a newc archive as the kernel does (Documentation/driver-api/early-userspace/buffer-format.rst). */
function readNewc(buffer: Buffer): Entry[] {
  const entries: Entry[] = [];
  let offset = 0;
  const align = (n: number) => n + ((4 - (n % 4)) % 4);
  for (;;) {
    expect(buffer.subarray(offset, offset + 6).toString("latin1")).toBe("070701");
    const field = (i: number) => parseInt(buffer.subarray(offset + 6 + i * 8, offset + 14 + i * 8).toString("latin1"), 16);
    const [ino, mode, , , nlink, mtime, size] = [0, 1, 2, 3, 4, 5, 6].map(field) as number[];
    const nameSize = field(11);
    const name = buffer.subarray(offset + 110, offset + 110 + nameSize - 1).toString("utf8");
    const dataStart = align(offset + 110 + nameSize);
    if (name === "TRAILER!!!") break;
    entries.push({ name, ino: ino!, mode: mode!, nlink: nlink!, mtime: mtime!, data: buffer.subarray(dataStart, dataStart + size!) });
    offset = align(dataStart + size!);
  }
  return entries;
}

let work: string;
let archive: string;
const EPOCH = 1_700_000_000;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-cpio-"));
  const root = join(work, "root");
  await mkdir(join(root, "usr/bin"), { recursive: true });
  await mkdir(join(root, "boot"), { recursive: true });
  await writeFile(join(root, "usr/bin/tool"), "#!/bin/sh\necho tool\n", { mode: 0o755 });
  await link(join(root, "usr/bin/tool"), join(root, "usr/bin/tool-again"));
  await symlink("tool", join(root, "usr/bin/tool-link"));
  await writeFile(join(root, "boot/vmlinuz-6.12.0-test"), "kernel bytes");
  await utimes(join(root, "usr/bin/tool"), new Date((EPOCH - 10) * 1000), new Date((EPOCH + 5_000) * 1000));
  archive = join(work, "root.tar");
  // Written synchronously: node-tar's asynchronous writer defers hard links and, when a
  // link's stat lands before its target's, can write after its end (an uncaught error).
  tar.c({ file: archive, cwd: root, portable: false, sync: true }, ["."]);
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

async function convert(exclude?: (path: string) => boolean) {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on("data", (c: Buffer) => chunks.push(c));
  const result = await tarToCpio(archive, out, { epoch: EPOCH, exclude, take: (p) => p.startsWith("boot/vmlinuz-") });
  out.end();
  const bytes = Buffer.concat(chunks);
  return { result, bytes, entries: readNewc(bytes) };
}

describe("a root tar as a newc initramfs", () => {
  it("keeps files, directories, symlinks and modes, with hard links as the kernel reads them", async () => {
    const { entries } = await convert();
    const byName = new Map(entries.map((e) => [e.name, e]));
    expect([...byName.keys()]).toEqual(
      expect.arrayContaining(["usr", "usr/bin", "usr/bin/tool", "usr/bin/tool-again", "usr/bin/tool-link", "boot/vmlinuz-6.12.0-test"]),
    );
    const tool = byName.get("usr/bin/tool")!;
    expect(tool.mode).toBe(0o100755);
    expect(tool.data.toString()).toBe("#!/bin/sh\necho tool\n");
    // The first name carries the data and nlink 2; the second the same inode and no data.
    const again = byName.get("usr/bin/tool-again")!;
    expect([tool.nlink, again.nlink, again.ino, again.data.length]).toEqual([2, 2, tool.ino, 0]);
    expect(entries.indexOf(tool)).toBeLessThan(entries.indexOf(again));
    const linkEntry = byName.get("usr/bin/tool-link")!;
    expect(linkEntry.mode & 0o170000).toBe(0o120000);
    expect(linkEntry.data.toString()).toBe("tool");
    expect(byName.get("usr/bin")!.mode & 0o170000).toBe(0o040000);
    // Mtimes are clamped to the epoch; older ones stay.
    for (const e of entries) expect(e.mtime).toBeLessThanOrEqual(EPOCH);
    expect(new Set(entries.map((e) => e.ino)).size).toBe(entries.length - 1);
  });

  it("leaves out what it is told to, and hands back the files asked for even when left out", async () => {
    const { entries, result } = await convert((path) => path === "boot" || path.startsWith("boot/"));
    expect(entries.some((e) => e.name.startsWith("boot"))).toBe(false);
    expect([...result.taken.keys()]).toEqual(["boot/vmlinuz-6.12.0-test"]);
    expect(result.taken.get("boot/vmlinuz-6.12.0-test")!.toString()).toBe("kernel bytes");
    expect(result.entries).toBe(entries.length);
  });

  it("is the same bytes every time", async () => {
    const a = await convert();
    const b = await convert();
    expect(a.bytes.length).toBeGreaterThan(0);
    expect(a.bytes.equals(b.bytes)).toBe(true);
  });

  it("fails naming the entry when a hard link's target was left out", async () => {
    await expect(convert((path) => path === "usr/bin/tool")).rejects.toThrow(
      /usr\/bin\/tool-again links to usr\/bin\/tool, which is not in the archive before it/,
    );
  });

  it("waits for a slow reader without piling up listeners on it", async () => {
    const root = join(work, "many");
    await mkdir(root);
    for (let i = 0; i < 200; i++) await writeFile(join(root, `file-${i}`), Buffer.alloc(4096, i));
    const many = join(work, "many.tar");
    tar.c({ file: many, cwd: root, sync: true }, ["."]);
    // A reader that takes little at a time: every entry waits for its drain.
    const out = new PassThrough({ highWaterMark: 1024 });
    const sizes: number[] = [];
    out.on("data", (chunk: Buffer) => {
      sizes.push(chunk.length);
      out.pause();
      setImmediate(() => out.resume());
    });
    let most = 0;
    const watch = setInterval(() => (most = Math.max(most, out.listenerCount("error"), out.listenerCount("drain"))), 0);
    try {
      await tarToCpio(many, out, { epoch: EPOCH });
    } finally {
      clearInterval(watch);
    }
    out.end();
    expect(sizes.length).toBeGreaterThan(200);
    // The stream's own listeners and at most one wait's.
    expect(most).toBeLessThan(5);
  });
});
