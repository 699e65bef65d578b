/**
 * The provisioning agents of seed 002: a Deployment of `spec.replicas` runner pods in
 * agent mode; their pod names are status.podAgents.
 */
import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import type { NormalizedSpec } from "../api/spec.js";
import type { Provisioning } from "../api/types.js";
import type { BpaConfig } from "../config/config.js";
import { names } from "../jobs/names.js";
import { agentsDeployment, runnerServiceAccount } from "../jobs/objects.js";
import { ensureServiceAccount } from "../runtime/ensure.js";
import { isConflict, isNotFound, mergePatch, type Clients } from "../runtime/kube.js";
import { ownedBy } from "../runtime/owners.js";

export interface AgentCaches {
  deployment(namespace: string, name: string): V1Deployment | undefined;
  pods(namespace: string): readonly V1Pod[];
}

/** Keeps `spec.replicas` agent pods (a Deployment; none for 0); returns their names for status.podAgents. */
export async function reconcileAgents(
  c: Clients,
  config: BpaConfig,
  caches: AgentCaches,
  p: Provisioning,
  spec: NormalizedSpec,
  inventory: string | undefined,
): Promise<string[]> {
  const namespace = p.metadata.namespace!;
  const n = names(p);
  const existing = caches.deployment(namespace, n.agents);
  if (spec.replicas === 0) {
    if (existing && ownedBy(existing, p.metadata.uid)) {
      try {
        await c.apps.deleteNamespacedDeployment({ namespace, name: n.agents });
      } catch (error) {
        if (!isNotFound(error)) throw error;
      }
    }
    return [];
  }
  await ensureServiceAccount(c, runnerServiceAccount(p));
  // Before an inventory exists keep the one the Deployment already mounts, if any.
  const currentInventory = inventory ?? existing?.spec?.template?.spec?.volumes?.find((v) => v.name === "inventory")?.configMap?.name;
  const want = agentsDeployment(p, config, spec.replicas, currentInventory);
  if (!existing) {
    try {
      await c.apps.createNamespacedDeployment({ namespace, body: want });
    } catch (error) {
      if (!isConflict(error)) throw error;
    }
  } else if (
    existing.spec?.replicas !== want.spec!.replicas ||
    existing.spec?.template?.spec?.containers?.[0]?.image !== want.spec!.template.spec!.containers[0]!.image ||
    currentInventory !== existing.spec?.template?.spec?.volumes?.find((v) => v.name === "inventory")?.configMap?.name
  ) {
    await c.apps.patchNamespacedDeployment(
      {
        namespace,
        name: n.agents,
        body: { spec: { replicas: want.spec!.replicas, template: want.spec!.template } },
      },
      mergePatch,
    );
  }
  const selector = want.spec!.selector.matchLabels!;
  return caches
    .pods(namespace)
    .filter((pod) => !pod.metadata?.deletionTimestamp)
    .filter((pod) => Object.entries(selector).every(([k, v]) => pod.metadata?.labels?.[k] === v))
    .map((pod) => pod.metadata!.name!)
    .sort();
}
