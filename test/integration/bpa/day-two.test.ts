/**
 * Day 2 against a real kube-apiserver: once a Provisioning's cluster is installed, spec
 * changes become operations on it (a new worker -> scale.yml --limit, a worker entry gone
 * -> remove-node.yml, a newer version -> upgrade-cluster.yml), one at a time, never
 * moving installed hosts, each a Job recorded in status.operations; a restarted operator
 * applies what finished while it was away. Jobs do not run here (no kube-controller-manager):
 * the tests write their status as the Job controller would. The "application cluster"
 * whose nodes status.nodes shows is this same API server, reached through the kubeconfig
 * handed back, with Node objects the tests create.
 */
import { readFile } from "node:fs/promises";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { V1Job } from "@kubernetes/client-node";
import type { Provisioning } from "../../../bpa/api/types.js";
import { mergePatch } from "../../../bpa/runtime/kube.js";
import type { Operator } from "../../../bpa/operator.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import {
  condition,
  createHost,
  createProvisioning,
  getProvisioning,
  handBackKubeconfig,
  listInstallJobs,
  newNamespace,
  operatorConfig,
  operatorSuite,
  patchProvisioning,
  setJobStatus,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const { c, start, stopAll } = operatorSuite();
const nodeNames: string[] = [];
let appKubeconfig: string;

beforeAll(async () => {
  appKubeconfig = await readFile(inject("kubeconfigPath"), "utf8");
});

afterAll(async () => {
  for (const name of nodeNames) await c.core.deleteNode({ name }).catch(() => undefined);
});

async function operatorFor(namespace: string, overrides: Record<string, unknown> = {}): Promise<Operator> {
  return start(operatorConfig(namespace, { kubernetesVersions: ["1.34.5", "1.35.4"], ...overrides }));
}

/** A Node in the "application cluster" as its kubelet would register it. */
async function registerNode(name: string, version: string): Promise<void> {
  await c.core.createNode({ body: { metadata: { name } } }).catch(() => undefined);
  nodeNames.push(name);
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
  await c.core.patchNodeStatus(
    {
      name,
      body: {
        status: {
          nodeInfo: {
            kubeletVersion: `v${version}`,
            machineID: "",
            systemUUID: "",
            bootID: "",
            kernelVersion: "",
            osImage: "",
            containerRuntimeVersion: "",
            kubeProxyVersion: "",
            operatingSystem: "linux",
            architecture: "amd64",
          },
          conditions: [{ type: "Ready", status: "True", reason: "KubeletReady", message: "", lastHeartbeatTime: now, lastTransitionTime: now }],
        },
      },
    },
    mergePatch,
  );
}

const jobsOf = async (ns: string, name: string) => (await listInstallJobs(c, ns)).filter((j) => j.metadata!.labels!["bpa.akraino.org/provisioning"] === name);
const env = (job: V1Job) =>
  Object.fromEntries(job.spec!.template.spec!.containers[0]!.env!.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
const roles = (p: Provisioning, field: "assignedHosts" | "cluster" = "assignedHosts") =>
  (field === "cluster" ? p.status!.cluster!.hosts : p.status!.assignedHosts!).map((h) => `${h.role}[${h.index}]=${h.name}`);

async function inventory(ns: string, job: V1Job) {
  const cm = await c.core.readNamespacedConfigMap({
    namespace: ns,
    name: job.spec!.template.spec!.volumes!.find((v) => v.name === "inventory")!.configMap!.name!,
  });
  return { hostsIni: cm.data!["hosts.ini"]!, vars: yaml.load(cm.data!["offline.yml"]!) as Record<string, unknown> };
}

/** Runs the install to Ready, the kubeconfig pointing at this API server. */
async function installed(ns: string, name: string): Promise<Provisioning> {
  const p = await waitForStatus(c, ns, name, "Installing", (x) => x.status?.phase === "Installing");
  await handBackKubeconfig(c, ns, `${name}-kubeconfig`, appKubeconfig);
  await setJobStatus(c, ns, p.status!.installJob!, "succeeded");
  return waitForStatus(c, ns, name, "Ready", (x) => x.status?.phase === "Ready" && x.status.cluster !== undefined);
}

/** Waits for the one running day-2 Job of a kind that is not among `seen`. */
async function nextJob(ns: string, name: string, kind: string, seen: readonly V1Job[]): Promise<V1Job> {
  return waitFor(`a ${kind} Job`, async () =>
    (await jobsOf(ns, name)).find((j) => j.metadata!.labels!["bpa.akraino.org/operation"] === kind && !seen.some((s) => s.metadata!.name === j.metadata!.name)),
  );
}

describe("day 2: operations on an installed cluster", () => {
  it("new workers join with scale.yml limited to them, one at a time; installed hosts never move; a failed one waits for the retry annotation", async () => {
    const ns = await newNamespace(c, "bpa-scale");
    const tag = ns.split("-").slice(-1)[0];
    const [m, w1, w2] = [`m-${tag}`, `w1-${tag}`, `w2-${tag}`];
    await createHost(c, ns, bmh({ name: m, cpu: 12, ram: 8192, ip: "10.20.0.1" }));
    await createHost(c, ns, bmh({ name: w1, cpu: 24, ram: 16384, ip: "10.20.0.2" }));
    await createHost(c, ns, bmh({ name: w2, cpu: 32, ram: 32768, ip: "10.20.0.3" }));
    await operatorFor(ns);
    await createProvisioning(c, ns, { metadata: { name: "edge" }, spec: { master: { cpu: 10, memory: "4Gi" } } });
    await registerNode(m, "1.35.4");
    const ready = await installed(ns, "edge");
    expect(ready.status!.cluster).toMatchObject({ kubernetesVersion: "1.35.4", mastersAreNodes: true, revision: 1 });
    expect(roles(ready, "cluster")).toEqual([`master[0]=${m}`]);
    expect(ready.status!.operations).toEqual([
      expect.objectContaining({
        kind: "install",
        playbook: "cluster.yml",
        result: "Succeeded",
        job: ready.status!.installJob,
        hosts: [m],
        kubernetesVersion: "1.35.4",
        description: `cluster.yml installs master[0]=${m}`,
      }),
    ]);
    // The application cluster's nodes, read through the kubeconfig handed back.
    const observed = await waitForStatus(c, ns, "edge", "nodes observed", (x) => condition(x, "NodesObserved")?.status === "True");
    expect(observed.status!.nodes).toEqual(expect.arrayContaining([{ name: m, kubeletVersion: "v1.35.4", ready: true }]));
    const install = (await jobsOf(ns, "edge"))[0]!;

    // A worker entry appears: only the new role gets a host, scale.yml runs limited to it.
    await patchProvisioning(c, ns, "edge", { spec: { worker: [{ cpu: 20, memory: "8Gi" }] } });
    const scale = await nextJob(ns, "edge", "scale", [install]);
    const updating = await waitForStatus(c, ns, "edge", "Updating", (x) => x.status?.phase === "Updating");
    expect(roles(updating)).toEqual([`master[0]=${m}`, `worker[0]=${w1}`]);
    expect(env(scale)).toMatchObject({ BPA_OPERATION: "scale", BPA_PLAYBOOK: "scale.yml", BPA_LIMIT: `${w1},${m}` });
    const { hostsIni, vars } = await inventory(ns, scale);
    // The master was installed as a node and stays one; the new worker joins kube_node.
    expect(hostsIni).toContain(`[kube_control_plane]\n${m}\n`);
    expect(hostsIni).toContain(`[kube_node]\n${m}\n${w1}\n`);
    expect(vars.kube_version).toBe("1.35.4");
    expect(condition(updating, "Ready")).toMatchObject({ status: "True", reason: "Updating" });
    expect(condition(updating, "Updating")).toMatchObject({
      status: "True",
      reason: "Scale",
      message: expect.stringContaining(`scale.yml adds worker[0]=${w1}`),
    });

    // A second worker while the first scale runs: it waits (one operation at a time).
    await patchProvisioning(c, ns, "edge", {
      spec: {
        worker: [
          { cpu: 20, memory: "8Gi" },
          { cpu: 20, memory: "8Gi" },
        ],
      },
    });
    await waitForStatus(c, ns, "edge", "the second worker assigned", (x) => x.status?.assignedHosts?.length === 3);
    await new Promise((r) => setTimeout(r, 800));
    expect((await jobsOf(ns, "edge")).map((j) => j.metadata!.name).sort()).toEqual([install.metadata!.name, scale.metadata!.name].sort());

    // The first scale succeeds: the cluster has the worker; the next scale starts by itself.
    await setJobStatus(c, ns, scale.metadata!.name!, "succeeded");
    const scale2 = await nextJob(ns, "edge", "scale", [install, scale]);
    expect(env(scale2)).toMatchObject({ BPA_LIMIT: `${w2},${m}` });
    const grown = await waitForStatus(c, ns, "edge", "revision 2", (x) => x.status?.cluster?.revision === 2);
    expect(roles(grown, "cluster")).toEqual([`master[0]=${m}`, `worker[0]=${w1}`]);

    // It fails: the cluster stays as it was and usable; status says what failed and how to retry.
    await setJobStatus(c, ns, scale2.metadata!.name!, "failed");
    const failed = await waitForStatus(c, ns, "edge", "UpdateFailed", (x) => x.status?.phase === "UpdateFailed");
    expect(condition(failed, "Ready")).toMatchObject({ status: "True", reason: "Installed" });
    expect(condition(failed, "Failed")).toMatchObject({ status: "True", reason: "ScaleFailed" });
    expect(condition(failed, "Failed")!.message).toContain(`scale.yml adds worker[1]=${w2} failed in Job ${scale2.metadata!.name}`);
    expect(condition(failed, "Failed")!.message).toContain("The cluster runs as before it");
    expect(condition(failed, "Failed")!.message).toContain("bpa.akraino.org/retry");
    expect(failed.status!.cluster!.revision).toBe(2);
    await new Promise((r) => setTimeout(r, 800));
    expect(await jobsOf(ns, "edge")).toHaveLength(3); // not re-run by itself

    await patchProvisioning(c, ns, "edge", { metadata: { annotations: { "bpa.akraino.org/retry": "1" } } });
    const scale3 = await nextJob(ns, "edge", "scale", [install, scale, scale2]);
    await registerNode(w1, "1.35.4");
    await registerNode(w2, "1.35.4");
    await setJobStatus(c, ns, scale3.metadata!.name!, "succeeded");
    const done = await waitForStatus(c, ns, "edge", "Ready with three hosts", (x) => x.status?.phase === "Ready" && x.status.cluster?.revision === 3);
    expect(roles(done, "cluster")).toEqual([`master[0]=${m}`, `worker[0]=${w1}`, `worker[1]=${w2}`]);
    expect(done.status!.operations!.map((o) => `${o.kind}:${o.result}`)).toEqual(["install:Succeeded", "scale:Succeeded", "scale:Failed", "scale:Succeeded"]);
    expect(done.status!.operations![1]).toMatchObject({ hosts: [w1], job: scale.metadata!.name, description: `scale.yml adds worker[0]=${w1}` });
    const nodes = await waitForStatus(c, ns, "edge", "all nodes observed", (x) => [m, w1, w2].every((n) => x.status?.nodes?.some((s) => s.name === n)));
    expect(nodes.status!.nodes!.filter((n) => [m, w1, w2].includes(n.name)).map((n) => n.kubeletVersion)).toEqual(["v1.35.4", "v1.35.4", "v1.35.4"]);
    const events = await c.core.listNamespacedEvent({ namespace: ns });
    expect(events.items.map((e) => e.reason)).toEqual(
      expect.arrayContaining(["InstallStarted", "InstallSucceeded", "ScaleStarted", "ScaleSucceeded", "ScaleFailed"]),
    );
    // The install's Events once each, however often the Provisioning was reconciled since.
    const installEvents = events.items.filter((e) => e.reason?.startsWith("Install"));
    expect(installEvents.map((e) => `${e.reason} x${e.count ?? 1}`).sort()).toEqual(["InstallStarted x1", "InstallSucceeded x1"]);
    expect(installEvents.find((e) => e.reason === "InstallSucceeded")!.message).toContain("done (Job edge-install-");
  });

  it("a worker entry gone: remove-node.yml for its host, which stays claimed until it succeeded; then a newer version: upgrade-cluster.yml", async () => {
    const ns = await newNamespace(c, "bpa-remove");
    await createHost(c, ns, bmh({ name: "m", cpu: 12, ram: 8192, ip: "10.21.0.1" }));
    await createHost(c, ns, bmh({ name: "w-a", cpu: 24, ram: 16384, ip: "10.21.0.2" }));
    await createHost(c, ns, bmh({ name: "w-b", cpu: 32, ram: 32768, ip: "10.21.0.3" }));
    await operatorFor(ns);
    await createProvisioning(c, ns, {
      metadata: { name: "site" },
      spec: {
        master: { cpu: 10, memory: "4Gi" },
        worker: [
          { cpu: 20, memory: "8Gi" },
          { cpu: 20, memory: "8Gi" },
        ],
        kubernetesVersion: "1.34.5",
      },
    });
    const ready = await installed(ns, "site");
    expect(ready.status!.cluster).toMatchObject({ kubernetesVersion: "1.34.5", mastersAreNodes: false });
    const seen = await jobsOf(ns, "site");

    await patchProvisioning(c, ns, "site", { spec: { worker: [{ cpu: 20, memory: "8Gi" }] } });
    const remove = await nextJob(ns, "site", "remove", seen);
    expect(env(remove)).toMatchObject({
      BPA_OPERATION: "remove",
      BPA_PLAYBOOK: "remove-node.yml",
      BPA_EXTRA_VARS: JSON.stringify({ node: "w-b", skip_confirmation: "true" }),
    });
    expect(env(remove).BPA_LIMIT).toBeUndefined();
    expect((await inventory(ns, remove)).hostsIni).toContain("[kube_node]\nw-a\nw-b\n"); // the removed host is still in it

    // Another Provisioning that could use w-b waits while w-b is being removed...
    await createProvisioning(c, ns, { metadata: { name: "other" }, spec: { master: { cpu: 30, memory: "8Gi" } } });
    const waiting = await waitForStatus(c, ns, "other", "Unsatisfiable", (x) => x.status?.phase === "Unsatisfiable");
    expect(condition(waiting, "HostsAssigned")!.message).toContain("w-b");
    // ...and gets it once the removal succeeded.
    await setJobStatus(c, ns, remove.metadata!.name!, "succeeded");
    const removed = await waitForStatus(c, ns, "site", "Ready without w-b", (x) => x.status?.phase === "Ready" && x.status.cluster?.revision === 2);
    expect(roles(removed, "cluster")).toEqual(["master[0]=m", "worker[0]=w-a"]);
    const other = await waitForStatus(c, ns, "other", "Installing on w-b", (x) => x.status?.phase === "Installing");
    expect(other.status!.assignedHosts!.map((h) => h.name)).toEqual(["w-b"]);

    // A version older than the cluster's is refused, saying why; the cluster is untouched.
    await patchProvisioning(c, ns, "site", { spec: { kubernetesVersion: "1.34.4" } });
    await stopAll();
    await operatorFor(ns, { kubernetesVersions: ["1.34.4", "1.34.5", "1.35.4"] });
    const refused = await waitForStatus(c, ns, "site", "ChangeRefused", (x) => condition(x, "Failed")?.reason === "ChangeRefused");
    expect(refused.status!.phase).toBe("UpdateFailed");
    expect(condition(refused, "Failed")!.message).toContain("the cluster runs Kubernetes 1.34.5; 1.34.4 is older and kubespray does not downgrade");

    // The next minor: upgrade-cluster.yml over every host with kube_version 1.35.4.
    await patchProvisioning(c, ns, "site", { spec: { kubernetesVersion: "1.35.4" } });
    const upgrade = await nextJob(ns, "site", "upgrade", await jobsOf(ns, "site"));
    expect(env(upgrade)).toMatchObject({ BPA_OPERATION: "upgrade", BPA_PLAYBOOK: "upgrade-cluster.yml" });
    expect(env(upgrade).BPA_LIMIT).toBeUndefined();
    const inv = await inventory(ns, upgrade);
    expect(inv.vars.kube_version).toBe("1.35.4");
    expect(inv.hostsIni).not.toContain("w-b");
    const updating = await waitForStatus(c, ns, "site", "Updating", (x) => x.status?.phase === "Updating");
    expect(condition(updating, "Updating")!.message).toContain("upgrade-cluster.yml upgrades 1.34.5 -> 1.35.4");
    await setJobStatus(c, ns, upgrade.metadata!.name!, "succeeded");
    const upgraded = await waitForStatus(
      c,
      ns,
      "site",
      "Ready on 1.35.4",
      (x) => x.status?.phase === "Ready" && x.status.cluster?.kubernetesVersion === "1.35.4",
    );
    expect(upgraded.status!.operations!.map((o) => `${o.kind}:${o.result}`)).toEqual(["install:Succeeded", "remove:Succeeded", "upgrade:Succeeded"]);
    expect(upgraded.status!.operations![2]).toMatchObject({ kubernetesVersion: "1.35.4", fromVersion: "1.34.5" });
  });

  it("restart in the middle: a Job that finished while no operator ran is applied from the Job alone, then the next change starts", async () => {
    const ns = await newNamespace(c, "bpa-restart");
    await createHost(c, ns, bmh({ name: "m", cpu: 12, ram: 8192, ip: "10.22.0.1" }));
    await createHost(c, ns, bmh({ name: "w-a", cpu: 24, ram: 16384, ip: "10.22.0.2" }));
    await createHost(c, ns, bmh({ name: "w-b", cpu: 32, ram: 32768, ip: "10.22.0.3" }));
    await operatorFor(ns);
    await createProvisioning(c, ns, { metadata: { name: "edge" }, spec: { master: { cpu: 10, memory: "4Gi" }, worker: [{ cpu: 20, memory: "8Gi" }] } });
    await installed(ns, "edge");
    const seen = await jobsOf(ns, "edge");
    await patchProvisioning(c, ns, "edge", {
      spec: {
        worker: [
          { cpu: 20, memory: "8Gi" },
          { cpu: 20, memory: "8Gi" },
        ],
      },
    });
    const scale = await nextJob(ns, "edge", "scale", seen);
    await waitForStatus(c, ns, "edge", "Updating", (x) => x.status?.phase === "Updating");

    // The operator goes away; the Job finishes; the spec changes again (a worker removed:
    // the one just added, by position); a new operator starts.
    await stopAll();
    await setJobStatus(c, ns, scale.metadata!.name!, "succeeded");
    await patchProvisioning(c, ns, "edge", { spec: { worker: [{ cpu: 20, memory: "8Gi" }] } });
    await operatorFor(ns);
    const remove = await nextJob(ns, "edge", "remove", [...seen, scale]);
    expect(env(remove).BPA_EXTRA_VARS).toBe(JSON.stringify({ node: "w-b", skip_confirmation: "true" }));
    const p = await waitForStatus(c, ns, "edge", "the scale applied", (x) => x.status?.cluster?.revision === 2 && x.status.phase === "Updating");
    expect(roles(p, "cluster")).toEqual(["master[0]=m", "worker[0]=w-a", "worker[1]=w-b"]);
    expect(p.status!.operations!.map((o) => `${o.kind}:${o.result}`)).toEqual(["install:Succeeded", "scale:Succeeded", "remove:Running"]);
    await setJobStatus(c, ns, remove.metadata!.name!, "succeeded");
    const done = await waitForStatus(c, ns, "edge", "Ready", (x) => x.status?.phase === "Ready" && x.status.cluster?.revision === 3);
    expect(roles(done, "cluster")).toEqual(["master[0]=m", "worker[0]=w-a"]);
    // Nothing more to do: no further Job.
    await new Promise((r) => setTimeout(r, 800));
    expect(await jobsOf(ns, "edge")).toHaveLength(3);
    expect((await getProvisioning(c, ns, "edge")).status!.phase).toBe("Ready");
  });

  it("deleting a middle entry removes the last position's host, unless worker entries are pinned by MAC", async () => {
    const ns = await newNamespace(c, "bpa-pin");
    await createHost(c, ns, bmh({ name: "m", cpu: 12, ram: 8192, ip: "10.23.0.1" }));
    for (const [i, name] of ["w-a", "w-b", "w-c"].entries())
      await createHost(c, ns, bmh({ name, cpu: 24, ram: 16384, ip: `10.23.0.${i + 2}`, mac: `52:54:00:23:00:0${i + 2}` }));
    await operatorFor(ns);
    const worker = { cpu: 20, memory: "8Gi" };
    await createProvisioning(c, ns, { metadata: { name: "edge" }, spec: { master: { cpu: 10, memory: "4Gi" }, worker: [worker, worker, worker] } });
    const ready = await installed(ns, "edge");
    expect(roles(ready, "cluster")).toEqual(["master[0]=m", "worker[0]=w-a", "worker[1]=w-b", "worker[2]=w-c"]);
    // The user means "w-b goes": with the second entry pinned to w-c, w-b is removed, w-c stays.
    await patchProvisioning(c, ns, "edge", { spec: { worker: [worker, { ...worker, mac: "52:54:00:23:00:04" }] } });
    const remove = await nextJob(ns, "edge", "remove", await jobsOf(ns, "edge"));
    expect(env(remove).BPA_EXTRA_VARS).toBe(JSON.stringify({ node: "w-b", skip_confirmation: "true" }));
    const p = await waitForStatus(c, ns, "edge", "Updating", (x) => x.status?.phase === "Updating");
    expect(roles(p)).toEqual(["master[0]=m", "worker[0]=w-a", "worker[1]=w-c"]);
  });
});
