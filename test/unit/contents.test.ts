import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { applyEntries, compareManifests, ext4Manifest } from "../../builder/disk/contents.js";
import { debugfsScript, listTree } from "../../builder/disk/debugfs.js";

/** A small ext4 image made from a directory, as the disk stage makes the root (mkfs.ext4 -d under fakeroot). */
async function ext4From(files: Record<string, string>): Promise<{ image: string; dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), "icn-contents-"));
  const tree = join(dir, "tree");
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(tree, path, ".."), { recursive: true });
    await writeFile(join(tree, path), content);
  }
  await chmod(join(tree, "usr/bin/tool"), 0o755);
  await symlink("../usr/bin/tool", join(tree, "bin-link"));
  await mkdir(join(tree, "dir with space"));
  const image = join(dir, "fs.ext4");
  await execa("fakeroot", ["--", "sh", "-c", 'chown -R 0:0 "$1" && chown 101:102 "$1/etc/owned" && mkfs.ext4 -q -F -d "$1" "$2" 16M', "mkfs", tree, image]);
  return { image, dir };
}

describe("root filesystem contents manifest", () => {
  it("lists every entry with type, mode, owner and sha256 or link target, and names a changed byte", async () => {
    const { image, dir } = await ext4From({ "usr/bin/tool": "#!/bin/sh\necho tool\n", "etc/owned": "x\n", "etc/conf": "a=1\n" });
    const manifest = await ext4Manifest(image, dir);
    const lines = manifest.split("\n").filter(Boolean);
    expect(lines).toContain(`f 0755 0:0 ${createHash("sha256").update("#!/bin/sh\necho tool\n").digest("hex")} usr/bin/tool`);
    expect(lines).toContainEqual(expect.stringMatching(/^f 0644 101:102 [0-9a-f]{64} etc\/owned$/));
    expect(lines).toContain("l 0777 0:0 ../usr/bin/tool bin-link");
    expect(lines).toContain("d 0755 0:0 - dir with space");
    expect(lines).toContain("d 0700 0:0 - lost+found");
    expect(await ext4Manifest(image, dir)).toBe(manifest); // read twice, same text

    // One byte of a file's data, changed behind the filesystem's back (no metadata touched).
    const block = Number((await execa("debugfs", ["-R", "bmap /etc/conf 0", image])).stdout.trim());
    const { stdout: blockSize } = await execa("sh", ["-c", `dumpe2fs -h "$1" 2>/dev/null | sed -n 's/^Block size: *//p'`, "sh", image]);
    await execa("sh", ["-c", `printf 'b' | dd of="$1" bs=1 seek=$2 conv=notrunc status=none`, "sh", image, String(block * Number(blockSize))]);
    const tampered = await ext4Manifest(image, dir);
    const differences = compareManifests(manifest, tampered);
    expect(differences.map((d) => d.path)).toEqual(["etc/conf"]);
    expect(differences[0]!.expected).not.toBe(differences[0]!.actual);
  });

  it("the manifest after the image stage's debugfs writes equals what applyEntries derives from the base manifest", async () => {
    const { image, dir } = await ext4From({ "usr/bin/tool": "v1\n", "etc/owned": "x\n", "etc/conf": "a=1\n" });
    const base = await ext4Manifest(image, dir);
    const overlay = join(dir, "overlay");
    await mkdir(join(overlay, "etc/new/deeper"), { recursive: true });
    await mkdir(join(overlay, "root/.ssh"), { recursive: true });
    await writeFile(join(overlay, "etc/conf"), "a=2\n"); // replaces a file
    await writeFile(join(overlay, "etc/new/deeper/file"), "new\n");
    await writeFile(join(overlay, "root/.ssh/authorized_keys"), "ssh-ed25519 AAAA test\n"); // private: 0700 dir, 0600 file
    await symlink("/etc/conf", join(overlay, "etc/new/link"));
    const entries = await listTree(overlay);
    const existing = new Set(
      base
        .split("\n")
        .filter((l) => l.startsWith("d "))
        .map((l) => l.split(" ").slice(4).join(" ")),
    );
    await writeFile(join(dir, "script"), debugfsScript(entries, existing));
    await execa("debugfs", ["-w", "-f", join(dir, "script"), image]);
    const derived = await applyEntries(base, entries);
    expect(compareManifests(await ext4Manifest(image, dir), derived)).toEqual([]);
    expect(derived).toContain("d 0700 0:0 - root/.ssh");
    expect(derived).toMatch(/^f 0600 0:0 [0-9a-f]{64} root\/\.ssh\/authorized_keys$/m);
    expect(derived).toContain("l 0777 0:0 /etc/conf etc/new/link");
  });
});
