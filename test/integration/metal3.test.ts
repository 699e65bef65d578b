/**
 * Metal3 as the appliance runs it, from the images the build makes: Metal3's
 * baremetal-operator (built from its pinned Go module) and the project's Ironic
 * (Ironic 39 from PyPI, the project's configuration), each run with bubblewrap on its own
 * image root, against the integration project's real API server with Metal3's own CRDs.
 * The operator watches only this file's namespace (the other tests' hosts are the BPA's
 * stand-ins) and talks to Ironic over loopback with the credentials Ironic was started with.
 *
 * - Ironic refuses API calls without those credentials or with wrong ones;
 * - a BareMetalHost whose BMC does not answer ends in Metal3's `registration error`,
 *   with Ironic's reason in status.errorMessage; a host next to it without a BMC stays
 *   unmanaged, without an error.
 */
import type { ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir, runStages } from "../../builder/pipeline.js";
import { freePort } from "../../builder/registry/server.js";
import { startIronicPod, unpackIronic } from "../helpers/ironic-pod.js";
import { startInImage, stopInImage, unpackImage } from "../helpers/oci-rootfs.js";
import { applyCrds, clients, kubeConfig, newNamespace, waitFor } from "../helpers/operator-suite.js";

const BMO = "quay.io/metal3-io/baremetal-operator:v0.13.2";
const bmhApi = { group: "metal3.io", version: "v1alpha1", plural: "baremetalhosts" };

const kc = kubeConfig();
const c = clients(kc);
let work: string;
let ns: string;
let ironicPort: number;
let ironicRoot: string;
let password: string;
let auth: string;
const processes: ChildProcess[] = [];
let bmo: ChildProcess;
let bmoLog: string;

interface Host {
  metadata: { name: string; finalizers?: string[] };
  status?: { operationalStatus?: string; errorType?: string; errorMessage?: string; errorCount?: number; provisioning?: { state?: string } };
}

/** Waits for Ironic's API; a process that exited first fails at once, with its log. */
async function waitForIronic(ironic: { exitCode?: number | null }, log: string): Promise<void> {
  await waitFor(
    "Ironic's API",
    async () => {
      if (typeof ironic.exitCode === "number") throw new Error(`Ironic exited (${ironic.exitCode}):\n${(await readFile(log, "utf8")).slice(-3000)}`);
      return (await fetch(`http://127.0.0.1:${ironicPort}/`).catch(() => undefined))?.ok;
    },
    10 * 60_000,
    1000,
  );
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-metal3-"));
  await applyCrds(kc);
  ns = await newNamespace(c, "metal3");
  const lock = await loadLock(DEFAULT_LOCK);
  const content = await runStages({
    definition: await loadDefinition(DEFAULT_DEFINITION),
    lock,
    lockPath: DEFAULT_LOCK,
    stagesDir: stagesDir(),
    sections: ["content"],
    stopAfterImages: true,
  });
  const bmoRoot = join(work, "bmo-root");
  await unpackImage(content.images!.dir, BMO, bmoRoot);
  ironicRoot = await unpackIronic(content.images!.dir, work);
  // Mount points, as the container runtime makes them for the pods' volumes.
  await mkdir(join(bmoRoot, "opt/metal3/auth"), { recursive: true });
  await writeFile(join(bmoRoot, "kubeconfig"), "");

  ironicPort = await freePort();
  const pod = await startIronicPod({
    root: ironicRoot,
    work,
    network: { hostNetwork: true },
    env: { IRONIC_IP: "127.0.0.1", IRONIC_LISTEN_IP: "127.0.0.1", OS_API__PORT: String(ironicPort) },
  });
  password = pod.password;
  auth = pod.auth;
  const ironic = pod.servers[0]!.child;
  processes.push(ironic);
  await waitForIronic(ironic, join(work, "ironic.log"));

  const kubeconfig = join(work, "kubeconfig");
  await writeFile(kubeconfig, await readFile(inject("kubeconfigPath"), "utf8"));
  bmoLog = join(work, "bmo.log");
  bmo = startInImage(
    bmoRoot,
    ["/baremetal-operator", `--namespace=${ns}`, "--webhook-port=0", "--metrics-addr=0", `--health-addr=127.0.0.1:${await freePort()}`],
    join(work, "bmo.log"),
    {
      hostNetwork: true,
      binds: { [kubeconfig]: "/kubeconfig", [auth]: "/opt/metal3/auth" },
      env: { KUBECONFIG: "/kubeconfig", IRONIC_ENDPOINT: `http://127.0.0.1:${ironicPort}/v1/`, POD_NAMESPACE: ns, POD_NAME: "bmo-test" },
    },
  );
  processes.push(bmo);
}, 40 * 60_000);

afterAll(async () => {
  await Promise.all(processes.map((p) => stopInImage(p)));
  if (work) await rm(work, { recursive: true, force: true });
});

describe("Metal3 from the appliance's images", () => {
  it("Ironic answers its API only with the credentials it was started with", async () => {
    const url = `http://127.0.0.1:${ironicPort}/v1/nodes`;
    const basic = (user: string, pass: string) => ({
      authorization: `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}`,
      "x-openstack-ironic-api-version": "1.89",
    });
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: basic("metal3", "wrong") })).status).toBe(401);
    const ok = await fetch(url, { headers: basic("metal3", password) });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ nodes: [] });
    // The API's version range covers what the baremetal-operator requires (1.89).
    const root = (await (await fetch(`http://127.0.0.1:${ironicPort}/`)).json()) as { default_version: { version: string } };
    expect(Number(root.default_version.version.split(".")[1])).toBeGreaterThanOrEqual(89);
  });

  it("Ironic is OpenStack 2026.2's (39.0.0, from PyPI) on the image's python3, with its bytecode made at build time", async () => {
    const root = (await (await fetch(`http://127.0.0.1:${ironicPort}/`)).json()) as { default_version: { version: string } };
    // 1.110 is the newest the pinned baremetal-operator asks for (deployment abort); 2025.1's Ironic stopped at 1.96.
    expect(Number(root.default_version.version.split(".")[1])).toBeGreaterThanOrEqual(110);
    const site = join(ironicRoot, "usr/local/lib/python3.13/dist-packages");
    expect(await readdir(site)).toContain("ironic-39.0.0.dist-info");
    // The root is read-only in the pod: without .pyc made for this python every start compiles what it imports again.
    expect(await readdir(join(site, "ironic/__pycache__"))).toContain("__init__.cpython-313.pyc");
    // What the recipe leaves out (python.leaveOut): Ironic's unit tests.
    expect(await readdir(join(site, "ironic"))).not.toContain("tests");
    expect(await readdir(join(ironicRoot, "usr/lib/python3/dist-packages")).catch(() => [])).not.toContain("ironic");
  });

  it("a host whose BMC does not answer ends in registration error with Ironic's reason; its neighbour is not disturbed", { timeout: 15 * 60_000 }, async () => {
    // Nothing listens on this loopback port: the BMC "does not answer".
    const deadBmc = await freePort();
    await c.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: "bmc" }, stringData: { username: "admin", password: "admin" } } });
    const host = (name: string, mac: string, bmc?: string) => ({
      apiVersion: "metal3.io/v1alpha1",
      kind: "BareMetalHost",
      metadata: { name },
      spec: { online: true, bootMACAddress: mac, ...(bmc ? { bmc: { address: bmc, credentialsName: "bmc" } } : {}) },
    });
    await c.custom.createNamespacedCustomObject({
      ...bmhApi,
      namespace: ns,
      body: host("unreachable", "52:54:00:aa:00:01", `redfish+http://127.0.0.1:${deadBmc}/redfish/v1/Systems/1`),
    });
    await c.custom.createNamespacedCustomObject({ ...bmhApi, namespace: ns, body: host("no-bmc", "52:54:00:aa:00:02") });
    const started = Date.now();
    const failed = await waitFor(
      "the host with the dead BMC in registration error",
      async () => {
        if (typeof bmo.exitCode === "number")
          throw new Error(`the baremetal-operator exited (${bmo.exitCode}):\n${(await readFile(bmoLog, "utf8")).slice(-3000)}`);
        const h = (await c.custom.getNamespacedCustomObject({ ...bmhApi, namespace: ns, name: "unreachable" })) as Host;
        return h.status?.errorType === "registration error" ? h : undefined;
      },
      12 * 60_000,
      2000,
    );
    console.log(`registration error after ${((Date.now() - started) / 1000).toFixed(0)} s: ${failed.status!.errorMessage}`);
    expect(failed.status!.operationalStatus).toBe("error");
    expect(failed.metadata.finalizers).toContain("baremetalhost.metal3.io");
    // Ironic's words, passed on by the operator: it could not reach the BMC at that address.
    expect(failed.status!.errorMessage).toMatch(new RegExp(`127\\.0\\.0\\.1:${deadBmc}|[Cc]onnection refused|[Uu]nable to connect|[Ff]ailed to connect`));
    const neighbour = (await c.custom.getNamespacedCustomObject({ ...bmhApi, namespace: ns, name: "no-bmc" })) as Host;
    // Without a BMC the operator only records the host, unmanaged, and reports nothing wrong with it.
    expect(neighbour.status?.provisioning?.state).toBe("unmanaged");
    expect(neighbour.status?.errorMessage).toBe("");
  });
});
