/**
 * The assignment of a Provisioning whose cluster is installed: installed hosts keep their
 * roles and never move (even when an edited entry no longer fits them); a pinned worker
 * entry keeps the installed worker with its MAC at any position, the other entries keep
 * the installed host of their position; an entry without one keeps the host already held
 * for it when that is still good, else gets a free host that fits (planAssignment).
 * Installed hosts no entry keeps are "retained": still claimed until their removal succeeded.
 */
import type { RoleRequirement } from "../api/spec.js";
import type { AssignedHost, BareMetalHost } from "../api/types.js";
import { toAssignedHost, type HostFacts } from "./hosts.js";
import { fits, planAssignment } from "./plan.js";

export interface GrowInput {
  roles: readonly RoleRequirement[];
  /** The installed cluster's hosts. */
  installed: readonly AssignedHost[];
  /** The assignment held before (status or memory): new roles keep their hosts when still good. */
  held: readonly AssignedHost[];
  facts: readonly HostFacts[];
  bmhs: readonly BareMetalHost[];
  /** host key -> the other Provisioning that holds it. */
  claimedBy: ReadonlyMap<string, string>;
}

export type GrowResult = { ok: true; hosts: AssignedHost[]; retained: AssignedHost[]; added: AssignedHost[] } | { ok: false; unmet: string };

const keyOf = (h: Pick<AssignedHost, "namespace" | "name">) => `${h.namespace}/${h.name}`;
const samePosition = (h: AssignedHost, r: RoleRequirement) => h.role === r.role && h.index === r.index;

export function growAssignment(input: GrowInput): GrowResult {
  const { roles, installed } = input;
  const factsByKey = new Map(input.facts.map((f) => [f.key, f]));
  const hasMac = (h: AssignedHost, mac: string) => h.mac === mac || Boolean(factsByKey.get(keyOf(h))?.macs.has(mac));
  const members = new Map<RoleRequirement, AssignedHost>();
  const used = new Set<string>();
  const take = (r: RoleRequirement, h: AssignedHost) => {
    members.set(r, h.index === r.index ? h : { ...h, index: r.index });
    used.add(keyOf(h));
  };
  // Pinned worker entries first: the installed worker with their MAC, wherever it was.
  for (const r of roles.filter((x) => x.role === "worker" && x.mac)) {
    const h = installed.find((x) => x.role === "worker" && !used.has(keyOf(x)) && hasMac(x, r.mac!));
    if (h) take(r, h);
  }
  // Then by position; a master keeps its position (kubespray's first control plane stays first).
  for (const r of roles.filter((x) => !members.has(x))) {
    const h = installed.find((x) => samePosition(x, r) && !used.has(keyOf(x)));
    if (h && (!r.mac || r.role === "master" || hasMac(h, r.mac))) take(r, h);
  }
  const installedKeys = new Set(installed.map(keyOf));
  const kept: AssignedHost[] = [...members.values()];
  const open = roles.filter((r) => {
    if (members.has(r)) return false;
    const h = input.held.find((x) => samePosition(x, r) && !installedKeys.has(keyOf(x)));
    const f = h && factsByKey.get(keyOf(h));
    if (h && f && !f.unusable && !input.claimedBy.has(f.key) && fits(r, f)) {
      kept.push(h);
      return false;
    }
    return true;
  });
  let hosts = kept;
  if (open.length) {
    const taken = new Set([...kept, ...installed].map(keyOf));
    const result = planAssignment({ roles: open, hosts: input.facts.filter((f) => !taken.has(f.key)), claimedBy: input.claimedBy });
    if (!result.ok) return { ok: false, unmet: result.message };
    const bmhByKey = new Map(input.bmhs.map((b) => [`${b.metadata.namespace}/${b.metadata.name}`, b]));
    hosts = [...kept, ...result.placements.map(({ role, host }) => toAssignedHost(role, host, bmhByKey.get(host.key)!))];
  }
  hosts.sort((a, b) => (a.role === b.role ? a.index - b.index : a.role === "master" ? -1 : 1));
  const wanted = new Set(hosts.map(keyOf));
  return {
    ok: true,
    hosts,
    retained: installed.filter((h) => !wanted.has(keyOf(h))),
    added: hosts.filter((h) => !installedKeys.has(keyOf(h))),
  };
}
