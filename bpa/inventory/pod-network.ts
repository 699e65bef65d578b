/**
 * How many nodes a cluster's pod network holds, as kubespray's validate_inventory checks it
 * ("Check that ipv4 IP range is enough for the nodes"): each node gets a range of
 * kube_network_node_prefix out of kube_pods_subnet, so 2^(node prefix - subnet prefix)
 * nodes fit. Read from the BPA configuration's extraVars, else kubespray's defaults.
 * Neither can change once a cluster is installed: a site that grows past it sets both
 * before the install.
 */
const KUBESPRAY_PODS_SUBNET = "10.233.64.0/18";
const KUBESPRAY_NODE_PREFIX = 24;

export interface PodNetwork {
  subnet: string;
  nodePrefix: number;
  /** The most nodes it holds. */
  nodes: number;
}

/** The pod network the BPA's clusters get; undefined when extraVars set it in a form not read here (kubespray's own validation then speaks). */
export function podNetwork(extraVars: Readonly<Record<string, unknown>>): PodNetwork | undefined {
  const subnet = extraVars.kube_pods_subnet ?? KUBESPRAY_PODS_SUBNET;
  const nodePrefix = extraVars.kube_network_node_prefix ?? KUBESPRAY_NODE_PREFIX;
  if (typeof subnet !== "string" || typeof nodePrefix !== "number" || !Number.isInteger(nodePrefix)) return undefined;
  const match = /^\d{1,3}(\.\d{1,3}){3}\/(\d{1,2})$/.exec(subnet);
  if (!match) return undefined;
  const subnetPrefix = Number(match[2]);
  if (subnetPrefix > 32 || nodePrefix > 32 || nodePrefix < subnetPrefix) return undefined;
  return { subnet, nodePrefix, nodes: 2 ** (nodePrefix - subnetPrefix) };
}

/** Why `count` nodes do not fit, and what a site does about it; undefined when they fit. */
export function podNetworkTooSmall(network: PodNetwork, count: number): string | undefined {
  if (count <= network.nodes) return undefined;
  const subnetPrefix = Number(network.subnet.split("/")[1]);
  const extraBits = Math.ceil(Math.log2(count)) - (network.nodePrefix - subnetPrefix);
  const narrowerNodes = network.nodePrefix + extraBits;
  // A node's range also holds its pods: kubelet's default of 110 pods needs /25 or wider.
  const nodePrefixFix = narrowerNodes <= 25 ? ` or kube_network_node_prefix: ${narrowerNodes} (${2 ** (32 - narrowerNodes) - 2} pod addresses per node)` : "";
  return (
    `${count} nodes do not fit the pod network (kube_pods_subnet ${network.subnet} with kube_network_node_prefix ${network.nodePrefix} holds ${network.nodes}): ` +
    `before the cluster is installed, set in the BPA configuration's extraVars a kube_pods_subnet of /${subnetPrefix - extraBits} that collides with nothing${nodePrefixFix}`
  );
}
