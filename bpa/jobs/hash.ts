/**
 * The install hash: one install per value. It covers what decides the cluster: the
 * resolved spec, the hosts and their roles and addresses, and the retry annotation. It does
 * not cover the operator's configuration (runner image, registry): changing that, or
 * upgrading the operator, never re-runs finished installs.
 */
import { createHash } from "node:crypto";
import type { AssignedHost } from "../api/types.js";

export function installHash(specHash: string, hosts: readonly AssignedHost[], retryToken: string): string {
  const assignment = [...hosts]
    .sort((a, b) => (a.role === b.role ? a.index - b.index : a.role < b.role ? -1 : 1))
    .map((h) => [h.role, h.index, h.namespace, h.name, h.ip, h.mac]);
  return createHash("sha256").update(JSON.stringify({ specHash, assignment, retryToken })).digest("hex");
}
