/**
 * kubespray's inventory (docs/ansible/inventory.md of the current release): hosts with
 * `ansible_host` and `ip` in [all], then the groups kube_control_plane, etcd, kube_node,
 * calico_rr and k8s_cluster:children.
 */
import type { AssignedHost } from "../api/types.js";

export interface InventoryHeader {
  provisioning: string;
  installHash: string;
}

/** Ansible host names must not contain spaces or '='; BareMetalHost names never do, this guards anyway. */
function hostName(name: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name)) throw new Error(`host name ${JSON.stringify(name)} cannot be used in an Ansible inventory`);
  return name;
}

/**
 * etcd needs an odd number of members: all masters when their number is odd, all but the
 * last one otherwise (2 masters -> 1 etcd member, 4 -> 3).
 */
export function etcdMembers(masters: readonly AssignedHost[]): AssignedHost[] {
  return masters.length % 2 === 1 ? [...masters] : masters.slice(0, masters.length - 1);
}

export function byRole(hosts: readonly AssignedHost[]): { masters: AssignedHost[]; workers: AssignedHost[] } {
  const sorted = (role: string) => hosts.filter((h) => h.role === role).sort((a, b) => a.index - b.index);
  return { masters: sorted("master"), workers: sorted("worker") };
}

/**
 * Renders hosts.ini. Without workers the masters also join kube_node, so that the cluster
 * can run workloads (kubespray's single-node layout); a cluster installed that way keeps
 * its masters in kube_node when workers join (`mastersAreNodes`).
 */
export function renderHostsIni(hosts: readonly AssignedHost[], header: InventoryHeader, options: { mastersAreNodes?: boolean } = {}): string {
  const { masters, workers } = byRole(hosts);
  const etcd = etcdMembers(masters);
  const mastersAreNodes = options.mastersAreNodes ?? workers.length === 0;
  const nodes = mastersAreNodes ? [...masters, ...workers] : workers;
  const lines: string[] = [
    `# kubespray inventory written by the BPA operator for Provisioning ${header.provisioning}`,
    `# install ${header.installHash.slice(0, 16)}; roles: ${masters.length} master(s), ${workers.length} worker(s). Do not edit: it is regenerated.`,
    "[all]",
  ];
  for (const h of [...masters, ...workers]) {
    const member = etcd.indexOf(h);
    const etcdName = member >= 0 ? ` etcd_member_name=etcd${member + 1}` : "";
    lines.push(`${hostName(h.name)} ansible_host=${h.ip} ip=${h.ip}${etcdName}`);
  }
  const group = (name: string, members: readonly AssignedHost[]) => {
    lines.push("", `[${name}]`, ...members.map((h) => hostName(h.name)));
  };
  group("kube_control_plane", masters);
  group("etcd", etcd);
  group("kube_node", nodes);
  group("calico_rr", []);
  lines.push("", "[k8s_cluster:children]", "kube_control_plane", "kube_node", "calico_rr", "");
  return lines.join("\n");
}
