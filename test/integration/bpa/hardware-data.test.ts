/**
 * Hosts whose hardware details are in Metal3's HardwareData (where Metal3 is moving them)
 * rather than in their status, against a real kube-apiserver with Metal3's own CRDs: the
 * BPA takes their facts from there, with the same rules. Each host decision is an Event
 * on the Provisioning (kubectl describe): why none fit, then which hosts were chosen.
 */
import type { CoreV1Event } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import {
  condition,
  createHost,
  createProvisioning,
  newNamespace,
  operatorConfig,
  operatorSuite,
  waitFor,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const { c, start } = operatorSuite();
const hardwareDataApi = { group: "metal3.io", version: "v1alpha1", plural: "hardwaredata" };

async function events(namespace: string, reason: string): Promise<CoreV1Event[]> {
  return (await c.core.listNamespacedEvent({ namespace, fieldSelector: "involvedObject.name=cluster" })).items.filter((e) => e.reason === reason);
}

describe("hardware details from HardwareData", () => {
  it("a host without status.hardware is matched on its HardwareData; each decision is an Event", async () => {
    const ns = await newNamespace(c, "bpa-hwd");
    // Inspected the new way: the host's status has no hardware, its HardwareData has it all.
    const host = bmh({ name: "moved", namespace: ns, cpu: 16, ram: 16384, ip: "10.20.0.5", nicModel: "0x8086 0x1572" });
    const hardware = host.status!.hardware!;
    delete host.status!.hardware;
    await createHost(c, ns, host);
    await start(operatorConfig(ns));

    // Without the HardwareData the host has no facts: Unsatisfiable, with an Event saying why.
    await createProvisioning(c, ns, { metadata: { name: "cluster" }, spec: { master: { cpu: 8, memory: "8Gi" } } });
    const waiting = await waitForStatus(c, ns, "cluster", "Unsatisfiable", (p) => p.status?.phase === "Unsatisfiable");
    expect(condition(waiting, "HostsAssigned")!.message).toMatch(/hosts without hardware details yet \(status\.hardware, HardwareData\): moved$/);
    const unsatisfiable = await waitFor("an Unsatisfiable Event", async () => (await events(ns, "Unsatisfiable"))[0]);
    expect(unsatisfiable.type).toBe("Warning");
    expect(unsatisfiable.message).toBe(condition(waiting, "HostsAssigned")!.message);

    // Metal3 writes the HardwareData: the host now fits.
    await c.custom.createNamespacedCustomObject({
      ...hardwareDataApi,
      namespace: ns,
      body: { apiVersion: "metal3.io/v1alpha1", kind: "HardwareData", metadata: { name: "moved" }, spec: { hardware } },
    });
    const installing = await waitForStatus(c, ns, "cluster", "Installing", (p) => p.status?.phase === "Installing");
    expect(installing.status!.assignedHosts!.map((h) => `${h.role}=${h.name}@${h.ip}`)).toEqual(["master=moved@10.20.0.5"]);
    const assigned = await waitFor("a HostsAssigned Event", async () => (await events(ns, "HostsAssigned"))[0]);
    expect(assigned.type).toBe("Normal");
    expect(assigned.message).toMatch(/^master\[0\]=moved \(10\.20\.0\.5\): /);
    // Rechecks of an unchanged decision add no Events.
    expect((await events(ns, "Unsatisfiable"))[0]!.count).toBe(1);
  });
});
