/**
 * overlays/usr/lib/icn-bootstrap/upgrade-write: the root filesystem of a USB image (GPT,
 * partition 3 "root", as builder/disk/layout.ts lays it out) written into a slot, read
 * back, given its own UUID and grown; a slot too small, an image without the root
 * partition, and a truncated image are refused with the slot untouched or without a
 * filesystem. Small files stand in for the image and the slot (the script takes either a
 * file or a device), made with the real sgdisk and mkfs.ext4.
 */
import { mkdir, mkdtemp, rm, stat, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const WRITE = new URL("../../overlays/usr/lib/icn-bootstrap/upgrade-write", import.meta.url).pathname;
const MIB = 1024 * 1024;
const ROOT_START_MIB = 3;
const ROOT_MIB = 24;
const UUID = "5b0c6f2e-1d4a-4c3b-9e8f-0a1b2c3d4e5f";
let work: string;

/** A 32 MiB disk image: BIOS boot, ESP, and partition 3 "root" holding an ext4 with /etc/icn-release. */
async function makeImage(path: string, { rootName = "root" } = {}): Promise<void> {
  await truncate(path, 0).catch(() => undefined);
  await writeFile(path, "");
  await truncate(path, 32 * MIB);
  const sector = (mib: number) => (mib * MIB) / 512;
  await execa("sgdisk", [
    "--clear",
    `--new=1:${sector(1)}:${sector(2) - 1}`,
    "--typecode=1:EF02",
    `--new=2:${sector(2)}:${sector(ROOT_START_MIB) - 1}`,
    "--typecode=2:EF00",
    `--new=3:${sector(ROOT_START_MIB)}:${sector(ROOT_START_MIB + ROOT_MIB) - 1}`,
    "--typecode=3:8304",
    `--change-name=3:${rootName}`,
    path,
  ]);
  const tree = join(work, "tree");
  await mkdir(join(tree, "etc"), { recursive: true });
  await writeFile(join(tree, "etc", "icn-release"), "2026.12\n");
  await execa("mkfs.ext4", ["-q", "-F", "-d", tree, "-E", `offset=${ROOT_START_MIB * MIB}`, path, `${ROOT_MIB * 1024}`]);
}

async function slot(name: string, mib: number): Promise<string> {
  const path = join(work, name);
  await writeFile(path, Buffer.alloc(MIB, 0xa5)); // an old slot's bytes, not zeros
  await truncate(path, mib * MIB);
  return path;
}

const run = (...args: string[]) => execa(WRITE, args, { reject: false, all: true });
const debugfs = async (target: string, request: string) => (await execa("debugfs", ["-R", request, target], { reject: false })).stdout;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-upgrade-write-"));
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("upgrade-write", () => {
  it("writes the image's root filesystem into a larger slot, reads it back, gives it the UUID and grows it", async () => {
    const image = join(work, "good.img");
    await makeImage(image);
    const target = await slot("slot-b", 40);
    const result = await run(image, target, "--uuid", UUID);
    expect(result.exitCode, result.all).toBe(0);
    expect(result.all).toMatch(/written and read back, sha256 [0-9a-f]{64}/);
    expect(await debugfs(target, "cat /etc/icn-release")).toBe("2026.12");
    const header = (await execa("dumpe2fs", ["-h", target])).stdout;
    expect(header).toContain(`Filesystem UUID:          ${UUID}`);
    const blocks = Number(/Block count:\s+(\d+)/.exec(header)![1]);
    const blockSize = Number(/Block size:\s+(\d+)/.exec(header)![1]);
    expect(blocks * blockSize).toBe(40 * MIB);
    expect((await execa("e2fsck", ["-fn", target], { reject: false })).exitCode).toBe(0);
  });

  it("refuses a slot smaller than the image's root filesystem, naming both sizes, and leaves it as it was", async () => {
    const image = join(work, "big.img");
    await makeImage(image);
    const target = await slot("small", 16);
    const before = await stat(target);
    const result = await run(image, target);
    expect(result.exitCode).toBe(1);
    expect(result.all).toContain(`the image's root filesystem is ${ROOT_MIB * MIB} bytes, the slot ${target} only ${16 * MIB}`);
    expect((await stat(target)).mtimeMs).toBe(before.mtimeMs);
  });

  it("refuses an image without the root partition, and one cut short, before touching the slot", async () => {
    const other = join(work, "other.img");
    await makeImage(other, { rootName: "data" });
    const target = await slot("untouched", 40);
    const before = await stat(target);
    const wrong = await run(other, target);
    expect(wrong.exitCode).toBe(1);
    expect(wrong.all).toContain("has no root partition 3 named 'root'");

    const cut = join(work, "cut.img");
    await makeImage(cut);
    await truncate(cut, 10 * MIB);
    const short = await run(cut, target);
    expect(short.exitCode).toBe(1);
    expect(short.all).toMatch(/cut short|not a disk image with a GPT/);
    expect((await stat(target)).mtimeMs).toBe(before.mtimeMs);

    const usage = await run(other);
    expect(usage.exitCode).toBe(2);
  });
});
