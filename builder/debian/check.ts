/**
 * `icn-bootstrap lock --check`: how old the Debian pins are, without building. For each
 * pinned file: still listed by today's index, or only in the pool, only in the snapshot
 * archive, only in this machine's cache, or gone; and which pinned packages the security
 * archive has a newer version of.
 */
import { ContentStore } from "../cache.js";
import type { LockFile } from "../lockfile.js";
import { debianSets } from "../lockfile.js";
import { locationsOf } from "./fetch.js";
import { versionGreater, type SuiteIndex } from "./index.js";
import { findPin } from "./pins.js";
import type { PinnedPackage } from "./schema.js";

export type PinState = "indexed" | "pool" | "snapshot" | "cache" | "gone";

export interface LockAge {
  suites: { suite: string; pinned?: string; now: string }[];
  /** Each distinct pinned file once (a package in two sets at the same file counts once). */
  pins: { name: string; pin: PinnedPackage; sets: string[]; state: PinState }[];
  securityUpdates: { name: string; from: string; to: string }[];
}

/**
 * Exit status bits of `lock --check` (0: every pin indexed, no update waiting, no known
 * vulnerability, every component in support; 1: the check itself failed).
 */
export const CHECK_EXIT = {
  /** Some advisory data was not available (offline without a cache): nothing is claimed fine that was not checked. */
  unknown: 2,
  notIndexed: 4,
  /** Updates waiting: newer versions in the security archive, or newer patch releases of a pinned line. */
  securityUpdates: 8,
  cacheOnly: 16,
  gone: 32,
  /** A pinned version has a known vulnerability. */
  vulnerable: 64,
  /** A pinned component's upstream support window has ended. */
  outOfSupport: 128,
} as const;

export async function checkLock(lock: LockFile, indexes: SuiteIndex[], store = new ContentStore()): Promise<LockAge> {
  const byFile = new Map<string, { name: string; pin: PinnedPackage; sets: string[] }>();
  for (const set of debianSets(lock)) {
    for (const [name, pin] of Object.entries(set.packages)) {
      const seen = byFile.get(pin.sha256);
      if (seen) seen.sets.push(set.name);
      else byFile.set(pin.sha256, { name, pin, sets: [set.name] });
    }
  }
  const pins: LockAge["pins"] = [];
  const queue = [...byFile.values()];
  const worker = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) pins.push({ ...next, state: await stateOf(next.name, next.pin, lock, indexes, store) });
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  pins.sort((a, b) => a.name.localeCompare(b.name) || a.pin.version.localeCompare(b.pin.version));

  const securityUpdates: LockAge["securityUpdates"] = [];
  const security = indexes.filter((i) => i.archive.name === "security");
  for (const { name, pin } of pins) {
    let newest: string | undefined;
    for (const index of security) {
      for (const entry of index.packages.get(name) ?? []) {
        if (entry.architecture === pin.architecture && (await versionGreater(entry.version, newest ?? pin.version))) newest = entry.version;
      }
    }
    if (newest && !securityUpdates.some((u) => u.name === name && u.to === newest)) securityUpdates.push({ name, from: pin.version, to: newest });
  }
  const suites = indexes.map((i) => ({ suite: i.suite, pinned: lock.debian.indexes[i.suite], now: i.date }));
  return { suites, pins, securityUpdates };
}

async function stateOf(name: string, pin: PinnedPackage, lock: LockFile, indexes: SuiteIndex[], store: ContentStore): Promise<PinState> {
  if (findPin(indexes, name, pin.version, pin.architecture)?.sha256 === pin.sha256) return "indexed";
  for (const place of locationsOf(pin, lock.debian)) {
    if (await exists(place.url)) return place.source;
  }
  return (await store.has(pin.sha256)) ? "cache" : "gone";
}

async function exists(url: string): Promise<boolean> {
  try {
    const response = await fetch(url, { method: "HEAD", redirect: "follow", signal: AbortSignal.timeout(30_000) });
    return response.ok;
  } catch {
    return false;
  }
}

export function exitStatus(age: LockAge): number {
  const has = (state: PinState) => age.pins.some((p) => p.state === state);
  return (
    (has("pool") || has("snapshot") ? CHECK_EXIT.notIndexed : 0) |
    (age.securityUpdates.length > 0 ? CHECK_EXIT.securityUpdates : 0) |
    (has("cache") ? CHECK_EXIT.cacheOnly : 0) |
    (has("gone") ? CHECK_EXIT.gone : 0)
  );
}

export function describeAge(age: LockAge): string[] {
  const count = (state: PinState) => age.pins.filter((p) => p.state === state);
  const lines = age.suites.map((s) => `${s.suite}: pinned against the index of ${s.pinned ?? "(not pinned)"}; today's index: ${s.now}`);
  lines.push(
    "",
    `${age.pins.length} pinned files:`,
    `  ${count("indexed").length} still listed by today's index`,
    `  ${count("pool").length} only in the pool (the index moved on; builds fetch them by pool path)`,
    `  ${count("snapshot").length} only in the snapshot archive`,
    `  ${count("cache").length} only in this machine's cache (a fresh machine cannot build)`,
    `  ${count("gone").length} gone (builds fail)`,
  );
  for (const state of ["pool", "snapshot", "cache", "gone"] as const) {
    for (const p of count(state)) lines.push(`    ${state}: ${p.name} ${p.pin.version} (${p.sets.join(", ")})`);
  }
  lines.push(
    "",
    age.securityUpdates.length === 0
      ? "no newer versions in the security archive"
      : `${age.securityUpdates.length} pinned packages have a newer version in the security archive:`,
  );
  for (const u of age.securityUpdates) lines.push(`  ${u.name}: ${u.from} -> ${u.to}`);
  if (age.securityUpdates.length > 0) lines.push(`  take them with: icn-bootstrap lock --update ${age.securityUpdates.map((u) => u.name).join(" ")}`);
  return lines;
}
