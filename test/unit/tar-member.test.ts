/** One member of a tar file as the stages read mmdebstrap's output (builder/oci/tar.ts readTarMember). */
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, expect, it } from "vitest";
import { parseDpkgStatus } from "../../builder/debian/dpkg-status.js";
import { readTarMember } from "../../builder/oci/tar.js";

let dir: string;
const status =
  "Package: b\nStatus: install ok installed\nVersion: 2\n\nPackage: a\nStatus: deinstall ok config-files\nVersion: 1\n\nPackage: c\nStatus: install ok installed\nVersion: 3\n";
const long = `${"d".repeat(60)}/${"e".repeat(70)}/${"f".repeat(120)}`;
const big = "x".repeat(3000) + "\n";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "icn-tar-member-"));
  const root = join(dir, "root");
  await mkdir(join(root, "var/lib/dpkg"), { recursive: true });
  await mkdir(join(root, "etc"));
  await mkdir(join(root, long, ".."), { recursive: true });
  await writeFile(join(root, "var/lib/dpkg/status"), status);
  await writeFile(join(root, "etc/debian_version"), "13.1\n");
  await writeFile(join(root, "etc/big"), big);
  await writeFile(join(root, long), "long\n");
  await symlink("debian_version", join(root, "etc/link"));
  // As mmdebstrap writes it: pax, members named "./…".
  await execa("tar", ["--sort=name", "--format=pax", "-C", root, "-cf", join(dir, "root.tar"), "."]);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

it("reads a member named with or without ./, long names, several blocks; undefined when absent", async () => {
  const tar = join(dir, "root.tar");
  expect(await readTarMember(tar, "var/lib/dpkg/status")).toBe(status);
  expect(await readTarMember(tar, "./var/lib/dpkg/status")).toBe(status);
  expect(await readTarMember(tar, "etc/debian_version")).toBe("13.1\n");
  expect(await readTarMember(tar, "etc/big")).toBe(big);
  expect(await readTarMember(tar, long)).toBe("long\n");
  expect(await readTarMember(tar, "etc/link")).toBe("");
  expect(await readTarMember(tar, "etc")).toBeUndefined();
  expect(await readTarMember(tar, "etc/missing")).toBeUndefined();
  expect(parseDpkgStatus((await readTarMember(tar, "var/lib/dpkg/status"))!)).toEqual({ b: "2", c: "3" });
});

/** A ustar header block (name, size, type) with its checksum. */
function header(name: string, size: number, typeflag: string): Buffer {
  const block = Buffer.alloc(512);
  block.write(name, 0, "utf8");
  block.write("0000644\0", 100, "ascii");
  block.write("0000000\0", 108, "ascii");
  block.write("0000000\0", 116, "ascii");
  block.write(`${size.toString(8).padStart(11, "0")}\0`, 124, "ascii");
  block.write("00000000000\0", 136, "ascii");
  block.write(typeflag, 156, "ascii");
  block.write("ustar\x0000", 257, "binary");
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
  return block;
}
const padded = (data: Buffer) => Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]);

it("reads past a pax header whose value is binary (a POSIX ACL, as mmdebstrap writes /var/log/journal), and rejects a malformed one", async () => {
  const acl = Buffer.from([0x02, 0, 0, 0, 0x01, 0, 0x07, 0, 0xff, 0xff, 0xff, 0xff, 0x04, 0, 0x05, 0, 0xff, 0xff, 0xff, 0xff, 0x0a]);
  const key = Buffer.from(" SCHILY.xattr.system.posix_acl_access=");
  let length = key.length + acl.length + 1;
  length += String(length).length;
  const record = Buffer.concat([Buffer.from(String(length)), key, acl, Buffer.from("\n")]);
  expect(record.length).toBe(length);
  const content = Buffer.from("after the ACL\n");
  const archive = (pax: Buffer) =>
    Buffer.concat([
      header("PaxHeaders/journal", pax.length, "x"),
      padded(pax),
      header("var/log/journal/", 0, "5"),
      header("etc/after", content.length, "0"),
      padded(content),
      Buffer.alloc(1024),
    ]);
  const good = join(dir, "acl.tar");
  await writeFile(good, archive(record));
  expect(await readTarMember(good, "etc/after")).toBe("after the ACL\n");
  const bad = join(dir, "bad-pax.tar");
  await writeFile(bad, archive(Buffer.from("99 path=x\n")));
  await expect(readTarMember(bad, "etc/after")).rejects.toThrow(/malformed pax record/);
});
