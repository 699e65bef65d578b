/** Conditions and status writing for Provisionings. */
import type { Condition, ConditionStatus, ProvisioningStatus } from "../api/types.js";

export const CONDITION = {
  hostsAssigned: "HostsAssigned",
  inventoryReady: "InventoryReady",
  installing: "Installing",
  updating: "Updating",
  nodesObserved: "NodesObserved",
  addonsReady: "AddonsReady",
  ready: "Ready",
  failed: "Failed",
  reconciled: "Reconciled",
} as const;

export const CONDITION_ORDER: string[] = [
  CONDITION.ready,
  CONDITION.hostsAssigned,
  CONDITION.inventoryReady,
  CONDITION.installing,
  CONDITION.updating,
  CONDITION.failed,
  CONDITION.nodesObserved,
  CONDITION.addonsReady,
  CONDITION.reconciled,
];

export interface ConditionInput {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
}

/** A status timestamp: RFC 3339 in UTC, whole seconds (as the API server writes them). */
export function statusTime(t: Date | string): string {
  return new Date(t).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** Condition messages are capped (the CRD allows 32 KiB; status should stay readable). */
export const MAX_MESSAGE = 4096;

/** A condition message as status keeps it. */
export const capMessage = (message: string) => (message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 3)}...` : message);

/**
 * Merges new condition values into the old list: lastTransitionTime only changes when the
 * status changes; types not given keep their old value.
 */
export function mergeConditions(
  old: readonly Condition[] | undefined,
  updates: readonly ConditionInput[],
  generation: number | undefined,
  now: string,
): Condition[] {
  const byType = new Map((old ?? []).map((c) => [c.type, c]));
  for (const u of updates) {
    const previous = byType.get(u.type);
    const message = capMessage(u.message);
    byType.set(u.type, {
      type: u.type,
      status: u.status,
      reason: u.reason,
      message,
      lastTransitionTime: previous && previous.status === u.status ? previous.lastTransitionTime : now,
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
    });
  }
  return [...byType.values()].sort((a, b) => rank(a.type) - rank(b.type) || a.type.localeCompare(b.type));
}

function rank(type: string): number {
  const i = CONDITION_ORDER.indexOf(type);
  return i === -1 ? CONDITION_ORDER.length : i;
}

/** A JSON merge patch that turns `old` status into `next` (absent keys are set to null). */
export function statusPatch(old: ProvisioningStatus | undefined, next: ProvisioningStatus): Record<string, unknown> {
  const patch: Record<string, unknown> = { ...next };
  for (const key of Object.keys(old ?? {})) if (!(key in next) || (next as Record<string, unknown>)[key] === undefined) patch[key] = null;
  return { status: patch };
}
