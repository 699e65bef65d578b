/** Create-if-absent (and fix-if-different) for the objects a reconcile needs. */
import type { V1ConfigMap, V1Role, V1RoleBinding, V1Secret, V1ServiceAccount } from "@kubernetes/client-node";
import type { Clients } from "./kube.js";
import { isConflict, isNotFound } from "./kube.js";
import { jsonEqual } from "./json.js";

/** Reads the object; creates it when absent; on a create race reads again. */
async function ensure<T>(read: () => Promise<T>, create: () => Promise<T>): Promise<{ object: T; created: boolean }> {
  try {
    return { object: await read(), created: false };
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
  try {
    return { object: await create(), created: true };
  } catch (error) {
    if (!isConflict(error)) throw error;
    return { object: await read(), created: false };
  }
}

export function ensureSecret(c: Clients, body: V1Secret) {
  const { name, namespace } = body.metadata as { name: string; namespace: string };
  return ensure(
    () => c.core.readNamespacedSecret({ name, namespace }),
    () => c.core.createNamespacedSecret({ namespace, body }),
  );
}

export function ensureConfigMap(c: Clients, body: V1ConfigMap) {
  const { name, namespace } = body.metadata as { name: string; namespace: string };
  return ensure(
    () => c.core.readNamespacedConfigMap({ name, namespace }),
    () => c.core.createNamespacedConfigMap({ namespace, body }),
  );
}

export function ensureServiceAccount(c: Clients, body: V1ServiceAccount) {
  const { name, namespace } = body.metadata as { name: string; namespace: string };
  return ensure(
    () => c.core.readNamespacedServiceAccount({ name, namespace }),
    () => c.core.createNamespacedServiceAccount({ namespace, body }),
  );
}

/** A Role whose rules someone changed is put back. */
export async function ensureRole(c: Clients, body: V1Role): Promise<void> {
  const { name, namespace } = body.metadata as { name: string; namespace: string };
  const { object, created } = await ensure(
    () => c.rbac.readNamespacedRole({ name, namespace }),
    () => c.rbac.createNamespacedRole({ namespace, body }),
  );
  if (!created && !jsonEqual(JSON.parse(JSON.stringify(object.rules ?? [])), JSON.parse(JSON.stringify(body.rules)))) {
    await c.rbac.replaceNamespacedRole({ name, namespace, body: { ...object, rules: body.rules } });
  }
}

export async function ensureRoleBinding(c: Clients, body: V1RoleBinding): Promise<void> {
  const { name, namespace } = body.metadata as { name: string; namespace: string };
  await ensure(
    () => c.rbac.readNamespacedRoleBinding({ name, namespace }),
    () => c.rbac.createNamespacedRoleBinding({ namespace, body }),
  );
}
