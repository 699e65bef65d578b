import { describe, expect, it } from "vitest";
import type { Provisioning } from "../../../bpa/api/types.js";
import { loadConfig } from "../../../bpa/config/config.js";
import { installHash } from "../../../bpa/jobs/hash.js";
import { childName, names } from "../../../bpa/jobs/names.js";
import { nextOperation } from "../../../bpa/jobs/operation.js";
import { addonsJob } from "../../../bpa/jobs/addons-objects.js";
import { planAddons } from "../../../bpa/jobs/addons-plan.js";
import { agentsDeployment, installJob, inventoryConfigMap, operationJob, runnerRole, runnerRoleBinding, userDataSecret } from "../../../bpa/jobs/objects.js";
import { testConfig } from "../../helpers/fixtures/bpa/config.js";
import { makeTestCA } from "../../helpers/fixtures/bpa/registry-ca.js";

const p: Provisioning = {
  apiVersion: "bpa.akraino.org/v1alpha1",
  kind: "Provisioning",
  metadata: { name: "provisioning-sample", namespace: "team-a", uid: "1111-2222", generation: 1 },
  spec: { master: { cpu: 10, memory: "4Gi" }, worker: { cpu: 20, memory: "8Gi" }, replicas: 2 },
};
const hash = "0123456789abcdef".repeat(4);
const config = testConfig();

describe("names", () => {
  it("derives child names from the Provisioning and the install hash", () => {
    expect(names(p, hash)).toEqual({
      installJob: "provisioning-sample-install-01234567",
      inventory: "provisioning-sample-inventory-01234567",
      kubeconfig: "provisioning-sample-kubeconfig",
      runner: "provisioning-sample-runner",
      agents: "provisioning-sample-agents",
    });
  });

  it("keeps long names within 63 characters and unique", () => {
    const a = childName("a".repeat(100), "install-01234567");
    const b = childName(`${"a".repeat(99)}b`, "install-01234567");
    expect(a.length).toBeLessThanOrEqual(63);
    expect(a.endsWith("-install-01234567")).toBe(true);
    expect(a).not.toBe(b);
  });
});

describe("install hash", () => {
  const host = { name: "h1", namespace: "ns", role: "master" as const, index: 0, ip: "10.0.0.1", mac: "52:54:00:00:00:01", cpu: 8, ramMebibytes: 8192 };
  const ca = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  const appliance = { registryCaPem: ca, pins: "kubeadm_checksums: {amd64: {1.35.4: sha256:aa}}\n" };
  it("changes with the hosts, their addresses and the retry token, not with their order", () => {
    const w = { ...host, name: "h2", role: "worker" as const, ip: "10.0.0.2" };
    const h = installHash("spec", [host, w], "", appliance);
    expect(installHash("spec", [w, host], "", appliance)).toBe(h);
    expect(installHash("spec", [host, { ...w, ip: "10.0.0.3" }], "", appliance)).not.toBe(h);
    expect(installHash("spec", [host, w], "1", appliance)).not.toBe(h);
    expect(installHash("spec2", [host, w], "", appliance)).not.toBe(h);
  });

  it("changes with the registry's site CA (nodes with the old CA could not pull) and with what the appliance serves (the pins)", () => {
    const h = installHash("spec", [host], "", appliance);
    expect(installHash("spec", [host], "", { ...appliance })).toBe(h);
    expect(installHash("spec", [host], "", { ...appliance, registryCaPem: ca.replace("AAAA", "BBBB") })).not.toBe(h);
    expect(installHash("spec", [host], "", { ...appliance, pins: appliance.pins.replace("aa", "bb") })).not.toBe(h);
  });
});

describe("install Job", () => {
  const job = installJob(p, config, hash);
  it("is owned by the Provisioning (garbage collection deletes it with its owner)", () => {
    expect(job.metadata?.ownerReferences).toEqual([
      {
        apiVersion: "bpa.akraino.org/v1alpha1",
        kind: "Provisioning",
        name: "provisioning-sample",
        uid: "1111-2222",
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    expect(job.metadata?.annotations?.["bpa.akraino.org/install-hash"]).toBe(hash);
  });

  it("runs the configured runner image once, with the runner contract's mounts and environment", () => {
    const spec = job.spec!;
    expect(spec.backoffLimit).toBe(0);
    const pod = spec.template.spec!;
    expect(pod.restartPolicy).toBe("Never");
    expect(pod.serviceAccountName).toBe("provisioning-sample-runner");
    const container = pod.containers[0]!;
    expect(container.image).toBe("192.168.100.1:5000/icn/kubespray-runner:2.27.0");
    // Requests by default: a BestEffort runner starves behind the appliance's control plane.
    expect(container.resources).toEqual({ requests: { cpu: "500m", memory: "256Mi" } });
    expect(container.volumeMounts).toEqual([
      { name: "ssh", mountPath: "/ssh", readOnly: true },
      { name: "inventory", mountPath: "/inventory", readOnly: true },
      { name: "tmp", mountPath: "/tmp" },
    ]);
    const env = Object.fromEntries(container.env!.map((e) => [e.name, e.value ?? e.valueFrom?.fieldRef?.fieldPath]));
    expect(env).toMatchObject({
      BPA_MODE: "install",
      BPA_INVENTORY: "/inventory/hosts.ini",
      BPA_SSH_KEY: "/ssh/id_ed25519",
      BPA_PLAYBOOK: "cluster.yml",
      BPA_KUBECONFIG_SECRET: "provisioning-sample-kubeconfig",
      BPA_KUBECONFIG_SECRET_KEY: "kubeconfig",
      BPA_NAMESPACE: "metadata.namespace",
      BPA_INSTALL_HASH: hash,
    });
    const inventory = pod.volumes!.find((v) => v.name === "inventory")!.configMap!;
    expect(inventory.name).toBe("provisioning-sample-inventory-01234567");
    expect(inventory.items).toEqual([
      { key: "hosts.ini", path: "hosts.ini" },
      { key: "offline.yml", path: "group_vars/all/offline.yml" },
      { key: "registry-ca.crt", path: "registry-ca.crt" },
      { key: "kubespray-pins.yml", path: "kubespray-pins.yml" },
    ]);
    expect(pod.volumes!.find((v) => v.name === "ssh")!.secret).toEqual({
      secretName: "bpa-ssh-key",
      defaultMode: 0o400,
      items: [{ key: "ssh-privatekey", path: "id_ed25519" }],
    });
  });

  it("keeps the inventory, the registry's site CA and the kubespray pins in an immutable ConfigMap", () => {
    const { pem } = makeTestCA();
    const cm = inventoryConfigMap(p, hash, { hostsIni: "[all]\n", groupVarsYaml: "---\n", registryCaPem: pem, pins: "etcd_version: 3.6.6\n" });
    expect(cm.immutable).toBe(true);
    expect(cm.data).toEqual({ "hosts.ini": "[all]\n", "offline.yml": "---\n", "registry-ca.crt": pem, "kubespray-pins.yml": "etcd_version: 3.6.6\n" });
  });

  it("mounts the pins beside the inventory and tells the runner to pass them", () => {
    const pod = installJob(p, config, hash).spec!.template.spec!;
    expect(pod.volumes!.find((v) => v.name === "inventory")!.configMap!.items).toContainEqual({ key: "kubespray-pins.yml", path: "kubespray-pins.yml" });
    expect(pod.containers[0]!.env).toContainEqual({ name: "BPA_KUBESPRAY_PINS", value: "/inventory/kubespray-pins.yml" });
  });

  it("tells the runner Ansible's strategy from the configuration: Mitogen's by default", () => {
    expect(installJob(p, config, hash).spec!.template.spec!.containers[0]!.env).toContainEqual({ name: "BPA_ANSIBLE_STRATEGY", value: "mitogen_linear" });
    const own = { ...config, job: { ...config.job, ansibleStrategy: "linear" as const } };
    expect(installJob(p, own, hash).spec!.template.spec!.containers[0]!.env).toContainEqual({ name: "BPA_ANSIBLE_STRATEGY", value: "linear" });
  });

  it("mounts the CA beside the inventory and tells the runner where it goes on the nodes", () => {
    const pod = installJob(p, testConfig({ registryCA: { nodePath: "/etc/pki/icn/registry.pem" } }), hash).spec!.template.spec!;
    expect(pod.volumes!.find((v) => v.name === "inventory")!.configMap!.items).toContainEqual({ key: "registry-ca.crt", path: "registry-ca.crt" });
    const env = Object.fromEntries(pod.containers[0]!.env!.map((e) => [e.name, e.value]));
    expect(env).toMatchObject({ BPA_REGISTRY_CA: "/inventory/registry-ca.crt", BPA_REGISTRY_CA_NODE_PATH: "/etc/pki/icn/registry.pem" });
  });
});

describe("runner permissions", () => {
  it("allow get/update/patch on the one kubeconfig Secret and the one addons results ConfigMap, nothing else", () => {
    expect(runnerRole(p).rules).toEqual([
      { apiGroups: [""], resources: ["secrets"], resourceNames: ["provisioning-sample-kubeconfig"], verbs: ["get", "update", "patch"] },
      { apiGroups: [""], resources: ["configmaps"], resourceNames: ["provisioning-sample-addons-results"], verbs: ["get", "update", "patch"] },
    ]);
    expect(runnerRoleBinding(p).subjects).toEqual([{ kind: "ServiceAccount", name: "provisioning-sample-runner", namespace: "team-a" }]);
  });
});

describe("agents", () => {
  it("are a Deployment of spec.replicas runner pods in agent mode", () => {
    const d = agentsDeployment(p, config, 2, "provisioning-sample-inventory-01234567");
    expect(d.spec!.replicas).toBe(2);
    expect(d.spec!.selector.matchLabels).toEqual({ "bpa.akraino.org/provisioning": "provisioning-sample", "bpa.akraino.org/component": "agent" });
    expect(d.spec!.template.metadata!.labels).toMatchObject(d.spec!.selector.matchLabels!);
    expect(d.spec!.template.spec!.containers[0]!.args).toEqual(["agent"]);
  });
});

function scaleOperation() {
  const m0 = { name: "m0", namespace: "team-a", role: "master" as const, index: 0, mac: "52:54:00:00:00:01", ip: "10.0.0.1", cpu: 12, ramMebibytes: 8192 };
  const next = nextOperation({
    cluster: { hosts: [m0], kubernetesVersion: "1.35.4", mastersAreNodes: true, revision: 1 },
    wanted: [m0, { ...m0, name: "w0", role: "worker" as const, mac: "52:54:00:00:00:02", ip: "10.0.0.2" }],
    wantedVersion: "1.35.4",
    servedVersions: ["1.35.4"],
  });
  if (!("operation" in next)) throw new Error("expected an operation");
  return next.operation;
}

describe("the runner's pods", () => {
  const addons = addonsJob(p, config, "b".repeat(64), planAddons([]), { retryToken: "", entries: [] });
  const pods = {
    install: installJob(p, config, hash).spec!.template.spec!,
    operation: operationJob(p, config, hash, scaleOperation()).spec!.template.spec!,
    agents: agentsDeployment(p, config, 1, "provisioning-sample-inventory-01234567").spec!.template.spec!,
    addons: addons.spec!.template.spec!,
  };

  it.each(Object.entries(pods))("%s: run as nobody (65534), never root, no privilege, no capability, RuntimeDefault seccomp", (_, pod) => {
    expect(pod.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 65534,
      runAsGroup: 65534,
      fsGroup: 65534,
      seccompProfile: { type: "RuntimeDefault" },
    });
    for (const container of pod.containers) {
      expect(container.securityContext).toEqual({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } });
    }
  });

  it.each(Object.entries(pods))("%s: a read-only root with /tmp (and HOME in it) writable", (_, pod) => {
    expect(pod.volumes).toContainEqual({ name: "tmp", emptyDir: {} });
    for (const container of pod.containers) {
      expect(container.volumeMounts).toContainEqual({ name: "tmp", mountPath: "/tmp" });
      expect(container.env).toContainEqual({ name: "HOME", value: "/tmp" });
    }
  });
});

describe("user-data", () => {
  it("is a Secret with the key Metal3 reads", () => {
    const s = userDataSecret("team-a", config, "ssh-ed25519 AAAA bpa@team-a");
    expect(Object.keys(s.stringData!)).toEqual(["userData"]);
    expect(s.stringData!.userData).toContain("ssh-ed25519 AAAA bpa@team-a");
  });
});

describe("configuration", () => {
  it("fills defaults: agent image, image repositories and containerd mirrors", () => {
    expect(config.agentImage).toBe(config.runnerImage);
    expect(config.filesRepo).toBe("http://192.168.100.1:8080/kubespray");
    expect(config.containerdMirrors.map((m) => m.prefix)).toContain("registry.k8s.io");
    expect(config.leaderElection).toMatchObject({ enabled: true, leaseDurationSeconds: 15 });
  });

  it("takes environment overrides and names the bad fields with their variables", () => {
    const c = loadConfig({
      env: {
        BPA_RUNNER_IMAGE: "r.local/runner:1",
        BPA_REGISTRY_HOST: "10.1.1.1:5000",
        BPA_FILES_REPO: "http://10.1.1.1",
        POD_NAMESPACE: "ops",
        BPA_WATCH_NAMESPACE: "",
      },
    });
    expect(c).toMatchObject({ runnerImage: "r.local/runner:1", registryHost: "10.1.1.1:5000", namespace: "ops", watchNamespace: "" });
    expect(() => loadConfig({ env: { BPA_RUNNER_IMAGE: "Not An Image", BPA_REGISTRY_HOST: "x y", BPA_FILES_REPO: "ftp://x" } })).toThrow(
      /runnerImage \(or env BPA_RUNNER_IMAGE\): an image reference[\s\S]*registryHost \(or env BPA_REGISTRY_HOST\)[\s\S]*filesRepo/,
    );
    expect(() => testConfig({ leaderElection: { leaseDurationSeconds: 5, renewDeadlineSeconds: 5 } })).toThrow(/renewDeadlineSeconds: must be shorter/);
    expect(() => testConfig({ unknownField: 1 })).toThrow(/Unrecognized key/);
  });

  it("takes the registry's site CA from ConfigMap icn-registry-ca key ca.crt and writes it to /etc/icn-bootstrap/registry-ca.crt by default", () => {
    expect(config.registryCA).toEqual({ configMap: "icn-registry-ca", key: "ca.crt", nodePath: "/etc/icn-bootstrap/registry-ca.crt" });
    const custom = testConfig({ registryCA: { configMap: "site-ca", key: "root.pem", nodePath: "/opt/ca/root.pem" } });
    expect(custom.registryCA).toEqual({ configMap: "site-ca", key: "root.pem", nodePath: "/opt/ca/root.pem" });
    expect(custom.containerdMirrors[0]!.mirrors[0]!.ca).toBe("/opt/ca/root.pem");
  });

  it("takes the runner's resources from job.resources and refuses what is not a quantity, naming the field", () => {
    const custom = testConfig({ job: { resources: { requests: { cpu: "2" }, limits: { memory: "2Gi" } } } });
    expect(custom.job.resources).toEqual({ requests: { cpu: "2" }, limits: { memory: "2Gi" } });
    expect(() => testConfig({ job: { resources: { requests: { cpu: "half" } } } })).toThrow(/job\.resources\.requests\.cpu: a Kubernetes quantity/);
    expect(() => testConfig({ job: { resources: { requests: { gpu: "1" } } } })).toThrow(/job\.resources\.requests.*Unrecognized key/);
  });

  it("refuses a bad CA source or node path, naming the field", () => {
    expect(() => testConfig({ registryCA: { nodePath: "etc/ca.crt" } })).toThrow(/registryCA\.nodePath: an absolute file path/);
    expect(() => testConfig({ registryCA: { nodePath: "/etc/../root/ca.crt" } })).toThrow(/registryCA\.nodePath: a path without \. or \.\. segments/);
    expect(() => testConfig({ registryCA: { nodePath: '/etc/ca".crt' } })).toThrow(/registryCA\.nodePath/);
    expect(() => testConfig({ registryCA: { nodePath: "/etc/icn/" } })).toThrow(/registryCA\.nodePath/);
    expect(() => testConfig({ registryCA: { key: "ca crt" } })).toThrow(/registryCA\.key: a ConfigMap key/);
    expect(() => testConfig({ registryCA: { configMap: "Bad_Name" } })).toThrow(/registryCA\.configMap: a Kubernetes object name/);
    expect(() => testConfig({ registryCA: { namespace: "x" } })).toThrow(/registryCA.*Unrecognized key/);
  });

  it("refuses registryInsecure: true with the fix (the registry speaks only TLS); false is accepted", () => {
    expect(() => testConfig({ registryInsecure: true })).toThrow(/registryInsecure: plain HTTP to the registry is gone.*delete registryInsecure/);
    expect(testConfig({ registryInsecure: false }).containerdMirrors[0]!.mirrors[0]!.host).toBe("https://192.168.100.1:5000");
  });
});

describe("day-2 operation Job", () => {
  const m0 = { name: "m0", namespace: "team-a", role: "master" as const, index: 0, mac: "52:54:00:00:00:01", ip: "10.0.0.1", cpu: 12, ramMebibytes: 8192 };
  const w0 = { ...m0, name: "w0", role: "worker" as const, mac: "52:54:00:00:00:02", ip: "10.0.0.2" };
  const next = nextOperation({
    cluster: { hosts: [m0], kubernetesVersion: "1.35.4", mastersAreNodes: true, revision: 1 },
    wanted: [m0, w0],
    wantedVersion: "1.35.4",
    servedVersions: ["1.35.4"],
  });
  if (!("operation" in next)) throw new Error("expected an operation");
  const job = operationJob(p, config, hash, next.operation);
  it("is named after its kind and runs the runner with the operation's playbook and --limit", () => {
    expect(job.metadata!.name).toBe("provisioning-sample-scale-01234567");
    expect(job.metadata!.labels).toMatchObject({ "bpa.akraino.org/component": "install", "bpa.akraino.org/operation": "scale" });
    const env = Object.fromEntries(job.spec!.template.spec!.containers[0]!.env!.map((e) => [e.name, e.value]));
    expect(env).toMatchObject({ BPA_MODE: "install", BPA_OPERATION: "scale", BPA_PLAYBOOK: "scale.yml", BPA_LIMIT: "w0,m0", BPA_INSTALL_HASH: hash });
    expect(env.BPA_EXTRA_VARS).toBeUndefined();
  });
  it("carries the cluster it leads to and its status record, so a restarted operator can apply it from the Job alone", () => {
    expect(JSON.parse(job.metadata!.annotations!["bpa.akraino.org/outcome"]!)).toEqual({
      hosts: [m0, w0],
      kubernetesVersion: "1.35.4",
      mastersAreNodes: true,
      revision: 2,
    });
    expect(JSON.parse(job.metadata!.annotations!["bpa.akraino.org/record"]!)).toEqual({
      hosts: ["w0"],
      description: "scale.yml adds worker[0]=w0",
      kubernetesVersion: "1.35.4",
    });
  });
});
