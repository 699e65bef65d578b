/**
 * The file server's tree as one file, for the chart's own file server on a Kubernetes of
 * one's own (serve.files; docs/developer-path.md): kubespray's files (files_repo,
 * kubespray/), the deploy ramdisk (boot/) and the compute nodes' OS images (os-images/),
 * exactly as the appliance serves them from /srv/icn-bootstrap/files, in one tar with
 * fixed times and owners. `icn-bootstrap deploy --files` unpacks it into the file
 * server's store (builder/deploy-files.ts).
 */
import { readdir } from "node:fs/promises";
import { join, relative } from "node:path";
import * as tar from "tar";
import { FILES_ROOT } from "./stages/files.js";

export const FILES_BUNDLE_SUFFIX = "-files.tar";

/**
 * Writes the served trees of the given stage outputs (each `<dir>/tree/srv/icn-bootstrap/files`)
 * into `file`, as one tree (same bytes for the same trees). Two trees holding the same
 * path are a build error, named.
 */
export async function writeFilesBundle(stageDirs: string[], file: string): Promise<{ files: number }> {
  const owner = new Map<string, string>();
  const trees: { root: string; members: string[] }[] = [];
  for (const dir of stageDirs) {
    const root = join(dir, "tree", FILES_ROOT);
    const members = (await readdir(root, { recursive: true, withFileTypes: true }).catch(() => []))
      .filter((entry) => !entry.isDirectory())
      .map((entry) => relative(root, join(entry.parentPath, entry.name)))
      .sort();
    for (const member of members) {
      if (owner.has(member)) throw new Error(`files bundle: ${member} is served by two stages (${owner.get(member)} and ${dir})`);
      owner.set(member, dir);
    }
    if (members.length) trees.push({ root, members });
  }
  if (trees.length === 0) throw new Error("files bundle: the stages serve no file");
  const [first, ...rest] = trees;
  // Every file whole, hard links too (the files stage links some): node-tar's own hard-link
  // entries broke its writer ("write after end") when a link sorted before its target.
  const options = { portable: true, mtime: new Date(0), noDirRecurse: true, linkCache: new NoHardLinks() };
  await tar.create({ ...options, file, cwd: first!.root }, first!.members);
  for (const tree of rest) await tar.replace({ ...options, file, cwd: tree.root }, tree.members);
  return { files: owner.size };
}

/** A link cache that never remembers: tar writes each path as a file of its own. */
class NoHardLinks extends Map<never, string> {
  override get(): undefined {
    return undefined;
  }
}
