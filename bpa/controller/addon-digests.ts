/**
 * The chart digest each addon installs, and the tags that moved under one. An addon installs,
 * in this order: the digest its spec.addons entry names; the digest status.addons recorded for
 * it at the same chart and version (it stays as long as they stay); else what the version's
 * tag names now, which is then recorded. A tag that names another digest than the recorded one
 * is shown (status.addons[].tagDigest) and reported, never followed: taking the new chart is
 * a change of spec.addons (its digest, or a new version). Pure: the registry's answers come in.
 */
import type { PinnedAddon, ResolvedAddon } from "../api/addons.js";
import { withDigest } from "../api/addons.js";
import type { AddonStatus } from "../api/types.js";
import { chartRef, tagKey, type TagLookup, type TagLookups } from "./chart-registry.js";

export interface Unresolved {
  name: string;
  chart: string;
  version: string;
  problem: string;
}

export function pinAddons(
  addons: readonly ResolvedAddon[],
  status: readonly AddonStatus[],
  tags: TagLookups,
): { pinned: PinnedAddon[]; unresolved: Unresolved[] } {
  const pinned: PinnedAddon[] = [];
  const unresolved: Unresolved[] = [];
  for (const a of addons) {
    const recorded = status.find((s) => s.name === a.name && s.chart === a.chart && s.version === a.version && s.digest)?.digest;
    const tag = tags.get(tagKey(a.chart, a.version));
    const digest = a.digest ?? recorded ?? (tag && "digest" in tag ? tag.digest : undefined);
    if (digest) pinned.push(withDigest(a, digest));
    else unresolved.push({ name: a.name, chart: a.chart, version: a.version, problem: problem(tag) });
  }
  return { pinned, unresolved };
}

function problem(tag: TagLookup | undefined): string {
  if (!tag) return "not looked up";
  if ("missing" in tag) return tag.missing;
  return "error" in tag ? tag.error : "";
}

/**
 * status.addons with tagDigest set where the entry's tag now names another digest than the
 * entry's own, and cleared where it names the same again. Entries whose tag was not looked up,
 * or could not be read this time, keep what they said.
 */
export function markMovedTags(status: readonly AddonStatus[], tags: TagLookups): AddonStatus[] {
  return status.map((s) => {
    const tag = s.digest ? tags.get(tagKey(s.chart, s.version)) : undefined;
    if (!tag || !("digest" in tag)) return s;
    if (tag.digest !== s.digest) return s.tagDigest === tag.digest ? s : { ...s, tagDigest: tag.digest };
    if (s.tagDigest === undefined) return s;
    const { tagDigest: _gone, ...rest } = s;
    return rest;
  });
}

/** One addon's moved tag, for the Event and the AddonsReady condition. */
export const describeMovedTag = (s: AddonStatus) =>
  `${s.name}: ${chartRef(s.chart, s.version)} now names ${s.tagDigest}; the addon keeps ${s.digest} ` +
  `(to take the new chart, check who published it and name digest ${s.tagDigest} in spec.addons, or publish a new version)`;
