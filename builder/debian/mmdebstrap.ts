/**
 * The one way the builder runs mmdebstrap, for the root filesystem, the images' base
 * and the C toolchain alike:
 * - pinned: from a local repository of exactly the lock's files (withLocalRepo), every
 *   package named with its version;
 * - resolving (`icn-bootstrap lock`): the newest versions in the archives' suites.
 * Either way the result's /etc/apt/sources.list names the real archives, so the bytes
 * of a pinned build do not depend on the local repository's port.
 */
import { stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { UserError } from "../errors.js";
import type { StageRun } from "../stage.js";
import { ensureSetDebs } from "./fetch.js";
import { withLocalRepo } from "./local-repo.js";
import { sourcesLines, type DebianSources, type PinnedPackage } from "./schema.js";

export type PackageChoice = { pinned: Record<string, PinnedPackage> } | { resolve: string[] };

export interface MmdebstrapRun {
  /** With `snapshot` and `indexes`, a pinned file missing from the cache is fetched (pool, then snapshot); without, it fails. */
  sources: Pick<DebianSources, "suite" | "archives" | "components" | "keyring"> & Partial<Pick<DebianSources, "snapshot" | "indexes">>;
  variant: "apt" | "minbase" | "custom";
  /** `chrootless` installs with the host's dpkg (no dpkg needed in the set): the toy archives of the tests. */
  mode?: "unshare" | "chrootless";
  format: "tar" | "null" | "directory";
  target: string;
  dpkgOptions?: string[];
  customizeHooks?: string[];
  env?: Record<string, string>;
}

/**
 * The directory mmdebstrap makes its chroot in. Its unshare mode runs apt as mapped
 * users; when they cannot traverse TMPDIR (a private one, as pam_tmpdir or a test's
 * scratch directory makes, mode 0700), apt downloads unsandboxed and leaves its
 * `partial` folders to root instead of _apt: the same lock would give a different image.
 * Such a TMPDIR is passed over for /tmp.
 */
export async function chrootParent(): Promise<string> {
  const candidates = [tmpdir(), "/tmp"];
  for (const dir of candidates) {
    const info = await stat(dir).catch(() => undefined);
    if (info?.isDirectory() && (info.mode & 0o001) !== 0) return dir;
  }
  throw new UserError(
    `neither ${candidates.join(" nor ")} can be entered by other users, which mmdebstrap's unshare mode needs`,
    "set TMPDIR to a directory with mode 1777 or 0755 (e.g. /var/tmp)",
  );
}

export async function mmdebstrap(exec: StageRun["exec"], run: MmdebstrapRun, choice: PackageChoice): Promise<void> {
  const env = { ...run.env, TMPDIR: await chrootParent() };
  const quote = (word: string) => `'${word.replace(/'/g, "'\\''")}'`;
  const writeSources = `mkdir -p "$1"/etc/apt && printf '%s\\n' ${sourcesLines(run.sources).map(quote).join(" ")} > "$1"/etc/apt/sources.list && rm -f "$1"/etc/apt/sources.list.d/*.sources "$1"/etc/apt/sources.list.d/*.list`;
  const args = (include: string[], mirrors: string[]) => [
    `--mode=${run.mode ?? "unshare"}`,
    `--variant=${run.variant}`,
    `--format=${run.format}`,
    ...(run.sources.keyring ? [`--keyring=${run.sources.keyring}`] : []),
    ...(include.length > 0 ? [`--include=${include.join(",")}`] : []),
    ...(run.dpkgOptions ?? []).map((rule) => `--dpkgopt=${rule}`),
    ...[writeSources, ...(run.customizeHooks ?? [])].map((hook) => `--customize-hook=${hook}`),
    run.sources.suite,
    run.target,
    ...mirrors,
  ];
  if ("resolve" in choice) {
    await exec("mmdebstrap", args(choice.resolve, sourcesLines(run.sources)), { env });
    return;
  }
  const { snapshot, indexes } = run.sources;
  if (indexes) await ensureSetDebs(choice.pinned, { archives: run.sources.archives, snapshot: snapshot ?? "", indexes });
  const include = Object.entries(choice.pinned).map(([name, pin]) => `${name}=${pin.version}`);
  await withLocalRepo(run.sources.suite, choice.pinned, (line) => exec("mmdebstrap", args(include, [line]), { env }));
}

/** This module's path: stages that install through it hash it into their cache key. */
export const MMDEBSTRAP_MODULE = import.meta.filename;
