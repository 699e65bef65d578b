/**
 * What each shipped account may NOT do (docs/permissions.md), asked of the real
 * kube-apiserver's authorizer with the shipped manifests applied (manifests/bpa/,
 * manifests/metal3/ and Metal3's own ClusterRole): SubjectAccessReviews as
 * `kubectl auth can-i … --as system:serviceaccount:NS:NAME` sends them. Then the operator
 * itself, as its ServiceAccount, facing a Provisioning in a namespace it was given no
 * rights in; the runner's pods under the restricted Pod Security level, and the runner
 * image's programs (OpenSSH, Ansible with Mitogen, Helm) run as those pods run them: as
 * nobody, on a read-only root, only /tmp writable.
 */
import { CoreV1Api, loadAllYaml, type V1Pod } from "@kubernetes/client-node";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readMetal3Manifests } from "../../builder/metal3/manifests.js";
import { PROVISIONING_API_VERSION, PROVISIONING_KIND } from "../../bpa/api/constants.js";
import type { Provisioning } from "../../bpa/api/types.js";
import { addonsJob } from "../../bpa/jobs/addons-objects.js";
import { planAddons } from "../../bpa/jobs/addons-plan.js";
import { names } from "../../bpa/jobs/names.js";
import { agentsDeployment, installJob, runnerRole, runnerRoleBinding, runnerServiceAccount } from "../../bpa/jobs/objects.js";
import { RUNNER_UID } from "../../bpa/jobs/pod-security.js";
import { mergePatch } from "../../bpa/runtime/kube.js";
import type { Operator } from "../../bpa/operator.js";
import { REASON_NAMESPACE_NOT_PERMITTED } from "../../bpa/controller/reconcile.js";
import { bmh } from "../helpers/fixtures/bpa/hosts.js";
import { testConfig } from "../helpers/fixtures/bpa/config.js";
import { inImage, unpackBuiltImage } from "../helpers/oci-rootfs.js";
import { applyRbac, applyRbacObject, bindOperatorTo, can, impersonating, serviceAccount, type Access } from "../helpers/rbac.js";
import {
  applyCrds,
  clients,
  condition,
  createHost,
  createProvisioning,
  kubeConfig,
  newNamespace,
  operatorConfig,
  startOperator,
  waitForStatus,
} from "../helpers/operator-suite.js";

const kc = kubeConfig();
const c = clients(kc);

const RUNNER = "bootstrap.icn:5000/icn/kubespray-runner:v2.31.0";
const OPERATOR = serviceAccount("bpa-system", "bpa-operator");
const API = serviceAccount("bpa-system", "bpa-api");
const BMO = serviceAccount("baremetal-operator-system", "baremetal-operator");

/** A namespace where Provisionings live (bound as a site binds it) and one where none may. */
let bound: string;
let unbound: string;

beforeAll(async () => {
  await applyCrds(kc);
  await applyRbac(c, "manifests/bpa/rbac.yaml", "manifests/bpa/api.yaml", "manifests/metal3/rbac.yaml");
  const metal3 = await readMetal3Manifests();
  for (const role of loadAllYaml(metal3.clusterRole).filter(Boolean)) await applyRbacObject(c, role as never);
  bound = await newNamespace(c, "lp-bound");
  await bindOperatorTo(c, bound);
  unbound = await newNamespace(c, "lp-unbound");
});

/** Each access with the answer expected, all asked, every wrong answer named at once. */
async function expectAnswers(user: string, cases: [boolean, Access][]): Promise<void> {
  const wrong: string[] = [];
  for (const [expected, access] of cases) {
    const got = await can(kc, user, access);
    if (got !== expected) wrong.push(`${user} ${got ? "may" : "may not"} ${JSON.stringify(access)}`);
  }
  expect(wrong).toEqual([]);
}

describe("the BPA operator (bpa-system:bpa-operator)", () => {
  it("may not read Secrets, run pods or grant rights outside the namespaces bound to it", async () => {
    await expectAnswers(OPERATOR, [
      [false, { verb: "get", resource: "secrets", namespace: "kube-system" }],
      [false, { verb: "list", resource: "secrets" }],
      [false, { verb: "get", resource: "secrets", namespace: "bpa-system", name: "icn-site-ca" }],
      [false, { verb: "get", resource: "secrets", namespace: "bpa-system", name: "icn-registry-push" }],
      [false, { verb: "get", resource: "secrets", namespace: unbound }],
      [false, { verb: "create", resource: "jobs.batch", namespace: "kube-system" }],
      [false, { verb: "create", resource: "pods", namespace: "kube-system" }],
      [false, { verb: "create", resource: "deployments.apps", namespace: "kube-system" }],
      [false, { verb: "create", resource: "jobs.batch", namespace: unbound }],
      [false, { verb: "create", resource: "serviceaccounts", namespace: "kube-system", subresource: "token", name: "default" }],
      [false, { verb: "create", resource: "roles.rbac.authorization.k8s.io", namespace: "kube-system" }],
      [false, { verb: "create", resource: "rolebindings.rbac.authorization.k8s.io", namespace: unbound }],
      [false, { verb: "create", resource: "clusterrolebindings.rbac.authorization.k8s.io" }],
      [false, { verb: "create", resource: "clusterroles.rbac.authorization.k8s.io" }],
      [false, { verb: "escalate", resource: "roles.rbac.authorization.k8s.io", namespace: bound }],
      [false, { verb: "bind", resource: "clusterroles.rbac.authorization.k8s.io", name: "cluster-admin" }],
      [false, { verb: "impersonate", resource: "serviceaccounts", namespace: "kube-system" }],
      [false, { verb: "create", resource: "pods", namespace: bound }],
      [false, { verb: "list", resource: "secrets", namespace: bound }],
      [false, { verb: "delete", resource: "provisionings.bpa.akraino.org", namespace: bound }],
      [false, { verb: "patch", resource: "baremetalhosts.metal3.io", namespace: bound }],
      [false, { verb: "create", resource: "leases.coordination.k8s.io", namespace: bound }],
      // What its work needs, so that the refusals above are the binding's and not an empty account's.
      [true, { verb: "list", resource: "provisionings.bpa.akraino.org" }],
      [true, { verb: "watch", resource: "baremetalhosts.metal3.io" }],
      [true, { verb: "patch", resource: "provisionings.bpa.akraino.org", subresource: "status", namespace: unbound }],
      [true, { verb: "create", resource: "events", namespace: unbound }],
      [true, { verb: "get", resource: "secrets", namespace: bound }],
      [true, { verb: "create", resource: "jobs.batch", namespace: bound }],
      [true, { verb: "create", resource: "roles.rbac.authorization.k8s.io", namespace: bound }],
      [true, { verb: "update", resource: "leases.coordination.k8s.io", namespace: "bpa-system" }],
      [true, { verb: "get", resource: "configmaps", namespace: "bpa-system", name: "bpa-addons" }],
    ]);
  });
});

describe("the REST API (bpa-system:bpa-api)", () => {
  it("may not read the site CA's key, clusters' kubeconfigs or any other Secret, nor run anything", async () => {
    await expectAnswers(API, [
      [false, { verb: "get", resource: "secrets", namespace: "bpa-system", name: "icn-site-ca" }],
      [false, { verb: "get", resource: "secrets", namespace: "bpa-system", name: "icn-registry-push" }],
      [false, { verb: "get", resource: "secrets", namespace: "bpa-system", name: "bpa-api-tls" }],
      [false, { verb: "list", resource: "secrets", namespace: "bpa-system" }],
      [false, { verb: "get", resource: "secrets", namespace: bound, name: "cluster-kubeconfig" }],
      [false, { verb: "get", resource: "secrets", namespace: "kube-system" }],
      [false, { verb: "get", resource: "secrets", namespace: "baremetal-operator-system", name: "ironic-credentials" }],
      [false, { verb: "create", resource: "pods", namespace: "bpa-system" }],
      [false, { verb: "create", resource: "jobs.batch", namespace: bound }],
      [false, { verb: "create", resource: "provisionings.bpa.akraino.org", namespace: bound }],
      [false, { verb: "create", resource: "clusterrolebindings.rbac.authorization.k8s.io" }],
      [false, { verb: "create", resource: "serviceaccounts", namespace: "bpa-system", subresource: "token", name: "bpa-api-uploader" }],
      [true, { verb: "create", resource: "tokenreviews.authentication.k8s.io" }],
      [true, { verb: "list", resource: "provisionings.bpa.akraino.org" }],
    ]);
  });
});

describe("a Provisioning's runner (NS:<name>-runner, the Role the operator makes)", () => {
  const p = {
    apiVersion: PROVISIONING_API_VERSION,
    kind: PROVISIONING_KIND,
    metadata: { name: "cluster", namespace: "", uid: "00000000-0000-0000-0000-000000000001" },
    spec: {},
  } as unknown as Provisioning;

  it("may write its own kubeconfig Secret and addons results ConfigMap, and nothing else", async () => {
    p.metadata.namespace = bound;
    for (const o of [runnerServiceAccount(p), runnerRole(p), runnerRoleBinding(p)]) {
      // Owned by a Provisioning that does not exist: the garbage collector does not run here.
      await applyRbacObject(c, { ...o, metadata: { ...o.metadata, ownerReferences: [] } } as never);
    }
    const runner = serviceAccount(bound, names(p).runner);
    await expectAnswers(runner, [
      [true, { verb: "patch", resource: "secrets", namespace: bound, name: "cluster-kubeconfig" }],
      [true, { verb: "patch", resource: "configmaps", namespace: bound, name: "cluster-addons-results" }],
      [false, { verb: "get", resource: "secrets", namespace: bound, name: "bpa-ssh-key" }],
      [false, { verb: "get", resource: "secrets", namespace: bound, name: "other-kubeconfig" }],
      [false, { verb: "list", resource: "secrets", namespace: bound }],
      [false, { verb: "create", resource: "secrets", namespace: bound }],
      [false, { verb: "get", resource: "configmaps", namespace: bound, name: "cluster-inventory" }],
      [false, { verb: "create", resource: "pods", namespace: bound }],
      [false, { verb: "get", resource: "provisionings.bpa.akraino.org", namespace: bound }],
      [false, { verb: "get", resource: "secrets", namespace: "kube-system" }],
    ]);
  });

  it("runs as a non-root user that the restricted Pod Security level admits (install, addons, agents)", async () => {
    const restricted = await newNamespace(c, "lp-restricted");
    await c.core.patchNamespace({ name: restricted, body: { metadata: { labels: { "pod-security.kubernetes.io/enforce": "restricted" } } } }, mergePatch);
    p.metadata.namespace = restricted;
    const config = testConfig();
    const plan = planAddons([]);
    const templates = [
      installJob(p, config, "a".repeat(64)).spec!.template,
      addonsJob(p, config, "b".repeat(64), plan, { retryToken: "", entries: [] }).spec!.template,
      agentsDeployment(p, config, 1, "cluster-inventory").spec!.template,
    ];
    const core = kc.makeApiClient(CoreV1Api);
    for (const [i, template] of templates.entries()) {
      const pod: V1Pod = { metadata: { name: `pod-${i}`, namespace: restricted }, spec: { ...template.spec!, serviceAccountName: "default" } };
      // Server-side dry run: Pod Security admission decides, nothing is stored.
      await core.createNamespacedPod({ namespace: restricted, body: pod, dryRun: "All" });
    }
  });
});

describe("the runner image as its pods run it: nobody, a read-only root, /tmp writable", () => {
  let work: string;
  let root: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "icn-runner-nobody-"));
    await chmod(work, 0o755); // nobody must reach the image's root and the play below
    root = join(work, "root");
    await unpackBuiltImage(RUNNER, root);
    await mkdir(join(work, "play/chart/templates"), { recursive: true });
    await writeFile(
      join(work, "play/site.yml"),
      [
        "- hosts: all",
        "  gather_facts: false",
        "  tasks:",
        "    - ansible.builtin.ping:",
        "    - ansible.builtin.copy: { content: written, dest: /tmp/written }",
        "    - ansible.builtin.command: id -un",
        "      register: who",
        "    - ansible.builtin.assert: { that: [\"who.stdout == 'nobody'\"] }",
        "",
      ].join("\n"),
    );
    await writeFile(join(work, "play/chart/Chart.yaml"), "apiVersion: v2\nname: probe\nversion: 0.1.0\n");
    await writeFile(join(work, "play/chart/templates/cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: probe }\n");
  }, 30 * 60_000);
  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  const asPod = () => ({
    uid: RUNNER_UID,
    cwd: "/kubespray",
    binds: { [join(work, "play")]: "/mnt" },
    env: { HELM_CACHE_HOME: "/tmp/helm/cache", HELM_CONFIG_HOME: "/tmp/helm/config", HELM_DATA_HOME: "/tmp/helm/data" },
  });

  it("OpenSSH's client knows the user; Ansible with kubespray's configuration and Mitogen's strategy runs a play; Helm renders", async () => {
    const ssh = await inImage(root, ["ssh", "-G", "node1"], asPod());
    expect(ssh.exitCode, ssh.all).toBe(0);
    expect(ssh.stdout).toMatch(/^user nobody$/m);
    const mitogen = await inImage(root, ["python3", "-c", "import ansible_mitogen, os; print(os.path.dirname(ansible_mitogen.__file__))"], asPod());
    expect(mitogen.exitCode, mitogen.all).toBe(0);
    const play = await inImage(root, ["ansible-playbook", "-i", "localhost,", "-c", "local", "/mnt/site.yml"], {
      ...asPod(),
      env: { ...asPod().env, ANSIBLE_STRATEGY: "mitogen_linear", ANSIBLE_STRATEGY_PLUGINS: `${mitogen.stdout.trim()}/plugins/strategy` },
    });
    expect(play.exitCode, play.all).toBe(0);
    expect(play.stdout).toMatch(/localhost\s*: ok=4 .*failed=0/);
    const helm = await inImage(root, ["helm", "template", "probe", "/mnt/chart"], asPod());
    expect(helm.exitCode, helm.all).toBe(0);
    expect(helm.stdout).toContain("name: probe");
  });
});

describe("Metal3 (baremetal-operator-system)", () => {
  it("the baremetal-operator runs nothing and grants nothing; Ironic's pod has no account rights", async () => {
    await expectAnswers(BMO, [
      [false, { verb: "create", resource: "pods", namespace: "kube-system" }],
      [false, { verb: "create", resource: "jobs.batch", namespace: "baremetal-operator-system" }],
      [false, { verb: "create", resource: "deployments.apps", namespace: "kube-system" }],
      [false, { verb: "create", resource: "clusterrolebindings.rbac.authorization.k8s.io" }],
      [false, { verb: "create", resource: "rolebindings.rbac.authorization.k8s.io", namespace: "kube-system" }],
      [false, { verb: "create", resource: "serviceaccounts", namespace: "kube-system", subresource: "token", name: "default" }],
      [false, { verb: "patch", resource: "provisionings.bpa.akraino.org", namespace: bound }],
      [false, { verb: "create", resource: "leases.coordination.k8s.io", namespace: "kube-system" }],
      [true, { verb: "watch", resource: "baremetalhosts.metal3.io" }],
    ]);
    // Ironic's pod mounts no token (automountServiceAccountToken: false) and its account is the namespace's default, bound to nothing.
    await expectAnswers(serviceAccount("baremetal-operator-system", "default"), [
      [false, { verb: "get", resource: "secrets", namespace: "baremetal-operator-system", name: "ironic-credentials" }],
      [false, { verb: "list", resource: "baremetalhosts.metal3.io" }],
    ]);
  });
});

describe("the operator in a namespace it has no rights in", () => {
  it("says so in status and in an Event, creates nothing there, and goes on once the namespace is bound", async () => {
    const ns = await newNamespace(c, "lp-nobind");
    await createHost(c, ns, bmh({ name: "m1", cpu: 16, ram: 16384, ip: "10.21.0.1" }));
    const config = operatorConfig(ns, {
      namespace: "bpa-system",
      leaderElection: { leaseName: `lp-${ns}`.slice(0, 63), leaseDurationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 0.25 },
    });
    const operators: Operator[] = [];
    try {
      const op = await startOperator(impersonating(kc, OPERATOR), config);
      operators.push(op);
      await createProvisioning(c, ns, { metadata: { name: "cluster" }, spec: { master: { cpu: 2, memory: "1Gi" } } });
      const refused = await waitForStatus(c, ns, "cluster", "NamespaceNotPermitted", (p) => condition(p, "Ready")?.reason === REASON_NAMESPACE_NOT_PERMITTED);
      const message = condition(refused, "Ready")!.message;
      expect(message).toContain(`no rights in namespace ${ns}`);
      expect(message).toContain(
        `kubectl -n ${ns} create rolebinding bpa-operator --clusterrole=bpa-operator-namespace --serviceaccount=bpa-system:bpa-operator`,
      );
      expect(condition(refused, "Reconciled")).toMatchObject({ status: "True" });
      const events = await c.core.listNamespacedEvent({ namespace: ns });
      expect(events.items.filter((e) => e.reason === REASON_NAMESPACE_NOT_PERMITTED).map((e) => e.message)).toEqual([message]);
      // Not retried in a loop, nothing made there.
      const key = `${ns}/cluster`;
      await new Promise((r) => setTimeout(r, 1000));
      expect(op.controller!.queue.failureCount(key)).toBe(0);
      expect((await c.core.listNamespacedSecret({ namespace: ns })).items).toEqual([]);
      expect((await c.batch.listNamespacedJob({ namespace: ns })).items).toEqual([]);

      // The site binds the namespace; the next check (an edit here, else within a minute) goes on.
      await bindOperatorTo(c, ns);
      await c.custom.patchNamespacedCustomObject(
        {
          group: "bpa.akraino.org",
          version: "v1alpha1",
          namespace: ns,
          plural: "provisionings",
          name: "cluster",
          body: { metadata: { annotations: { "test/poke": "1" } } },
        },
        mergePatch,
      );
      const installing = await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing", 30_000);
      expect(condition(installing, "Ready")?.reason).not.toBe(REASON_NAMESPACE_NOT_PERMITTED);
      expect((await c.batch.listNamespacedJob({ namespace: ns })).items).toHaveLength(1);
    } finally {
      await Promise.all(operators.map((o) => o.stop()));
    }
  });
});
