/**
 * The application cluster's nodes and their kubelet versions, read from its own API
 * server through the kubeconfig the runner handed back: status.nodes shows which node
 * runs which version after an install, a new node or an upgrade.
 */
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import type { ClusterNode, Provisioning, ProvisioningStatus } from "../api/types.js";
import { KUBECONFIG_KEY } from "../jobs/contract.js";
import { names } from "../jobs/names.js";
import { errorMessage, isNotFound, type Clients } from "../runtime/kube.js";
import { CONDITION, statusTime, type ConditionInput } from "./status.js";

/** How often a Ready cluster's nodes are read again without any event. */
export const NODES_REFRESH_MS = 5 * 60_000;
const TIMEOUT_MS = 10_000;

export type NodesResult = { ok: true; nodes: ClusterNode[] } | { ok: false; message: string };

export async function readClusterNodes(kubeconfig: string, timeoutMs = TIMEOUT_MS): Promise<NodesResult> {
  try {
    const kc = new KubeConfig();
    kc.loadFromString(kubeconfig);
    const server = kc.getCurrentCluster()?.server;
    if (!server) return { ok: false, message: "the kubeconfig names no cluster" };
    const api = kc.makeApiClient(CoreV1Api);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer from ${server} within ${timeoutMs / 1000} s`)), timeoutMs);
    });
    try {
      const list = await Promise.race([api.listNode(), timeout]);
      const nodes = list.items
        .map((n) => ({
          name: n.metadata?.name ?? "?",
          kubeletVersion: n.status?.nodeInfo?.kubeletVersion ?? "unknown",
          ready: (n.status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True"),
        }))
        .sort((a, b) => a.name.localeCompare(b.name));
      return { ok: true, nodes };
    } finally {
      clearTimeout(timer);
    }
  } catch (error) {
    return { ok: false, message: `cannot read the application cluster's nodes: ${errorMessage(error)}` };
  }
}

/** "node-a v1.35.4, node-b v1.35.3 (NotReady)" */
export function describeNodes(nodes: readonly ClusterNode[]): string {
  return nodes.map((n) => `${n.name} ${n.kubeletVersion}${n.ready ? "" : " (NotReady)"}`).join(", ");
}

/** The kubeconfig the runner handed back (base64, as in the Secret), or undefined while there is none. */
export async function readKubeconfigSecret(c: Clients, namespace: string, name: string): Promise<string | undefined> {
  try {
    const secret = await c.core.readNamespacedSecret({ namespace, name });
    const data = secret.data?.[KUBECONFIG_KEY];
    return data && Buffer.from(data, "base64").length > 0 ? data : undefined;
  } catch (error) {
    if (isNotFound(error)) return undefined;
    throw error;
  }
}

/**
 * The application cluster's nodes for status, read after an operation (`force`) and then
 * every NODES_REFRESH_MS; unreachable: the NodesObserved condition says why and the last
 * list stays.
 */
export async function observeNodes(
  c: Clients,
  p: Provisioning,
  now: Date,
  force: boolean,
): Promise<{ fields?: Pick<ProvisioningStatus, "nodes" | "nodesObservedAt">; condition?: ConditionInput }> {
  const seen = p.status?.conditions?.find((x) => x.type === CONDITION.nodesObserved);
  const lastTry = seen?.status === "True" && p.status?.nodesObservedAt ? p.status.nodesObservedAt : seen?.lastTransitionTime;
  if (!force && lastTry && now.getTime() - new Date(lastTry).getTime() < NODES_REFRESH_MS) return {};
  const secret = names(p).kubeconfig;
  const kubeconfig = await readKubeconfigSecret(c, p.metadata.namespace!, secret);
  if (!kubeconfig)
    return { condition: { type: CONDITION.nodesObserved, status: "False", reason: "NoKubeconfig", message: `Secret ${secret} holds no kubeconfig` } };
  const result = await readClusterNodes(Buffer.from(kubeconfig, "base64").toString());
  if (!result.ok) return { condition: { type: CONDITION.nodesObserved, status: "False", reason: "Unreachable", message: result.message } };
  return {
    fields: { nodes: result.nodes, nodesObservedAt: statusTime(now) },
    condition: { type: CONDITION.nodesObserved, status: "True", reason: "Read", message: describeNodes(result.nodes) },
  };
}
