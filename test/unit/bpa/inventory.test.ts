import yaml from "js-yaml";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AssignedHost } from "../../../bpa/api/types.js";
import { clusterVersion, renderGroupVars } from "../../../bpa/inventory/group-vars.js";
import { etcdMembers, renderHostsIni } from "../../../bpa/inventory/hosts-ini.js";
import { testConfig } from "../../helpers/fixtures/bpa/config.js";

const run = promisify(execFile);

function host(name: string, role: "master" | "worker", index: number, ip: string): AssignedHost {
  return { name, namespace: "ns", role, index, ip, mac: "52:54:00:00:00:01", cpu: 16, ramMebibytes: 16384 };
}

interface AnsibleList {
  _meta: { hostvars: Record<string, Record<string, unknown>> };
  [group: string]: { hosts?: string[]; children?: string[] } | AnsibleList["_meta"];
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "bpa-inventory-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Writes the inventory the way the install Job mounts it and parses it with the real ansible-inventory. */
async function ansibleInventory(hostsIni: string, groupVarsYaml: string, name: string): Promise<AnsibleList> {
  const root = join(dir, name);
  const groupVarsFile = join(root, "group_vars", "all", "offline.yml");
  await mkdir(dirname(groupVarsFile), { recursive: true });
  await writeFile(join(root, "hosts.ini"), hostsIni);
  await writeFile(groupVarsFile, groupVarsYaml);
  const { stdout } = await run("ansible-inventory", ["-i", join(root, "hosts.ini"), "--list"], {
    env: { ...process.env, ANSIBLE_LOCAL_TEMP: join(dir, "tmp"), ANSIBLE_HOME: join(dir, "home"), ANSIBLE_INVENTORY_UNPARSED_FAILED: "true" },
  });
  return JSON.parse(stdout) as AnsibleList;
}

function groupHosts(list: AnsibleList, group: string): string[] {
  return ((list[group] as { hosts?: string[] } | undefined)?.hosts ?? []).slice().sort();
}

describe("kubespray inventory", () => {
  const config = testConfig();
  const hosts = [host("worker-b", "worker", 1, "10.0.0.22"), host("master-1", "master", 0, "10.0.0.11"), host("worker-a", "worker", 0, "10.0.0.21")];

  it("renders kubespray's current inventory layout", () => {
    const text = renderHostsIni(hosts, { provisioning: "ns/p", installHash: "ab".repeat(32) });
    expect(text).toContain(
      "[all]\nmaster-1 ansible_host=10.0.0.11 ip=10.0.0.11 etcd_member_name=etcd1\nworker-a ansible_host=10.0.0.21 ip=10.0.0.21\nworker-b ansible_host=10.0.0.22 ip=10.0.0.22\n",
    );
    expect(text).toContain("[kube_control_plane]\nmaster-1\n");
    expect(text).toContain("[etcd]\nmaster-1\n");
    expect(text).toContain("[kube_node]\nworker-a\nworker-b\n");
    expect(text).toContain("[k8s_cluster:children]\nkube_control_plane\nkube_node\ncalico_rr\n");
  });

  it("parses with the real ansible-inventory: groups, addresses and the offline variables", async () => {
    const list = await ansibleInventory(
      renderHostsIni(hosts, { provisioning: "ns/p", installHash: "cd".repeat(32) }),
      renderGroupVars(config, "ns/p"),
      "three",
    );
    expect(groupHosts(list, "kube_control_plane")).toEqual(["master-1"]);
    expect(groupHosts(list, "etcd")).toEqual(["master-1"]);
    expect(groupHosts(list, "kube_node")).toEqual(["worker-a", "worker-b"]);
    expect((list.k8s_cluster as { children?: string[] }).children?.slice().sort()).toEqual(["calico_rr", "kube_control_plane", "kube_node"]);
    const vars = list._meta.hostvars;
    expect(vars["worker-b"]).toMatchObject({ ansible_host: "10.0.0.22", ip: "10.0.0.22" });
    expect(vars["master-1"]).toMatchObject({ ansible_host: "10.0.0.11", etcd_member_name: "etcd1" });
    // group_vars/all/offline.yml is loaded for every host.
    expect(vars["worker-a"]).toMatchObject({
      registry_host: "192.168.100.1:5000",
      files_repo: "http://192.168.100.1:8080/kubespray",
      kube_image_repo: "192.168.100.1:5000",
      quay_image_repo: "192.168.100.1:5000",
      dl_k8s_io_url: "{{ files_repo }}/dl.k8s.io",
      ansible_user: "root",
      ansible_ssh_private_key_file: "/ssh/id_ed25519",
    });
    // Every mirror is the registry over TLS, verified with the site CA the runner puts on each node.
    const mirrors = vars["worker-a"]!.containerd_registries_mirrors as { prefix: string; mirrors: Record<string, unknown>[] }[];
    expect(mirrors.map((m) => m.prefix)).toEqual(["docker.io", "registry.k8s.io", "quay.io", "ghcr.io", "gcr.io", "192.168.100.1:5000"]);
    for (const m of mirrors) {
      expect(m.mirrors).toEqual([
        { host: "https://192.168.100.1:5000", capabilities: ["pull", "resolve"], skip_verify: false, ca: "/etc/icn-bootstrap/registry-ca.crt" },
      ]);
    }
  });

  it("without workers, masters also run workloads; etcd gets an odd member count", async () => {
    const masters = [0, 1, 2, 3].map((i) => host(`m${i}`, "master", i, `10.0.1.${i + 1}`));
    expect(etcdMembers(masters).map((h) => h.name)).toEqual(["m0", "m1", "m2"]);
    const list = await ansibleInventory(
      renderHostsIni(masters, { provisioning: "ns/q", installHash: "ef".repeat(32) }),
      renderGroupVars(testConfig({ sshUser: "ubuntu", extraVars: { kube_version: "1.31.4" } }), "ns/q"),
      "masters-only",
    );
    expect(groupHosts(list, "kube_control_plane")).toEqual(["m0", "m1", "m2", "m3"]);
    expect(groupHosts(list, "etcd")).toEqual(["m0", "m1", "m2"]);
    expect(groupHosts(list, "kube_node")).toEqual(["m0", "m1", "m2", "m3"]);
    expect(list._meta.hostvars.m3).toMatchObject({ ansible_user: "ubuntu", ansible_become: true, kube_version: "1.31.4" });
    expect(list._meta.hostvars.m3!.etcd_member_name).toBeUndefined();
  });

  it("a cluster installed without workers keeps its masters in kube_node when workers join (mastersAreNodes)", async () => {
    const hosts = [host("m0", "master", 0, "10.0.2.1"), host("w0", "worker", 0, "10.0.2.2")];
    const grown = await ansibleInventory(
      renderHostsIni(hosts, { provisioning: "ns/r", installHash: "12".repeat(32) }, { mastersAreNodes: true }),
      renderGroupVars(testConfig(), "ns/r"),
      "grown",
    );
    expect(groupHosts(grown, "kube_node")).toEqual(["m0", "w0"]);
    const split = await ansibleInventory(
      renderHostsIni(hosts, { provisioning: "ns/r", installHash: "12".repeat(32) }),
      renderGroupVars(testConfig(), "ns/r"),
      "split",
    );
    expect(groupHosts(split, "kube_node")).toEqual(["w0"]);
  });

  it("writes IPv6 addresses as they are", () => {
    const text = renderHostsIni([host("v6", "master", 0, "fd00::11")], { provisioning: "ns/p", installHash: "00".repeat(32) });
    expect(text).toContain("v6 ansible_host=fd00::11 ip=fd00::11");
  });

  it("names the cluster's Kubernetes version: the spec's, else the newest the appliance serves, else kubespray's default", () => {
    const served = ["1.35.10", "1.34.3", "1.35.4"];
    expect(clusterVersion(served)).toBe("1.35.10");
    expect(clusterVersion(served, "1.34.3")).toBe("1.34.3");
    expect(clusterVersion(undefined)).toBeUndefined();
    expect(yaml.load(renderGroupVars(config, "ns/p", "1.34.3"))).toMatchObject({ kube_version: "1.34.3" });
    expect(yaml.load(renderGroupVars(config, "ns/p"))).not.toHaveProperty("kube_version");
    expect(() => testConfig({ kubernetesVersions: ["v1.35"] })).toThrow(/kubernetesVersions/);
  });
});
