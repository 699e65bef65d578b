/**
 * The registry's site CA: the appliance makes it at first boot and stores it in a
 * ConfigMap of the operator's namespace (registryCA in the configuration); every install
 * carries it to the nodes, whose containerd verifies the registry with it.
 */
import { X509Certificate } from "node:crypto";
import type { BpaConfig } from "../config/config.js";
import { isNotFound, type Clients } from "../runtime/kube.js";

/** Condition reason and Event reason while the CA cannot be had. */
export const REASON_REGISTRY_CA_MISSING = "RegistryCAMissing";

export type RegistryCA = { ok: true; pem: string } | { ok: false; message: string };

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----/g;

/**
 * The certificates of a PEM text, one block per certificate, newline-terminated (so that
 * whitespace around them does not change the install hash), or what is wrong with it.
 */
export function checkRegistryCaPem(text: string, now: Date = new Date()): { pem: string } | { problem: string } {
  const blocks = text.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) return { problem: "holds no PEM certificate (-----BEGIN CERTIFICATE-----)" };
  for (const [i, block] of blocks.entries()) {
    let certificate: X509Certificate;
    try {
      certificate = new X509Certificate(block);
    } catch (error) {
      return { problem: `certificate ${i + 1} is not a valid X.509 certificate (${(error as Error).message})` };
    }
    if (new Date(certificate.validTo).getTime() < now.getTime()) {
      return { problem: `certificate ${i + 1} (${certificate.subject.replace(/\n/g, ", ")}) expired on ${certificate.validTo}` };
    }
  }
  return { pem: `${blocks.map((b) => b.trim()).join("\n")}\n` };
}

/** Reads and checks the site CA; the message of a failure names the ConfigMap, the key and who makes it. */
export async function readRegistryCA(c: Clients, config: BpaConfig, now: Date = new Date()): Promise<RegistryCA> {
  const { configMap: name, key } = config.registryCA;
  const namespace = config.namespace;
  const where = `ConfigMap ${namespace}/${name} key "${key}"`;
  const fix =
    "the appliance's first boot creates it with the registry's site CA (icn-bootstrap's icn-kubernetes unit); " +
    "the install starts once it holds a valid PEM certificate";
  let data: Record<string, string> | undefined;
  try {
    data = (await c.core.readNamespacedConfigMap({ namespace, name })).data;
  } catch (error) {
    if (!isNotFound(error)) throw error;
    return { ok: false, message: `the registry's site CA is missing: ${where}: ConfigMap not found; ${fix}` };
  }
  const text = data?.[key];
  if (!text?.trim()) return { ok: false, message: `the registry's site CA is missing: ${where}: no such key or empty; ${fix}` };
  const checked = checkRegistryCaPem(text, now);
  if ("problem" in checked) return { ok: false, message: `the registry's site CA is not usable: ${where} ${checked.problem}; ${fix}` };
  return { ok: true, pem: checked.pem };
}
