/**
 * The operator as a process among others: restarted during an install, two replicas
 * behind leader election, least-privilege RBAC from manifests/bpa/rbac.yaml, and hosts
 * claimed by one Provisioning at a time.
 */
import yaml from "js-yaml";
import { parseConfig } from "../../../bpa/config/config.js";
import { KubeConfig, type V1ConfigMap, type V1Deployment, type V1ClusterRole } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { BPA_GROUP, BPA_VERSION, PROVISIONING_PLURAL } from "../../../bpa/api/constants.js";
import { isConflict, makeClients } from "../../../bpa/runtime/kube.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { applyRbac as applyShippedRbac, bindOperatorTo } from "../../helpers/rbac.js";
import {
  condition,
  createHost,
  createProvisioning,
  getProvisioning,
  handBackKubeconfig,
  listInstallJobs,
  loadKubeYaml,
  newNamespace,
  operatorConfig,
  operatorSuite,
  setJobStatus,
  startOperator,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const { kc, c, start, track } = operatorSuite();

async function twoHosts(ns: string): Promise<void> {
  await createHost(c, ns, bmh({ name: "m1", cpu: 16, ram: 16384, ip: "10.20.0.1" }));
  await createHost(c, ns, bmh({ name: "w1", cpu: 32, ram: 32768, ip: "10.20.0.2" }));
}

const sample = { metadata: { name: "cluster" }, spec: { master: { cpu: 10, memory: "4Gi" }, worker: { cpu: 20, memory: "8Gi" } } };

describe("operator lifecycle", () => {
  it("picks up an install where a stopped operator left it, without a second Job", async () => {
    const ns = await newNamespace(c, "bpa-restart");
    await twoHosts(ns);
    const first = await startOperator(kc, operatorConfig(ns), { identity: "first" });
    await createProvisioning(c, ns, sample);
    const installing = await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing");
    const jobName = installing.status!.installJob!;
    await setJobStatus(c, ns, jobName, "running");
    await first.stop(); // releases the Lease

    // While no operator runs, the install goes on and finishes (the runner hands back the kubeconfig).
    await handBackKubeconfig(c, ns, "cluster-kubeconfig");
    await setJobStatus(c, ns, jobName, "succeeded");
    expect((await getProvisioning(c, ns, "cluster")).status!.phase).toBe("Installing");

    await start(operatorConfig(ns), { identity: "second" });
    const ready = await waitForStatus(c, ns, "cluster", "Ready", (p) => p.status?.phase === "Ready");
    expect(ready.status!.installJob).toBe(jobName);
    expect(ready.status!.assignedHosts).toEqual(installing.status!.assignedHosts);
    expect((await listInstallJobs(c, ns)).map((j) => j.metadata!.name)).toEqual([jobName]);
  });

  it("two replicas: only the Lease holder reconciles; the other takes over when it stops", async () => {
    const ns = await newNamespace(c, "bpa-leader");
    await twoHosts(ns);
    const config = operatorConfig(ns);
    const a = await startOperator(kc, config, { identity: "replica-a" });
    const b = await start(config, { identity: "replica-b", waitForLeadership: false });
    await new Promise((r) => setTimeout(r, 1000));
    expect(a.isLeader()).toBe(true);
    expect(b.isLeader()).toBe(false);
    expect(b.controller).toBeUndefined();
    const lease = await c.coordination.readNamespacedLease({ namespace: ns, name: "bpa-leader" });
    expect(lease.spec!.holderIdentity).toBe("replica-a");

    await createProvisioning(c, ns, sample);
    await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing");
    expect(await listInstallJobs(c, ns)).toHaveLength(1);

    await a.stop();
    await waitFor("replica-b to lead", async () => b.isLeader() && b.controller !== undefined, 10_000);
    const after = await c.coordination.readNamespacedLease({ namespace: ns, name: "bpa-leader" });
    expect(after.spec!.holderIdentity).toBe("replica-b");
    expect(after.spec!.leaseTransitions).toBeGreaterThanOrEqual(1);
    const jobName = (await getProvisioning(c, ns, "cluster")).status!.installJob!;
    await handBackKubeconfig(c, ns, "cluster-kubeconfig");
    await setJobStatus(c, ns, jobName, "succeeded");
    await waitForStatus(c, ns, "cluster", "Ready under the new leader", (p) => p.status?.phase === "Ready");
    expect(await listInstallJobs(c, ns)).toHaveLength(1);
  });

  it("a leader whose Lease is taken over stops reconciling", async () => {
    const ns = await newNamespace(c, "bpa-steal");
    let lost = "";
    const { Operator } = await import("../../../bpa/operator.js");
    const { silentLogger } = await import("../../../bpa/runtime/log.js");
    const op = track(new Operator({ kc, config: operatorConfig(ns), log: silentLogger, identity: "victim", onLostLeadership: (reason) => (lost = reason) }));
    await op.start();
    await waitFor("victim leads", async () => op.controller !== undefined);
    // Another holder writes itself into the Lease (as a replica that saw it expire would).
    const lease = await c.coordination.readNamespacedLease({ namespace: ns, name: "bpa-leader" });
    await c.coordination.replaceNamespacedLease({ namespace: ns, name: "bpa-leader", body: { ...lease, spec: { ...lease.spec, holderIdentity: "usurper" } } });
    await waitFor("leadership lost", async () => lost !== "", 10_000);
    expect(lost).toContain("usurper");
    expect(op.controller).toBeUndefined();
  });

  it("one host serves one Provisioning; deleting a Provisioning frees its hosts", async () => {
    const ns = await newNamespace(c, "bpa-claims");
    await createHost(c, ns, bmh({ name: "h1", cpu: 16, ram: 16384 }));
    await createHost(c, ns, bmh({ name: "h2", cpu: 16, ram: 16384 }));
    await start(operatorConfig(ns));
    const request = (name: string) => ({ metadata: { name }, spec: { master: { cpu: 8, memory: "8Gi" } } });
    await Promise.all([createProvisioning(c, ns, request("a")), createProvisioning(c, ns, request("b"))]);
    const a = await waitForStatus(c, ns, "a", "a Installing", (p) => p.status?.phase === "Installing");
    const b = await waitForStatus(c, ns, "b", "b Installing", (p) => p.status?.phase === "Installing");
    expect(new Set([a.status!.assignedHosts![0]!.name, b.status!.assignedHosts![0]!.name])).toEqual(new Set(["h1", "h2"]));
    await createProvisioning(c, ns, request("c"));
    const waiting = await waitForStatus(c, ns, "c", "c Unsatisfiable", (p) => p.status?.phase === "Unsatisfiable");
    expect(condition(waiting, "HostsAssigned")!.message).toMatch(/h1: claimed by .*\/(a|b)/);
    // Deleting a frees its host for c (its children would go with it through the garbage collector).
    await c.custom.deleteNamespacedCustomObject({ group: BPA_GROUP, version: BPA_VERSION, namespace: ns, plural: PROVISIONING_PLURAL, name: "a" });
    const filled = await waitForStatus(c, ns, "c", "c Installing", (p) => p.status?.phase === "Installing");
    expect(filled.status!.assignedHosts![0]!.name).toBe(a.status!.assignedHosts![0]!.name);
  });
});

describe("informers", () => {
  it("restart after errors: a list refused by RBAC is retried with backoff until it is allowed", async () => {
    const ns = await newNamespace(c, "bpa-informer");
    await c.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: "seen", labels: { app: "x" } } } });
    const viewer = new KubeConfig();
    viewer.loadFromString(kc.exportConfig());
    viewer.users = viewer.users.map((u) => ({ ...u, impersonateUser: `system:serviceaccount:${ns}:viewer` }));
    const asViewer = makeClients(viewer);
    const { ResilientInformer } = await import("../../../bpa/runtime/informer.js");
    const { silentLogger } = await import("../../../bpa/runtime/log.js");
    const informer = new ResilientInformer({
      kc: viewer,
      name: "configmaps",
      log: silentLogger,
      path: `/api/v1/namespaces/${ns}/configmaps`,
      list: () => asViewer.core.listNamespacedConfigMap({ namespace: ns }),
      minBackoffMs: 50,
      maxBackoffMs: 400,
    });
    const added: string[] = [];
    informer.on("add", (cm) => added.push(cm.metadata!.name!));
    try {
      await informer.start();
      await waitFor("a few restarts while forbidden", async () => informer.restarts >= 2, 10_000);
      expect(informer.isSynced()).toBe(false);
      await c.rbac.createNamespacedRole({
        namespace: ns,
        body: { metadata: { name: "viewer" }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["list", "watch"] }] },
      });
      await c.rbac.createNamespacedRoleBinding({
        namespace: ns,
        body: {
          metadata: { name: "viewer" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "viewer" },
          subjects: [{ kind: "ServiceAccount", name: "viewer", namespace: ns }],
        },
      });
      await waitFor("the informer to sync once allowed", async () => informer.isSynced(), 10_000);
      expect(added).toContain("seen");
      // And it watches from there on.
      await c.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: "later" } } });
      await waitFor("the watch to deliver a new object", async () => added.includes("later"));
    } finally {
      await informer.stop();
    }
  });
});

describe("reconcile errors", () => {
  it("are retried with a growing backoff and reported in the Reconciled condition, until they go away", async () => {
    const ns = await newNamespace(c, "bpa-errors");
    await twoHosts(ns);
    // The operator's rules (cluster-wide and per namespace), minus creating Jobs: every reconcile fails at the last step.
    const clusterRoles = (await loadKubeYaml<V1ClusterRole>("manifests/bpa/rbac.yaml")).filter((d) => d.kind === "ClusterRole");
    const rules = clusterRoles
      .flatMap((r) => r.rules!)
      .map((r) => (r.resources!.includes("jobs") ? { ...r, verbs: r.verbs.filter((v) => v !== "create") } : r));
    rules.push({ apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "create", "update"] });
    rules.push({ apiGroups: [""], resources: ["configmaps"], resourceNames: ["icn-registry-ca", "bpa-kubespray-pins"], verbs: ["get", "list", "watch"] });
    await c.rbac.createNamespacedRole({ namespace: ns, body: { metadata: { name: "op" }, rules } });
    await c.rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: "op" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "op" },
        subjects: [{ kind: "ServiceAccount", name: "op", namespace: ns }],
      },
    });
    const limited = new KubeConfig();
    limited.loadFromString(kc.exportConfig());
    limited.users = limited.users.map((u) => ({ ...u, impersonateUser: `system:serviceaccount:${ns}:op` }));
    const op = await start(operatorConfig(ns), {}, limited);
    await createProvisioning(c, ns, sample);
    const failing = await waitForStatus(c, ns, "cluster", "Reconciled=False", (p) => condition(p, "Reconciled")?.status === "False");
    expect(condition(failing, "Reconciled")).toMatchObject({ reason: "ReconcileError" });
    expect(condition(failing, "Reconciled")!.message).toMatch(/jobs\.batch is forbidden.*retrying with backoff/);
    // Backoff: 100 ms, 200, 400, ... (test settings): retried, but not a hot loop. Waiting for the
    // second retry (not a fixed sleep) keeps this true on a loaded machine; a hot loop would retry
    // hundreds of times in the 1.5 s that follow, the backoff four or five times (plus one
    // immediate re-queue when the registry CA's informer lists its ConfigMap).
    const key = `${ns}/cluster`;
    for (const deadline = Date.now() + 15_000; op.controller!.queue.failureCount(key) < 2 && Date.now() < deadline;)
      await new Promise((r) => setTimeout(r, 50));
    const early = op.controller!.queue.failureCount(key);
    expect(early).toBeGreaterThanOrEqual(2);
    await new Promise((r) => setTimeout(r, 1500));
    expect(op.controller!.queue.failureCount(key) - early).toBeLessThanOrEqual(6);
    // Fixing the cause lets the next retry through.
    await c.rbac.replaceNamespacedRole({
      namespace: ns,
      name: "op",
      body: { metadata: { name: "op" }, rules: [...rules, { apiGroups: ["batch"], resources: ["jobs"], verbs: ["create"] }] },
    });
    const installing = await waitForStatus(
      c,
      ns,
      "cluster",
      "Installing",
      (p) => p.status?.phase === "Installing" && condition(p, "Reconciled")?.status === "True",
      30_000,
    );
    expect(installing.status!.installJob).toBeTruthy();
    // The reconcile writes the status before it returns; the queue forgets the failures after.
    for (const deadline = Date.now() + 5000; op.controller!.queue.failureCount(key) > 0 && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 20));
    expect(op.controller!.queue.failureCount(key)).toBe(0);
  });
});

describe("least-privilege RBAC (manifests/bpa/rbac.yaml)", () => {
  async function applyRbac(): Promise<void> {
    const [namespace] = await loadKubeYaml<{ metadata: { name: string } }>("manifests/bpa/namespace.yaml");
    try {
      await c.core.createNamespace({ body: namespace! });
    } catch (error) {
      if (!isConflict(error)) throw error;
    }
    await applyShippedRbac(c, "manifests/bpa/rbac.yaml");
  }

  /** The test's admin kubeconfig, impersonating the operator's ServiceAccount. */
  function asOperator(): KubeConfig {
    const impersonating = new KubeConfig();
    impersonating.loadFromString(kc.exportConfig());
    const user = impersonating.getCurrentUser()!;
    impersonating.users = impersonating.users.map((u) =>
      u.name === user.name ? { ...u, impersonateUser: "system:serviceaccount:bpa-system:bpa-operator" } : u,
    );
    return impersonating;
  }

  it("the deploy manifests are accepted by the API server, and the shipped configuration is valid", async () => {
    await applyRbac();
    const [config] = await loadKubeYaml<V1ConfigMap>("manifests/bpa/config.yaml");
    const [deployment] = await loadKubeYaml<V1Deployment>("manifests/bpa/deployment.yaml");
    // Server-side dry run: full validation and admission, nothing stored.
    await c.core.createNamespacedConfigMap({ namespace: "bpa-system", body: config!, dryRun: "All" });
    const created = await c.apps.createNamespacedDeployment({ namespace: "bpa-system", body: deployment!, dryRun: "All" });
    expect(created.spec!.template.spec!.serviceAccountName).toBe("bpa-operator");
    // One replica on the one-node appliance; leader election stays on, so a rollout's second pod (or more replicas) is safe.
    expect(created.spec!.replicas).toBe(1);
    const parsed = parseConfig(yaml.load(config!.data!["config.yaml"]!), "manifests/bpa/config.yaml");
    expect(parsed.leaderElection.enabled).toBe(true);
    // One replica on a possibly slow appliance: a minute and more of API server trouble must not make the leader exit.
    expect(parsed.leaderElection.renewDeadlineSeconds).toBeGreaterThanOrEqual(60);
    expect(created.spec!.template.spec!.containers[0]!.env!.find((e) => e.name === "BPA_CONFIG")!.value).toBe("/etc/bpa/config.yaml");
  });

  it("are enough for a whole install, and no more than the operator needs", async () => {
    await applyRbac();
    const ns = await newNamespace(c, "bpa-rbac");
    await bindOperatorTo(c, ns); // as a site does for each namespace its Provisionings live in
    await twoHosts(ns);
    const operatorKc = asOperator();
    const asSa = makeClients(operatorKc);
    // The impersonation is real: the ServiceAccount may not do what the admin may.
    await expect(asSa.core.listNamespacedSecret({ namespace: ns })).rejects.toThrow(/forbidden/i);
    await expect(
      asSa.custom.deleteNamespacedCustomObject({ group: BPA_GROUP, version: BPA_VERSION, namespace: ns, plural: PROVISIONING_PLURAL, name: "x" }),
    ).rejects.toThrow(/forbidden/i);
    await expect(asSa.coordination.createNamespacedLease({ namespace: ns, body: { metadata: { name: "x" }, spec: {} } })).rejects.toThrow(/forbidden/i);

    await start(
      operatorConfig(ns, {
        namespace: "bpa-system",
        leaderElection: { leaseName: `bpa-rbac-${ns}`.slice(0, 63), leaseDurationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 0.25 },
      }),
      {},
      operatorKc,
    );
    await createProvisioning(c, ns, { ...sample, spec: { ...sample.spec, replicas: 1 } });
    const p = await waitForStatus(c, ns, "cluster", "Installing", (x) => x.status?.phase === "Installing");
    expect(condition(p, "Reconciled")).toMatchObject({ status: "True" });
    // The Role it made for the runner (it may only grant what it holds itself).
    const role = await c.rbac.readNamespacedRole({ namespace: ns, name: "cluster-runner" });
    expect(role.rules![0]!.resourceNames).toEqual(["cluster-kubeconfig"]);
    await handBackKubeconfig(c, ns, "cluster-kubeconfig");
    await setJobStatus(c, ns, p.status!.installJob!, "succeeded");
    const ready = await waitForStatus(c, ns, "cluster", "Ready", (x) => x.status?.phase === "Ready");
    expect(ready.status!.podAgents).toEqual([]);
    // The runner's ServiceAccount may write its kubeconfig Secret and nothing else.
    const runnerKc = new KubeConfig();
    runnerKc.loadFromString(kc.exportConfig());
    runnerKc.users = runnerKc.users.map((u) => ({ ...u, impersonateUser: `system:serviceaccount:${ns}:cluster-runner` }));
    const runner = makeClients(runnerKc);
    await handBackKubeconfig(runner, ns, "cluster-kubeconfig", "written by the runner");
    await expect(runner.core.readNamespacedSecret({ namespace: ns, name: "bpa-ssh-key" })).rejects.toThrow(/forbidden/i);
  });
});
