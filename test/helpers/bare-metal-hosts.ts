/**
 * A BareMetalHost written as Metal3's baremetal-operator leaves it: the object, then its
 * status through the status subresource (tests and benchmarks stand in for Metal3's
 * registration and inspection this way).
 */
import { BMH_PLURAL, METAL3_GROUP, METAL3_VERSION } from "../../bpa/api/constants.js";
import type { BareMetalHost } from "../../bpa/api/types.js";
import { mergePatch, type Clients } from "../../bpa/runtime/kube.js";

export async function writeBareMetalHost(c: Clients, namespace: string, host: BareMetalHost): Promise<void> {
  const { status, ...rest } = host;
  const body = { ...rest, metadata: { ...rest.metadata, namespace } };
  await c.custom.createNamespacedCustomObject({ group: METAL3_GROUP, version: METAL3_VERSION, namespace, plural: BMH_PLURAL, body });
  await c.custom.patchNamespacedCustomObjectStatus(
    { group: METAL3_GROUP, version: METAL3_VERSION, namespace, plural: BMH_PLURAL, name: host.metadata.name!, body: { status } },
    mergePatch,
  );
}
