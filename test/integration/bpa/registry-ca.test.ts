/**
 * The registry's site CA against a real kube-apiserver (issue 19): the appliance's first
 * boot stores it in ConfigMap icn-registry-ca (key ca.crt) of the operator's namespace;
 * every install carries it to the nodes. Without it, no install starts.
 */
import type { CoreV1Event } from "@kubernetes/client-node";
import yaml from "js-yaml";
import { describe, expect, it } from "vitest";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { makeTestCA } from "../../helpers/fixtures/bpa/registry-ca.js";
import {
  condition,
  createHost,
  createProvisioning,
  listInstallJobs,
  newNamespace,
  operatorConfig,
  operatorSuite,
  putRegistryCA,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const { c, start } = operatorSuite();

async function caEvents(namespace: string): Promise<CoreV1Event[]> {
  const list = await c.core.listNamespacedEvent({ namespace, fieldSelector: "involvedObject.name=cluster" });
  return list.items.filter((e) => e.reason === "RegistryCAMissing");
}

describe("the registry's site CA", () => {
  it("missing: condition and Event, no Job; created: the Job starts and the inventory carries it; changed: a new install", async () => {
    const ns = await newNamespace(c, "bpa-ca");
    await createHost(c, ns, bmh({ name: "m1", cpu: 16, ram: 16384, ip: "10.20.0.1" }));
    const config = operatorConfig(ns);
    const op = await start(config, { registryCA: false });
    await createProvisioning(c, ns, { metadata: { name: "cluster" }, spec: { master: { cpu: 8, memory: "8Gi" } } });

    // 1. No ConfigMap: the Provisioning says what is missing and who makes it; nothing runs.
    const waiting = await waitForStatus(c, ns, "cluster", "Ready=False RegistryCAMissing", (p) => condition(p, "Ready")?.reason === "RegistryCAMissing");
    expect(waiting.status!.phase).toBe("Pending");
    const message = condition(waiting, "Ready")!.message;
    expect(message).toContain(`ConfigMap ${ns}/icn-registry-ca key "ca.crt": ConfigMap not found`);
    expect(message).toContain("the appliance's first boot creates it");
    expect(condition(waiting, "InventoryReady")).toMatchObject({ status: "False", reason: "RegistryCAMissing", message });
    expect(condition(waiting, "HostsAssigned")).toMatchObject({ status: "True" });
    expect(condition(waiting, "Reconciled")).toMatchObject({ status: "True" });
    const [event] = await waitFor("a RegistryCAMissing Event", async () => ((await caEvents(ns)).length ? caEvents(ns) : undefined));
    expect(event).toMatchObject({
      type: "Warning",
      reason: "RegistryCAMissing",
      message,
      involvedObject: { kind: "Provisioning", name: "cluster", uid: waiting.metadata.uid },
    });
    // Retried with the key's backoff (test settings 100 ms .. 2 s), repeats counted on the one Event.
    await waitFor("the Event counted again", async () => ((await caEvents(ns))[0]?.count ?? 0) >= 2, 10_000);
    expect(await caEvents(ns)).toHaveLength(1);
    expect(op.controller!.queue.failureCount(`${ns}/cluster`)).toBeGreaterThanOrEqual(1);
    expect(await listInstallJobs(c, ns)).toEqual([]);

    // 2. A ConfigMap without a certificate is named as such.
    await putRegistryCA(config, "not a certificate\n");
    await waitForStatus(c, ns, "cluster", "the bad PEM named", (p) => /holds no PEM certificate/.test(condition(p, "Ready")?.message ?? ""));
    expect(await listInstallJobs(c, ns)).toEqual([]);

    // 3. The appliance's CA appears: the install starts (the watch on the ConfigMap, or the next retry).
    const first = makeTestCA("site CA one");
    await putRegistryCA(config, first.pem);
    const installing = await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing", 5_000);
    expect(condition(installing, "InventoryReady")).toMatchObject({ status: "True", reason: "Written" });
    const jobs = await listInstallJobs(c, ns);
    expect(jobs.map((j) => j.metadata!.name)).toEqual([installing.status!.installJob]);
    const cm = await c.core.readNamespacedConfigMap({ namespace: ns, name: installing.status!.inventoryConfigMap! });
    expect(cm.data!["registry-ca.crt"]).toBe(first.pem);
    const offline = yaml.load(cm.data!["offline.yml"]!) as { containerd_registries_mirrors: { prefix: string; mirrors: Record<string, unknown>[] }[] };
    expect(offline.containerd_registries_mirrors.find((m) => m.prefix === "192.168.100.1:5000")!.mirrors).toEqual([
      { host: "https://192.168.100.1:5000", capabilities: ["pull", "resolve"], skip_verify: false, ca: "/etc/icn-bootstrap/registry-ca.crt" },
    ]);
    const env = Object.fromEntries(jobs[0]!.spec!.template.spec!.containers[0]!.env!.map((e) => [e.name, e.value]));
    expect(env).toMatchObject({ BPA_REGISTRY_CA: "/inventory/registry-ca.crt", BPA_REGISTRY_CA_NODE_PATH: "/etc/icn-bootstrap/registry-ca.crt" });

    // 4. The same CA written again (whitespace aside) is the same install.
    await putRegistryCA(config, `\n${first.pem}\n`);
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await listInstallJobs(c, ns)).map((j) => j.metadata!.name)).toEqual([installing.status!.installJob]);

    // 5. A new CA (the appliance re-made it; only the watch on the ConfigMap can notice: nothing is retrying): new install hash, new inventory with the new PEM, new Job.
    const second = makeTestCA("site CA two");
    await putRegistryCA(config, second.pem);
    const moved = await waitForStatus(
      c,
      ns,
      "cluster",
      "a new install hash",
      (p) => !!p.status?.installHash && p.status.installHash !== installing.status!.installHash,
      5_000,
    );
    expect(moved.status!.inventoryConfigMap).not.toBe(installing.status!.inventoryConfigMap);
    expect(moved.status!.installJob).not.toBe(installing.status!.installJob);
    const cm2 = await c.core.readNamespacedConfigMap({ namespace: ns, name: moved.status!.inventoryConfigMap! });
    expect(cm2.data!["registry-ca.crt"]).toBe(second.pem);
    const after = await waitFor("the superseded running Job deleted", async () => {
      const names = (await listInstallJobs(c, ns)).filter((j) => !j.metadata!.deletionTimestamp).map((j) => j.metadata!.name);
      return names.length === 1 ? names : undefined;
    });
    expect(after).toEqual([moved.status!.installJob]);
  });
});
