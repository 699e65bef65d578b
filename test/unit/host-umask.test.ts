/**
 * Issue 34: the image does not depend on the build host's umask, time zone or locale.
 * A small root filesystem, a content layer and an overlay go through the real disk,
 * overlays and image stages twice: as usual (umask 022, UTC) and as a hardened host runs
 * them (umask 077, TZ Pacific/Chatham), the layer and the overlay written under that umask
 * as a stage or a checkout there would write them. The two disks must be the same bytes,
 * with the modes the build decides.
 */
import { chmod, mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { sha256File } from "../../common/hash.js";
import { loadDefinition } from "../../builder/definition.js";
import { REPO_SITE_SCRIPT, SITE_SCRIPT } from "../../builder/disk/site-partition.js";
import { runStage, type StageResult } from "../../builder/stage.js";
import { DISK_IMAGE, diskStage } from "../../builder/stages/disk.js";
import { CONTENTS, imageStage } from "../../builder/stages/image.js";
import { overlaysStage } from "../../builder/stages/overlays.js";
import { REPO } from "../helpers/cli.js";

const EPOCH = 1_779_000_000;

const result = (name: string, key: string, dir: string): StageResult => ({ name, key, dir, reused: true, seconds: 0, bytes: 0 });

/** A root filesystem tarball as mmdebstrap makes one: every mode its own, whatever the umask. */
async function rootfs(dir: string): Promise<StageResult> {
  const root = join(dir, "root");
  const dirs: [string, number][] = [
    ["", 0o755],
    ["boot", 0o755],
    ["etc", 0o755],
    ["etc/nginx", 0o755],
    ["etc/systemd", 0o755],
    ["etc/systemd/system", 0o755],
    ["root", 0o700],
    ["srv", 0o755],
    ["usr", 0o755],
    ["usr/lib", 0o755],
    ["usr/lib/systemd", 0o755],
    ["usr/lib/systemd/system", 0o755],
    ["usr/local", 0o755],
    ["usr/local/bin", 0o755],
    ["var", 0o755],
    ["var/lib", 0o755],
  ];
  for (const [path, mode] of dirs) {
    await mkdir(join(root, path), { recursive: true });
    await chmod(join(root, path), mode);
  }
  await writeFile(join(root, "etc/os-release"), "ID=test\n");
  await chmod(join(root, "etc/os-release"), 0o644);
  await execa("tar", [
    "-C",
    root,
    "--sort=name",
    "--owner=0",
    "--group=0",
    "--numeric-owner",
    `--mtime=@${EPOCH - 86400}`,
    "-cf",
    join(dir, "rootfs.tar"),
    ".",
  ]);
  return result("rootfs", "test-rootfs", dir);
}

/** Files written with the modes Node gives them: what the host's umask makes of 0666 and 0777. */
async function writeTree(root: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, path), text, { mode: path.includes("bin/") ? 0o777 : 0o666 });
  }
}

async function build(work: string, base: StageResult): Promise<{ image: string; contents: Map<string, string> }> {
  const defaults = await loadDefinition();
  const definition = { ...defaults, disk: { ...defaults.disk, rootFree: "1MiB" } };
  // A content layer as a stage writes one (e.g. the registry's storage, the file server's tree).
  const layer = join(work, "layer");
  await writeTree(join(layer, "tree"), {
    "etc/nginx/seeded.conf": "map {}\n",
    "usr/local/bin/tool": "#!/bin/sh\n",
    "var/lib/registry/blob": "data\n",
    "srv/files/kubespray/a.txt": "a\n",
  });
  // An overlay directory as a checkout under this umask has it.
  const overlay = join(work, "overlay");
  await writeTree(overlay, { "etc/motd": "hello\n", "usr/local/sbin/run-me": "#!/bin/sh\n", [SITE_SCRIPT]: await readFile(REPO_SITE_SCRIPT, "utf8") });
  await chmod(join(overlay, SITE_SCRIPT), 0o777 & ~process.umask());

  const stages = join(work, "stages");
  const overlays = await runStage(overlaysStage, { definition, directories: [{ dir: overlay, target: "" }] }, stages);
  const disk = await runStage(diskStage, { definition, epoch: EPOCH, rootfs: base, layers: [result("layer", "test-layer", layer)] }, stages);
  const image = await runStage(imageStage, { disk, overlays, epoch: EPOCH }, stages);
  const contents = new Map<string, string>();
  for (const line of (await readFile(join(image.dir, CONTENTS), "utf8")).split("\n").filter(Boolean)) {
    const [type, mode, owner, , path] = line.split(" ");
    contents.set(path!, `${type} ${mode} ${owner}`);
  }
  return { image: await sha256File(join(image.dir, DISK_IMAGE)), contents };
}

async function hardened<T>(run: () => Promise<T>): Promise<T> {
  const umask = process.umask(0o077);
  const tz = process.env.TZ;
  process.env.TZ = "Pacific/Chatham";
  try {
    return await run();
  } finally {
    process.umask(umask);
    if (tz === undefined) delete process.env.TZ;
    else process.env.TZ = tz;
  }
}

describe("the image does not depend on the host's umask or time zone", () => {
  it("gives the same disk under umask 077 and TZ Pacific/Chatham, with the modes the build decides", { timeout: 300_000 }, async () => {
    const work = await mkdtemp(join(tmpdir(), "icn-umask-"));
    const base = await rootfs(join(work, "rootfs"));
    await mkdir(join(work, "usual"));
    await mkdir(join(work, "hardened"));
    const usual = await build(join(work, "usual"), base);
    const strict = await hardened(() => build(join(work, "hardened"), base));

    for (const { contents } of [usual, strict]) {
      const modes = Object.fromEntries(
        [
          "etc",
          "etc/nginx",
          "etc/nginx/seeded.conf",
          "var/lib",
          "var/lib/registry",
          "var/lib/registry/blob",
          "srv/files/kubespray/a.txt",
          "usr/local",
          "usr/local/bin/tool",
          "root",
          "boot/grub",
          "boot/grub/grub.cfg",
          "etc/motd",
          "usr/local/sbin",
          "usr/local/sbin/run-me",
          SITE_SCRIPT,
        ].map((p) => [p, contents.get(p)]),
      );
      expect(modes).toEqual({
        etc: "d 0755 0:0",
        "etc/nginx": "d 0755 0:0",
        "etc/nginx/seeded.conf": "f 0644 0:0",
        "var/lib": "d 0755 0:0",
        "var/lib/registry": "d 0755 0:0",
        "var/lib/registry/blob": "f 0644 0:0",
        "srv/files/kubespray/a.txt": "f 0644 0:0",
        "usr/local": "d 0755 0:0",
        "usr/local/bin/tool": "f 0755 0:0",
        root: "d 0700 0:0",
        "boot/grub": "d 0755 0:0",
        "boot/grub/grub.cfg": "f 0644 0:0",
        "etc/motd": "f 0644 0:0",
        "usr/local/sbin": "d 0755 0:0",
        "usr/local/sbin/run-me": "f 0755 0:0",
        [SITE_SCRIPT]: "f 0755 0:0",
      });
    }
    expect(strict.image).toBe(usual.image);
  });

  it("pins the umask, time zone and collation for the build and the commands it runs", async () => {
    const script = [
      `import { pinHostEnvironment } from ${JSON.stringify(join(REPO, "builder/reproducible.ts"))};`,
      'import { execSync } from "node:child_process";',
      "const order = () => ['h', 'ch', 'cz'].sort((a, b) => a.localeCompare(b)).join(' ');",
      "const before = order();",
      "pinHostEnvironment();",
      'console.log(JSON.stringify({ before, after: order(), hour: new Date(0).getHours(), shell: execSync("umask; date -d @0 +%H; echo $LC_ALL", { encoding: "utf8" }).split("\\n") }));',
    ].join("\n");
    const run = await execa("sh", ["-c", 'umask 077 && exec "$@"', "sh", "node", "--import", "tsx", "--input-type=module", "-e", script], {
      cwd: REPO,
      env: { TZ: "Pacific/Chatham", LANG: "cs_CZ.UTF-8", LC_ALL: "cs_CZ.UTF-8" },
    });
    // Czech collation puts "ch" after "h": Node takes it from the locale it starts in.
    expect(JSON.parse(run.stdout)).toEqual({ before: "cz h ch", after: "ch cz h", hour: 0, shell: ["0022", "00", "C.UTF-8", ""] });
  });
});
