/**
 * The infra-local-controller chart installed by the pinned Helm into a real API server of
 * its own (etcd and kube-apiserver; no kubelet, so its pods do not run: what is checked is
 * what Helm and the chart make of the cluster). It renders no Secret (its CA and
 * credentials are made beside the release: test/integration/deploy.test.ts); the CRDs and
 * namespaces stay after an uninstall.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiextensionsV1Api } from "@kubernetes/client-node";
import { loadKubeConfig, makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { startKubeTestServer, type KubeTestServer } from "../helpers/kube-apiserver.js";
import { writeControllerChart, type ControllerChart } from "../helpers/controller-chart.js";

let work: string;
let server: KubeTestServer;
let chart: ControllerChart;
let c: Clients;
let apiext: ApiextensionsV1Api;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-chart-install-"));
  [server, chart] = await Promise.all([startKubeTestServer({ readyTimeoutMs: 10 * 60_000 }), writeControllerChart(work)]);
  c = makeClients(loadKubeConfig(server.kubeconfigPath));
  apiext = c.kc.makeApiClient(ApiextensionsV1Api);
}, 30 * 60_000);
afterAll(async () => {
  await server?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

const values = () => ["-f", join(chart.dir, "ci/cluster-values.yaml")];
async function helm(args: string[]) {
  const result = await chart.helm([...args, "--kubeconfig", server.kubeconfigPath]);
  expect(result.exitCode, `helm ${args.join(" ")}\n${String(result.stdout)}\n${String(result.stderr)}`).toBe(0);
  return String(result.stdout);
}

describe("the infra-local-controller chart on a real API server", () => {
  it("installs: the components' Deployments and the CRDs, and no Secret (icn-bootstrap deploy or the appliance makes them beside the release)", async () => {
    const notes = await helm(["install", "icn", chart.dir, ...values()]);
    expect(notes).toContain("kubectl -n bpa-system create token bpa-api-uploader");
    const deployments = [
      ...(await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items,
      ...(await c.apps.listNamespacedDeployment({ namespace: "baremetal-operator-system" })).items,
    ];
    expect(deployments.map((d) => d.metadata!.name).sort()).toEqual(["baremetal-operator", "bpa-api", "bpa-operator", "ironic", "ironic-dnsmasq"]);
    const crds = (await apiext.listCustomResourceDefinition()).items.map((d) => d.metadata!.name!);
    expect(crds).toEqual(expect.arrayContaining(["provisionings.bpa.akraino.org", "baremetalhosts.metal3.io"]));
    const manifest = await helm(["get", "manifest", "icn"]);
    expect(manifest).not.toMatch(/kind: Secret\b/);
    expect(manifest).not.toContain("PRIVATE KEY");
    expect((await c.core.listNamespacedSecret({ namespace: "bpa-system" })).items.filter((s) => s.type !== "helm.sh/release.v1")).toEqual([]);
  });

  it("an upgrade applies changed values", async () => {
    await helm(["upgrade", "icn", chart.dir, ...values(), "--set", "api.nodePort=30444"]);
    const service = await c.core.readNamespacedService({ namespace: "bpa-system", name: "bpa-api" });
    expect(service.spec!.ports![0]!.nodePort).toBe(30444);
  });

  it("an uninstall leaves the CRDs and the namespaces (and so every Provisioning and BareMetalHost)", async () => {
    await helm(["uninstall", "icn"]);
    expect((await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items).toEqual([]);
    const crds = (await apiext.listCustomResourceDefinition()).items.map((d) => d.metadata!.name!);
    expect(crds).toEqual(expect.arrayContaining(["provisionings.bpa.akraino.org", "baremetalhosts.metal3.io"]));
    const namespaces = (await c.core.listNamespace()).items.map((n) => n.metadata!.name!);
    expect(namespaces).toEqual(expect.arrayContaining(["bpa-system", "baremetal-operator-system"]));
  });
});
