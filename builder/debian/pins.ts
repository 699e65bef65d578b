/** Turning what apt installed into file pins, and re-pinning single packages. */
import { UserError } from "../errors.js";
import { versionGreater, type SuiteIndex } from "./index.js";
import type { PinnedPackage } from "./schema.js";

/** The record of `name` at exactly `version` from the first suite (in preference order) that lists it. */
export function findPin(indexes: SuiteIndex[], name: string, version: string, architecture?: string): PinnedPackage | undefined {
  for (const index of indexes) {
    const entry = index.packages.get(name)?.find((e) => e.version === version && (!architecture || e.architecture === architecture));
    if (entry) {
      const { filename, sha256, size } = entry;
      return { version, architecture: entry.architecture, filename, sha256, size, archive: index.archive.name, suite: index.suite };
    }
  }
  return undefined;
}

/** Pins for an installed set (name -> version, as dpkg reports it). */
export function pinInstalled(installed: Record<string, string>, indexes: SuiteIndex[]): Record<string, PinnedPackage> {
  const pins: Record<string, PinnedPackage> = {};
  const missing: string[] = [];
  for (const [name, version] of Object.entries(installed).sort(([a], [b]) => a.localeCompare(b))) {
    const pin = findPin(indexes, name, version);
    if (pin) pins[name] = pin;
    else missing.push(`${name} ${version}`);
  }
  if (missing.length > 0) {
    throw new UserError(
      `apt installed packages that none of the suites' indexes list: ${missing.join(", ")}`,
      `the archive changed while resolving (indexes of ${indexes.map((i) => i.suite).join(", ")}): run the command again`,
    );
  }
  return pins;
}

/** The newest version of `name` in any of the suites, with its record. */
export async function newestPin(indexes: SuiteIndex[], name: string): Promise<PinnedPackage | undefined> {
  let best: PinnedPackage | undefined;
  for (const index of indexes) {
    for (const entry of index.packages.get(name) ?? []) {
      if (!best || (await versionGreater(entry.version, best.version))) {
        const { version, architecture, filename, sha256, size } = entry;
        best = { version, architecture, filename, sha256, size, archive: index.archive.name, suite: index.suite };
      }
    }
  }
  return best;
}

export interface Moved {
  name: string;
  from?: string;
  to?: string;
  suite?: string;
}

/** What differs between two pin sets, by name (versions and files: a rebuilt file with the same version counts). */
export function movedPackages(before: Record<string, { version: string; sha256?: string }>, after: Record<string, PinnedPackage>): Moved[] {
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  return names
    .filter((n) => before[n]?.version !== after[n]?.version || (before[n]?.sha256 !== undefined && before[n]?.sha256 !== after[n]?.sha256))
    .map((name) => ({ name, from: before[name]?.version, to: after[name]?.version, suite: after[name]?.suite }));
}

export function describeMoved(moved: Moved[]): string[] {
  return moved.map((m) => `${m.name}: ${m.from ?? "(new)"} -> ${m.to ?? "(removed)"}${m.to && m.suite ? ` (${m.suite})` : ""}`);
}

/**
 * Pins for a package that is not pinned yet, plus whatever of its dependency closure the
 * pinned set does not already satisfy (a dependency counts as satisfied by any pinned or
 * added package of that name or providing it; the first alternative that exists is taken).
 * Versions are the newest listed; constraints are left to apt, which installs the set
 * before the lock is written.
 */
export async function pinsToAdd(indexes: SuiteIndex[], name: string, pinned: Record<string, PinnedPackage>): Promise<Record<string, PinnedPackage>> {
  const added: Record<string, PinnedPackage> = {};
  const provided = new Set<string>();
  const entryOf = (pkg: string, version: string) => indexes.flatMap((i) => i.packages.get(pkg) ?? []).find((e) => e.version === version);
  const noteProvides = (pkg: string, pin: PinnedPackage) => {
    for (const virtual of (entryOf(pkg, pin.version)?.provides ?? "").split(",")) if (virtual.trim()) provided.add(virtual.trim().split(/\s/)[0]!);
  };
  for (const [pkg, pin] of Object.entries(pinned)) noteProvides(pkg, pin);
  const satisfied = (pkg: string) => pkg in pinned || pkg in added || provided.has(pkg);
  const listed = (pkg: string) => indexes.some((i) => i.packages.has(pkg));
  const queue = [name];
  while (queue.length > 0) {
    const pkg = queue.shift()!;
    if (satisfied(pkg)) continue;
    const pin = await newestPin(indexes, pkg);
    if (!pin)
      throw new UserError(
        `no suite of the lock's archives lists ${pkg}${pkg === name ? "" : ` (needed by ${name})`}`,
        "check the package name (apt-cache policy NAME on a Debian machine)",
      );
    added[pkg] = pin;
    noteProvides(pkg, pin);
    for (const clause of (entryOf(pkg, pin.version)?.depends ?? "").split(",")) {
      const alternatives = clause
        .split("|")
        .map((a) => a.trim().split(/[\s(:]/)[0]!)
        .filter(Boolean);
      if (alternatives.length === 0 || alternatives.some(satisfied)) continue;
      const choice = alternatives.find(listed);
      if (!choice)
        throw new UserError(
          `${pkg} needs ${clause.trim()}, which no suite of the lock's archives lists`,
          "run 'icn-bootstrap lock' to re-resolve the whole set",
        );
      queue.push(choice);
    }
  }
  return added;
}
