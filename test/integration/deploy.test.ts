/**
 * `icn-bootstrap deploy` against a real API server of its own (etcd and kube-apiserver, no
 * kubelet: the chart's pods never run, so it deploys with --wait 0, and once with a short
 * wait to see how it reports Deployments that do not come up). What is checked: what it
 * refuses before anything is applied (no cluster, too few permissions, bad values), and
 * that a deploy installs the release and a second one upgrades it, keeping its CA.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadKubeConfig, makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { supportedVersion } from "../../builder/deploy.js";
import { writeImagesBundle } from "../../builder/images-bundle.js";
import { freePort, startRegistry } from "../../builder/registry/server.js";
import { startKubeTestServer, type KubeTestServer } from "../harness/kube-apiserver.js";
import { runCli } from "../helpers/cli.js";
import { writeControllerChart, type ControllerChart } from "../helpers/controller-chart.js";
import { makeImagesStage } from "../helpers/images-stage.js";

let work: string;
let server: KubeTestServer;
let chart: ControllerChart;
let c: Clients;
/** A small images bundle (two images) for --images. */
let bundle: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-deploy-"));
  [server, chart] = await Promise.all([startKubeTestServer({ readyTimeoutMs: 10 * 60_000 }), writeControllerChart(work)]);
  c = makeClients(loadKubeConfig(server.kubeconfigPath));
  const stage = join(work, "images-stage");
  await mkdir(stage);
  await makeImagesStage(stage, join(work, "store"));
  bundle = join(work, "images.tar");
  await writeImagesBundle(stage, bundle);
}, 30 * 60_000);
afterAll(async () => {
  await server?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

const values = () => join(chart.dir, "ci/cluster-values.yaml");
const deploy = (kubeconfig: string, ...more: string[]) => runCli(["deploy", "--kubeconfig", kubeconfig, "--chart", chart.dir, "--values", values(), ...more]);

/** A kubeconfig for the test's API server that authenticates with a bearer token. */
async function kubeconfigWithToken(name: string, token: string): Promise<string> {
  const cluster = loadKubeConfig(server.kubeconfigPath).getCurrentCluster()!;
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [cluster], users: [{ name, token }], contexts: [{ name, cluster: cluster.name, user: name }], currentContext: name });
  const file = join(work, `${name}.kubeconfig`);
  await writeFile(file, kc.exportConfig());
  return file;
}

/** Nothing of the release is in the cluster: no namespace of its own, no Helm release record. */
async function expectNothingApplied() {
  const namespaces = (await c.core.listNamespace()).items.map((n) => n.metadata!.name);
  expect(namespaces).not.toContain("bpa-system");
  expect(namespaces).not.toContain("baremetal-operator-system");
  expect((await c.core.listNamespacedSecret({ namespace: "default", labelSelector: "owner=helm" })).items).toEqual([]);
}

describe("icn-bootstrap deploy", () => {
  it("refuses a cluster that does not answer, naming its address", async () => {
    const kc = loadKubeConfig(server.kubeconfigPath);
    const dead = new KubeConfig();
    dead.loadFromOptions({
      clusters: [{ ...kc.getCurrentCluster()!, server: "https://127.0.0.1:1" }],
      users: kc.users,
      contexts: kc.contexts,
      currentContext: kc.currentContext,
    });
    const file = join(work, "dead.kubeconfig");
    await writeFile(file, dead.exportConfig());
    const result = await deploy(file);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("cannot reach the cluster's API server at https://127.0.0.1:1");
  });

  it("refuses credentials the cluster does not accept, saying so", async () => {
    const result = await deploy(await kubeconfigWithToken("stale", "not-a-token"));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("refused the kubeconfig's credentials");
    await expectNothingApplied();
  });

  it("refuses a user who may not create what the chart holds, naming the permissions, and applies nothing", async () => {
    await c.core.createNamespacedServiceAccount({ namespace: "default", body: { metadata: { name: "not-an-admin" } } });
    const token = (
      await c.core.createNamespacedServiceAccountToken({
        namespace: "default",
        name: "not-an-admin",
        body: { spec: { audiences: [], expirationSeconds: 3600 } },
      })
    ).status!.token;
    const result = await deploy(await kubeconfigWithToken("weak", token));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("may not create customresourcedefinitions.apiextensions.k8s.io");
    expect(result.stderr).toContain("create deployments.apps in bpa-system");
    expect(result.stderr).toContain("nothing was applied");
    await expectNothingApplied();
  });

  it("refuses values the chart cannot use before anything is applied, naming them", async () => {
    const bad = join(work, "bad-values.yaml");
    await writeFile(bad, "registry:\n  address: 192.0.2.10\nnodeFacingAddress: 192.0.2.10\nprovisioning:\n  interface: eth1\n");
    const result = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", bad, "--wait", "0"]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("refused before anything was applied");
    expect(result.stderr).toContain("provisioning.address");
    await expectNothingApplied();
  });

  it("refuses bundles for a registry or file server the values do not run, and a registry that does not take the bundle, before anything is applied", async () => {
    const alone = await deploy(server.kubeconfigPath, "--images", bundle);
    expect(alone.exitCode).toBe(1);
    expect(alone.stderr).toContain("--images without --push-to goes into the chart's own registry, and these values run none; nothing was applied");
    expect(alone.stderr).toContain("serve.registry.enabled");
    const absent = await deploy(server.kubeconfigPath, "--files", join(work, "no-such-files.tar"));
    expect(absent.exitCode).toBe(1);
    expect(absent.stderr).toContain("no-such-files.tar is not a file");
    const files = await deploy(server.kubeconfigPath, "--files", bundle);
    expect(files.exitCode).toBe(1);
    expect(files.stderr).toContain("--files goes into the chart's own file server, and these values run none");
    const serve = join(chart.dir, "ci/serve-values.yaml");
    const noWait = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", serve, "--images", bundle, "--wait", "0"]);
    expect(noWait.exitCode).toBe(1);
    expect(noWait.stderr).toContain("--wait 0 with --images or --files");
    const nowhere = `127.0.0.1:${await freePort()}`;
    const result = await deploy(server.kubeconfigPath, "--images", bundle, "--push-to", nowhere, "--push-insecure", "--wait", "0");
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain(`cannot push ${nowhere}/icn/bpa:0.1.0`);
    await expectNothingApplied();
  });

  it("installs the release with progress, then a second deploy upgrades it and keeps its CA", async () => {
    const first = await deploy(server.kubeconfigPath, "--wait", "0");
    expect(first.exitCode, first.all).toBe(0);
    expect(first.stderr).toMatch(/cluster https:\/\/127\.0\.0\.1:\d+: Kubernetes v1\.\d+/);
    expect(first.stderr).toContain("dry run on the server: icn accepted");
    expect(first.stderr).toContain("icn installed");
    const ca = (await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-site-ca" })).data!["tls.crt"];
    const deployments = (await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items.map((d) => d.metadata!.name).sort();
    expect(deployments).toEqual(["bpa-api", "bpa-operator"]);
    const second = await deploy(server.kubeconfigPath, "--wait", "0");
    expect(second.exitCode, second.all).toBe(0);
    expect((await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-site-ca" })).data!["tls.crt"]).toBe(ca);
    const releases = (await c.core.listNamespacedSecret({ namespace: "default", labelSelector: "owner=helm,name=icn" })).items;
    expect(releases.map((s) => s.metadata!.labels!.version).sort()).toEqual(["1", "2"]);
  });

  it("pushes an images bundle into the registry given, then upgrades the release to pull from it", async () => {
    const registry = await startRegistry(join(work, "registry"));
    try {
      const result = await deploy(server.kubeconfigPath, "--images", bundle, "--push-to", registry.address, "--push-insecure", "--wait", "0");
      expect(result.exitCode, result.all).toBe(0);
      expect(result.stderr).toMatch(/2\/2 icn\/ironic:29\.0\.5 sha256:/);
      expect(result.stderr).toContain(`2 images and charts in ${registry.address}, digests unchanged`);
      // Pushed before the release changed: the upgrade comes after.
      expect(result.stderr.indexOf("digests unchanged")).toBeLessThan(result.stderr.indexOf("icn installed"));
      const operator = await c.apps.readNamespacedDeployment({ namespace: "bpa-system", name: "bpa-operator" });
      expect(operator.spec!.template.spec!.containers[0]!.image).toMatch(new RegExp(`^${registry.address}/icn/bpa[:@]`));
      const tags = (await (await fetch(`${registry.url}/v2/icn/bpa/tags/list`)).json()) as { tags: string[] };
      expect(tags.tags.sort()).toEqual(["0.1.0", "latest"]);
    } finally {
      await registry.stop();
    }
  });

  it("with serve, installs the site's registry and file server too, and waits for them", async () => {
    const serve = join(chart.dir, "ci/serve-values.yaml");
    const result = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", serve, "--wait", "5"]);
    // No kubelet here: nothing comes up, and what is waited for is every Deployment the release holds.
    expect(result.exitCode).toBe(1);
    for (const name of ["bpa-system/icn-registry", "bpa-system/icn-files", "bpa-system/bpa-operator", "baremetal-operator-system/ironic"])
      expect(result.stderr).toContain(name);
    const deployments = (await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items.map((d) => d.metadata!.name).sort();
    expect(deployments).toEqual(["bpa-api", "bpa-operator", "icn-files", "icn-registry"]);
    const front = await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-registry-front" });
    expect(Object.keys(front.data!).sort()).toEqual(["htpasswd", "tls.crt", "tls.key"]);
    // An upgrade keeps the certificate and the password file (bcrypt would salt it anew).
    const again = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", serve, "--wait", "0"]);
    expect(again.exitCode, again.all).toBe(0);
    expect((await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-registry-front" })).data).toEqual(front.data);
    // Back to the values without serve: the release drops them (their stores are kept).
    const plain = await deploy(server.kubeconfigPath, "--wait", "0");
    expect(plain.exitCode, plain.all).toBe(0);
    expect((await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items.map((d) => d.metadata!.name).sort()).toEqual(["bpa-api", "bpa-operator"]);
  });

  it("says which Deployments did not come up, and why, when they are not available in time", async () => {
    // No kubelet here: no pod is ever scheduled.
    const result = await deploy(server.kubeconfigPath, "--wait", "5");
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("installed, but not available after 5 s");
    expect(result.stderr).toContain("bpa-system/bpa-operator");
  });

  it("accepts Kubernetes 1.30 and later, as distributions spell the version", () => {
    expect(supportedVersion("1", "30")).toBe(true);
    expect(supportedVersion("1", "35+")).toBe(true);
    expect(supportedVersion("1", "29")).toBe(false);
    expect(supportedVersion("2", "0")).toBe(true);
    expect(supportedVersion("", "")).toBe(false);
  });
});
