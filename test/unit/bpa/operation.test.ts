/**
 * The day-2 decisions (bpa/jobs/operation.ts): which playbook, which inventory, which
 * --limit, one change at a time in the order add -> remove -> upgrade, one minor at a time.
 */
import { describe, expect, it } from "vitest";
import type { AssignedHost, ClusterState } from "../../../bpa/api/types.js";
import { nextOperation, upgradeStep } from "../../../bpa/jobs/operation.js";

const host = (name: string, role: "master" | "worker", index: number): AssignedHost => ({
  name,
  namespace: "site",
  role,
  index,
  mac: "52:54:00:00:00:01",
  ip: `10.0.0.${index + (role === "master" ? 1 : 11)}`,
  cpu: 4,
  ramMebibytes: 8192,
});
const m0 = host("m0", "master", 0);
const w0 = host("w0", "worker", 0);
const w1 = host("w1", "worker", 1);
const m1 = host("m1", "master", 1);
const served = ["1.33.7", "1.34.3", "1.34.5", "1.35.4"];
const cluster = (hosts: AssignedHost[], version = "1.35.4", mastersAreNodes = false): ClusterState => ({
  hosts,
  kubernetesVersion: version,
  mastersAreNodes,
  revision: 3,
});

function op(result: ReturnType<typeof nextOperation>) {
  if (!("operation" in result)) throw new Error(`expected an operation, got ${JSON.stringify(result)}`);
  return result.operation;
}

describe("the next operation of a Provisioning", () => {
  it("installs everything with cluster.yml before a cluster exists; without workers the masters are nodes", () => {
    const o = op(nextOperation({ wanted: [m0], wantedVersion: "1.35.4", servedVersions: served }));
    expect(o).toMatchObject({ kind: "install", playbook: "cluster.yml", hosts: ["m0"], mastersAreNodes: true, kubernetesVersion: "1.35.4" });
    expect(o.limit).toBeUndefined();
    expect(o.outcome).toEqual({ hosts: [m0], kubernetesVersion: "1.35.4", mastersAreNodes: true, revision: 1 });
  });

  it("a new worker: scale.yml limited to it and the first master (which uploads the certificates joining nodes fetch), the whole cluster in the inventory, the version unchanged", () => {
    const o = op(nextOperation({ cluster: cluster([m1, m0], "1.35.4", true), wanted: [m0, m1, w0], wantedVersion: "1.35.4", servedVersions: served }));
    expect(o).toMatchObject({ kind: "scale", playbook: "scale.yml", limit: ["w0", "m0"], hosts: ["w0"], kubernetesVersion: "1.35.4", mastersAreNodes: true });
    expect(o.inventoryHosts.map((h) => h.name)).toEqual(["m1", "m0", "w0"]);
    expect(o.outcome).toEqual({ hosts: [m1, m0, w0], kubernetesVersion: "1.35.4", mastersAreNodes: true, revision: 4 });
    expect(o.summary).toBe("scale.yml adds worker[0]=w0");
  });

  it("a new master: cluster.yml over every host (kubespray cannot scale a control plane)", () => {
    const o = op(nextOperation({ cluster: cluster([m0, w0]), wanted: [m0, m1, w0], wantedVersion: "1.35.4", servedVersions: served }));
    expect(o).toMatchObject({ kind: "add-control-plane", playbook: "cluster.yml", hosts: ["m1"] });
    expect(o.limit).toBeUndefined();
  });

  it("a worker entry gone: remove-node.yml with the host still in the inventory, confirmation skipped", () => {
    const o = op(nextOperation({ cluster: cluster([m0, w0, w1]), wanted: [m0, w0], wantedVersion: "1.35.4", servedVersions: served }));
    expect(o).toMatchObject({ kind: "remove", playbook: "remove-node.yml", hosts: ["w1"], extraVars: { node: "w1", skip_confirmation: "true" } });
    expect(o.inventoryHosts.map((h) => h.name)).toEqual(["m0", "w0", "w1"]);
    expect(o.outcome.hosts.map((h) => h.name)).toEqual(["m0", "w0"]);
  });

  it("a replaced worker: adds the new one first, then removes the old one, then upgrades: one operation at a time", () => {
    const both = { cluster: cluster([m0, w0], "1.34.5"), wanted: [m0, w1], wantedVersion: "1.35.4", servedVersions: served };
    expect(op(nextOperation(both))).toMatchObject({ kind: "scale", limit: ["w1", "m0"], kubernetesVersion: "1.34.5" });
    const afterAdd = { ...both, cluster: cluster([m0, w0, w1], "1.34.5") };
    expect(op(nextOperation(afterAdd))).toMatchObject({ kind: "remove", hosts: ["w0"] });
    const afterRemove = { ...both, cluster: cluster([m0, w1], "1.34.5") };
    expect(op(nextOperation(afterRemove))).toMatchObject({
      kind: "upgrade",
      playbook: "upgrade-cluster.yml",
      kubernetesVersion: "1.35.4",
      fromVersion: "1.34.5",
      hosts: ["m0", "w1"],
    });
    expect(nextOperation({ ...both, cluster: cluster([m0, w1], "1.35.4") })).toEqual({ upToDate: true });
  });

  it("upgrades one minor at a time, through the newest patch the appliance serves", () => {
    const o = op(nextOperation({ cluster: cluster([m0], "1.33.7", true), wanted: [m0], wantedVersion: "1.35.4", servedVersions: served }));
    expect(o).toMatchObject({ kind: "upgrade", kubernetesVersion: "1.34.5", fromVersion: "1.33.7" });
    expect(o.summary).toContain("on the way to 1.35.4");
    expect(upgradeStep("1.34.3", "1.34.5", served)).toEqual({ version: "1.34.5" });
    expect(upgradeStep("1.33.7", "1.35.4", ["1.33.7", "1.35.4"])).toEqual({ blocked: expect.stringContaining("serves no 1.34 version") });
  });

  it("follows the appliance's other components: a served containerd the cluster does not run is an upgrade-cluster.yml at the same Kubernetes version", () => {
    const installed = { ...cluster([m0, w0]), components: { containerd: "2.2.3", runc: "1.4.2" } };
    const servedComponents = { containerd: "2.2.4", runc: "1.4.2", nerdctl: "2.0.4" };
    const o = op(nextOperation({ cluster: installed, wanted: [m0, w0], wantedVersion: "1.35.4", servedVersions: served, servedComponents }));
    expect(o).toMatchObject({ kind: "upgrade", playbook: "upgrade-cluster.yml", kubernetesVersion: "1.35.4", fromVersion: "1.35.4", hosts: ["m0", "w0"] });
    expect(o.summary).toBe("upgrade-cluster.yml updates containerd 2.2.3 -> 2.2.4 (Kubernetes stays 1.35.4)");
    expect(o.outcome.components).toEqual({ containerd: "2.2.4", runc: "1.4.2", nerdctl: "2.0.4" });
    // The same components, or a cluster that recorded none: nothing to do.
    expect(
      nextOperation({
        cluster: { ...installed, components: { containerd: "2.2.4" } },
        wanted: [m0, w0],
        wantedVersion: "1.35.4",
        servedVersions: served,
        servedComponents,
      }),
    ).toEqual({ upToDate: true });
    expect(nextOperation({ cluster: cluster([m0, w0]), wanted: [m0, w0], wantedVersion: "1.35.4", servedVersions: served, servedComponents })).toEqual({
      upToDate: true,
    });
    // Hosts first; a Kubernetes upgrade brings the served components with it.
    expect(
      op(nextOperation({ cluster: installed, wanted: [m0, w0, w1], wantedVersion: "1.35.4", servedVersions: served, servedComponents })).outcome.components,
    ).toEqual(installed.components);
    const upgrade = op(
      nextOperation({
        cluster: { ...installed, kubernetesVersion: "1.34.5" },
        wanted: [m0, w0],
        wantedVersion: "1.35.4",
        servedVersions: served,
        servedComponents,
      }),
    );
    expect(upgrade).toMatchObject({ kubernetesVersion: "1.35.4", outcome: { kubernetesVersion: "1.35.4", components: servedComponents } });
  });

  it("refuses what it must not do, saying why: a downgrade, removing a master, removing the last worker of a control-plane-only cluster", () => {
    expect(nextOperation({ cluster: cluster([m0, w0]), wanted: [m0, w0], wantedVersion: "1.34.5", servedVersions: served })).toEqual({
      blocked: expect.stringContaining("does not downgrade"),
    });
    expect(nextOperation({ cluster: cluster([m0, m1, w0]), wanted: [m0, w0], wantedVersion: "1.35.4", servedVersions: served })).toEqual({
      blocked: expect.stringContaining("control-plane host (master[1]=m1)"),
    });
    expect(nextOperation({ cluster: cluster([m0, w0]), wanted: [m0], wantedVersion: "1.35.4", servedVersions: served })).toEqual({
      blocked: expect.stringContaining("no node to run workloads"),
    });
    // A single-node cluster's master is a node: its workers may all go.
    expect(op(nextOperation({ cluster: cluster([m0, w0], "1.35.4", true), wanted: [m0], wantedVersion: "1.35.4", servedVersions: served })).kind).toBe(
      "remove",
    );
  });
});
