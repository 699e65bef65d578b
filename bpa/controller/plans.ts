/**
 * The assignment each Provisioning holds, and so which hosts are claimed. Rebuilt from
 * the Provisionings' status.assignedHosts when the operator starts, updated in memory
 * when a plan is made (before its status is written), so that two Provisionings planned
 * one after the other never get the same host. Planning reads and updates this map
 * without awaiting in between: Node runs it as one uninterrupted step.
 */
import type { AssignedHost, Provisioning } from "../api/types.js";

export interface Plan {
  specHash: string;
  hosts: AssignedHost[];
  /** Hosts still in the installed cluster that the spec no longer wants: claimed until their removal succeeded. */
  retained?: AssignedHost[];
}

const claimed = (plan: Plan) => [...plan.hosts, ...(plan.retained ?? [])];

export const hostKey = (h: Pick<AssignedHost, "namespace" | "name">) => `${h.namespace}/${h.name}`;

export class PlanRegistry {
  private readonly plans = new Map<string, Plan>();
  private readonly owners = new Map<string, string>();

  /** Loads plans from status; on a conflicting claim the older Provisioning keeps the host. */
  load(provisionings: readonly Provisioning[]): void {
    const sorted = [...provisionings].sort((a, b) => String(a.metadata.creationTimestamp ?? "").localeCompare(String(b.metadata.creationTimestamp ?? "")));
    for (const p of sorted) {
      const key = `${p.metadata.namespace}/${p.metadata.name}`;
      const hosts = p.status?.assignedHosts ?? [];
      if (!p.status?.specHash || hosts.length === 0 || this.plans.has(key)) continue;
      const wanted = new Set(hosts.map(hostKey));
      const retained = (p.status.cluster?.hosts ?? []).filter((h) => !wanted.has(hostKey(h)));
      if ([...hosts, ...retained].some((h) => this.owners.has(hostKey(h)))) continue;
      this.set(key, { specHash: p.status.specHash, hosts, ...(retained.length ? { retained } : {}) });
    }
  }

  get(key: string): Plan | undefined {
    return this.plans.get(key);
  }

  /** Records a plan; returns the hosts the key held before and no longer holds. */
  set(key: string, plan: Plan): string[] {
    const before = this.release(key);
    this.plans.set(key, plan);
    for (const h of claimed(plan)) this.owners.set(hostKey(h), key);
    const kept = new Set(claimed(plan).map(hostKey));
    return before.filter((h) => !kept.has(h));
  }

  /** Forgets the key's plan; returns the hosts it held. */
  release(key: string): string[] {
    const old = this.plans.get(key);
    if (!old) return [];
    const released: string[] = [];
    for (const h of claimed(old)) {
      if (this.owners.get(hostKey(h)) === key) {
        this.owners.delete(hostKey(h));
        released.push(hostKey(h));
      }
    }
    this.plans.delete(key);
    return released;
  }

  /** host key -> owning Provisioning, leaving out `except`'s own hosts. */
  claimsExcept(except: string): Map<string, string> {
    const claims = new Map<string, string>();
    for (const [host, owner] of this.owners) if (owner !== except) claims.set(host, owner);
    return claims;
  }
}
