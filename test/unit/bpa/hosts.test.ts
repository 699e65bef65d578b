import { describe, expect, it } from "vitest";
import { LABEL_QAT, LABEL_SRIOV } from "../../../bpa/api/constants.js";
import { pciId } from "../../../bpa/assign/capabilities.js";
import { withHardwareData } from "../../../bpa/assign/hardware-data.js";
import { hostFacts, inventoryAddress } from "../../../bpa/assign/hosts.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";

describe("host capabilities", () => {
  it("infers SR-IOV from a known NIC model, and a label wins either way", () => {
    const x710 = { name: "x", cpu: 8, ram: 8192, nicModel: "0x8086 0x1572" };
    expect(hostFacts(bmh(x710)).sriov).toMatchObject({ value: true, source: "nic" });
    expect(hostFacts(bmh({ ...x710, labels: { [LABEL_SRIOV]: "false" } })).sriov).toMatchObject({ value: false, source: "label" });
    expect(hostFacts(bmh({ name: "y", cpu: 8, ram: 8192 })).sriov).toMatchObject({ value: false, source: "none" });
    expect(hostFacts(bmh({ name: "y", cpu: 8, ram: 8192, labels: { [LABEL_SRIOV]: "true" } })).sriov.value).toBe(true);
  });

  it("takes QAT only from the label", () => {
    expect(hostFacts(bmh({ name: "q", cpu: 8, ram: 8192 })).qat.value).toBe(false);
    expect(hostFacts(bmh({ name: "q", cpu: 8, ram: 8192, labels: { [LABEL_QAT]: "true" } })).qat.value).toBe(true);
  });

  it("reads PCI IDs in Ironic's and lspci's spelling", () => {
    expect(pciId("0x8086 0x1572")).toBe("8086:1572");
    expect(pciId("15B3:1017")).toBe("15b3:1017");
    expect(pciId("Intel X710")).toBeUndefined();
  });
});

describe("host usability", () => {
  it("accepts provisioned and externally provisioned hosts only", () => {
    expect(hostFacts(bmh({ name: "a", cpu: 8, ram: 8192 })).unusable).toBeUndefined();
    expect(hostFacts(bmh({ name: "a", cpu: 8, ram: 8192, state: "externally provisioned" })).unusable).toBeUndefined();
    expect(hostFacts(bmh({ name: "a", cpu: 8, ram: 8192, state: "available" })).unusable).toBe('state is "available", not provisioned');
  });

  it("refuses hosts without an address, and hosts another consumer uses", () => {
    expect(hostFacts(bmh({ name: "a", cpu: 8, ram: 8192, ip: "" })).unusable).toBe("no NIC with an IP address");
    const used = bmh({ name: "b", cpu: 8, ram: 8192 });
    used.spec!.consumerRef = { apiVersion: "infrastructure.cluster.x-k8s.io/v1beta1", kind: "Metal3Machine", name: "m-1" };
    expect(hostFacts(used).unusable).toBe("in use by Metal3Machine m-1");
  });
});

describe("inventory address", () => {
  it("prefers the boot NIC, then a PXE NIC, then any; IPv4 first", () => {
    const host = bmh({
      name: "n",
      cpu: 8,
      ram: 8192,
      mac: "52:54:00:00:00:aa",
      ip: "fd00::10",
      extraNics: [
        { name: "eno1", mac: "52:54:00:00:00:aa", ip: "10.0.0.10" },
        { name: "eno2", mac: "52:54:00:00:00:bb", ip: "192.168.1.5", pxe: false },
      ],
    });
    expect(inventoryAddress(host)).toEqual({ ip: "10.0.0.10", mac: "52:54:00:00:00:aa" });
    // A MAC pin selects its own NIC.
    expect(inventoryAddress(host, "52:54:00:00:00:bb")).toEqual({ ip: "192.168.1.5", mac: "52:54:00:00:00:bb" });
    host.spec!.bootMACAddress = "52:54:00:00:00:cc";
    host.status!.hardware!.nics![0]!.pxe = false;
    expect(inventoryAddress(host)).toEqual({ ip: "10.0.0.10", mac: "52:54:00:00:00:aa" });
  });
});

describe("hardware details from Metal3's HardwareData", () => {
  const hardwareData = (name: string, namespace: string, hardware: object) => ({ metadata: { name, namespace }, spec: { hardware } }) as never;

  it("fills a host without status.hardware from the HardwareData of its name, with the same capability rules", () => {
    const withStatus = bmh({ name: "inspected", cpu: 8, ram: 8192 });
    const moved = bmh({ name: "moved", cpu: 1, ram: 1, nicModel: "0x8086 0x1572" });
    const details = moved.status!.hardware!;
    delete moved.status!.hardware;
    expect(hostFacts(moved).unusable).toBe("no hardware inventory (status.hardware, HardwareData)");
    const [a, b] = withHardwareData(
      [withStatus, moved],
      [hardwareData("moved", "default", { ...details, cpu: { ...details.cpu, count: 32 }, ramMebibytes: 65536 })],
    );
    expect(a).toBe(withStatus);
    const facts = hostFacts(b!);
    expect(facts).toMatchObject({ cpu: 32, ramMebibytes: 65536 });
    expect(facts.unusable).toBeUndefined();
    expect(facts.sriov).toMatchObject({ value: true, source: "nic" });
    expect(moved.status!.hardware).toBeUndefined(); // the cached object is not changed
  });

  it("keeps the host's own status when it has one, and ignores HardwareData of another namespace", () => {
    const host = bmh({ name: "h", cpu: 8, ram: 8192 });
    const [same] = withHardwareData([host], [hardwareData("h", "default", { cpu: { count: 99 }, ramMebibytes: 1 })]);
    expect(hostFacts(same!).cpu).toBe(8);
    const bare = bmh({ name: "g", cpu: 8, ram: 8192 });
    delete bare.status!.hardware;
    const [other] = withHardwareData([bare], [hardwareData("g", "elsewhere", { cpu: { count: 4 }, ramMebibytes: 4096 })]);
    expect(other!.status!.hardware).toBeUndefined();
  });
});
