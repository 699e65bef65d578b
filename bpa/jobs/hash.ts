/**
 * The install hash: one install per value. It covers what decides the cluster: the
 * resolved spec, the hosts and their roles and addresses, the retry annotation, the
 * registry's site CA (nodes that keep an old CA can no longer pull: a new CA must reach
 * them, so it is a new install) and the kubespray pins (what the appliance serves). It does
 * not cover the operator's configuration (runner image, registry address): changing that
 * never re-runs finished installs.
 */
import { createHash } from "node:crypto";
import type { AssignedHost } from "../api/types.js";

/** What the appliance gives every Job beside its inventory: the registry's site CA and the kubespray pins. */
export interface ApplianceInputs {
  registryCaPem: string;
  pins: string;
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");
const applianceDigests = (a: ApplianceInputs) => ({ registryCa: sha256(a.registryCaPem), pins: sha256(a.pins) });

export function installHash(specHash: string, hosts: readonly AssignedHost[], retryToken: string, appliance: ApplianceInputs): string {
  const assignment = [...hosts]
    .sort((a, b) => (a.role === b.role ? a.index - b.index : a.role < b.role ? -1 : 1))
    .map((h) => [h.role, h.index, h.namespace, h.name, h.ip, h.mac]);
  return sha256(JSON.stringify({ specHash, assignment, retryToken, ...applianceDigests(appliance) }));
}

/**
 * A day-2 operation's hash: its kind, inventory, limit, variables and version, the
 * revision of the cluster it starts from (the same change made again later is a new
 * operation), the retry token, the registry's CA and the kubespray pins.
 */
export function operationHash(
  op: {
    kind: string;
    playbook: string;
    inventoryHosts: readonly AssignedHost[];
    limit?: readonly string[];
    extraVars?: Record<string, string>;
    kubernetesVersion?: string;
    mastersAreNodes: boolean;
  },
  revision: number,
  retryToken: string,
  appliance: ApplianceInputs,
): string {
  const hosts = [...op.inventoryHosts]
    .sort((a, b) => (a.role === b.role ? a.index - b.index : a.role < b.role ? -1 : 1))
    .map((h) => [h.role, h.index, h.namespace, h.name, h.ip, h.mac]);
  const body = {
    kind: op.kind,
    playbook: op.playbook,
    hosts,
    limit: op.limit ?? [],
    extraVars: op.extraVars ?? {},
    version: op.kubernetesVersion ?? "",
    mastersAreNodes: op.mastersAreNodes,
    revision,
    retryToken,
    ...applianceDigests(appliance),
  };
  return sha256(JSON.stringify(body));
}
