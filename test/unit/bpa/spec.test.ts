import { describe, expect, it } from "vitest";
import { formatBytes, parseQuantityBytes } from "../../../bpa/api/quantity.js";
import { normalizeSpec, specHash } from "../../../bpa/api/spec.js";

describe("quantities", () => {
  it.each([
    ["4Gi", 4 * 2 ** 30],
    ["512Mi", 512 * 2 ** 20],
    ["8G", 8e9],
    ["1.5Gi", 1.5 * 2 ** 30],
    ["4096", 4096],
    ["2e3", 2000],
    ["1k", 1000],
    ["100m", 1], // 0.1 byte rounds up to 1, as apimachinery rounds up
    [4294967296, 4294967296],
  ] as const)("%s is %d bytes", (text, bytes) => {
    expect(parseQuantityBytes(text)).toBe(bytes);
  });

  it.each(["4GB", "four", "", "-1Gi", "1.5.5Gi", "Gi"])("rejects %j", (text) => {
    expect(() => parseQuantityBytes(text)).toThrow();
  });

  it("prints bytes in the largest exact binary unit", () => {
    expect(formatBytes(8 * 2 ** 30)).toBe("8Gi");
    expect(formatBytes(1536 * 2 ** 20)).toBe("1536Mi");
    expect(formatBytes(8e9)).toBe("7.45Gi");
  });
});

describe("Provisioning spec", () => {
  it("accepts the seed's sample, where master and worker are single objects", () => {
    const result = normalizeSpec({ master: { cpu: 10, memory: "4Gi" }, worker: { cpu: 20, memory: "8Gi" }, replicas: 2 });
    expect(result).toEqual({
      ok: true,
      spec: {
        masters: [{ role: "master", index: 0, cpu: 10, memoryBytes: 4 * 2 ** 30, sriov: false, qat: false }],
        workers: [{ role: "worker", index: 0, cpu: 20, memoryBytes: 8 * 2 ** 30, sriov: false, qat: false }],
        replicas: 2,
      },
    });
  });

  it("treats a single object and a list of one the same, and equal quantities as equal", () => {
    const a = normalizeSpec({ master: { cpu: 10, memory: "4Gi" } });
    const b = normalizeSpec({ master: [{ cpu: 10, memory: "4096Mi" }], replicas: 3 });
    if (!a.ok || !b.ok) throw new Error("expected valid specs");
    expect(specHash(a.spec)).toBe(specHash(b.spec));
    const c = normalizeSpec({ master: [{ cpu: 11, memory: "4Gi" }] });
    if (!c.ok) throw new Error("expected a valid spec");
    expect(specHash(c.spec)).not.toBe(specHash(a.spec));
  });

  it("accepts lists with sriov, qat and MAC pins (normalised to lower case)", () => {
    const result = normalizeSpec({
      master: [{ cpu: 4, memory: "8Gi", mac: "52:54:00:AA:BB:CC" }, { cpu: 4 }],
      worker: [{ cpu: 8, memory: "16Gi", sriov: true, qat: true }],
    });
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.spec.masters[0]!.mac).toBe("52:54:00:aa:bb:cc");
    expect(result.spec.masters[1]).toMatchObject({ cpu: 4, memoryBytes: 0 });
    expect(result.spec.workers[0]).toMatchObject({ sriov: true, qat: true });
  });

  it("names every invalid field", () => {
    const result = normalizeSpec({
      master: { cpu: "ten", memory: "4 gigs", sriov: true },
      worker: [{ cpu: 2, memmory: "8Gi" }, "big", { qat: "yes", mac: "nope" }],
      replicas: -1,
      extra: 1,
    });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors).toEqual(
      expect.arrayContaining([
        "spec.extra: unknown field",
        'spec.worker[1]: expected an object with cpu and memory, got the string "big"',
        "spec.replicas: expected a whole number from 0 to 100, got number -1",
      ]),
    );
    const single = normalizeSpec({ master: { cpu: "ten", memory: "4 gigs", sriov: true } });
    expect(single.ok).toBe(false);
    if (single.ok) return;
    expect(single.errors).toEqual([
      "spec.master.sriov: unknown field (a master accepts cpu, memory, mac)",
      'spec.master.cpu: expected a whole number of CPUs >= 0, got the string "ten"',
      'spec.master.memory: "4 gigs" is not a Kubernetes quantity (examples: 4Gi, 512Mi, 8G, 1.5Gi, 4294967296)',
    ]);
    const worker = normalizeSpec({
      master: {},
      worker: [
        { cpu: 2, memmory: "8Gi" },
        { qat: "yes", mac: "nope" },
      ],
    });
    expect(worker.ok).toBe(false);
    if (worker.ok) return;
    expect(worker.errors).toEqual([
      "spec.worker[0].memmory: unknown field (a worker accepts cpu, memory, mac, sriov, qat)",
      'spec.worker[1].qat: expected true or false, got the string "yes"',
      'spec.worker[1].mac: expected a MAC address like 52:54:00:12:34:56, got the string "nope"',
    ]);
  });

  it("requires a master, and refuses one MAC pinned twice", () => {
    const none = normalizeSpec({ worker: { cpu: 1 } });
    expect(none).toEqual({ ok: false, errors: ["spec.master: at least one master is required (kubespray needs a control plane)"] });
    const twice = normalizeSpec({ master: { mac: "52:54:00:00:00:01" }, worker: { mac: "52:54:00:00:00:01" } });
    expect(twice.ok).toBe(false);
    if (!twice.ok) expect(twice.errors[0]).toContain("already pinned by spec.master[0]");
  });

  it("takes spec.kubernetesVersion (with or without v), checks it against the served versions, and hashes it only when named", () => {
    const plain = normalizeSpec({ master: { cpu: 2 } });
    const named = normalizeSpec({ master: { cpu: 2 }, kubernetesVersion: "v1.35.4" }, { servedVersions: ["1.35.4"] });
    expect(named).toMatchObject({ ok: true, spec: { kubernetesVersion: "1.35.4" } });
    if (!plain.ok || !named.ok) throw new Error("unreachable");
    expect(plain.spec.kubernetesVersion).toBeUndefined();
    expect(specHash(named.spec)).not.toBe(specHash(plain.spec));
    expect(specHash(plain.spec)).toBe(specHash({ ...plain.spec }));
    const unserved = normalizeSpec({ master: { cpu: 2 }, kubernetesVersion: "1.34.3" }, { servedVersions: ["1.35.4"] });
    expect(unserved).toEqual({
      ok: false,
      errors: ["spec.kubernetesVersion: 1.34.3 is not served by this appliance; it serves 1.35.4 (omit the field for the newest)"],
    });
    const bad = normalizeSpec({ master: { cpu: 2 }, kubernetesVersion: "latest" });
    expect(bad).toEqual({ ok: false, errors: ['spec.kubernetesVersion: expected a Kubernetes version such as 1.35.4, got the string "latest"'] });
  });
});
