import { createHash, randomBytes } from "node:crypto";
import { copyFile, mkdir, rename, rm, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { sha256File } from "../common/hash.js";
import { UserError } from "./errors.js";

/** Root of every cache the builder keeps: `$ICN_BOOTSTRAP_CACHE` or `~/.cache/icn-bootstrap`. */
export function cacheRoot(): string {
  return process.env.ICN_BOOTSTRAP_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "icn-bootstrap");
}

export function sha256Text(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** A unique sibling path for writing something that is renamed into place when complete. */
export function tempSibling(path: string): string {
  return `${path}.partial-${process.pid}-${randomBytes(3).toString("hex")}`;
}

/**
 * The content-addressed store: files named by their sha256 under `<root>/sha256/`.
 * Every `get` re-hashes the file, so a corrupted entry is caught (and removed)
 * instead of ending up in an image.
 */
export class ContentStore {
  constructor(readonly root: string = join(cacheRoot(), "sha256")) {}

  pathOf(digest: string): string {
    const hex = normalizeDigest(digest);
    return join(this.root, hex.slice(0, 2), hex);
  }

  async has(digest: string): Promise<boolean> {
    try {
      await stat(this.pathOf(digest));
      return true;
    } catch {
      return false;
    }
  }

  /** Returns the verified path of an entry, or undefined when absent. Throws on corruption. */
  async get(digest: string, what = digest): Promise<string | undefined> {
    const path = this.pathOf(digest);
    if (!(await this.has(digest))) return undefined;
    const actual = await sha256File(path);
    if (actual !== normalizeDigest(digest)) {
      await rm(path, { force: true });
      throw new UserError(
        `cache entry for ${what} is corrupted: expected sha256 ${normalizeDigest(digest)}, found ${actual}`,
        "the bad entry was removed; run the command again to rebuild or re-download it",
      );
    }
    return path;
  }

  /**
   * Adds a file (moved when `move` is set, else copied). With `expected`, a digest
   * mismatch throws and nothing is stored.
   */
  async put(file: string, opts: { expected?: string; what?: string; move?: boolean } = {}): Promise<string> {
    const actual = await sha256File(file);
    if (opts.expected && normalizeDigest(opts.expected) !== actual) {
      throw new UserError(
        `sha256 mismatch for ${opts.what ?? file}: expected ${normalizeDigest(opts.expected)}, got ${actual}`,
        "check the pinned digest in the lock file, or the source it was fetched from",
      );
    }
    const target = this.pathOf(actual);
    await mkdir(dirname(target), { recursive: true });
    const temp = tempSibling(target);
    if (opts.move) await rename(file, temp);
    else await copyFile(file, temp);
    await rename(temp, target);
    return actual;
  }
}

export function normalizeDigest(digest: string): string {
  const hex = digest.startsWith("sha256:") ? digest.slice(7) : digest;
  if (!/^[0-9a-f]{64}$/.test(hex))
    throw new UserError(`not a sha256 digest: ${JSON.stringify(digest)}`, "use 64 lowercase hex digits, optionally prefixed with 'sha256:'");
  return hex;
}
