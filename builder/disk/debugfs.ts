import { lstat, readdir, readlink } from "node:fs/promises";
import { join } from "node:path";

/**
 * Writes a directory tree into an ext4 filesystem (inside a disk image, at a byte
 * offset) with debugfs: no mount, no loop device, no root. Everything written is owned
 * by root; modes come from the tree, except the private paths below.
 */
const PRIVATE_DIRS = new Set(["root/.ssh"]);

export interface TreeEntry {
  path: string; // relative, no leading slash
  kind: "dir" | "file" | "symlink";
  mode: number;
  source: string;
  target?: string;
}

export async function listTree(root: string): Promise<TreeEntry[]> {
  const entries: TreeEntry[] = [];
  async function walk(rel: string): Promise<void> {
    for (const name of (await readdir(join(root, rel))).sort()) {
      const path = rel ? `${rel}/${name}` : name;
      const source = join(root, path);
      const info = await lstat(source);
      if (info.isDirectory()) {
        entries.push({ path, kind: "dir", mode: PRIVATE_DIRS.has(path) ? 0o700 : 0o755, source });
        await walk(path);
      } else if (info.isSymbolicLink()) {
        entries.push({ path, kind: "symlink", mode: 0o777, source, target: await readlink(source) });
      } else if (info.isFile()) {
        const inPrivateDir = [...PRIVATE_DIRS].some((dir) => path.startsWith(`${dir}/`));
        entries.push({ path, kind: "file", mode: inPrivateDir ? 0o600 : info.mode & 0o7777, source });
      }
    }
  }
  await walk("");
  return entries;
}

const quote = (path: string) => `"/${path.replace(/"/g, '\\"')}"`;

/** The debugfs command script that writes these entries (replacing files and links that exist). */
export function debugfsScript(entries: TreeEntry[], existingDirs: Set<string>): string {
  const lines: string[] = [];
  for (const entry of entries) {
    const path = quote(entry.path);
    if (entry.kind === "dir") {
      if (existingDirs.has(entry.path)) continue;
      lines.push(`mkdir ${path}`, `sif ${path} mode 0${(0o040000 | entry.mode).toString(8)}`);
    } else if (entry.kind === "file") {
      lines.push(`rm ${path}`, `write "${entry.source}" ${path}`, `sif ${path} mode 0${(0o100000 | entry.mode).toString(8)}`);
    } else {
      lines.push(`rm ${path}`, `symlink ${path} "${entry.target}"`);
    }
    if (entry.kind !== "symlink") lines.push(`sif ${path} uid 0`, `sif ${path} gid 0`);
  }
  return lines.join("\n") + "\n";
}

/** Sets atime and ctime of every path ("" is the root directory) to `epoch` (mtime is the file's own, already clamped). */
export function timesScript(paths: string[], epoch: number): string {
  return paths.map((path) => `sif ${quote(path)} atime @${epoch}\nsif ${quote(path)} ctime @${epoch}\n`).join("");
}

/** debugfs reports errors on stdout/stderr and still exits 0: anything but a "not found" from rm is fatal. */
export function debugfsErrors(output: string): string[] {
  const lines = output.split("\n");
  const errors: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith("debugfs") || line.startsWith("Allocated inode")) continue;
    if (/^rm: File not found by ext2_lookup/.test(line)) continue;
    if (/^mkdir: .*already exists|^mkdir: Ext2 directory already exists/.test(line)) continue;
    if (/^\w+: /.test(line)) errors.push(line);
  }
  return errors;
}
