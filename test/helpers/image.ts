import { execa } from "execa";

export interface PartitionRow {
  number: number;
  start: number;
  end: number;
  code: string;
  name: string;
}

/**
 * A copy of a disk image that keeps its holes: a built image is mostly unwritten space,
 * and a byte-for-byte copy (fs.copyFile) would take its whole apparent size on the disk.
 */
export async function copyImageSparse(from: string, to: string): Promise<void> {
  await execa("cp", ["--sparse=always", "--reflink=auto", from, to]); // as builder/stages/image.ts copies its disk
}

/** The GPT as sgdisk reads it. */
export async function partitions(image: string): Promise<PartitionRow[]> {
  const { stdout } = await execa("sgdisk", ["-p", image]);
  return stdout
    .split("\n")
    .map((line) => /^\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+ \S+\s+([0-9A-F]{4})\s+(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ number: Number(m[1]), start: Number(m[2]), end: Number(m[3]), code: m[4]!, name: m[5]!.trim() }));
}

/** `image?offset=N`: how e2fsprogs and mtools address a partition inside a disk image. */
export async function partitionAddress(image: string, number: number): Promise<{ ext: string; mtools: string }> {
  const row = (await partitions(image)).find((p) => p.number === number);
  if (!row) throw new Error(`no partition ${number} in ${image}`);
  return { ext: `${image}?offset=${row.start * 512}`, mtools: `${image}@@${row.start * 512}` };
}

export async function debugfs(fs: string, request: string): Promise<string> {
  const { stdout } = await execa("debugfs", ["-R", request, fs], { stderr: "ignore" });
  return stdout;
}

/** Type and target of a path inside an ext4 filesystem, or undefined when absent. */
export async function statInFs(fs: string, path: string): Promise<{ type: string; mode: string; size: number; uid: number; linkTarget?: string } | undefined> {
  const { stdout, stderr } = await execa("debugfs", ["-R", `stat "${path}"`, fs], { reject: false });
  if (/File not found/.test(stderr) || !/Inode:/.test(stdout)) return undefined;
  const type = /Type: (\w+)/.exec(stdout)?.[1] ?? "";
  return {
    type,
    mode: /Mode:\s+(\d+)/.exec(stdout)?.[1] ?? "",
    size: Number(/Size: (\d+)/.exec(stdout)?.[1] ?? -1),
    uid: Number(/User:\s+(\d+)/.exec(stdout)?.[1] ?? -1),
    linkTarget: /Fast link dest: "([^"]*)"/.exec(stdout)?.[1],
  };
}

/**
 * Changes one byte of a file's data inside the ext4 partition of a disk image, behind the
 * filesystem's back (no metadata touched): what a tampered stick looks like.
 */
export async function flipByteOfFile(image: string, partition: number, path: string): Promise<void> {
  const { ext } = await partitionAddress(image, partition);
  const offset = Number(ext.split("?offset=")[1]);
  const block = Number((await debugfs(ext, `bmap "${path}" 0`)).trim());
  if (!(block > 0)) throw new Error(`no data block for ${path}`);
  const size = Number(/Size: (\d+)/.exec(await debugfs(ext, `stat "${path}"`))?.[1]);
  if (!(size > 100)) throw new Error(`${path} has ${size} bytes: too small to change its byte 100`);
  const blockSize = Number(/Block size:\s+(\d+)/.exec((await execa("dumpe2fs", ["-h", ext], { stderr: "ignore" })).stdout)?.[1]);
  const { open } = await import("node:fs/promises");
  const handle = await open(image, "r+");
  try {
    const byte = Buffer.alloc(1);
    const at = offset + block * blockSize + 100;
    await handle.read(byte, 0, 1, at);
    byte[0] = byte[0]! ^ 0xff;
    await handle.write(byte, 0, 1, at);
  } finally {
    await handle.close();
  }
}
