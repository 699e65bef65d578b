import { describe, expect, it } from "vitest";
import { normalizeSpec, type RoleRequirement } from "../../../bpa/api/spec.js";
import { hostFacts, type HostFacts } from "../../../bpa/assign/hosts.js";
import { costOf, fits, orderHosts, planAssignment } from "../../../bpa/assign/plan.js";
import { LABEL_QAT, LABEL_SRIOV } from "../../../bpa/api/constants.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { prng } from "../../helpers/fixtures/prng.js";

const pick = <T>(rand: () => number, items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;

function role(partial: Partial<RoleRequirement> & { role: RoleRequirement["role"]; index: number }): RoleRequirement {
  return { cpu: 0, memoryBytes: 0, sriov: false, qat: false, ...partial };
}

/** Every injective assignment of roles to usable, unclaimed hosts; the cheapest total cost, or undefined. */
function bruteForce(roles: RoleRequirement[], hosts: HostFacts[], claimed: Map<string, string>): number | undefined {
  const candidates = orderHosts(hosts.filter((h) => !h.unusable && !claimed.has(h.key)));
  const cost = costOf(candidates);
  let best: number | undefined;
  const used = new Set<string>();
  const walk = (i: number, total: number): void => {
    if (i === roles.length) {
      if (best === undefined || total < best) best = total;
      return;
    }
    for (const h of candidates) {
      if (used.has(h.key) || !fits(roles[i]!, h)) continue;
      used.add(h.key);
      walk(i + 1, total + cost.get(h.key)!);
      used.delete(h.key);
    }
  };
  walk(0, 0);
  return best;
}

function randomInventory(seed: number) {
  const rand = prng(seed);
  const hostCount = Math.floor(rand() * 8); // 0..7
  const hosts: HostFacts[] = [];
  for (let i = 0; i < hostCount; i++) {
    const labels: Record<string, string> = {};
    if (rand() < 0.3) labels[LABEL_SRIOV] = "true";
    if (rand() < 0.2) labels[LABEL_QAT] = "true";
    hosts.push(
      hostFacts(
        bmh({
          name: `h${i}`,
          cpu: pick(rand, [2, 4, 8, 16]),
          ram: pick(rand, [2048, 4096, 8192, 16384]),
          state: rand() < 0.1 ? "provisioning" : pick(rand, ["provisioned", "externally provisioned"]),
          labels,
          // Some hosts get an SR-IOV capable NIC without a label.
          nicModel: rand() < 0.15 ? "0x8086 0x1572" : "0x8086 0x1533",
        }),
      ),
    );
  }
  const claimed = new Map<string, string>();
  for (const h of hosts) if (rand() < 0.1) claimed.set(h.key, "default/other");
  const roleCount = Math.floor(rand() * 6); // 0..5
  const roles: RoleRequirement[] = [];
  for (let i = 0; i < roleCount; i++) {
    const isMaster = i === 0 || rand() < 0.3;
    const pinned = hosts.length > 0 && rand() < 0.1 ? pick(rand, hosts) : undefined;
    roles.push(
      role({
        role: isMaster ? "master" : "worker",
        index: i,
        cpu: pick(rand, [0, 2, 4, 8, 12]),
        memoryBytes: pick(rand, [0, 2, 4, 8, 12]) * 2 ** 30,
        sriov: !isMaster && rand() < 0.3,
        qat: !isMaster && rand() < 0.2,
        ...(pinned ? { mac: [...pinned.macs][0]! } : {}),
      }),
    );
  }
  return { hosts, roles, claimed };
}

describe("role assignment", () => {
  it("agrees with a brute-force reference on 3,000 random small inventories", () => {
    let feasible = 0;
    let infeasible = 0;
    for (let seed = 1; seed <= 3000; seed++) {
      const { hosts, roles, claimed } = randomInventory(seed);
      const expected = bruteForce(roles, hosts, claimed);
      const result = planAssignment({ roles, hosts, claimedBy: claimed });
      if (expected === undefined) {
        infeasible++;
        expect(result.ok, `seed ${seed}: brute force finds no assignment`).toBe(false);
        if (!result.ok) expect(result.unmet.length).toBeGreaterThan(0);
        continue;
      }
      feasible++;
      expect(result.ok, `seed ${seed}: brute force finds an assignment`).toBe(true);
      if (!result.ok) continue;
      expect(result.cost, `seed ${seed}: optimal cost`).toBe(expected);
      // Every role placed once, on a distinct, usable, unclaimed, fitting host.
      expect(result.placements).toHaveLength(roles.length);
      const keys = new Set(result.placements.map((p) => p.host.key));
      expect(keys.size).toBe(roles.length);
      for (const p of result.placements) {
        expect(fits(p.role, p.host)).toBe(true);
        expect(p.host.unusable).toBeUndefined();
        expect(claimed.has(p.host.key)).toBe(false);
      }
    }
    // The generator must exercise both outcomes, or the test proves little.
    expect(feasible).toBeGreaterThan(500);
    expect(infeasible).toBeGreaterThan(500);
  });

  it("is deterministic: the input order of hosts does not change the result", () => {
    for (let seed = 1; seed <= 300; seed++) {
      const { hosts, roles, claimed } = randomInventory(seed);
      const a = planAssignment({ roles, hosts, claimedBy: claimed });
      const rand = prng(seed * 7919);
      const shuffled = [...hosts].sort(() => rand() - 0.5);
      const b = planAssignment({ roles, hosts: shuffled.reverse(), claimedBy: claimed });
      const summary = (r: typeof a) => r.placements.map((p) => `${p.role.role}${p.role.index}=${p.host.name}`);
      expect(summary(b)).toEqual(summary(a));
      expect(b.ok).toBe(a.ok);
    }
  });

  it("prefers the smallest host that fits", () => {
    const hosts = [
      hostFacts(bmh({ name: "big", cpu: 64, ram: 262144 })),
      hostFacts(bmh({ name: "small", cpu: 16, ram: 8192 })),
      hostFacts(bmh({ name: "medium", cpu: 32, ram: 65536 })),
      hostFacts(bmh({ name: "tiny", cpu: 2, ram: 2048 })),
    ];
    const result = planAssignment({ roles: [role({ role: "master", index: 0, cpu: 10, memoryBytes: 4 * 2 ** 30 })], hosts });
    expect(result.ok).toBe(true);
    expect(result.placements.map((p) => p.host.name)).toEqual(["small"]);
  });

  it("does not give a scarce capable host to a role that does not need it when that blocks another role", () => {
    // Greedy in role order would give 'sriov-small' (the smallest) to master[0] and leave worker[0] without SR-IOV.
    const hosts = [
      hostFacts(bmh({ name: "sriov-small", cpu: 16, ram: 8192, labels: { [LABEL_SRIOV]: "true" } })),
      hostFacts(bmh({ name: "plain-big", cpu: 32, ram: 32768 })),
    ];
    const roles = [
      role({ role: "master", index: 0, cpu: 10, memoryBytes: 4 * 2 ** 30 }),
      role({ role: "worker", index: 0, cpu: 10, memoryBytes: 4 * 2 ** 30, sriov: true }),
    ];
    const result = planAssignment({ roles, hosts });
    expect(result.ok).toBe(true);
    expect(result.placements.map((p) => `${p.role.role}=${p.host.name}`)).toEqual(["master=plain-big", "worker=sriov-small"]);
  });

  it("honours a MAC pin", () => {
    const a = bmh({ name: "a", cpu: 8, ram: 8192, mac: "52:54:00:aa:00:01" });
    const b = bmh({ name: "b", cpu: 64, ram: 65536, mac: "52:54:00:aa:00:02" });
    const result = planAssignment({
      roles: [role({ role: "master", index: 0, cpu: 4, mac: "52:54:00:aa:00:02" })],
      hosts: [hostFacts(a), hostFacts(b)],
    });
    expect(result.placements.map((p) => p.host.name)).toEqual(["b"]);
  });

  it("names the unmet requirement and the closest hosts when no host fits a role", () => {
    const parsed = normalizeSpec({
      master: { cpu: 10, memory: "4Gi" },
      worker: [
        { cpu: 4, memory: "4Gi" },
        { cpu: 20, memory: "8Gi", sriov: true },
      ],
    });
    if (!parsed.ok) throw new Error(parsed.errors.join());
    const hosts = [
      hostFacts(bmh({ name: "host-1", cpu: 12, ram: 8192 })),
      hostFacts(bmh({ name: "host-2", cpu: 8, ram: 8192 })),
      hostFacts(bmh({ name: "host-3", cpu: 16, ram: 8192, labels: { [LABEL_SRIOV]: "true" } })),
      hostFacts(bmh({ name: "host-4", cpu: 24, ram: 16384, labels: { [LABEL_SRIOV]: "true" } })),
      hostFacts(bmh({ name: "host-9", cpu: 40, ram: 65536, labels: { [LABEL_SRIOV]: "true" } })),
    ];
    const claimed = new Map([["default/host-4", "default/other"]]);
    const hosts2 = [...hosts, hostFacts(bmh({ name: "host-5", cpu: 32, ram: 32768, state: "provisioning", labels: { [LABEL_SRIOV]: "true" } }))];
    const result = planAssignment({
      roles: [...parsed.spec.masters, ...parsed.spec.workers],
      hosts: hosts2.filter((h) => h.name !== "host-9"),
      claimedBy: claimed,
    });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.unmet.map((u) => `${u.role.role}[${u.role.index}]`)).toEqual(["worker[1]"]);
    const message = result.unmet[0]!.message;
    expect(message).toContain("worker[1] needs cpu>=20, memory>=8Gi, sriov: no unclaimed provisioned host has it");
    expect(message).toContain("closest: host-3 (16 cpu, 8Gi, sriov)");
    expect(message).toContain("host-4: claimed by default/other");
    expect(message).toContain('host-5: state is "provisioning", not provisioned');
  });

  it("explains a shortage of hosts (Hall's condition) by naming the competing roles and hosts", () => {
    const hosts = [
      hostFacts(bmh({ name: "a", cpu: 16, ram: 16384 })),
      hostFacts(bmh({ name: "b", cpu: 16, ram: 16384 })),
      hostFacts(bmh({ name: "c", cpu: 2, ram: 2048 })),
    ];
    const roles = [role({ role: "master", index: 0, cpu: 8 }), role({ role: "worker", index: 0, cpu: 8 }), role({ role: "worker", index: 1, cpu: 8 })];
    const result = planAssignment({ roles, hosts });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.unmet[0]!.message).toContain("master[0], worker[0], worker[1] need 3 distinct hosts but only 2 unclaimed provisioned hosts fit them (a, b)");
  });

  it("handles an empty inventory and an empty role list", () => {
    expect(planAssignment({ roles: [], hosts: [] })).toMatchObject({ ok: true, placements: [] });
    const r = planAssignment({ roles: [role({ role: "master", index: 0 })], hosts: [] });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.message).toContain("there are no unclaimed provisioned hosts");
  });
});
