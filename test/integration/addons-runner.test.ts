/**
 * The runner's addons mode (images/kubespray-runner/entrypoint.py, docs/addons.md)
 * in the real runner image, with the Helm the build makes: a chart packaged by that Helm and
 * published as the REST API publishes a chart upload (an OCI artifact, bpa/rest/push-chart.ts)
 * to the appliance's registry as it runs there (docker-registry behind the shipped nginx,
 * TLS with a site CA), then the addons Job's contract played as the pod gets
 * it: the plan, the registry's CA, the application cluster's kubeconfig (here: a real
 * kube-apiserver, which runs no pods, so the chart holds a ConfigMap) and a ServiceAccount
 * that may write only the results ConfigMap. Install, upgrade, uninstall and a failure; each
 * chart by the digest the BPA recorded, also after its tag moved.
 */
import { readFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { checkChart, pushChart } from "../../bpa/rest/push-chart.js";
import { RegistryClient } from "../../bpa/rest/registry.js";
import { inImage, unpackBuiltImage } from "../helpers/oci-rootfs.js";
import { runnerIdentity } from "../helpers/runner-identity.js";
import { startRegistryFront, type RegistryFront } from "../helpers/registry-front.js";

const RUNNER = "bootstrap.icn:5000/icn/kubespray-runner:v2.31.0";
const id = `${process.pid % 100000}`;
const namespace = `addons-${id}`;
const target = `addons-target-${id}`;

let work: string;
let root: string;
let registry: RegistryFront;
let kc: KubeConfig;
let core: CoreV1Api;
/** The directories the addons Job's pod would have mounted. */
let dirs: { plan: string; kubeconfig: string; sa: string; helm: string };
let apiServer: URL;
let client: RegistryClient;
/** The digest probe 0.1.0's tag named when it was first published. */
let recorded: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-addons-runner-"));
  root = join(work, "runner-root");
  await unpackBuiltImage(RUNNER, root);
  registry = await startRegistryFront();

  kc = new KubeConfig();
  kc.loadFromFile(inject("kubeconfigPath"));
  core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: "site-addons-results" }, data: {} } });
  dirs = { plan: join(work, "addons"), kubeconfig: join(work, "kubeconfig"), sa: join(work, "serviceaccount"), helm: join(work, "helm") };
  for (const d of Object.values(dirs)) await mkdir(d, { recursive: true });
  const rules = [{ apiGroups: [""], resources: ["configmaps"], resourceNames: ["site-addons-results"], verbs: ["get", "update", "patch"] }];
  apiServer = (await runnerIdentity(kc, namespace, "site-runner", rules, dirs.sa)).server;
  // The application cluster's admin kubeconfig, as the install handed it back.
  await writeFile(join(dirs.kubeconfig, "kubeconfig"), kc.exportConfig());
  await writeFile(join(dirs.plan, "registry-ca.crt"), registry.ca);

  // A site's chart, packaged and pushed with the image's Helm as a site would (the REST API's upload is another step).
  const chart = join(dirs.helm, "probe");
  await mkdir(join(chart, "templates"), { recursive: true });
  await writeFile(join(chart, "Chart.yaml"), "apiVersion: v2\nname: probe\nversion: 0.1.0\ndescription: a ConfigMap, for the addons test\n");
  await writeFile(join(chart, "values.yaml"), "greeting: hello\n");
  await writeFile(
    join(chart, "templates/configmap.yaml"),
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  chart: {{ .Chart.Version | quote }}\n",
  );
  client = new RegistryClient({ url: `https://${registry.address}`, ca: registry.ca, username: registry.username, password: registry.password });
  const pushed = await publishProbe();
  expect(pushed).toMatchObject({ url: `oci://${registry.address}/charts/probe`, version: "0.1.0" });
  recorded = pushed.digest;
}, 40 * 60_000);

/**
 * Packages the probe chart with the image's Helm and pushes it as the REST API publishes a
 * chart upload (bpa/rest/push-chart.ts); again with other values.yaml, it moves the tag.
 */
async function publishProbe(greeting = "hello") {
  await writeFile(join(dirs.helm, "probe", "values.yaml"), `greeting: ${greeting}\n`);
  const packaged = await helm(["package", "/tmp/helm/probe", "--destination", "/tmp/helm"]);
  expect(packaged.exitCode, packaged.all).toBe(0);
  const file = join(dirs.helm, "probe-0.1.0.tgz");
  return pushChart(file, join(work, "push"), await checkChart(file, "charts/probe:0.1.0"), client, registry.address);
}

afterAll(async () => {
  await core?.deleteNamespace({ name: namespace }).catch(() => undefined);
  await core?.deleteNamespace({ name: target }).catch(() => undefined);
  await registry?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

function helm(args: string[]) {
  return inImage(root, ["helm", ...args], {
    hostNetwork: true,
    binds: { [dirs.helm]: "/tmp/helm", [dirs.plan]: "/tmp/addons" },
    env: { HELM_CACHE_HOME: "/tmp/h/cache", HELM_CONFIG_HOME: "/tmp/h/config", HELM_DATA_HOME: "/tmp/h/data" },
  });
}

/**
 * The addons Job's container, as the BPA's addonsJob() makes it, with this plan. The image's
 * root is read-only here (no mount points a kubelet would make): the mounts go under /tmp.
 */
async function runAddons(plan: unknown, job: string) {
  await writeFile(join(dirs.plan, "plan.json"), JSON.stringify(plan));
  return inImage(root, ["/usr/local/bin/bpa-runner", "addons"], {
    hostNetwork: true,
    binds: { [dirs.plan]: "/tmp/addons", [dirs.kubeconfig]: "/tmp/kubeconfig", [dirs.sa]: "/tmp/serviceaccount" },
    env: {
      BPA_MODE: "addons",
      BPA_NAMESPACE: namespace,
      BPA_PROVISIONING: "site",
      BPA_ADDONS_PLAN: "/tmp/addons/plan.json",
      BPA_SERVICEACCOUNT_DIR: "/tmp/serviceaccount",
      BPA_ADDONS_RESULTS: "site-addons-results",
      BPA_ADDONS_JOB: job,
      BPA_KUBECONFIG: "/tmp/kubeconfig/kubeconfig",
      BPA_REGISTRY_CA: "/tmp/addons/registry-ca.crt",
      BPA_TERMINATION_LOG: "/tmp/termination-log",
      KUBERNETES_SERVICE_HOST: apiServer.hostname,
      KUBERNETES_SERVICE_PORT: apiServer.port || "443",
      HELM_CACHE_HOME: "/tmp/helm/cache",
      HELM_CONFIG_HOME: "/tmp/helm/config",
      HELM_DATA_HOME: "/tmp/helm/data",
    },
  });
}

const results = async () =>
  Object.fromEntries(
    Object.entries((await core.readNamespacedConfigMap({ namespace, name: "site-addons-results" })).data ?? {}).map(([k, v]) => [k, JSON.parse(v)]),
  );
const probe = () => core.readNamespacedConfigMap({ namespace: target, name: "probe" });
const apply = (values: Record<string, unknown>, digest = recorded) => ({
  name: "probe",
  chart: `oci://${registry.address}/charts/probe`,
  version: "0.1.0",
  digest,
  namespace: target,
  values,
  hash: "h",
});

describe("the runner's addons mode with the build's Helm", () => {
  it(
    "installs a chart from the appliance's registry (TLS, the site CA) into its namespace and reports it",
    async () => {
      const run = await runAddons({ apply: [apply({ greeting: "hi" })], remove: [{ name: "never-installed", namespace: target }] }, "site-addons-00000001");
      expect(run.exitCode, run.all).toBe(0);
      expect(await results()).toEqual({
        probe: { job: "site-addons-00000001", state: "Installed" },
        "never-installed": { job: "site-addons-00000001", state: "Uninstalled" },
      });
      expect((await probe()).data).toEqual({ greeting: "hi", chart: "0.1.0" });
      expect(run.all).toContain(`helm upgrade --install probe oci://${registry.address}/charts/probe@${recorded} --namespace`);
    },
    10 * 60_000,
  );

  it(
    "upgrades it when its values change, uninstalls it when it is removed",
    async () => {
      const upgraded = await runAddons({ apply: [apply({ greeting: "again" })], remove: [] }, "site-addons-00000002");
      expect(upgraded.exitCode, upgraded.all).toBe(0);
      expect((await probe()).data!.greeting).toBe("again");
      const removed = await runAddons({ apply: [], remove: [{ name: "probe", namespace: target }] }, "site-addons-00000003");
      expect(removed.exitCode, removed.all).toBe(0);
      expect((await results()).probe).toEqual({ job: "site-addons-00000003", state: "Uninstalled" });
      await expect(probe()).rejects.toThrow();
    },
    10 * 60_000,
  );

  it(
    "a chart digest the registry does not have: that addon Failed with Helm's words, the others still done, exit non-zero",
    async () => {
      const absent = `sha256:${"0".repeat(64)}`;
      const run = await runAddons({ apply: [apply({}, absent), { ...apply({ greeting: "still" }), name: "probe2" }], remove: [] }, "site-addons-00000004");
      expect(run.exitCode).not.toBe(0);
      const r = await results();
      expect(r.probe).toMatchObject({ job: "site-addons-00000004", state: "Failed" });
      expect(r.probe.message).toMatch(/not found/i);
      expect(r.probe2).toEqual({ job: "site-addons-00000004", state: "Installed" });
      expect(run.all).toContain("bpa-runner: error: addons failed: probe");
    },
    10 * 60_000,
  );

  it(
    "the tag moved after the BPA recorded its digest: the recorded chart is installed, not what the tag names now; a plan without a digest is refused",
    async () => {
      // probe2 (the run before) holds the ConfigMap the probe chart makes.
      const cleared = await runAddons({ apply: [], remove: [{ name: "probe2", namespace: target }] }, "site-addons-00000005");
      expect(cleared.exitCode, cleared.all).toBe(0);
      const moved = await publishProbe("moved");
      expect(moved.digest).not.toBe(recorded);
      const run = await runAddons({ apply: [apply({})], remove: [] }, "site-addons-00000006");
      expect(run.exitCode, run.all).toBe(0);
      expect((await results()).probe).toEqual({ job: "site-addons-00000006", state: "Installed" });
      expect((await probe()).data).toEqual({ greeting: "hello", chart: "0.1.0" });
      // The new digest, once named, is what the tag names now.
      const taken = await runAddons({ apply: [apply({}, moved.digest)], remove: [] }, "site-addons-00000007");
      expect(taken.exitCode, taken.all).toBe(0);
      expect((await probe()).data!.greeting).toBe("moved");

      const { digest: _none, ...byTag } = apply({});
      const refused = await runAddons({ apply: [byTag], remove: [] }, "site-addons-00000008");
      expect(refused.exitCode).not.toBe(0);
      expect((await results()).probe).toMatchObject({ job: "site-addons-00000008", state: "Failed", message: expect.stringContaining("no chart digest") });
      expect(refused.all).not.toContain("helm upgrade");
    },
    10 * 60_000,
  );

  it("may write its results ConfigMap and nothing else", async () => {
    const token = (await readFile(join(dirs.sa, "token"), "utf8")).trim();
    const other = await fetch(`${apiServer.origin}/api/v1/namespaces/${namespace}/configmaps`, { headers: { Authorization: `Bearer ${token}` } }).catch(
      () => undefined,
    );
    expect(other === undefined || other.status === 403).toBe(true);
  });
});
