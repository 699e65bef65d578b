/** One member of a tar file as the stages read mmdebstrap's output (builder/oci/tar.ts readTarMember). */
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, expect, it } from "vitest";
import { parseDpkgStatus } from "../../builder/debian/dpkg-status.js";
import { readTarMember } from "../../builder/oci/tar.js";

let dir: string;
const status = "Package: b\nStatus: install ok installed\nVersion: 2\n\nPackage: a\nStatus: deinstall ok config-files\nVersion: 1\n\nPackage: c\nStatus: install ok installed\nVersion: 3\n";
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
