/**
 * Kubernetes Events about a Provisioning (core/v1, as kubectl describe shows them). One
 * Event per Provisioning and reason, its count raised on repeats (as client-go's recorder
 * aggregates). Best effort: a failure to record is logged, never fails the reconcile.
 */
import { createHash } from "node:crypto";
import type { CoreV1Event } from "@kubernetes/client-node";
import { PROVISIONING_API_VERSION, PROVISIONING_KIND } from "../api/constants.js";
import type { Provisioning } from "../api/types.js";
import { errorMessage, isConflict, mergePatch, type Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";

export const EVENT_SOURCE = "bpa-operator";

export function eventName(p: Provisioning, reason: string): string {
  const digest = createHash("sha256").update(`${p.metadata.uid}/${reason}`).digest("hex").slice(0, 16);
  return `${p.metadata.name!.slice(0, 200)}.${digest}`;
}

export async function recordEvent(
  c: Clients,
  log: Logger,
  p: Provisioning,
  event: { type: "Normal" | "Warning"; reason: string; message: string },
  now: Date = new Date(),
): Promise<void> {
  const namespace = p.metadata.namespace!;
  const name = eventName(p, event.reason);
  const body: CoreV1Event = {
    metadata: { name, namespace },
    involvedObject: { apiVersion: PROVISIONING_API_VERSION, kind: PROVISIONING_KIND, name: p.metadata.name!, namespace, uid: p.metadata.uid! },
    type: event.type,
    reason: event.reason,
    message: event.message,
    source: { component: EVENT_SOURCE },
    reportingComponent: EVENT_SOURCE,
    reportingInstance: EVENT_SOURCE,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
  try {
    try {
      await c.core.createNamespacedEvent({ namespace, body });
    } catch (error) {
      if (!isConflict(error)) throw error;
      const existing = await c.core.readNamespacedEvent({ namespace, name });
      await c.core.patchNamespacedEvent(
        { namespace, name, body: { count: (existing.count ?? 1) + 1, lastTimestamp: now.toISOString(), message: event.message } },
        mergePatch,
      );
    }
  } catch (error) {
    log.warn("cannot record an Event", { provisioning: `${namespace}/${p.metadata.name}`, reason: event.reason, error: errorMessage(error) });
  }
}
