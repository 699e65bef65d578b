/**
 * The root filesystem's contents as a canonical text manifest, one line per entry
 * (sorted by path): `<type> <mode> <uid>:<gid> <sha256 | link target | -> <path>`.
 * Its sha256 is the "root filesystem contents digest" of the report; `verify` makes
 * the same manifest from an image and names the entries that differ.
 *
 * The filesystem is read with `debugfs rdump` under fakeroot (no mount, no loop
 * device, no root): fakeroot keeps the owners debugfs sets, and `find` under the same
 * fakeroot session reads them back. rdump writes directories, regular files and
 * symbolic links; device nodes and extended attributes are not part of the manifest.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { sha256File } from "../../common/hash.js";

export interface ContentsEntry {
  path: string;
  type: "d" | "f" | "l";
  mode: string;
  owner: string;
  /** sha256 of a file, target of a symlink (spaces, newlines and % escaped), "-" for a directory. */
  value: string;
}

export function manifestLine(e: ContentsEntry): string {
  return `${e.type} ${e.mode} ${e.owner} ${e.value} ${e.path}`;
}

export function parseManifest(text: string): Map<string, ContentsEntry> {
  const entries = new Map<string, ContentsEntry>();
  for (const line of text.split("\n")) {
    if (!line) continue;
    const [type, mode, owner, value, ...rest] = line.split(" ");
    const path = rest.join(" ");
    entries.set(path, { type: type as ContentsEntry["type"], mode: mode!, owner: owner!, value: value!, path });
  }
  return entries;
}

export function manifestText(entries: ContentsEntry[]): string {
  const sorted = [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return sorted.map((e) => `${manifestLine(e)}\n`).join("");
}

const escapeTarget = (target: string) => target.replace(/%/g, "%25").replace(/ /g, "%20").replace(/\n/g, "%0A");

export interface DumpedTree {
  /** The filesystem's root directory, copied out. */
  dir: string;
  /** The fakeroot session that knows the owners. */
  state: string;
  remove(): Promise<void>;
}

/** Copies the ext4 filesystem at `fs` (`image?offset=N`) into a temporary directory under `scratch`. */
export async function dumpExt4(fs: string, scratch: string): Promise<DumpedTree> {
  await mkdir(scratch, { recursive: true });
  const work = await mkdtemp(join(scratch, "contents-"));
  const dir = join(work, "root");
  const state = join(work, "fakeroot.state");
  const remove = () => rm(work, { recursive: true, force: true });
  try {
    await mkdir(dir);
    const dump = await execa("fakeroot", ["-s", state, "--", "debugfs", "-R", `rdump / ${dir}`, fs], { reject: false, all: true });
    const errors = String(dump.all)
      .split("\n")
      .filter((l) => l && !l.startsWith("debugfs "));
    if (dump.exitCode !== 0 || errors.length > 0) throw new Error(`debugfs could not read ${fs}:\n  ${errors.slice(0, 10).join("\n  ")}`);
    return { dir, state, remove };
  } catch (error) {
    await remove();
    throw error;
  }
}

/** The manifest of a dumped tree. */
export async function treeManifest(tree: DumpedTree): Promise<string> {
  const { stdout } = await execa("fakeroot", ["-i", tree.state, "--", "find", tree.dir, "-mindepth", "1", "-printf", "%y %m %U:%G %P\\0%l\\0"], {
    encoding: "buffer",
    maxBuffer: 512 * 1024 * 1024,
  });
  const fields = Buffer.from(stdout).toString("utf8").split("\0");
  const entries: ContentsEntry[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const head = fields[i]!;
    const [type, mode, owner] = head.split(" ", 3) as [string, string, string];
    const path = head.slice(type.length + mode.length + owner.length + 3);
    if (type !== "d" && type !== "f" && type !== "l") continue;
    const value = type === "f" ? await sha256File(join(tree.dir, path)) : type === "l" ? escapeTarget(fields[i + 1]!) : "-";
    entries.push({ path, type, mode: mode.padStart(4, "0"), owner, value });
  }
  return manifestText(entries);
}

/** The manifest of the ext4 filesystem at `fs`. */
export async function ext4Manifest(fs: string, scratch: string): Promise<string> {
  const tree = await dumpExt4(fs, scratch);
  try {
    return await treeManifest(tree);
  } finally {
    await tree.remove();
  }
}

/**
 * The manifest after a debugfs script of `entries` (builder/disk/debugfs.ts) ran on the
 * filesystem `base` describes: what the image stage writes, without reading the whole
 * filesystem again. `verify` reads the image itself, so a mistake here shows there.
 */
export async function applyEntries(
  base: string,
  entries: { path: string; kind: "dir" | "file" | "symlink"; mode: number; source: string; target?: string }[],
): Promise<string> {
  const manifest = parseManifest(base);
  const mode = (m: number) => (m & 0o7777).toString(8).padStart(4, "0");
  for (const e of entries) {
    if (e.kind === "dir") {
      if (!manifest.has(e.path)) manifest.set(e.path, { path: e.path, type: "d", mode: mode(e.mode), owner: "0:0", value: "-" });
    } else if (e.kind === "file") {
      manifest.set(e.path, { path: e.path, type: "f", mode: mode(e.mode), owner: "0:0", value: await sha256File(e.source) });
    } else {
      manifest.set(e.path, { path: e.path, type: "l", mode: "0777", owner: "0:0", value: escapeTarget(e.target ?? "") });
    }
  }
  return manifestText([...manifest.values()]);
}

/** What differs between two manifests: every path added, removed or changed (with both lines). */
export function compareManifests(expected: string, actual: string): { path: string; expected?: string; actual?: string }[] {
  const want = parseManifest(expected);
  const have = parseManifest(actual);
  const differences: { path: string; expected?: string; actual?: string }[] = [];
  for (const [path, entry] of want) {
    const other = have.get(path);
    if (!other) differences.push({ path, expected: manifestLine(entry) });
    else if (manifestLine(other) !== manifestLine(entry)) differences.push({ path, expected: manifestLine(entry), actual: manifestLine(other) });
  }
  for (const [path, entry] of have) if (!want.has(path)) differences.push({ path, actual: manifestLine(entry) });
  return differences.sort((a, b) => (a.path < b.path ? -1 : 1));
}
