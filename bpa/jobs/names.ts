/** Names and labels of the objects the operator creates for a Provisioning. */
import { createHash } from "node:crypto";
import type { V1OwnerReference } from "@kubernetes/client-node";
import { LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_PROVISIONING, MANAGED_BY, PROVISIONING_API_VERSION, PROVISIONING_KIND } from "../api/constants.js";
import type { Provisioning } from "../api/types.js";

/** Job names end up in a pod label (job-name), so they must fit in 63 characters. */
export const MAX_NAME = 63;

/**
 * `<base>-<suffix>`, shortened when needed to `<base prefix>-<hash of base>-<suffix>` so
 * that it fits in 63 characters and stays unique per base.
 */
export function childName(base: string, suffix: string): string {
  const full = `${base}-${suffix}`;
  if (full.length <= MAX_NAME) return full;
  const digest = createHash("sha256").update(base).digest("hex").slice(0, 8);
  const room = MAX_NAME - suffix.length - digest.length - 2;
  return `${base.slice(0, room).replace(/[-.]+$/, "")}-${digest}-${suffix}`;
}

/** A day-2 operation's Job: `<name>-<kind>-<first 8 hex of its hash>`. */
export function operationJobName(p: Provisioning, kind: string, hash: string): string {
  return childName(p.metadata.name!, `${kind}-${hash.slice(0, 8)}`);
}

export function names(p: Provisioning, installHash?: string) {
  const name = p.metadata.name!;
  const short = installHash?.slice(0, 8);
  return {
    installJob: short ? childName(name, `install-${short}`) : undefined,
    inventory: short ? childName(name, `inventory-${short}`) : undefined,
    kubeconfig: childName(name, "kubeconfig"),
    runner: childName(name, "runner"),
    agents: childName(name, "agents"),
  };
}

/** Label values are at most 63 characters; longer Provisioning names are shortened the same way. */
export function labelValue(value: string): string {
  return value.length <= MAX_NAME ? value : childName(value.slice(0, 40), "x");
}

export function childLabels(p: Provisioning, component: string): Record<string, string> {
  return {
    [LABEL_PROVISIONING]: labelValue(p.metadata.name!),
    [LABEL_COMPONENT]: component,
    [LABEL_MANAGED_BY]: MANAGED_BY,
  };
}

/** The controller owner reference: deleting the Provisioning lets the garbage collector delete the child. */
export function ownerReference(p: Provisioning): V1OwnerReference {
  return {
    apiVersion: PROVISIONING_API_VERSION,
    kind: PROVISIONING_KIND,
    name: p.metadata.name!,
    uid: p.metadata.uid!,
    controller: true,
    blockOwnerDeletion: true,
  };
}
