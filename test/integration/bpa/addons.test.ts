/**
 * Addons against a real kube-apiserver: once a Provisioning's cluster is installed, the BPA
 * starts one addons Job for spec.addons (absent: the appliance catalog's defaults), with
 * its plan in a ConfigMap; the runner (played here through its own ServiceAccount, as the
 * Job's pod would be) writes each addon's result into the one ConfigMap its Role allows;
 * the Provisioning shows status.addons and AddonsReady, and Events. A failed addon leaves
 * the cluster Ready; day 2 upgrades a changed addon and uninstalls a removed one. The charts
 * are in the appliance's registry as it runs there (test/helpers/registry-front.ts), where
 * the operator reads the digest each chart version's tag names and pins the addon to it; a
 * tag moved afterwards is reported, not followed. Jobs do not run here (no
 * kube-controller-manager): the tests write their status as the Job controller would. Helm
 * itself runs in test/integration/addons-runner.test.ts and the e2e (npm run e2e:kubespray).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig, type V1Job } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addonsCatalogManifest, type CatalogAddon } from "../../../common/addons-catalog.js";
import type { Provisioning } from "../../../bpa/api/types.js";
import { RegistryClient } from "../../../bpa/rest/registry.js";
import { startRegistryFront, type RegistryFront } from "../../helpers/registry-front.js";
import { makeClients, mergePatch, type Clients } from "../../../bpa/runtime/kube.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import yaml from "js-yaml";
import {
  condition,
  createHost,
  createProvisioning,
  handBackKubeconfig,
  newNamespace,
  operatorConfig,
  operatorSuite,
  patchProvisioning,
  putRegistryCA,
  setJobStatus,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const { kc, c, start } = operatorSuite();

let registry: RegistryFront;
let push: RegistryClient;
let work: string;
/** The charts' registry by the name its certificate carries (the operator reaches it at 127.0.0.1, addonsRegistryIP). */
let host: string;
let CATALOG: CatalogAddon[];
/** What each catalog chart's tag named when published: repository -> digest. */
const published = new Map<string, string>();

beforeAll(async () => {
  registry = await startRegistryFront();
  host = `bootstrap.icn:${registry.address.split(":")[1]}`;
  push = new RegistryClient({ url: `https://${registry.address}`, ca: registry.ca, username: registry.username, password: registry.password });
  work = await mkdtemp(join(tmpdir(), "icn-bpa-addons-"));
  CATALOG = [
    { name: "multus", chart: `oci://${host}/charts/multus`, version: "4.3.0", namespace: "kube-system", default: true },
    { name: "node-feature-discovery", chart: `oci://${host}/charts/node-feature-discovery`, version: "0.19.0", namespace: "nfd", default: true },
    { name: "qat-device-plugin", chart: `oci://${host}/charts/qat-device-plugin`, version: "0.36.0", namespace: "kube-system", default: false },
  ];
  for (const a of CATALOG) published.set(a.name, await publishChart(`charts/${a.name}`, a.version));
}, 60_000);

afterAll(async () => {
  await registry?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

/**
 * A chart version as Helm's OCI artifact (its config and a stand-in for the packaged chart,
 * which nothing here unpacks), pushed under its tag; returns the manifest's digest. Pushed
 * again with other content, the tag moves.
 */
async function publishChart(repository: string, version: string, content = "chart"): Promise<string> {
  const blob = async (bytes: string, mediaType: string) => {
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const file = join(work, digest.slice(7));
    await writeFile(file, bytes);
    await push.pushBlob(repository, digest, Buffer.byteLength(bytes), file);
    return { mediaType, digest, size: Buffer.byteLength(bytes) };
  };
  const name = repository.split("/").pop()!;
  const config = await blob(JSON.stringify({ name, version, apiVersion: "v2" }), "application/vnd.cncf.helm.config.v1+json");
  const layer = await blob(`${name} ${version} ${content}`, "application/vnd.cncf.helm.chart.content.v1.tar+gzip");
  const manifest = { schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json", config, layers: [layer] };
  return push.pushManifest(repository, version, manifest.mediaType, Buffer.from(JSON.stringify(manifest)));
}

async function siteWithCatalog(prefix: string): Promise<string> {
  const ns = await newNamespace(c, prefix);
  await c.core.createNamespacedConfigMap({ namespace: ns, body: yaml.load(addonsCatalogManifest(CATALOG, ns)) as never });
  await createHost(c, ns, bmh({ name: `m-${ns.split("-").pop()}`, cpu: 8, ram: 8192, ip: "10.30.0.1" }));
  const config = operatorConfig(ns, { addonsRegistryIP: "127.0.0.1" });
  await putRegistryCA(config, registry.ca);
  await start(config, { registryCA: false });
  return ns;
}

async function installed(ns: string, name: string): Promise<Provisioning> {
  const p = await waitForStatus(c, ns, name, "Installing", (x) => x.status?.phase === "Installing");
  await handBackKubeconfig(c, ns, `${name}-kubeconfig`);
  await setJobStatus(c, ns, p.status!.installJob!, "succeeded");
  return waitForStatus(c, ns, name, "Ready", (x) => x.status?.phase === "Ready");
}

const addonsJobs = async (ns: string) => (await c.batch.listNamespacedJob({ namespace: ns, labelSelector: "bpa.akraino.org/component=addons" })).items;
const nextAddonsJob = (ns: string, seen: readonly V1Job[] = []) =>
  waitFor("an addons Job", async () => (await addonsJobs(ns)).find((j) => !seen.some((s) => s.metadata!.name === j.metadata!.name)));
const planOf = async (ns: string, job: V1Job) =>
  JSON.parse(
    (await c.core.readNamespacedConfigMap({ namespace: ns, name: job.spec!.template.spec!.volumes!.find((v) => v.name === "plan")!.configMap!.name! })).data![
      "plan.json"
    ]!,
  ) as { apply: { name: string; chart: string; version: string; digest: string; namespace: string; values: unknown }[]; remove: { name: string }[] };

/** The runner as its pod would act: through its own ServiceAccount. */
function runnerClients(ns: string, provisioning: string): Clients {
  const runnerKc = new KubeConfig();
  runnerKc.loadFromString(kc.exportConfig());
  runnerKc.users = runnerKc.users.map((u) => ({ ...u, impersonateUser: `system:serviceaccount:${ns}:${provisioning}-runner` }));
  return makeClients(runnerKc);
}
async function report(runner: Clients, ns: string, provisioning: string, job: V1Job, name: string, state: string, message?: string) {
  const value = JSON.stringify({ job: job.metadata!.name, state, ...(message ? { message } : {}) });
  await runner.core.patchNamespacedConfigMap({ namespace: ns, name: `${provisioning}-addons-results`, body: { data: { [name]: value } } }, mergePatch);
}
const events = async (ns: string) => (await c.core.listNamespacedEvent({ namespace: ns })).items.map((e) => `${e.reason}: ${e.message}`);

describe("addons of an installed cluster", () => {
  it("the catalog's defaults are installed by one Job once the cluster is Ready; the runner's results make status.addons and AddonsReady", async () => {
    const ns = await siteWithCatalog("bpa-addons");
    await createProvisioning(c, ns, { metadata: { name: "edge" }, spec: { master: { cpu: 2, memory: "2Gi" } } });
    await installed(ns, "edge");
    const job = await nextAddonsJob(ns);
    expect(await planOf(ns, job)).toEqual({
      apply: [
        expect.objectContaining({
          name: "multus",
          chart: `oci://${host}/charts/multus`,
          version: "4.3.0",
          digest: published.get("multus"),
          namespace: "kube-system",
          values: {},
        }),
        expect.objectContaining({ name: "node-feature-discovery", version: "0.19.0", digest: published.get("node-feature-discovery"), namespace: "nfd" }),
      ],
      remove: [],
    });
    const pod = job.spec!.template.spec!;
    expect(pod.containers[0]!.args).toEqual(["addons"]);
    expect(pod.hostAliases).toEqual([{ ip: "127.0.0.1", hostnames: ["bootstrap.icn"] }]);
    expect(pod.volumes!.find((v) => v.name === "kubeconfig")!.secret!.secretName).toBe("edge-kubeconfig");
    await setJobStatus(c, ns, job.metadata!.name!, "running");
    const installing = await waitForStatus(c, ns, "edge", "addons installing", (x) => x.status?.addons?.every((a) => a.state === "Installing") === true);
    expect(installing.status!.phase).toBe("Ready");
    expect(condition(installing, "AddonsReady")).toMatchObject({ status: "False", reason: "Installing" });

    // The runner may write its results ConfigMap and no other.
    const runner = runnerClients(ns, "edge");
    await report(runner, ns, "edge", job, "multus", "Installed");
    await expect(runner.core.patchNamespacedConfigMap({ namespace: ns, name: "bpa-addons", body: { data: { x: "y" } } }, mergePatch)).rejects.toThrow(
      /forbidden/i,
    );
    await report(runner, ns, "edge", job, "node-feature-discovery", "Installed");
    await setJobStatus(c, ns, job.metadata!.name!, "succeeded");
    const ready = await waitForStatus(c, ns, "edge", "AddonsReady", (x) => condition(x, "AddonsReady")?.status === "True");
    expect(ready.status!.addons!.map((a) => [a.name, a.version, a.digest, a.state])).toEqual([
      ["multus", "4.3.0", published.get("multus"), "Installed"],
      ["node-feature-discovery", "0.19.0", published.get("node-feature-discovery"), "Installed"],
    ]);
    expect(condition(ready, "AddonsReady")!.message).toBe("installed: multus 4.3.0, node-feature-discovery 0.19.0");
    expect(await events(ns)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^AddonsJobStarted: edge-addons-[0-9a-f]{8}: install multus 4.3.0, install node-feature-discovery 0.19.0$/),
      ]),
    );
    // Nothing more to do: no second Job.
    await new Promise((r) => setTimeout(r, 1500));
    expect(await addonsJobs(ns)).toHaveLength(1);
  });

  it("day 2: a changed addon is upgraded, a removed one uninstalled; a failure leaves the cluster Ready with AddonsReady False until the retry annotation", async () => {
    const ns = await siteWithCatalog("bpa-addons2");
    await createProvisioning(c, ns, {
      metadata: { name: "edge" },
      spec: { master: { cpu: 2, memory: "2Gi" }, addons: [{ name: "multus" }, { name: "qat-device-plugin" }] },
    });
    await installed(ns, "edge");
    const first = await nextAddonsJob(ns);
    expect((await planOf(ns, first)).apply.map((a) => a.name)).toEqual(["multus", "qat-device-plugin"]);
    const runner = runnerClients(ns, "edge");
    await report(runner, ns, "edge", first, "multus", "Installed");
    await report(runner, ns, "edge", first, "qat-device-plugin", "Installed");
    await setJobStatus(c, ns, first.metadata!.name!, "succeeded");
    await waitForStatus(c, ns, "edge", "AddonsReady", (x) => condition(x, "AddonsReady")?.status === "True");

    await patchProvisioning(c, ns, "edge", { spec: { addons: [{ name: "multus", values: { logLevel: "debug" } }] } });
    const second = await nextAddonsJob(ns, [first]);
    expect(await planOf(ns, second)).toEqual({
      apply: [expect.objectContaining({ name: "multus", values: { logLevel: "debug" } })],
      remove: [{ name: "qat-device-plugin", namespace: "kube-system" }],
    });
    await report(runner, ns, "edge", second, "multus", "Failed", "Error: UPGRADE FAILED: context deadline exceeded");
    await setJobStatus(c, ns, second.metadata!.name!, "failed");
    const failed = await waitForStatus(c, ns, "edge", "AddonsReady False", (x) => condition(x, "AddonsReady")?.reason === "AddonsFailed");
    expect(failed.status!.phase).toBe("Ready");
    expect(condition(failed, "Ready")).toMatchObject({ status: "True" });
    expect(failed.status!.addons).toEqual([
      expect.objectContaining({ name: "multus", state: "Failed", message: "Error: UPGRADE FAILED: context deadline exceeded" }),
      expect.objectContaining({ name: "qat-device-plugin", state: "Failed", message: expect.stringContaining("before it got to qat-device-plugin") }),
    ]);
    expect(condition(failed, "AddonsReady")!.message).toContain("bpa.akraino.org/retry");
    expect(await events(ns)).toEqual(expect.arrayContaining([expect.stringMatching(/^AddonFailed: /)]));
    await new Promise((r) => setTimeout(r, 1500));
    expect(await addonsJobs(ns)).toHaveLength(2);

    // The retry annotation: the same change again, now it goes through.
    await c.custom.patchNamespacedCustomObject(
      {
        group: "bpa.akraino.org",
        version: "v1alpha1",
        namespace: ns,
        plural: "provisionings",
        name: "edge",
        body: { metadata: { annotations: { "bpa.akraino.org/retry": "1" } } },
      },
      mergePatch,
    );
    const third = await nextAddonsJob(ns, [first, second]);
    await report(runner, ns, "edge", third, "multus", "Installed");
    await report(runner, ns, "edge", third, "qat-device-plugin", "Uninstalled");
    await setJobStatus(c, ns, third.metadata!.name!, "succeeded");
    const done = await waitForStatus(c, ns, "edge", "AddonsReady", (x) => condition(x, "AddonsReady")?.status === "True");
    expect(done.status!.addons!.map((a) => [a.name, a.state])).toEqual([["multus", "Installed"]]);
  });

  it("a bad spec.addons is refused by the schema or reported in AddonsReady, naming the field; nothing is changed", async () => {
    const ns = await siteWithCatalog("bpa-addons3");
    await expect(createProvisioning(c, ns, { metadata: { name: "bad" }, spec: { master: { cpu: 2, memory: "2Gi" }, addons: "multus" } })).rejects.toThrow(
      /spec\.addons.*array/i,
    );
    // Dry run: the schema is checked, nothing is made. The answer as text: a failure prints it, not the client's error object.
    const badDigest = { metadata: { name: "bad2", namespace: ns }, spec: { master: { cpu: 2, memory: "2Gi" }, addons: [{ name: "multus", digest: "4.3.0" }] } };
    const answer = await c.custom
      .createNamespacedCustomObject({
        group: "bpa.akraino.org",
        version: "v1alpha1",
        namespace: ns,
        plural: "provisionings",
        dryRun: "All",
        body: { apiVersion: "bpa.akraino.org/v1alpha1", kind: "Provisioning", ...badDigest },
      })
      .then(
        () => "accepted",
        (error: Error) => error.message,
      );
    expect(answer).toMatch(/spec\.addons\[0\]\.digest.*should match/i);
    await createProvisioning(c, ns, { metadata: { name: "edge" }, spec: { master: { cpu: 2, memory: "2Gi" }, addons: [{ name: "nope" }] } });
    await installed(ns, "edge");
    const p = await waitForStatus(c, ns, "edge", "InvalidAddons", (x) => condition(x, "AddonsReady")?.reason === "InvalidAddons");
    expect(condition(p, "AddonsReady")!.message).toContain(
      "spec.addons[0]: nope is not an addon of this appliance (it serves multus, node-feature-discovery, qat-device-plugin)",
    );
    expect(p.status!.phase).toBe("Ready");
    expect(await addonsJobs(ns)).toHaveLength(0);
  });

  it("a tag moved after the BPA recorded its digest: status, AddonsReady and an Event report it; the next Job installs the recorded digest until spec.addons names the new one", async () => {
    const ns = await siteWithCatalog("bpa-addons4");
    const chart = `oci://${host}/site/charts/moving`;
    const first = await publishChart("site/charts/moving", "1.0.0");
    const entry = { name: "moving", chart, version: "1.0.0" };
    await createProvisioning(c, ns, { metadata: { name: "edge" }, spec: { master: { cpu: 2, memory: "2Gi" }, addons: [entry] } });
    await installed(ns, "edge");
    const job = await nextAddonsJob(ns);
    expect((await planOf(ns, job)).apply).toEqual([expect.objectContaining({ ...entry, digest: first })]);
    const runner = runnerClients(ns, "edge");
    await report(runner, ns, "edge", job, "moving", "Installed");
    await setJobStatus(c, ns, job.metadata!.name!, "succeeded");
    const ready = await waitForStatus(c, ns, "edge", "AddonsReady", (x) => condition(x, "AddonsReady")?.status === "True");
    expect(ready.status!.addons).toEqual([expect.objectContaining({ name: "moving", state: "Installed", digest: first })]);

    // Someone publishes other content under the same tag; the next reconcile (here: made by an annotation) sees it.
    const moved = await publishChart("site/charts/moving", "1.0.0", "someone else's");
    expect(moved).not.toBe(first);
    await c.custom.patchNamespacedCustomObject(
      {
        group: "bpa.akraino.org",
        version: "v1alpha1",
        namespace: ns,
        plural: "provisionings",
        name: "edge",
        body: { metadata: { annotations: { touched: "1" } } },
      },
      mergePatch,
    );
    const said = `moving: ${host}/site/charts/moving:1.0.0 now names ${moved}; the addon keeps ${first}`;
    const reported = await waitForStatus(c, ns, "edge", "AddonTagMoved", (x) => condition(x, "AddonsReady")?.reason === "AddonTagMoved");
    expect(condition(reported, "AddonsReady")).toMatchObject({ status: "True" });
    expect(condition(reported, "AddonsReady")!.message).toContain(said);
    expect(reported.status!.addons).toEqual([expect.objectContaining({ name: "moving", state: "Installed", digest: first, tagDigest: moved })]);
    expect(await events(ns)).toEqual(expect.arrayContaining([expect.stringContaining(`AddonTagMoved: ${said}`)]));
    expect(await addonsJobs(ns)).toHaveLength(1);

    // A change of the addon upgrades it with the digest recorded for its version, not the tag's.
    await patchProvisioning(c, ns, "edge", { spec: { addons: [{ ...entry, values: { replicas: 2 } }] } });
    const second = await nextAddonsJob(ns, [job]);
    expect((await planOf(ns, second)).apply).toEqual([expect.objectContaining({ ...entry, digest: first, values: { replicas: 2 } })]);
    await report(runner, ns, "edge", second, "moving", "Installed");
    await setJobStatus(c, ns, second.metadata!.name!, "succeeded");
    await waitForStatus(
      c,
      ns,
      "edge",
      "upgraded",
      (x) => x.status?.addons?.[0]?.hash !== ready.status!.addons![0]!.hash && x.status?.addons?.[0]?.state === "Installed",
    );

    // Naming the new digest takes it; the tag names it, so nothing is reported any more.
    await patchProvisioning(c, ns, "edge", { spec: { addons: [{ ...entry, values: { replicas: 2 }, digest: moved }] } });
    const third = await nextAddonsJob(ns, [job, second]);
    expect((await planOf(ns, third)).apply).toEqual([expect.objectContaining({ ...entry, digest: moved })]);
    await report(runner, ns, "edge", third, "moving", "Installed");
    await setJobStatus(c, ns, third.metadata!.name!, "succeeded");
    const taken = await waitForStatus(c, ns, "edge", "Installed", (x) => condition(x, "AddonsReady")?.reason === "Installed");
    expect(taken.status!.addons).toEqual([expect.objectContaining({ name: "moving", state: "Installed", digest: moved })]);
    expect(taken.status!.addons![0]!.tagDigest).toBeUndefined();
  });

  it("a chart version the registry does not have: AddonsReady False/ChartUnresolved naming it, no Job; published, it is installed", async () => {
    const ns = await siteWithCatalog("bpa-addons5");
    const chart = `oci://${host}/site/charts/later`;
    await createProvisioning(c, ns, {
      metadata: { name: "edge" },
      spec: { master: { cpu: 2, memory: "2Gi" }, addons: [{ name: "later", chart, version: "2.0.0" }] },
    });
    await installed(ns, "edge");
    const waiting = await waitForStatus(c, ns, "edge", "ChartUnresolved", (x) => condition(x, "AddonsReady")?.reason === "ChartUnresolved");
    expect(condition(waiting, "AddonsReady")!.message).toContain(
      `later's chart ${host}/site/charts/later:2.0.0 (${host}/site/charts/later:2.0.0 is not in the registry`,
    );
    expect(await addonsJobs(ns)).toHaveLength(0);
    const digest = await publishChart("site/charts/later", "2.0.0");
    await c.custom.patchNamespacedCustomObject(
      {
        group: "bpa.akraino.org",
        version: "v1alpha1",
        namespace: ns,
        plural: "provisionings",
        name: "edge",
        body: { metadata: { annotations: { touched: "1" } } },
      },
      mergePatch,
    );
    const job = await nextAddonsJob(ns);
    expect((await planOf(ns, job)).apply).toEqual([expect.objectContaining({ name: "later", digest })]);
  });
});
