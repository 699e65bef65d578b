/**
 * The files bundle (`icn-bootstrap bundle`: out/<name>-files.tar): the served trees of
 * the files, OS image and ramdisk stages as one tree, as the appliance's file server
 * serves them; the same bytes for the same trees; a path two stages serve refused, named.
 */
import { createHash } from "node:crypto";
import { link, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeFilesBundle } from "../../builder/files-bundle.js";
import { FILES_ROOT } from "../../builder/stages/files.js";

let work: string;

async function stageWith(name: string, files: Record<string, string>): Promise<string> {
  const dir = join(work, name);
  for (const [path, content] of Object.entries(files)) {
    const target = join(dir, "tree", FILES_ROOT, path);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, content);
  }
  return dir;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-files-bundle-"));
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("the files bundle", () => {
  it("holds the stages' served trees as one, unpacked by tar as the file server's root, the same bytes every time", async () => {
    const files = await stageWith("files", { "kubespray/dl.k8s.io/release/v1.35.4/bin/linux/amd64/kubeadm": "kubeadm", "kubespray/releases/k.tar.gz": "k" });
    // The files stage links the same file under two paths: both arrive.
    await link(join(files, "tree", FILES_ROOT, "kubespray/releases/k.tar.gz"), join(files, "tree", FILES_ROOT, "kubespray/k-again.tar.gz"));
    const os = await stageWith("os", { "os-images/debian.qcow2": "qcow2", "os-images/debian.qcow2.sha256sum": "sum" });
    const ramdisk = await stageWith("ramdisk", { "boot/ipa.kernel": "kernel", "boot/ipa.initramfs": "initramfs" });
    const [a, b] = [join(work, "a.tar"), join(work, "b.tar")];
    expect(await writeFilesBundle([files, os, ramdisk], a)).toEqual({ files: 7 });
    await writeFilesBundle([files, os, ramdisk], b);
    const digest = async (f: string) =>
      createHash("sha256")
        .update(await readFile(f))
        .digest("hex");
    expect(await digest(b)).toBe(await digest(a));
    // What deploy --files runs in the file server's container.
    const root = join(work, "unpacked");
    await mkdir(root);
    await execa("tar", ["-x", "-f", a, "-C", root, "--no-same-owner", "--no-same-permissions", "--delay-directory-restore"]);
    expect(await readFile(join(root, "kubespray/dl.k8s.io/release/v1.35.4/bin/linux/amd64/kubeadm"), "utf8")).toBe("kubeadm");
    expect(await readFile(join(root, "kubespray/k-again.tar.gz"), "utf8")).toBe("k");
    expect(await readFile(join(root, "os-images/debian.qcow2.sha256sum"), "utf8")).toBe("sum");
    expect(await readFile(join(root, "boot/ipa.initramfs"), "utf8")).toBe("initramfs");
    // Fixed times and owners: nothing of the machine that wrote it.
    const listing = (await execa("tar", ["-tvf", a, "--numeric-owner"])).stdout;
    for (const line of listing.split("\n")) expect(line).toMatch(/^\S+ 0\/0 +\d+ 1970-01-01 00:00 /);
  });

  it("refuses a path two stages serve, naming it", async () => {
    const one = await stageWith("one", { "boot/x": "1" });
    const two = await stageWith("two", { "boot/x": "2" });
    await expect(writeFilesBundle([one, two], join(work, "c.tar"))).rejects.toThrow(/boot\/x is served by two stages/);
  });
});
