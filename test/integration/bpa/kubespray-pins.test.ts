/**
 * The appliance's kubespray pins against a real kube-apiserver: the build ships them as
 * ConfigMap bpa-kubespray-pins of the operator's namespace (first-boot manifests); every
 * Job gets them beside its inventory, and the Kubernetes versions a Provisioning may name
 * are the ones they serve. Without them no Job starts; when they change (a new appliance
 * image), installed clusters follow what is served: a newer Kubernetes version when asked
 * for, and the nodes' other components (containerd, …) on their own.
 */
import type { CoreV1Event, V1Job } from "@kubernetes/client-node";
import yaml from "js-yaml";
import { describe, expect, it } from "vitest";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { testPins } from "../../helpers/fixtures/bpa/pins.js";
import {
  condition,
  createHost,
  createProvisioning,
  handBackKubeconfig,
  listInstallJobs,
  newNamespace,
  operatorConfig,
  operatorSuite,
  patchProvisioning,
  putKubesprayPins,
  setJobStatus,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const { c, start } = operatorSuite();

const env = (job: V1Job) =>
  Object.fromEntries(job.spec!.template.spec!.containers[0]!.env!.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
async function inventoryOf(ns: string, job: V1Job) {
  const cm = await c.core.readNamespacedConfigMap({
    namespace: ns,
    name: job.spec!.template.spec!.volumes!.find((v) => v.name === "inventory")!.configMap!.name!,
  });
  return { pins: cm.data!["kubespray-pins.yml"]!, vars: yaml.load(cm.data!["offline.yml"]!) as Record<string, unknown> };
}
async function pinsEvents(namespace: string): Promise<CoreV1Event[]> {
  const list = await c.core.listNamespacedEvent({ namespace, fieldSelector: "involvedObject.name=cluster" });
  return list.items.filter((e) => e.reason === "KubesprayPinsMissing");
}
async function newJob(ns: string, seen: readonly V1Job[]): Promise<V1Job> {
  return waitFor("a new Job", async () => (await listInstallJobs(c, ns)).find((j) => !seen.some((s) => s.metadata!.name === j.metadata!.name)));
}

describe("the appliance's kubespray pins", () => {
  it("missing: condition and Event, no Job; present: the Job gets them and the versions they serve are the ones a Provisioning may name", async () => {
    const ns = await newNamespace(c, "bpa-pins");
    await createHost(c, ns, bmh({ name: "m1", cpu: 16, ram: 16384, ip: "10.26.0.1" }));
    const config = operatorConfig(ns, { kubernetesVersions: undefined });
    await start(config, { pins: false });
    await createProvisioning(c, ns, { metadata: { name: "cluster" }, spec: { master: { cpu: 8, memory: "8Gi" }, kubernetesVersion: "1.35.3" } });

    const waiting = await waitForStatus(c, ns, "cluster", "Ready=False KubesprayPinsMissing", (p) => condition(p, "Ready")?.reason === "KubesprayPinsMissing");
    expect(waiting.status!.phase).toBe("Pending");
    const message = condition(waiting, "Ready")!.message;
    expect(message).toContain(`ConfigMap ${ns}/bpa-kubespray-pins key "kubespray-pins.yml": ConfigMap not found`);
    expect(message).toContain("the appliance's first boot applies it");
    expect(condition(waiting, "InventoryReady")).toMatchObject({ status: "False", reason: "KubesprayPinsMissing" });
    await waitFor("a KubesprayPinsMissing Event", async () => ((await pinsEvents(ns)).length ? true : undefined));
    expect(await listInstallJobs(c, ns)).toEqual([]);

    // Pins that are not pins are named as such.
    await putKubesprayPins(config, "etcd_version: 3.6.6\n");
    await waitForStatus(c, ns, "cluster", "the bad pins named", (p) => /no kubeadm_checksums\.amd64/.test(condition(p, "Ready")?.message ?? ""));

    // Pins serving only 1.35.4: the spec's 1.35.3 is refused with what is served (the watch on the ConfigMap brings the reconcile).
    await putKubesprayPins(config, testPins(["1.35.4"]));
    const invalid = await waitForStatus(c, ns, "cluster", "Invalid", (p) => p.status?.phase === "Invalid");
    expect(condition(invalid, "Ready")!.message).toMatch(/1\.35\.3.*1\.35\.4/);

    // A new appliance that serves both: the install starts at 1.35.3, the pins beside its inventory.
    const both = testPins(["1.35.3", "1.35.4"]);
    await putKubesprayPins(config, both);
    const installing = await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing");
    expect(condition(installing, "InventoryReady")!.message).toContain("kubespray-pins.yml");
    const [job] = await listInstallJobs(c, ns);
    expect(env(job!)).toMatchObject({ BPA_KUBESPRAY_PINS: "/inventory/kubespray-pins.yml" });
    const inventory = await inventoryOf(ns, job!);
    expect(inventory.pins).toBe(both);
    expect(inventory.vars.kube_version).toBe("1.35.3");
  });

  it("an installed cluster follows a new appliance: the spec's newer version is an upgrade, a newer containerd an upgrade at the same version", async () => {
    const ns = await newNamespace(c, "bpa-pins-day2");
    await createHost(c, ns, bmh({ name: "m", cpu: 16, ram: 16384, ip: "10.27.0.1" }));
    await createHost(c, ns, bmh({ name: "w", cpu: 16, ram: 16384, ip: "10.27.0.2" }));
    const config = operatorConfig(ns, { kubernetesVersions: undefined });
    await putKubesprayPins(config, testPins(["1.35.3", "1.35.4"]));
    await start(config, { pins: false });
    await createProvisioning(c, ns, {
      metadata: { name: "cluster" },
      spec: { master: { cpu: 8, memory: "8Gi" }, worker: [{ cpu: 8, memory: "8Gi" }], kubernetesVersion: "1.35.3" },
    });
    const installing = await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing");
    await handBackKubeconfig(c, ns, "cluster-kubeconfig", "apiVersion: v1\nkind: Config\nclusters: []\n");
    await setJobStatus(c, ns, installing.status!.installJob!, "succeeded");
    const ready = await waitForStatus(c, ns, "cluster", "Ready", (p) => p.status?.phase === "Ready" && p.status.cluster !== undefined);
    expect(ready.status!.cluster).toMatchObject({ kubernetesVersion: "1.35.3", components: { containerd: "2.2.3", runc: "1.4.2", etcd: "3.6.6" } });

    // The spec asks for the newer served version: upgrade-cluster.yml at 1.35.4.
    let seen = await listInstallJobs(c, ns);
    await patchProvisioning(c, ns, "cluster", { spec: { kubernetesVersion: "1.35.4" } });
    const upgrade = await newJob(ns, seen);
    expect(env(upgrade)).toMatchObject({ BPA_OPERATION: "upgrade", BPA_PLAYBOOK: "upgrade-cluster.yml" });
    expect((await inventoryOf(ns, upgrade)).vars.kube_version).toBe("1.35.4");
    await setJobStatus(c, ns, upgrade.metadata!.name!, "succeeded");
    await waitForStatus(c, ns, "cluster", "Ready on 1.35.4", (p) => p.status?.phase === "Ready" && p.status.cluster?.kubernetesVersion === "1.35.4");

    // A new appliance image serves containerd 2.2.4 (its pins change): every node gets it, Kubernetes stays.
    seen = await listInstallJobs(c, ns);
    const newer = testPins(["1.35.3", "1.35.4"], { containerd_version: "2.2.4" });
    await putKubesprayPins(config, newer);
    const update = await newJob(ns, seen);
    expect(env(update)).toMatchObject({ BPA_OPERATION: "upgrade", BPA_PLAYBOOK: "upgrade-cluster.yml" });
    const inventory = await inventoryOf(ns, update);
    expect(inventory.vars.kube_version).toBe("1.35.4");
    expect(inventory.pins).toBe(newer);
    const updating = await waitForStatus(c, ns, "cluster", "Updating", (p) => p.status?.phase === "Updating");
    expect(condition(updating, "Updating")!.message).toContain("upgrade-cluster.yml updates containerd 2.2.3 -> 2.2.4 (Kubernetes stays 1.35.4)");
    await setJobStatus(c, ns, update.metadata!.name!, "succeeded");
    const done = await waitForStatus(
      c,
      ns,
      "cluster",
      "Ready with containerd 2.2.4",
      (p) => p.status?.phase === "Ready" && p.status.cluster?.components?.containerd === "2.2.4",
    );
    expect(done.status!.cluster).toMatchObject({ kubernetesVersion: "1.35.4", revision: 3 });
    expect(done.status!.operations!.map((o) => `${o.kind}:${o.result}`)).toEqual(["install:Succeeded", "upgrade:Succeeded", "upgrade:Succeeded"]);
    // Nothing more to do.
    await new Promise((r) => setTimeout(r, 800));
    expect(await listInstallJobs(c, ns)).toHaveLength(3);
  });
});
