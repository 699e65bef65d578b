/**
 * Role assignment: give every requested role (master[i], worker[j]) its own host that
 * fits, preferring small hosts, deterministically; explain when it cannot be done.
 *
 * A host fits a role when cpu.count >= cpu, RAM >= memory, it has SR-IOV / QAT when the
 * role asks for it (bpa/assign/capabilities.ts), and it has the role's pinned MAC if any.
 * Candidates are the usable hosts (hosts.ts) not claimed by another Provisioning.
 *
 * Cost of giving a host to a role: size(host) * H + rank(host), where rank orders hosts by
 * (size, namespace/name) and H is the number of candidates, so the matching minimises the
 * total size and among equal sizes prefers names that sort first. Each role only
 * needs its R cheapest fitting hosts (R = number of roles): in an optimal assignment a role
 * using a host outside that list could swap to one of its R cheaper hosts that the other
 * R-1 roles leave free, lowering the cost. That keeps 5,000 hosts x 100 roles small.
 */
import { formatBytes, mebibytesToBytes } from "../api/quantity.js";
import { describeRequirement, roleLabel, type RoleRequirement } from "../api/spec.js";
import { hostSize, type HostFacts } from "./hosts.js";
import { minCostMatching, type Edge } from "./matching.js";

export interface PlanInput {
  roles: readonly RoleRequirement[];
  /** Every host the operator sees in scope, usable or not. */
  hosts: readonly HostFacts[];
  /** host key -> the Provisioning (namespace/name) that holds it; the planning one excluded. */
  claimedBy?: ReadonlyMap<string, string>;
}

export interface Placement {
  role: RoleRequirement;
  host: HostFacts;
}

export interface Unmet {
  role: RoleRequirement;
  /** One sentence for the status condition. */
  message: string;
}

export type PlanResult = { ok: true; placements: Placement[]; cost: number } | { ok: false; unmet: Unmet[]; message: string; placements: Placement[] };

export function fits(role: RoleRequirement, host: HostFacts): boolean {
  return (
    host.cpu >= role.cpu &&
    mebibytesToBytes(host.ramMebibytes) >= role.memoryBytes &&
    (!role.sriov || host.sriov.value) &&
    (!role.qat || host.qat.value) &&
    (!role.mac || host.macs.has(role.mac))
  );
}

/** Candidates in preference order: by size, then namespace/name. */
export function orderHosts(hosts: readonly HostFacts[]): HostFacts[] {
  return [...hosts].sort((a, b) => hostSize(a) - hostSize(b) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** The cost function of the matching, exported so the brute-force reference uses the same one. */
export function costOf(ordered: readonly HostFacts[]): Map<string, number> {
  const cost = new Map<string, number>();
  ordered.forEach((h, rank) => cost.set(h.key, hostSize(h) * ordered.length + rank));
  return cost;
}

export function planAssignment(input: PlanInput): PlanResult {
  const claimedBy = input.claimedBy ?? new Map<string, string>();
  const candidates = orderHosts(input.hosts.filter((h) => !h.unusable && !claimedBy.has(h.key)));
  const cost = costOf(candidates);
  const roles = input.roles;
  const limit = roles.length;

  // Each role's R cheapest fitting hosts; columns are the union, in preference order.
  const columnOf = new Map<string, number>();
  const perRole: HostFacts[][] = roles.map((role) => {
    const list: HostFacts[] = [];
    for (const host of candidates) {
      if (fits(role, host)) {
        list.push(host);
        if (list.length >= limit) break;
      }
    }
    return list;
  });
  const used = new Set<HostFacts>(perRole.flat());
  const columnHosts = candidates.filter((h) => used.has(h));
  columnHosts.forEach((h, i) => columnOf.set(h.key, i));
  const adjacency: Edge[][] = perRole.map((list) => list.map((h) => ({ col: columnOf.get(h.key)!, cost: cost.get(h.key)! })));

  const result = minCostMatching(adjacency, columnHosts.length);
  const placements: Placement[] = [];
  roles.forEach((role, r) => {
    const col = result.rowToCol[r]!;
    if (col >= 0) placements.push({ role, host: columnHosts[col]! });
  });
  if (result.unmatchedRows.length === 0) return { ok: true, placements, cost: result.totalCost };

  const unmet = result.unmatchedRows.map((r) => explain(r, roles, perRole, adjacency, result.colToRow, columnHosts, input.hosts, claimedBy));
  return { ok: false, unmet, placements, message: unmet.map((u) => u.message).join("; ") };
}

function describeHost(h: HostFacts, role?: RoleRequirement): string {
  const parts = [`${h.cpu} cpu`, formatBytes(mebibytesToBytes(h.ramMebibytes))];
  if (!role || role.sriov) parts.push(h.sriov.value ? "sriov" : "no sriov");
  if (!role || role.qat) parts.push(h.qat.value ? "qat" : "no qat");
  return `${h.name} (${parts.join(", ")})`;
}

/** How far a host is from fitting a role: 0 when it fits. */
function shortfall(role: RoleRequirement, h: HostFacts): number {
  let s = 0;
  if (h.cpu < role.cpu) s += (role.cpu - h.cpu) / Math.max(role.cpu, 1);
  const ram = mebibytesToBytes(h.ramMebibytes);
  if (ram < role.memoryBytes) s += (role.memoryBytes - ram) / Math.max(role.memoryBytes, 1);
  if (role.sriov && !h.sriov.value) s += 1;
  if (role.qat && !h.qat.value) s += 1;
  if (role.mac && !h.macs.has(role.mac)) s += 10;
  return s;
}

function closest(role: RoleRequirement, pool: readonly HostFacts[], count = 3): HostFacts[] {
  return orderHosts(pool)
    .map((h, order) => ({ h, s: shortfall(role, h), order }))
    .sort((a, b) => a.s - b.s || a.order - b.order)
    .slice(0, count)
    .map((x) => x.h);
}

function explain(
  row: number,
  roles: readonly RoleRequirement[],
  perRole: HostFacts[][],
  adjacency: Edge[][],
  colToRow: Int32Array,
  columnHosts: HostFacts[],
  allHosts: readonly HostFacts[],
  claimedBy: ReadonlyMap<string, string>,
): Unmet {
  const role = roles[row]!;
  const label = roleLabel(role);
  const needs = describeRequirement(role);

  // Hosts that would fit but may not be used, and why.
  const blocked = allHosts
    .filter((h) => fits(role, h) && (h.unusable || claimedBy.has(h.key)))
    .map((h) => `${h.name}: ${h.unusable ?? `claimed by ${claimedBy.get(h.key)}`}`);
  const blockedNote = blocked.length
    ? `; hosts that fit but cannot be used: ${blocked.slice(0, 5).join(", ")}${blocked.length > 5 ? `, and ${blocked.length - 5} more` : ""}`
    : "";
  // Hosts that cannot be judged yet (not inspected): they may fit once Metal3 has their details.
  const uninspected = allHosts.filter((h) => !h.cpu && !claimedBy.has(h.key)).map((h) => h.name);
  const uninspectedNote = uninspected.length
    ? `; hosts without hardware details yet (status.hardware, HardwareData): ${uninspected.slice(0, 5).join(", ")}${uninspected.length > 5 ? `, and ${uninspected.length - 5} more` : ""}`
    : "";

  if (perRole[row]!.length === 0) {
    const pool = allHosts.filter((h) => !h.unusable && !claimedBy.has(h.key));
    const near = closest(role, pool);
    const nearNote = near.length ? `closest: ${near.map((h) => describeHost(h, role)).join(", ")}` : "there are no unclaimed provisioned hosts";
    return {
      role,
      message: `${label} needs ${needs}: no unclaimed provisioned host has it; ${nearNote}${blockedNote}${uninspectedNote}`,
    };
  }

  // Every role it competes with: the alternating tree from this row (Hall's condition fails there).
  const rows = new Set<number>([row]);
  const cols = new Set<number>();
  const queue = [row];
  while (queue.length) {
    const r = queue.shift()!;
    for (const { col } of adjacency[r]!) {
      if (cols.has(col)) continue;
      cols.add(col);
      const owner = colToRow[col]!;
      if (owner >= 0 && !rows.has(owner)) {
        rows.add(owner);
        queue.push(owner);
      }
    }
  }
  const group = [...rows].sort((a, b) => a - b).map((r) => roleLabel(roles[r]!));
  const hosts = [...cols].sort((a, b) => a - b).map((c) => columnHosts[c]!.name);
  return {
    role,
    message:
      `${label} needs ${needs}: ${group.join(", ")} need ${rows.size} distinct hosts but only ` +
      `${hosts.length} unclaimed provisioned host${hosts.length === 1 ? "" : "s"} fit${hosts.length === 1 ? "s" : ""} them (${hosts.join(", ")})${blockedNote}`,
  };
}
