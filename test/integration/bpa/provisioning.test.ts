/**
 * The BPA operator against a real kube-apiserver: seed 002's sample Provisioning and a
 * set of BareMetalHosts -> role assignment, inventory, install Job, status; Job success
 * and failure (Job status written through the API, as the Job controller would) ->
 * conditions and the kubeconfig Secret; re-planning on changes and never a second
 * install for an unchanged spec; invalid and unsatisfiable requests.
 */
import { execFile } from "node:child_process";
import yaml from "js-yaml";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { LABEL_SRIOV } from "../../../bpa/api/constants.js";
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
  loadYamlDocuments,
  newNamespace,
  operatorConfig,
  operatorSuite,
  patchProvisioning,
  setJobStatus,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const run = promisify(execFile);
const { c, start } = operatorSuite();

async function operatorFor(namespace: string, overrides: Record<string, unknown> = {}): Promise<Operator> {
  return start(operatorConfig(namespace, overrides));
}

/** The seed's sample, exactly as bpa/samples/provisioning.yaml has it. */
async function seedSample(): Promise<Record<string, unknown>> {
  const [sample] = await loadYamlDocuments("bpa/samples/provisioning.yaml");
  return sample!;
}

/** Hosts for the sample (master: 10 cpu / 4Gi, worker: 20 cpu / 8Gi). */
async function sampleHosts(namespace: string): Promise<void> {
  const hosts = [
    bmh({ name: "small", cpu: 4, ram: 4096, ip: "10.10.0.1" }), // fits nothing
    bmh({ name: "mid-a", cpu: 12, ram: 8192, ip: "10.10.0.2" }), // master (smallest that fits)
    bmh({ name: "mid-b", cpu: 16, ram: 16384, ip: "10.10.0.3" }), // fits master only
    bmh({ name: "big-a", cpu: 24, ram: 16384, ip: "10.10.0.4" }), // worker (smallest that fits)
    bmh({ name: "big-b", cpu: 48, ram: 131072, ip: "10.10.0.5" }),
    bmh({ name: "busy", cpu: 24, ram: 16384, ip: "10.10.0.6", state: "provisioning" }),
  ];
  for (const h of hosts) await createHost(c, namespace, h);
}

async function inventoryOf(namespace: string, p: Provisioning): Promise<{ hostsIni: string; offline: string }> {
  const cm = await c.core.readNamespacedConfigMap({ namespace, name: p.status!.inventoryConfigMap! });
  return { hostsIni: cm.data!["hosts.ini"]!, offline: cm.data!["offline.yml"]! };
}

describe("BPA operator with a real API server", () => {
  it("applies seed 002's sample as written and installs it on the smallest hosts that fit", async () => {
    const ns = await newNamespace(c, "bpa-sample");
    await sampleHosts(ns);
    await operatorFor(ns);
    await createProvisioning(c, ns, await seedSample());

    const p = await waitForStatus(c, ns, "provisioning-sample", "phase Installing", (x) => x.status?.phase === "Installing");
    // The spec is stored as written: single objects.
    expect(p.spec).toEqual({ master: { cpu: 10, memory: "4Gi" }, worker: { cpu: 20, memory: "8Gi" }, replicas: 2 });
    expect(p.status!.observedGeneration).toBe(p.metadata.generation);
    expect(p.status!.assignedHosts!.map((h) => `${h.role}[${h.index}]=${h.name}@${h.ip}`)).toEqual(["master[0]=mid-a@10.10.0.2", "worker[0]=big-a@10.10.0.4"]);
    expect(condition(p, "HostsAssigned")).toMatchObject({ status: "True", reason: "Assigned" });
    expect(condition(p, "InventoryReady")).toMatchObject({ status: "True" });
    expect(condition(p, "Installing")).toMatchObject({ status: "True", reason: "JobRunning" });
    expect(condition(p, "Ready")).toMatchObject({ status: "False", reason: "Installing", observedGeneration: p.metadata.generation });

    // The inventory ConfigMap: kubespray's format, parsed by the real ansible-inventory.
    const { hostsIni, offline } = await inventoryOf(ns, p);
    const dir = await mkdtemp(join(tmpdir(), "bpa-int-inv-"));
    try {
      await mkdir(join(dir, "group_vars", "all"), { recursive: true });
      await writeFile(join(dir, "hosts.ini"), hostsIni);
      await writeFile(join(dir, "group_vars", "all", "offline.yml"), offline);
      const { stdout } = await run("ansible-inventory", ["-i", join(dir, "hosts.ini"), "--list"], {
        env: { ...process.env, ANSIBLE_HOME: join(dir, ".ansible"), ANSIBLE_LOCAL_TEMP: join(dir, ".tmp") },
      });
      const inv = JSON.parse(stdout) as Record<string, { hosts?: string[] }> & { _meta: { hostvars: Record<string, Record<string, unknown>> } };
      expect(inv.kube_control_plane!.hosts).toEqual(["mid-a"]);
      expect(inv.etcd!.hosts).toEqual(["mid-a"]);
      expect(inv.kube_node!.hosts).toEqual(["big-a"]);
      expect(inv._meta.hostvars["big-a"]).toMatchObject({ ansible_host: "10.10.0.4", ip: "10.10.0.4", registry_host: "192.168.100.1:5000" });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }

    // The install Job: runner image from the configuration, inventory and key mounted, owned by the Provisioning.
    const jobs = await listInstallJobs(c, ns);
    expect(jobs.map((j) => j.metadata!.name)).toEqual([p.status!.installJob]);
    const job = jobs[0]!;
    const owner = {
      apiVersion: "bpa.akraino.org/v1alpha1",
      kind: "Provisioning",
      name: "provisioning-sample",
      uid: p.metadata.uid,
      controller: true,
      blockOwnerDeletion: true,
    };
    expect(job.metadata!.ownerReferences).toEqual([owner]);
    expect(job.spec!.template.spec!.containers[0]!.image).toBe("192.168.100.1:5000/icn/kubespray-runner:2.27.0");
    // Beside its writable /tmp (an emptyDir), the pod mounts the SSH key and this install's inventory.
    expect(job.spec!.template.spec!.volumes!.map((v) => v.configMap?.name ?? v.secret?.secretName ?? (v.emptyDir ? "emptyDir" : v.name))).toEqual([
      "bpa-ssh-key",
      p.status!.inventoryConfigMap,
      "emptyDir",
    ]);

    // Deleting the Provisioning cleans up through these owner references. The garbage
    // collector that acts on them is kube-controller-manager's, which the test harness does
    // not run, so the test checks that every child carries the controller reference.
    const cm = await c.core.readNamespacedConfigMap({ namespace: ns, name: p.status!.inventoryConfigMap! });
    const kubeconfig = await c.core.readNamespacedSecret({ namespace: ns, name: "provisioning-sample-kubeconfig" });
    const sa = await c.core.readNamespacedServiceAccount({ namespace: ns, name: "provisioning-sample-runner" });
    const role = await c.rbac.readNamespacedRole({ namespace: ns, name: "provisioning-sample-runner" });
    const binding = await c.rbac.readNamespacedRoleBinding({ namespace: ns, name: "provisioning-sample-runner" });
    const agents = await c.apps.readNamespacedDeployment({ namespace: ns, name: "provisioning-sample-agents" });
    for (const child of [cm, kubeconfig, sa, role, binding, agents]) expect(child.metadata!.ownerReferences).toEqual([owner]);
    expect(kubeconfig.data ?? {}).toEqual({}); // empty until the runner hands the kubeconfig back
    expect(role.rules).toEqual([
      { apiGroups: [""], resources: ["secrets"], resourceNames: ["provisioning-sample-kubeconfig"], verbs: ["get", "update", "patch"] },
      { apiGroups: [""], resources: ["configmaps"], resourceNames: ["provisioning-sample-addons-results"], verbs: ["get", "update", "patch"] },
    ]);

    // The SSH key: created once per namespace, not owned (hosts keep trusting it), published for user-data.
    const key = await c.core.readNamespacedSecret({ namespace: ns, name: "bpa-ssh-key" });
    expect(key.type).toBe("kubernetes.io/ssh-auth");
    expect(key.metadata!.ownerReferences).toBeUndefined();
    const publicKey = Buffer.from(key.data!["ssh-publickey"]!, "base64").toString();
    expect(publicKey).toMatch(/^ssh-ed25519 \S+ bpa@/);
    const published = await c.core.readNamespacedConfigMap({ namespace: ns, name: "bpa-ssh-key-public" });
    expect(published.data!.authorized_keys!.trim()).toBe(publicKey);
    const userData = await c.core.readNamespacedSecret({ namespace: ns, name: "bpa-ssh-key-user-data" });
    expect(Buffer.from(userData.data!.userData!, "base64").toString()).toContain(publicKey);
  });

  it("replicas: keeps an agent Deployment of that size and lists its pods in status.podAgents", async () => {
    const ns = await newNamespace(c, "bpa-agents");
    await sampleHosts(ns);
    await operatorFor(ns);
    await createProvisioning(c, ns, await seedSample());
    const deployment = await waitFor("agents Deployment", async () => {
      try {
        return await c.apps.readNamespacedDeployment({ namespace: ns, name: "provisioning-sample-agents" });
      } catch {
        return undefined;
      }
    });
    expect(deployment.spec!.replicas).toBe(2);
    expect(deployment.spec!.template.spec!.containers[0]!.args).toEqual(["agent"]);
    // No controller-manager here: make the pods its ReplicaSet would make (same labels).
    const labels = deployment.spec!.template.metadata!.labels!;
    for (const name of ["agent-b", "agent-a"]) {
      await c.core.createNamespacedPod({ namespace: ns, body: { metadata: { name, labels }, spec: { containers: [{ name: "agent", image: "x" }] } } });
    }
    await c.core.createNamespacedPod({
      namespace: ns,
      body: { metadata: { name: "unrelated", labels: { app: "x" } }, spec: { containers: [{ name: "c", image: "x" }] } },
    });
    await waitForStatus(c, ns, "provisioning-sample", "podAgents", (p) => JSON.stringify(p.status?.podAgents) === '["agent-a","agent-b"]');
    // A pod dies: it leaves the list.
    await c.core.deleteNamespacedPod({ namespace: ns, name: "agent-a", gracePeriodSeconds: 0 });
    await waitForStatus(c, ns, "provisioning-sample", "podAgents after a pod died", (p) => JSON.stringify(p.status?.podAgents) === '["agent-b"]');
    // Scaling follows spec.replicas; 0 removes the Deployment.
    await patchProvisioning(c, ns, "provisioning-sample", { spec: { replicas: 3 } });
    await waitFor(
      "3 replicas",
      async () => (await c.apps.readNamespacedDeployment({ namespace: ns, name: "provisioning-sample-agents" })).spec!.replicas === 3,
    );
    await patchProvisioning(c, ns, "provisioning-sample", { spec: { replicas: 0 } });
    await waitFor("agents deleted", async () => {
      try {
        await c.apps.readNamespacedDeployment({ namespace: ns, name: "provisioning-sample-agents" });
        return false;
      } catch {
        return true;
      }
    });
    // Changing replicas never starts an install.
    expect(await listInstallJobs(c, ns)).toHaveLength(1);
  });

  it("Job success with a kubeconfig handed back -> Ready; an unchanged spec never starts a second install", async () => {
    const ns = await newNamespace(c, "bpa-success");
    await sampleHosts(ns);
    const op = await operatorFor(ns);
    await createProvisioning(c, ns, await seedSample());
    const p = await waitForStatus(c, ns, "provisioning-sample", "Installing", (x) => x.status?.phase === "Installing");
    const jobName = p.status!.installJob!;
    await setJobStatus(c, ns, jobName, "running");
    await handBackKubeconfig(c, ns, "provisioning-sample-kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: app\n");
    await setJobStatus(c, ns, jobName, "succeeded");
    const ready = await waitForStatus(c, ns, "provisioning-sample", "Ready", (x) => x.status?.phase === "Ready");
    expect(condition(ready, "Ready")).toMatchObject({ status: "True", reason: "Installed" });
    expect(condition(ready, "Ready")!.message).toContain("provisioning-sample-kubeconfig");
    expect(condition(ready, "Installing")).toMatchObject({ status: "False", reason: "JobSucceeded" });
    expect(condition(ready, "Failed")).toMatchObject({ status: "False" });
    expect(ready.status!.kubeconfigSecret).toBe("provisioning-sample-kubeconfig");
    const secret = await c.core.readNamespacedSecret({ namespace: ns, name: "provisioning-sample-kubeconfig" });
    expect(Buffer.from(secret.data!.kubeconfig!, "base64").toString()).toContain("current-context: app");

    // Re-applying the same spec in other words (a list of one, 4096Mi) and unrelated edits:
    // reconciles happen, no second Job.
    const before = op.controller!.reconciles;
    await patchProvisioning(c, ns, "provisioning-sample", {
      metadata: { labels: { touched: "yes" } },
      spec: { master: [{ cpu: 10, memory: "4096Mi" }], worker: [{ cpu: 20, memory: "8Gi" }] },
    });
    await waitFor("reconciles after the edit", async () => op.controller!.reconciles > before);
    // A new host that fits better must not move a finished cluster either.
    await createHost(c, ns, bmh({ name: "tiny-but-enough", cpu: 10, ram: 4096, ip: "10.10.0.9" }));
    await new Promise((r) => setTimeout(r, 1000));
    const after = await getProvisioning(c, ns, "provisioning-sample");
    expect(after.status!.phase).toBe("Ready");
    expect(after.status!.observedGeneration).toBe(after.metadata.generation);
    expect((await listInstallJobs(c, ns)).map((j) => j.metadata!.name)).toEqual([jobName]);

    // Even when the finished Job is deleted, the same install is not started again.
    // Background propagation: no orphan finalizer waiting for a garbage collector that is not running.
    await c.batch.deleteNamespacedJob({ namespace: ns, name: jobName, propagationPolicy: "Background" });
    await patchProvisioning(c, ns, "provisioning-sample", { metadata: { labels: { touched: "again" } } });
    await new Promise((r) => setTimeout(r, 1000));
    expect(await listInstallJobs(c, ns)).toHaveLength(0);
    expect((await getProvisioning(c, ns, "provisioning-sample")).status!.phase).toBe("Ready");
  });

  it("Job success without a kubeconfig -> Failed/NoKubeconfig; Job failure -> Failed with the reason and where the logs are", async () => {
    const ns = await newNamespace(c, "bpa-failure");
    await sampleHosts(ns);
    await operatorFor(ns);
    await createProvisioning(c, ns, await seedSample());
    const p = await waitForStatus(c, ns, "provisioning-sample", "Installing", (x) => x.status?.phase === "Installing");
    await setJobStatus(c, ns, p.status!.installJob!, "succeeded");
    const noKubeconfig = await waitForStatus(c, ns, "provisioning-sample", "Failed", (x) => x.status?.phase === "Failed");
    expect(condition(noKubeconfig, "Failed")).toMatchObject({ status: "True", reason: "NoKubeconfig" });
    expect(condition(noKubeconfig, "Ready")!.message).toContain(
      'the runner handed back no kubeconfig: Secret provisioning-sample-kubeconfig has no "kubeconfig" data',
    );

    // A failing install: a second Provisioning in the namespace (the first holds two hosts).
    await createProvisioning(c, ns, { metadata: { name: "second" }, spec: { master: { cpu: 10, memory: "4Gi" } } });
    const second = await waitForStatus(c, ns, "second", "Installing", (x) => x.status?.phase === "Installing");
    expect(second.status!.assignedHosts!.map((h) => h.name)).toEqual(["mid-b"]); // mid-a is claimed by the first
    const job = await c.batch.readNamespacedJob({ namespace: ns, name: second.status!.installJob! });
    // The pod the Job controller would have made, so that the logs hint can name it.
    await c.core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: {
          name: `${job.metadata!.name}-x7k2p`,
          labels: job.spec!.template.metadata!.labels!,
          ownerReferences: [{ apiVersion: "batch/v1", kind: "Job", name: job.metadata!.name!, uid: job.metadata!.uid!, controller: true }],
        },
        spec: { restartPolicy: "Never", containers: [{ name: "kubespray", image: "x" }] },
      },
    });
    expect(job.spec!.template.spec!.containers[0]!.terminationMessagePolicy).toBe("FallbackToLogsOnError");
    // What the kubelet reports for the runner that failed: its termination message names the task and host.
    const cause = 'cluster.yml failed: task "kubernetes/preinstall : Stop if memory is too small for control plane" failed on host mid-b: Assertion failed';
    await c.core.patchNamespacedPodStatus(
      {
        namespace: ns,
        name: `${job.metadata!.name}-x7k2p`,
        body: {
          status: {
            phase: "Failed",
            containerStatuses: [
              {
                name: "kubespray",
                image: "x",
                imageID: "",
                ready: false,
                restartCount: 0,
                state: { terminated: { exitCode: 2, reason: "Error", message: cause } },
              },
            ],
          },
        },
      },
      mergePatch,
    );
    await setJobStatus(c, ns, job.metadata!.name!, "failed");
    const failed = await waitForStatus(
      c,
      ns,
      "second",
      "Failed",
      (x) =>
        condition(x, "Failed")?.reason === "InstallFailed" &&
        condition(x, "Failed")!.message.includes("pods:") &&
        condition(x, "Failed")!.message.includes("mid-b"),
    );
    const message = condition(failed, "Failed")!.message;
    expect(message).toContain(`install Job ${job.metadata!.name} failed: ${cause} (BackoffLimitExceeded: Job has reached the specified backoff limit)`);
    expect(message).toContain(`logs: kubectl -n ${ns} logs job/${job.metadata!.name} (pods: ${job.metadata!.name}-x7k2p)`);
    expect(condition(failed, "Ready")).toMatchObject({ status: "False", reason: "InstallFailed" });
    // kubectl describe shows it: a Warning Event with the runner's cause.
    const event = await waitFor("an InstallFailed Event", async () =>
      (await c.core.listNamespacedEvent({ namespace: ns, fieldSelector: "involvedObject.name=second" })).items.find((e) => e.reason === "InstallFailed"),
    );
    expect(event).toMatchObject({ type: "Warning", message: expect.stringContaining(cause) });

    // No automatic second attempt; the retry annotation asks for one.
    await new Promise((r) => setTimeout(r, 500));
    expect((await listInstallJobs(c, ns)).filter((j) => j.metadata!.labels!["bpa.akraino.org/provisioning"] === "second")).toHaveLength(1);
    await patchProvisioning(c, ns, "second", { metadata: { annotations: { "bpa.akraino.org/retry": "1" } } });
    const retried = await waitForStatus(
      c,
      ns,
      "second",
      "a new install after the retry annotation",
      (x) => x.status?.phase === "Installing" && x.status.installJob !== job.metadata!.name,
    );
    expect(retried.status!.assignedHosts!.map((h) => h.name)).toEqual(["mid-b"]);
    const secondJobs = (await listInstallJobs(c, ns)).filter((j) => j.metadata!.labels!["bpa.akraino.org/provisioning"] === "second");
    expect(secondJobs.map((j) => j.metadata!.name).sort()).toEqual([job.metadata!.name, retried.status!.installJob].sort());
  });

  it("re-plans when the spec changes: new inventory, new Job, the superseded running Job deleted", async () => {
    const ns = await newNamespace(c, "bpa-change");
    await sampleHosts(ns);
    await operatorFor(ns);
    await createProvisioning(c, ns, await seedSample());
    const first = await waitForStatus(c, ns, "provisioning-sample", "Installing", (x) => x.status?.phase === "Installing");
    await setJobStatus(c, ns, first.status!.installJob!, "running");
    await patchProvisioning(c, ns, "provisioning-sample", {
      spec: {
        worker: [
          { cpu: 20, memory: "8Gi" },
          { cpu: 40, memory: "64Gi" },
        ],
      },
    });
    const second = await waitForStatus(
      c,
      ns,
      "provisioning-sample",
      "a new install",
      (x) => x.status?.installJob !== first.status!.installJob && x.status?.phase === "Installing",
    );
    expect(second.status!.assignedHosts!.map((h) => `${h.role}[${h.index}]=${h.name}`)).toEqual(["master[0]=mid-a", "worker[0]=big-a", "worker[1]=big-b"]);
    const { hostsIni } = await inventoryOf(ns, second);
    expect(hostsIni).toContain("[kube_node]\nbig-a\nbig-b\n");
    await waitFor("the superseded Job deleted", async () => (await listInstallJobs(c, ns)).map((j) => j.metadata!.name).join() === second.status!.installJob);
  });

  it("an unsatisfiable request says which requirement and which hosts were close; a new matching host fills it", async () => {
    const ns = await newNamespace(c, "bpa-unsat");
    await createHost(c, ns, bmh({ name: "host-1", cpu: 12, ram: 8192 }));
    await createHost(c, ns, bmh({ name: "host-3", cpu: 16, ram: 8192, labels: { [LABEL_SRIOV]: "true" } }));
    await createHost(c, ns, bmh({ name: "host-7", cpu: 24, ram: 4096, nicModel: "0x8086 0x1572" }));
    await operatorFor(ns);
    await createProvisioning(c, ns, {
      metadata: { name: "edge" },
      spec: { master: { cpu: 10, memory: "4Gi" }, worker: [{ cpu: 20, memory: "8Gi", sriov: true }] },
    });
    const p = await waitForStatus(c, ns, "edge", "Unsatisfiable", (x) => x.status?.phase === "Unsatisfiable");
    const message = condition(p, "HostsAssigned")!.message;
    expect(condition(p, "HostsAssigned")).toMatchObject({ status: "False", reason: "Unsatisfiable" });
    expect(message).toContain(
      "worker[0] needs cpu>=20, memory>=8Gi, sriov: no unclaimed provisioned host has it; closest: host-3 (16 cpu, 8Gi, sriov), host-7 (24 cpu, 4Gi, sriov)",
    );
    expect(condition(p, "Ready")).toMatchObject({ status: "False", reason: "Unsatisfiable" });
    expect(await listInstallJobs(c, ns)).toHaveLength(0);
    // A matching host appears: the unfilled role is re-planned and the install starts.
    await createHost(c, ns, bmh({ name: "host-9", cpu: 32, ram: 16384, labels: { [LABEL_SRIOV]: "true" } }));
    const filled = await waitForStatus(c, ns, "edge", "Installing", (x) => x.status?.phase === "Installing");
    expect(filled.status!.assignedHosts!.map((h) => `${h.role}=${h.name}`)).toEqual(["master=host-1", "worker=host-9"]);
    expect(await listInstallJobs(c, ns)).toHaveLength(1);
  });

  it("an invalid request gets a condition naming the field, no requeue loop, and the operator keeps serving others", async () => {
    const ns = await newNamespace(c, "bpa-invalid");
    await sampleHosts(ns);
    const op = await operatorFor(ns);
    await createProvisioning(c, ns, { metadata: { name: "bad" }, spec: { master: { cpu: "ten", memory: "lots" }, worker: [{ cpu: 2, gpu: true }] } });
    const bad = await waitForStatus(c, ns, "bad", "Invalid", (x) => x.status?.phase === "Invalid");
    const message = condition(bad, "Ready")!.message;
    expect(condition(bad, "Ready")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(message).toContain('spec.master.cpu: expected a whole number of CPUs >= 0, got the string "ten"');
    expect(message).toContain('spec.master.memory: "lots" is not a Kubernetes quantity');
    expect(message).toContain("spec.worker[0].gpu: unknown field");
    // The API server itself rejects what the schema can type.
    await expect(createProvisioning(c, ns, { metadata: { name: "negative" }, spec: { master: {}, replicas: -1 } })).rejects.toThrow(/replicas/);
    // No crash loop, no busy requeue: only a handful of reconciles while nothing changes.
    const count = op.controller!.reconciles;
    await new Promise((r) => setTimeout(r, 1500));
    expect(op.controller!.reconciles - count).toBeLessThanOrEqual(1);
    expect(op.controller!.queue.failureCount(`${ns}/bad`)).toBe(0);
    // Others are still served, and fixing the spec brings the install.
    await createProvisioning(c, ns, await seedSample());
    await waitForStatus(c, ns, "provisioning-sample", "Installing", (x) => x.status?.phase === "Installing");
    await patchProvisioning(c, ns, "bad", { spec: { master: { cpu: 12, memory: "8Gi" }, worker: null } });
    const fixed = await waitForStatus(c, ns, "bad", "Installing", (x) => x.status?.phase === "Installing");
    expect(fixed.status!.assignedHosts!.map((h) => h.name)).toEqual(["mid-b"]);
  });

  it("more nodes than the pod network holds is Invalid, naming what to set; within it, the install starts", async () => {
    const ns = await newNamespace(c, "bpa-pod-network");
    await sampleHosts(ns);
    await operatorFor(ns, { extraVars: { kube_pods_subnet: "10.233.64.0/23", kube_network_node_prefix: 24 } });
    const worker = { cpu: 2, memory: "1Gi" };
    await createProvisioning(c, ns, { metadata: { name: "wide" }, spec: { master: { cpu: 10, memory: "4Gi" }, worker: [worker, worker] } });
    const wide = await waitForStatus(c, ns, "wide", "Invalid", (x) => x.status?.phase === "Invalid");
    expect(condition(wide, "Ready")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(wide, "Ready")!.message).toContain(
      "spec: 3 nodes do not fit the pod network (kube_pods_subnet 10.233.64.0/23 with kube_network_node_prefix 24 holds 2)",
    );
    expect(await listInstallJobs(c, ns)).toHaveLength(0);
    await patchProvisioning(c, ns, "wide", { spec: { worker: [worker] } });
    await waitForStatus(c, ns, "wide", "Installing", (x) => x.status?.phase === "Installing");
  });

  it("spec.kubernetesVersion: one the appliance does not serve is Invalid with the served list; a served one reaches kubespray's variables", async () => {
    const ns = await newNamespace(c, "bpa-version");
    await sampleHosts(ns);
    await operatorFor(ns, { kubernetesVersions: ["1.35.4"] });
    await createProvisioning(c, ns, { metadata: { name: "old" }, spec: { master: { cpu: 10, memory: "4Gi" }, kubernetesVersion: "1.33.1" } });
    const old = await waitForStatus(c, ns, "old", "Invalid", (x) => x.status?.phase === "Invalid");
    expect(condition(old, "Ready")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(old, "Ready")!.message).toContain("spec.kubernetesVersion: 1.33.1 is not served by this appliance; it serves 1.35.4");
    await patchProvisioning(c, ns, "old", { spec: { kubernetesVersion: "v1.35.4" } });
    const served = await waitForStatus(c, ns, "old", "Installing", (x) => x.status?.phase === "Installing");
    expect(yaml.load((await inventoryOf(ns, served)).offline)).toMatchObject({ kube_version: "1.35.4" });
  });
});
