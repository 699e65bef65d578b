/**
 * `icn-bootstrap deploy` against a real API server of its own (etcd and kube-apiserver, no
 * kubelet: the chart's pods never run, so it deploys with --wait 0, and once with a short
 * wait to see how it reports Deployments that do not come up). What is checked: what it
 * refuses before anything is applied (no cluster, too few permissions, bad values, a CA
 * from a namespace not named on purpose), that a deploy installs the release in bpa-system
 * and a second one upgrades it, keeping its CA and credentials, which it makes outside the
 * release: no record of Helm's history holds a key or a password.
 */
import { X509Certificate } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { gunzipSync } from "node:zlib";
import { AuthorizationV1Api } from "@kubernetes/client-node";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadKubeConfig, makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { HISTORY_MAX, supportedVersion } from "../../builder/deploy.js";
import { writeImagesBundle } from "../../builder/images-bundle.js";
import { freePort, startRegistry } from "../../builder/registry/server.js";
import { startKubeTestServer, type KubeTestServer } from "../helpers/kube-apiserver.js";
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

async function secretData(namespace: string, name: string): Promise<Record<string, string>> {
  const secret = await c.core.readNamespacedSecret({ namespace, name });
  return Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
}

/** Every record of Helm's release history in the cluster, decoded (the Secret's data: base64 of gzip of the release's JSON). */
async function releaseRecords(): Promise<{ namespace: string; name: string; version: string; text: string; manifest: string }[]> {
  const secrets = (await c.core.listSecretForAllNamespaces({ labelSelector: "owner=helm" })).items;
  return secrets.map((secret) => {
    const text = gunzipSync(Buffer.from(Buffer.from(secret.data!.release!, "base64").toString(), "base64")).toString();
    return {
      namespace: secret.metadata!.namespace!,
      name: secret.metadata!.name!,
      version: secret.metadata!.labels!.version!,
      text,
      manifest: (JSON.parse(text) as { manifest: string }).manifest,
    };
  });
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

  it("refuses values that break the chart's schema, with Helm's lines that name the key", async () => {
    const typo = join(work, "typo-values.yaml");
    await writeFile(typo, "registry:\n  address: 192.0.2.10\nnodeFacingAddress: 192.0.2.10\napi:\n  nodeport: 30443\n");
    const result = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", typo, "--wait", "0"]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("values don't meet the specifications of the schema(s)");
    // The key Helm names is on a line after that one: shown, not dropped.
    const after = result.stderr.slice(result.stderr.indexOf("values don't meet"));
    expect(after.split("\n").slice(1).join("\n")).toContain("nodeport");
    await expectNothingApplied();
  });

  it("refuses a CA of the site's own from a namespace the command line did not name, before anything is applied", async () => {
    await makeCaSecret("default", "site-ca");
    const values = join(work, "ca-default-values.yaml");
    await writeFile(
      values,
      `${await readFile(join(chart.dir, "ci/cluster-values.yaml"), "utf8")}\nsecrets:\n  caFrom: { namespace: default, name: site-ca }\n`,
    );
    const result = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", values, "--wait", "0"]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain(
      "secrets.caFrom.namespace default: deploy copies a CA only from bpa-system, or from the namespace its --ca-namespace option names",
    );
    expect(result.stderr).toContain("--ca-namespace default");
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

  it("installs the release in bpa-system with progress, taking over one an earlier deploy kept in default; a second deploy upgrades it and keeps its CA and credentials", async () => {
    // As deploy did before: the release in default (made here by Helm directly).
    const former = await chart.helm(["install", "icn", chart.dir, "--namespace", "default", "-f", values(), "--kubeconfig", server.kubeconfigPath]);
    expect(former.exitCode, String(former.stderr)).toBe(0);
    const first = await deploy(server.kubeconfigPath, "--wait", "0");
    expect(first.exitCode, first.all).toBe(0);
    expect(first.stderr).toMatch(/cluster https:\/\/127\.0\.0\.1:\d+: Kubernetes v1\.\d+/);
    expect(first.stderr).toContain("dry run on the server: icn accepted");
    expect(first.stderr).toContain("icn installed");
    expect(first.stderr).toContain("the release's former history in default (1 revisions");
    expect((await c.core.listNamespacedSecret({ namespace: "default", labelSelector: "owner=helm" })).items).toEqual([]);
    const made = async () => ({
      ca: await secretData("bpa-system", "icn-site-ca"),
      api: (await secretData("bpa-system", "bpa-api-tls"))["tls.crt"],
      push: await secretData("bpa-system", "icn-registry-push"),
      registryApi: await secretData("bpa-system", "icn-registry-api"),
      ironic: await secretData("baremetal-operator-system", "ironic-credentials"),
    });
    const before = await made();
    const ca = new X509Certificate(before.ca["tls.crt"]!);
    expect(ca.ca).toBe(true);
    expect(before.ca["tls.key"]).toContain("PRIVATE KEY");
    expect(new X509Certificate(before.api!).verify(ca.publicKey)).toBe(true);
    expect(new X509Certificate(before.api!).subjectAltName).toContain("DNS:bpa.example.test");
    expect(before.push.username).toBe("icn-push");
    expect(before.registryApi.username).toBe("icn-api");
    expect(before.ironic.username).toBe("metal3");
    for (const account of [before.push, before.registryApi, before.ironic]) expect(account.password).toMatch(/^[A-Za-z0-9]{32}$/);
    expect(new Set([before.push.password, before.registryApi.password, before.ironic.password]).size).toBe(3);
    const deployments = (await c.apps.listNamespacedDeployment({ namespace: "bpa-system" })).items.map((d) => d.metadata!.name).sort();
    expect(deployments).toEqual(["bpa-api", "bpa-operator"]);
    const second = await deploy(server.kubeconfigPath, "--wait", "0");
    expect(second.exitCode, second.all).toBe(0);
    expect(await made()).toEqual(before);
    const releases = (await c.core.listNamespacedSecret({ namespace: "bpa-system", labelSelector: "owner=helm,name=icn" })).items;
    expect(releases.map((s) => s.metadata!.labels!.version).sort()).toEqual(["1", "2"]);
  });

  it("the REST API's service account reads its own registry account, never the push account deploy --images uses", async () => {
    const authz = c.kc.makeApiClient(AuthorizationV1Api);
    const can = async (name: string) =>
      (
        await authz.createSubjectAccessReview({
          body: {
            spec: {
              user: "system:serviceaccount:bpa-system:bpa-api",
              groups: ["system:serviceaccounts", "system:serviceaccounts:bpa-system", "system:authenticated"],
              resourceAttributes: { verb: "get", resource: "secrets", namespace: "bpa-system", name },
            },
          },
        })
      ).status!.allowed;
    expect(await can("icn-registry-api")).toBe(true);
    for (const name of ["icn-registry-push", "icn-site-ca", "icn-registry-front"]) expect(await can(name), name).toBe(false);
    const api = await c.apps.readNamespacedDeployment({ namespace: "bpa-system", name: "bpa-api" });
    expect(api.spec!.template.spec!.containers[0]!.env).toContainEqual({ name: "BPA_API_PUSH_SECRET", value: "icn-registry-api" });
  });

  it("a CA of the site's own: copied from bpa-system, or from the namespace --ca-namespace names; the certificates issued from it, the credentials kept", async () => {
    const push = await secretData("bpa-system", "icn-registry-push");
    const own = await makeCaSecret("bpa-system", "own-ca");
    const inBpa = join(work, "ca-bpa-values.yaml");
    await writeFile(inBpa, `${await readFile(values(), "utf8")}\nsecrets:\n  caFrom: { name: own-ca }\n`);
    const copied = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", inBpa, "--wait", "0"]);
    expect(copied.exitCode, copied.all).toBe(0);
    expect((await secretData("bpa-system", "icn-site-ca"))["tls.crt"]!.trim()).toBe(own.crt.trim());
    expect((await c.core.readNamespacedConfigMap({ namespace: "bpa-system", name: "icn-registry-ca" })).data!["ca.crt"]!.trim()).toBe(own.crt.trim());
    expect(new X509Certificate((await secretData("bpa-system", "bpa-api-tls"))["tls.crt"]!).verify(new X509Certificate(own.crt).publicKey)).toBe(true);
    const other = join(work, "ca-default-values.yaml");
    const named = await runCli([
      "deploy",
      "--kubeconfig",
      server.kubeconfigPath,
      "--chart",
      chart.dir,
      "--values",
      other,
      "--wait",
      "0",
      "--ca-namespace",
      "default",
    ]);
    expect(named.exitCode, named.all).toBe(0);
    const site = await secretData("default", "site-ca");
    expect((await secretData("bpa-system", "icn-site-ca"))["tls.crt"]).toBe(site["tls.crt"]);
    expect(new X509Certificate((await secretData("bpa-system", "bpa-api-tls"))["tls.crt"]!).verify(new X509Certificate(site["tls.crt"]!).publicKey)).toBe(true);
    expect(await secretData("bpa-system", "icn-registry-push")).toEqual(push);
    const missing = join(work, "ca-missing-values.yaml");
    await writeFile(missing, `${await readFile(values(), "utf8")}\nsecrets:\n  caFrom: { name: no-such-ca }\n`);
    const refused = await runCli(["deploy", "--kubeconfig", server.kubeconfigPath, "--chart", chart.dir, "--values", missing, "--wait", "0"]);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain("secrets.caFrom: no Secret bpa-system/no-such-ca with tls.crt and tls.key");
  });

  it("pushes an images bundle into the registry given, then upgrades the release to pull from it", async () => {
    const registry = await startRegistry(join(work, "registry"));
    try {
      const result = await deploy(server.kubeconfigPath, "--images", bundle, "--push-to", registry.address, "--push-insecure", "--wait", "0");
      expect(result.exitCode, result.all).toBe(0);
      expect(result.stderr).toMatch(/2\/2 icn\/ironic:39\.0\.0 sha256:/);
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
    // The push account and the REST API's, as nginx checks them (SHA-512 crypt); the front's certificate from the site CA.
    const htpasswd = Buffer.from(front.data!.htpasswd!, "base64").toString();
    expect(htpasswd).toMatch(/^icn-api:\$6\$[^\n]+\nicn-push:\$6\$[^\n]+\n$/);
    const site = new X509Certificate((await secretData("bpa-system", "icn-site-ca"))["tls.crt"]!);
    const certificate = new X509Certificate(Buffer.from(front.data!["tls.crt"]!, "base64").toString());
    expect(certificate.verify(site.publicKey)).toBe(true);
    for (const name of ["DNS:bootstrap.icn", "DNS:registry.example.test", "IP Address:192.0.2.10", "IP Address:192.0.2.12"])
      expect(certificate.subjectAltName).toContain(name);
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

  it("keeps no key and no password in Helm's release history, which lives in bpa-system, its last revisions only", async () => {
    const records = await releaseRecords();
    expect(records.length).toBeGreaterThan(0);
    expect(new Set(records.map((r) => r.namespace))).toEqual(new Set(["bpa-system"]));
    // More deploys ran than Helm keeps.
    expect(Math.max(...records.map((r) => Number(r.version)))).toBeGreaterThan(HISTORY_MAX);
    expect(records.length).toBeLessThanOrEqual(HISTORY_MAX);
    const secrets = [
      ...(await c.core.listNamespacedSecret({ namespace: "bpa-system" })).items,
      ...(await c.core.listNamespacedSecret({ namespace: "baremetal-operator-system" })).items,
    ].filter((s) => s.type !== "helm.sh/release.v1");
    const values = secrets.flatMap((s) => Object.values(s.data ?? {}).map((v) => Buffer.from(v, "base64").toString()));
    const passwords = secrets.filter((s) => s.data?.password).map((s) => Buffer.from(s.data!.password!, "base64").toString());
    expect(passwords.length).toBeGreaterThanOrEqual(3);
    for (const record of records) {
      expect(record.text, record.name).not.toContain("PRIVATE KEY");
      expect(record.manifest, record.name).not.toMatch(/kind: Secret\b/);
      for (const password of passwords) expect(record.text.includes(password), `${record.name} holds a password`).toBe(false);
      for (const value of values.filter((v) => v.includes("PRIVATE KEY")))
        expect(record.text.includes(Buffer.from(value).toString("base64")), `${record.name} holds a key`).toBe(false);
    }
    // The Secrets are made beside the release: no uninstall or upgrade of it removes them.
    for (const s of secrets.filter((s) => ["icn-site-ca", "icn-registry-push", "icn-registry-api", "bpa-api-tls"].includes(s.metadata!.name!)))
      expect(s.metadata!.annotations?.["meta.helm.sh/release-name"], s.metadata!.name).toBeUndefined();
  });

  it("accepts Kubernetes 1.30 and later, as distributions spell the version", () => {
    expect(supportedVersion("1", "30")).toBe(true);
    expect(supportedVersion("1", "35+")).toBe(true);
    expect(supportedVersion("1", "29")).toBe(false);
    expect(supportedVersion("2", "0")).toBe(true);
    expect(supportedVersion("", "")).toBe(false);
  });
});

/** A CA of the site's own (openssl, as a site would make it) in a kubernetes.io/tls Secret. */
async function makeCaSecret(namespace: string, name: string): Promise<{ crt: string; key: string }> {
  const dir = await mkdtemp(join(work, "ca-"));
  await execa("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", join(dir, "ca.key"), "-out", join(dir, "ca.crt"),
    "-days", "30", "-subj", `/CN=Site CA ${name}`, "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
  ]); // prettier-ignore
  const [crt, key] = await Promise.all([readFile(join(dir, "ca.crt"), "utf8"), readFile(join(dir, "ca.key"), "utf8")]);
  await c.core.createNamespacedSecret({ namespace, body: { metadata: { name }, type: "kubernetes.io/tls", stringData: { "tls.crt": crt, "tls.key": key } } });
  return { crt, key };
}
