import { describe, expect, it } from "vitest";
import { normalizeSpec } from "../../../bpa/api/spec.js";
import { podNetwork, podNetworkTooSmall } from "../../../bpa/inventory/pod-network.js";

const spec = (nodes: number) => ({
  master: Array.from({ length: 3 }, () => ({ cpu: 2, memory: "4Gi" })),
  worker: Array.from({ length: nodes - 3 }, () => ({ cpu: 2, memory: "4Gi" })),
});

describe("the clusters' pod network", () => {
  it("holds 64 nodes with kubespray's defaults (/24 per node out of 10.233.64.0/18)", () => {
    expect(podNetwork({})).toEqual({ subnet: "10.233.64.0/18", nodePrefix: 24, nodes: 64 });
    expect(podNetworkTooSmall(podNetwork({})!, 64)).toBeUndefined();
  });

  it("follows what the BPA configuration's extraVars set", () => {
    expect(podNetwork({ kube_network_node_prefix: 25 })?.nodes).toBe(128);
    expect(podNetwork({ kube_pods_subnet: "10.240.0.0/16" })?.nodes).toBe(256);
    expect(podNetwork({ kube_pods_subnet: "10.240.0.0/16", kube_network_node_prefix: 26 })?.nodes).toBe(1024);
  });

  it("leaves values it does not read to kubespray's own validation", () => {
    expect(podNetwork({ kube_pods_subnet: "{{ my_subnet }}" })).toBeUndefined();
    expect(podNetwork({ kube_network_node_prefix: "25" })).toBeUndefined();
    expect(podNetwork({ kube_pods_subnet: "10.0.0.0/24", kube_network_node_prefix: 16 })).toBeUndefined();
  });

  it("says how many nodes fit and what a site sets for more", () => {
    const message = podNetworkTooSmall(podNetwork({})!, 100);
    expect(message).toMatch(/^100 nodes do not fit the pod network \(kube_pods_subnet 10\.233\.64\.0\/18 with kube_network_node_prefix 24 holds 64\)/);
    expect(message).toMatch(/kube_pods_subnet of \/17/);
    expect(message).toMatch(/kube_network_node_prefix: 25 \(126 pod addresses per node\)/);
    // Past /25 a node's range no longer holds kubelet's 110 pods: only a wider subnet is offered.
    expect(podNetworkTooSmall(podNetwork({})!, 300)).not.toMatch(/kube_network_node_prefix: \d/);
    expect(podNetworkTooSmall(podNetwork({})!, 300)).toMatch(/kube_pods_subnet of \/15/);
  });

  it("makes a Provisioning of more nodes than that an invalid spec, naming the fix", () => {
    const network = podNetwork({})!;
    const nodesTooMany = (count: number) => podNetworkTooSmall(network, count);
    expect(normalizeSpec(spec(64), { nodesTooMany }).ok).toBe(true);
    const refused = normalizeSpec(spec(65), { nodesTooMany });
    expect(refused.ok).toBe(false);
    expect(!refused.ok && refused.errors).toEqual([expect.stringMatching(/^spec: 65 nodes do not fit the pod network .* holds 64\)/)]);
    expect(normalizeSpec(spec(100), { nodesTooMany: (count) => podNetworkTooSmall(podNetwork({ kube_network_node_prefix: 25 })!, count) }).ok).toBe(true);
  });
});
