/**
 * Secrets on the site medium (issue 32 item 5): once applied, a Secret file's bytes are
 * gone from the medium, not only its directory entry. A site disk made by the real
 * `icn-bootstrap site write --new` is mounted read-write as the appliance mounts its
 * medium (the kernel's vfat on a loop device; FUSE's fusefat where the kernel has no
 * vfat, as in this project's containers), the removal step of icn-site-objects runs on
 * it (site.py wipe), and after unmounting the password is searched for in the image's bytes.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_SITE_SCRIPT } from "../../builder/disk/site-partition.js";
import { runCli } from "../helpers/cli.js";

const PASSWORD = "bmc-Pa55w0rd-7f3e9c1d";

let work: string;
let count = 0;

async function siteFolder(manifests: Record<string, string>): Promise<string> {
  const dir = join(work, `site-${++count}`);
  await mkdir(join(dir, "manifests"), { recursive: true });
  await writeFile(join(dir, "site.yaml"), "version: 1\n");
  for (const [name, text] of Object.entries(manifests)) await writeFile(join(dir, "manifests", name), text);
  return dir;
}

async function siteDisk(manifests: Record<string, string>): Promise<string> {
  const image = join(work, `site-${count + 1}.img`);
  const written = await runCli(["site", "write", await siteFolder(manifests), "--new", image]);
  expect(written.exitCode, written.all).toBe(0);
  return image;
}

/** Mounts a FAT image read-write at a new folder; returns the folder and how to unmount it. */
async function mountFat(image: string): Promise<{ dir: string; unmount: () => Promise<void> }> {
  const dir = await mkdtemp(join(work, "mnt-"));
  if ((await readFile("/proc/filesystems", "utf8")).split("\n").some((l) => l.trim().endsWith("vfat"))) {
    const loop = (await execa("losetup", ["--find", "--show", image])).stdout.trim();
    await execa("mount", ["-o", "rw", loop, dir]);
    return { dir, unmount: async () => void (await execa("umount", [dir]), await execa("losetup", ["-d", loop])) };
  }
  // In the foreground, so that its exit says it wrote everything back to the image.
  const fuse = execa("fusefat", ["-f", "-o", "rw+", image, dir], { reject: false, all: true });
  const mounted = async () => (await readFile("/proc/mounts", "utf8")).split("\n").some((l) => l.split(" ")[1] === dir);
  for (let waited = 0; !(await mounted()); waited += 100) {
    if (fuse.exitCode !== null || waited > 10_000)
      throw new Error(`this kernel has no vfat and fusefat could not mount ${image} (apt-get install fusefat): ${(fuse.kill(), (await fuse).all)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { dir, unmount: async () => void (await execa("fusermount", ["-u", dir]), await fuse) };
}

async function py(...args: string[]) {
  const result = await execa("python3", [REPO_SITE_SCRIPT, ...args], { reject: false, all: true });
  return { code: result.exitCode, stdout: result.stdout, all: String(result.all) };
}

const bytesOf = async (image: string) => (await readFile(image)).toString("latin1");

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-site-secrets-"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

const SECRET = `apiVersion: v1
kind: Secret
metadata:
  name: node-1-bmc
  namespace: metal3
type: Opaque
stringData:
  username: admin
  password: ${PASSWORD}
`;
const HOST = `apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: node-1
  namespace: metal3
spec:
  bmc:
    address: redfish://10.10.0.11/redfish/v1/Systems/1
    credentialsName: node-1-bmc
`;

describe("a Secret file removed from the site medium", () => {
  it("leaves none of its bytes on the FAT medium (site-objects' removal step on a mounted site disk)", async () => {
    const image = await siteDisk({ "10-host.yaml": HOST, "20-bmc-secret.yaml": SECRET });
    expect(await bytesOf(image)).toContain(PASSWORD);
    const medium = await mountFat(image);
    let wiped, left;
    try {
      wiped = await py("wipe", medium.dir, "manifests/20-bmc-secret.yaml");
      left = await readdir(join(medium.dir, "manifests"));
    } finally {
      await medium.unmount();
    }
    expect(wiped.code, wiped.all).toBe(0);
    expect(wiped.stdout.split("\n")).toEqual(["manifests/20-bmc-secret.yaml"]);
    expect(left).toEqual(["10-host.yaml"]);
    const after = await bytesOf(image);
    expect(after.includes(PASSWORD), "the password is still in the image's bytes").toBe(false);
    expect(after).toContain("credentialsName: node-1-bmc");
    const fsck = await execa("fsck.vfat", ["-n", image], { reject: false, all: true });
    expect(fsck.exitCode, fsck.all).toBe(0);
  });
});

describe("a manifest that holds a Secret, however it is written", () => {
  const item = (name: string) => ({ apiVersion: "v1", kind: "Secret", metadata: { name, namespace: "metal3" }, stringData: { password: PASSWORD } });
  it("is one whether the Secret is alone, in a List or SecretList, among other documents, or in JSON (tab-indented, several values)", async () => {
    const folder = await siteFolder({
      "10-host.yaml": HOST,
      "20-secret.yaml": SECRET,
      "30-list.yaml": `apiVersion: v1\nkind: List\nitems:\n  - ${JSON.stringify(item("list-bmc"))}\n  - ${JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c" } })}\n`,
      "40-multi.yaml": `${HOST}---\n${SECRET.replace("node-1-bmc", "multi-bmc")}`,
      "50-secretlist.yaml": `apiVersion: v1\nkind: SecretList\nitems:\n  - ${JSON.stringify(item("typed-bmc"))}\n`,
      "60-bmc.json": JSON.stringify(item("json-bmc"), null, "\t") + "\n",
      "70-list.json": JSON.stringify({ apiVersion: "v1", kind: "List", items: [item("json-list-bmc")] }),
      "80-stream.json":
        JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "s" } }) + "\n" + JSON.stringify(item("stream-bmc"), null, "\t"),
    });
    const checked = await py("check", folder);
    expect(checked.code, checked.all).toBe(0);
    expect(checked.stdout.split("\n")[0]).toBe("valid: site.yaml and 11 objects in 8 files under manifests/");
    const objects = await py("objects", folder);
    expect(objects.code, objects.all).toBe(0);
    expect(Object.fromEntries((JSON.parse(objects.stdout) as { file: string; secret: boolean }[]).map((f) => [f.file, f.secret]))).toEqual({
      "manifests/10-host.yaml": false,
      "manifests/20-secret.yaml": true,
      "manifests/30-list.yaml": true,
      "manifests/40-multi.yaml": true,
      "manifests/50-secretlist.yaml": true,
      "manifests/60-bmc.json": true,
      "manifests/70-list.json": true,
      "manifests/80-stream.json": true,
    });
  });

  it("checks a List's items as objects (a List itself has no name)", async () => {
    const folder = await siteFolder({
      "list.yaml":
        "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Secret\n    metadata: {name: Bad_Name}\n  - kind: Secret\n    metadata: {name: ok}\n",
    });
    const checked = await py("check", folder);
    expect(checked.code).toBe(3);
    expect(checked.stdout.split("\n")).toEqual([
      "manifests/list.yaml: items[0]: metadata.name: expected a Kubernetes name (lowercase letters, digits, '-' and '.'), got 'Bad_Name'",
      "manifests/list.yaml: items[1]: apiVersion: missing",
    ]);
  });
});

describe("install to disk's copy of the site partition", () => {
  it("holds no Secret: every file holding one is wiped, and so is what a laptop deleted before (site.py scrub on the mounted copy)", async () => {
    const image = await siteDisk({
      "10-host.yaml": HOST,
      "20-list.yaml": `apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Secret\n    metadata: {name: a}\n    stringData: {password: ${PASSWORD}-list}\n`,
      "30-bmc.json": JSON.stringify({ apiVersion: "v1", kind: "Secret", metadata: { name: "b" }, stringData: { password: `${PASSWORD}-json` } }, null, "\t"),
    });
    // Put there on a laptop: a file no parser reads (the site is invalid then, yet it is
    // copied), and a Secret file deleted since, whose clusters keep its bytes.
    const broken = join(work, "40-broken.yaml");
    await writeFile(broken, `kind: Secret\nstringData: {password: ${PASSWORD}-broken\n`);
    await execa("mcopy", ["-i", image, broken, "::/manifests/40-broken.yaml"]);
    const deleted = join(work, "old-bmc.yaml");
    await writeFile(deleted, SECRET.replace(PASSWORD, `${PASSWORD}-deleted`));
    await execa("mcopy", ["-i", image, deleted, "::/manifests/old-bmc.yaml"]);
    await execa("mdel", ["-i", image, "::/manifests/old-bmc.yaml"]);
    for (const form of ["-list", "-json", "-broken", "-deleted"]) expect(await bytesOf(image)).toContain(PASSWORD + form);

    const copy = await mountFat(image);
    let scrubbed, left;
    try {
      scrubbed = await py("scrub", copy.dir);
      left = (await readdir(join(copy.dir, "manifests"))).sort();
    } finally {
      await copy.unmount();
    }
    expect(scrubbed.code, scrubbed.all).toBe(0);
    expect(scrubbed.stdout.split("\n")).toEqual(["manifests/20-list.yaml", "manifests/30-bmc.json", "manifests/40-broken.yaml"]);
    expect(left).toEqual(["10-host.yaml"]);
    const after = await bytesOf(image);
    expect(after.includes(PASSWORD), "a password is still in the copy's bytes").toBe(false);
    expect(after).toContain("credentialsName: node-1-bmc");
    const fsck = await execa("fsck.vfat", ["-n", image], { reject: false, all: true });
    expect(fsck.exitCode, fsck.all).toBe(0);
  });
});
