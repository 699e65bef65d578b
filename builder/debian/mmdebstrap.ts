/**
 * The one way the builder runs mmdebstrap, for the root filesystem, the images' base
 * and the C toolchain alike:
 * - pinned: from a local repository of exactly the lock's files (withLocalRepo), every
 *   package named with its version;
 * - resolving (`icn-bootstrap lock`): the newest versions in the archives' suites.
 * Either way the result's /etc/apt/sources.list names the real archives, so the bytes
 * of a pinned build do not depend on the local repository's port.
 */
import type { StageRun } from "../stage.js";
import { withLocalRepo } from "./local-repo.js";
import { sourcesLines, type DebianSources, type PinnedPackage } from "./schema.js";

export type PackageChoice = { pinned: Record<string, PinnedPackage> } | { resolve: string[] };

export interface MmdebstrapRun {
  sources: Pick<DebianSources, "suite" | "archives" | "components" | "keyring">;
  variant: "apt" | "minbase" | "custom";
  /** `chrootless` installs with the host's dpkg (no dpkg needed in the set): the toy archives of the tests. */
  mode?: "unshare" | "chrootless";
  format: "tar" | "null" | "directory";
  target: string;
  dpkgOptions?: string[];
  customizeHooks?: string[];
  env?: Record<string, string>;
}

export async function mmdebstrap(exec: StageRun["exec"], run: MmdebstrapRun, choice: PackageChoice): Promise<void> {
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
    await exec("mmdebstrap", args(choice.resolve, sourcesLines(run.sources)), { env: run.env });
    return;
  }
  const include = Object.entries(choice.pinned).map(([name, pin]) => `${name}=${pin.version}`);
  await withLocalRepo(run.sources.suite, choice.pinned, (line) => exec("mmdebstrap", args(include, [line]), { env: run.env }));
}

/** This module's path: stages that install through it hash it into their cache key. */
export const MMDEBSTRAP_MODULE = import.meta.filename;
