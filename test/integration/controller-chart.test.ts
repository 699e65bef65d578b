/**
 * The infra-local-controller chart installed by the pinned Helm into a real API server of
 * its own (etcd and kube-apiserver; no kubelet, so its pods do not run: what is checked is
 * what Helm and the chart make of the cluster). Its CA and credentials are made at install
 * and kept by an upgrade, or its CA is the site's own; the CRDs and namespaces stay after
 * an uninstall.
 */
import { X509Certificate } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiextensionsV1Api } from "@kubernetes/client-node";
import { execa } from "execa";
import { loadKubeConfig, makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { startKubeTestServer, type KubeTestServer } from "../harness/kube-apiserver.js";
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
async function secretData(namespace: string, name: string): Promise<Record<string, string>> {
  const secret = await c.core.readNamespacedSecret({ namespace, name });
  return Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
}
async function made() {
  return {
    ca: (await secretData("bpa-system", "icn-site-ca"))["tls.crt"]!,
    apiCert: (await secretData("bpa-system", "bpa-api-tls"))["tls.crt"]!,
    push: (await secretData("bpa-system", "icn-registry-push")).password!,
    ironic: (await secretData("baremetal-operator-system", "ironic-credentials")).password!,
  };
}

describe("the infra-local-controller chart on a real API server", () => {
  let first: Awaited<ReturnType<typeof made>>;

  it("installs: the components' Deployments, the CRDs, the site CA and the credentials", async () => {
    const notes = await helm(["install", "icn", chart.dir, ...values()]);
    expect(notes).toContain("kubectl -n bpa-system create token bpa-api-uploader");
    const deployments = [
      ...(await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items,
      ...(await c.apps.listNamespacedDeployment({ namespace: "baremetal-operator-system" })).items,
    ];
    expect(deployments.map((d) => d.metadata!.name).sort()).toEqual(["baremetal-operator", "bpa-api", "bpa-operator", "ironic", "ironic-dnsmasq"]);
    const crds = (await apiext.listCustomResourceDefinition()).items.map((d) => d.metadata!.name!);
    expect(crds).toEqual(expect.arrayContaining(["provisionings.bpa.akraino.org", "baremetalhosts.metal3.io"]));
    first = await made();
    const ca = new X509Certificate(first.ca);
    expect(ca.ca).toBe(true);
    expect(new X509Certificate(first.apiCert).verify(ca.publicKey)).toBe(true);
    expect(first.push).toMatch(/^[A-Za-z0-9]{32}$/);
    expect(first.ironic).toMatch(/^[A-Za-z0-9]{32}$/);
    expect(first.push).not.toBe(first.ironic);
  });

  it("an upgrade keeps the CA, the REST API's certificate and the credentials", async () => {
    await helm(["upgrade", "icn", chart.dir, ...values(), "--set", "api.nodePort=30444"]);
    const service = await c.core.readNamespacedService({ namespace: "bpa-system", name: "bpa-api" });
    expect(service.spec!.ports![0]!.nodePort).toBe(30444);
    expect(await made()).toEqual(first);
  });

  it("a new name for the REST API: its certificate is issued again by the same CA", async () => {
    await helm(["upgrade", "icn", chart.dir, ...values(), "--set", "api.certificateNames={bpa.other.test}"]);
    const now = await made();
    expect(now.apiCert).not.toBe(first.apiCert);
    expect({ ...now, apiCert: first.apiCert }).toEqual(first);
    const cert = new X509Certificate(now.apiCert);
    expect(cert.verify(new X509Certificate(first.ca).publicKey)).toBe(true);
    expect(cert.subjectAltName).toContain("DNS:bpa.other.test");
  });

  it("a CA of the site's own (secrets.caFrom): copied in, the REST API's certificate issued from it; one not there refused, named", async () => {
    await execa("openssl", ["genrsa", "-traditional", "-out", join(work, "ca.key"), "2048"]);
    await execa("openssl", [
      "req", "-x509", "-key", join(work, "ca.key"), "-out", join(work, "ca.crt"), "-days", "30", "-subj", "/CN=Site CA of its own",
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    ]); // prettier-ignore
    const [crt, key] = await Promise.all([readFile(join(work, "ca.crt"), "utf8"), readFile(join(work, "ca.key"), "utf8")]);
    await c.core.createNamespacedSecret({
      namespace: "default",
      body: { metadata: { name: "site-ca" }, type: "kubernetes.io/tls", stringData: { "tls.crt": crt, "tls.key": key } },
    });
    const missing = await chart.helm([
      "upgrade",
      "icn",
      chart.dir,
      ...values(),
      "--set",
      "secrets.caFrom.namespace=default,secrets.caFrom.name=no-such-ca",
      "--kubeconfig",
      server.kubeconfigPath,
    ]);
    expect(missing.exitCode).not.toBe(0);
    expect(String(missing.stderr)).toContain("secrets.caFrom: no Secret default/no-such-ca with tls.crt and tls.key");
    await helm(["upgrade", "icn", chart.dir, ...values(), "--set", "secrets.caFrom.namespace=default,secrets.caFrom.name=site-ca"]);
    const now = await made();
    expect(now.ca.trim()).toBe(crt.trim());
    expect((await c.core.readNamespacedConfigMap({ namespace: "bpa-system", name: "icn-registry-ca" })).data!["ca.crt"]!.trim()).toBe(crt.trim());
    // A new CA: the REST API's certificate is issued again from it; the credentials stay.
    expect(new X509Certificate(now.apiCert).verify(new X509Certificate(crt).publicKey)).toBe(true);
    expect({ push: now.push, ironic: now.ironic }).toEqual({ push: first.push, ironic: first.ironic });
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
