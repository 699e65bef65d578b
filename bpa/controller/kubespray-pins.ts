/**
 * The kubespray pins: the build's ConfigMap in the operator's namespace (common/kubespray-pins.ts).
 * Every Job gets them beside its inventory (the runner passes them with -e @); the Kubernetes
 * versions they serve are the ones a Provisioning may name.
 */
import { readServedPins, type ServedPins } from "../../common/kubespray-pins.js";
import type { BpaConfig } from "../config/config.js";
import { isNotFound, type Clients } from "../runtime/kube.js";

/** Condition reason and Event reason while the pins cannot be had. */
export const REASON_PINS_MISSING = "KubesprayPinsMissing";

export type KubesprayPins = { ok: true; text: string; served: ServedPins } | { ok: false; message: string };

/** Reads and checks the pins; the message of a failure names the ConfigMap, the key and who makes it. */
export async function readKubesprayPins(c: Clients, config: BpaConfig): Promise<KubesprayPins> {
  const { configMap: name, key } = config.kubesprayPins;
  const namespace = config.namespace;
  const where = `ConfigMap ${namespace}/${name} key "${key}"`;
  const fix =
    "the appliance's first boot applies it from the build's manifests (usr/share/icn-bootstrap/manifests/bpa/kubespray-pins.yaml); kubespray runs once it is there";
  let data: Record<string, string> | undefined;
  try {
    data = (await c.core.readNamespacedConfigMap({ namespace, name })).data;
  } catch (error) {
    if (!isNotFound(error)) throw error;
    return { ok: false, message: `the appliance's kubespray pins are missing: ${where}: ConfigMap not found; ${fix}` };
  }
  const text = data?.[key];
  if (!text?.trim()) return { ok: false, message: `the appliance's kubespray pins are missing: ${where}: no such key or empty; ${fix}` };
  const served = readServedPins(text);
  if (typeof served === "string") return { ok: false, message: `the appliance's kubespray pins are not usable: ${where}: ${served}; ${fix}` };
  return { ok: true, text, served };
}
