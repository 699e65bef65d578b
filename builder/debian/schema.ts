import { z } from "zod";

/**
 * Debian in the lock file: every package is pinned as a FILE (pool path, sha256, size),
 * read from the archive's signed index when the lock was made, so a build never asks
 * today's index for anything: it fetches exactly those files (cache, pool, snapshot).
 */

const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "a sha256 digest (64 lowercase hex digits)");

/** One archive (the main one, the security one): where its indexes and pool live. */
export const DebianArchive = z
  .object({
    /** `main` or `security`: what the pins call it. */
    name: z.string().regex(/^[a-z][a-z0-9-]*$/),
    url: z.string().url(),
    /** Suites resolved against, in order of preference (a version listed in two comes from the first). */
    suites: z.array(z.string().min(1)).min(1),
    /** The archive's name on the snapshot service (`debian`, `debian-security`). */
    snapshotName: z.string().min(1),
  })
  .strict();
export type DebianArchive = z.infer<typeof DebianArchive>;

export const PinnedPackage = z
  .object({
    version: z.string().min(1),
    architecture: z.string().min(1),
    /** The pool path (`Filename` of the index), relative to the archive's URL. */
    filename: z.string().regex(/^pool\/\S+\.deb$/, "a pool path such as pool/main/n/nginx/nginx_1.26.3-3_amd64.deb"),
    sha256: Sha256Hex,
    size: z.number().int().nonnegative(),
    /** Which archive and suite listed it when it was pinned. */
    archive: z.string().min(1),
    suite: z.string().min(1),
    /** The Date of the index that listed it, when it was re-pinned later than debian.indexes says (lock --update NAME). */
    date: z.string().optional(),
  })
  .strict();
export type PinnedPackage = z.infer<typeof PinnedPackage>;

/** A package set: what was asked for, and the full installed set as files. */
export const PinnedSet = z
  .object({
    requested: z.array(z.string()),
    packages: z.record(z.string(), PinnedPackage),
  })
  .strict();
export type PinnedSet = z.infer<typeof PinnedSet>;

/** Where the pins come from: shared by the root filesystem and the images' sets. */
export const DebianSources = z
  .object({
    suite: z.string().min(1),
    architecture: z.string().default("amd64"),
    components: z.array(z.string()).min(1),
    archives: z.array(DebianArchive).min(1),
    /** Base URL of a snapshot archive (`<snapshot>/<snapshotName>/<timestamp>/<pool path>`); empty: none. */
    snapshot: z.string().default(""),
    /** The `Date` of each suite's signed index when the lock was made: the archive state pinned. */
    indexes: z.record(z.string(), z.string()),
    /** OpenPGP keyring that verifies the indexes (default: the host's Debian archive keyring). */
    keyring: z.string().optional(),
  })
  .strict();
export type DebianSources = z.infer<typeof DebianSources>;

export const DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg";
export const DEFAULT_MIRROR = "http://deb.debian.org/debian";
export const DEFAULT_SECURITY_MIRROR = "http://security.debian.org/debian-security";
export const DEFAULT_SNAPSHOT = "https://snapshot.debian.org/archive";

/** The archives a definition resolves against: the suite, its updates, and the security archive (each optional). */
export function defaultArchives(suite: string, opts: { mirror?: string; securityMirror?: string; updates: boolean; security: boolean }): DebianArchive[] {
  const archives: DebianArchive[] = [
    { name: "main", url: opts.mirror ?? DEFAULT_MIRROR, suites: [suite, ...(opts.updates ? [`${suite}-updates`] : [])], snapshotName: "debian" },
  ];
  if (opts.security)
    archives.push({ name: "security", url: opts.securityMirror ?? DEFAULT_SECURITY_MIRROR, suites: [`${suite}-security`], snapshotName: "debian-security" });
  return archives;
}

/** name -> version, for messages and diffs. */
export function versionsOf(packages: Record<string, PinnedPackage>): Record<string, string> {
  return Object.fromEntries(Object.entries(packages).map(([name, pin]) => [name, pin.version]));
}

/** The one-line sources.list entries of the archives (what an image's /etc/apt/sources.list says). */
export function sourcesLines(sources: Pick<DebianSources, "archives" | "components">): string[] {
  return sources.archives.flatMap((a) => a.suites.map((suite) => `deb ${a.url.replace(/\/$/, "")} ${suite} ${sources.components.join(" ")}`));
}
