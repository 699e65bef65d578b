/**
 * The small version of `npm run bench:scale`: a site of twelve inspected hosts of four
 * hardware shapes (some with SR-IOV NICs, one with QAT), one Provisioning of 3 control-plane
 * and 9 workers with SR-IOV and QAT demands. Every role is filled by a host that meets it,
 * no host twice, and kubespray's inventory lists each once in its groups (etcd: the three
 * control-plane hosts).
 */
import { describe, expect, it } from "vitest";
import { LABEL_QAT, LABEL_SRIOV } from "../../../bpa/api/constants.js";
import { INVENTORY_KEY_HOSTS } from "../../../bpa/jobs/contract.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { createHost, createProvisioning, newNamespace, operatorConfig, operatorSuite, waitFor, waitForStatus } from "../../helpers/operator-suite.js";

const { c, start } = operatorSuite();

/** Twelve hosts: [cpu, MiB, sriov, qat] by index. */
const SHAPES: [number, number, boolean, boolean][] = [
  [16, 65536, false, false],
  [16, 65536, false, false],
  [32, 131072, false, false],
  [32, 131072, true, false],
  [48, 196608, true, false],
  [48, 196608, true, true],
  [64, 262144, false, false],
  [64, 262144, true, false],
  [16, 32768, false, false],
  [32, 65536, false, false],
  [32, 65536, true, false],
  [64, 131072, false, false],
];

/** The lines of one [group] of an INI inventory. */
function group(ini: string, name: string): string[] {
  const start = ini.indexOf(`[${name}]\n`);
  if (start < 0) return [];
  const body = ini.slice(start + name.length + 3);
  return body
    .slice(0, body.search(/^\[/m) >= 0 ? body.search(/^\[/m) : undefined)
    .split("\n")
    .filter((l) => l.trim() && !l.startsWith("#"));
}

describe("a site of many hosts", () => {
  it("fills 3 control-plane and 9 worker roles from 12 hosts of varied shapes, each host once, and writes them all to the inventory", async () => {
    const ns = await newNamespace(c, "bpa-many");
    await Promise.all(
      SHAPES.map(([cpu, ram, sriov, qat], i) =>
        createHost(
          c,
          ns,
          bmh({
            name: `node-${String(i).padStart(2, "0")}`,
            namespace: ns,
            cpu,
            ram,
            ip: `10.30.0.${i + 10}`,
            labels: { ...(sriov ? { [LABEL_SRIOV]: "true" } : {}), ...(qat ? { [LABEL_QAT]: "true" } : {}) },
            ...(sriov ? { nicModel: "0x8086 0x1572" } : {}),
          }),
        ),
      ),
    );
    await start(operatorConfig(ns));
    const plain = { cpu: 8, memory: "16Gi" };
    const worker = [
      ...Array.from({ length: 4 }, () => ({ ...plain, sriov: true })),
      { cpu: 32, memory: "128Gi", qat: true },
      ...Array.from({ length: 4 }, () => plain),
    ];
    await createProvisioning(c, ns, { metadata: { name: "site" }, spec: { master: [plain, plain, plain], worker } });
    const installing = await waitForStatus(c, ns, "site", "Installing", (p) => p.status?.phase === "Installing", 60_000);

    const assigned = installing.status!.assignedHosts!;
    expect(assigned).toHaveLength(12);
    expect(new Set(assigned.map((h) => h.name)).size).toBe(12);
    const shapeOf = (name: string) => SHAPES[Number(name.slice(5))]!;
    for (const h of assigned.filter((h) => h.role === "worker")) {
      const [cpu, ram, sriov, qat] = shapeOf(h.name);
      const wanted = worker[h.index]!;
      expect(cpu, h.name).toBeGreaterThanOrEqual(wanted.cpu);
      expect(ram, h.name).toBeGreaterThanOrEqual(wanted.memory === "128Gi" ? 131072 : 16384);
      if ("sriov" in wanted) expect(sriov, `${h.name} for worker[${h.index}]`).toBe(true);
      if ("qat" in wanted) expect(qat, `${h.name} for worker[${h.index}]`).toBe(true);
    }
    // Only node-05 has QAT.
    expect(assigned.find((h) => h.role === "worker" && h.index === 4)!.name).toBe("node-05");

    const inventory = await waitFor("the inventory ConfigMap", async () =>
      (await c.core.listNamespacedConfigMap({ namespace: ns, labelSelector: "bpa.akraino.org/provisioning=site" })).items.find(
        (m) => m.data?.[INVENTORY_KEY_HOSTS],
      ),
    );
    const ini = inventory.data![INVENTORY_KEY_HOSTS]!;
    const all = group(ini, "all").map((l) => l.split(" ")[0]);
    expect(all.sort()).toEqual(assigned.map((h) => h.name).sort());
    const masters = assigned
      .filter((h) => h.role === "master")
      .map((h) => h.name)
      .sort();
    expect(group(ini, "kube_control_plane").sort()).toEqual(masters);
    expect(
      group(ini, "etcd")
        .map((l) => l.split(" ")[0])
        .sort(),
    ).toEqual(masters);
    expect(group(ini, "kube_node").sort()).toEqual(
      assigned
        .filter((h) => h.role === "worker")
        .map((h) => h.name)
        .sort(),
    );
    for (const h of assigned) expect(ini).toMatch(new RegExp(`^${h.name} ansible_host=${h.ip.replace(/\./g, "\\.")} ip=${h.ip.replace(/\./g, "\\.")}`, "m"));
  });
});
