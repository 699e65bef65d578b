/**
 * The application cluster's nodes and their kubelet versions, read from its own API
 * server through the kubeconfig the runner handed back: status.nodes shows which node
 * runs which version after an install, a new node or an upgrade.
 */
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import type { ClusterNode } from "../api/types.js";
import { errorMessage } from "./kube.js";

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
