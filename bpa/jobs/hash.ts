/**
 * The install hash: one install per value. It covers what decides the cluster: the
 * resolved spec, the hosts and their roles and addresses, the retry annotation, and the
 * registry's site CA (nodes that keep an old CA can no longer pull: a new CA must reach
 * them, so it is a new install). It does not cover the operator's configuration (runner
 * image, registry address): changing that never re-runs finished installs.
 */
import { createHash } from "node:crypto";
import type { AssignedHost } from "../api/types.js";

export function installHash(specHash: string, hosts: readonly AssignedHost[], retryToken: string, registryCaPem: string): string {
  const assignment = [...hosts]
    .sort((a, b) => (a.role === b.role ? a.index - b.index : a.role < b.role ? -1 : 1))
    .map((h) => [h.role, h.index, h.namespace, h.name, h.ip, h.mac]);
  const registryCa = createHash("sha256").update(registryCaPem).digest("hex");
  return createHash("sha256").update(JSON.stringify({ specHash, assignment, retryToken, registryCa })).digest("hex");
}
