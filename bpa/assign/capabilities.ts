/**
 * Where a host's SR-IOV and QAT capabilities come from (documented in bpa/README.md):
 *
 *  1. The BareMetalHost labels `bpa.akraino.org/sriov` and `bpa.akraino.org/qat` win:
 *     "true" means the host has it, "false" means it does not (whatever its NICs are).
 *  2. Without a label (or with another value), SR-IOV is inferred from NIC data: the host
 *     has SR-IOV when one of `status.hardware.nics[].model` (PCI "vendor device" IDs, as
 *     Ironic inspection reports them, e.g. "0x8086 0x1572") is in KNOWN_SRIOV_NICS.
 *  3. QAT is never inferred: inspection data lists NICs, not accelerators, so a QAT host
 *     must carry the label.
 */
import { LABEL_QAT, LABEL_SRIOV } from "../api/constants.js";
import type { BareMetalHost } from "../api/types.js";

/**
 * PCI IDs (vendor, device) of NICs with SR-IOV virtual functions, from the vendors'
 * datasheets (the same families the SR-IOV network device plugin supports).
 */
export const KNOWN_SRIOV_NICS: ReadonlyMap<string, string> = new Map([
  // Intel
  ["8086:10c9", "Intel 82576"],
  ["8086:10e6", "Intel 82576"],
  ["8086:10e7", "Intel 82576"],
  ["8086:10e8", "Intel 82576"],
  ["8086:1521", "Intel I350"],
  ["8086:10fb", "Intel 82599ES"],
  ["8086:10f8", "Intel 82599"],
  ["8086:154d", "Intel 82599"],
  ["8086:1528", "Intel X540"],
  ["8086:1563", "Intel X550"],
  ["8086:1572", "Intel X710"],
  ["8086:1580", "Intel XL710"],
  ["8086:1581", "Intel X710"],
  ["8086:1583", "Intel XL710"],
  ["8086:1584", "Intel XL710"],
  ["8086:1585", "Intel XL710"],
  ["8086:1589", "Intel X710-T"],
  ["8086:158a", "Intel XXV710"],
  ["8086:158b", "Intel XXV710"],
  ["8086:37d0", "Intel X722"],
  ["8086:37d1", "Intel X722"],
  ["8086:37d2", "Intel X722"],
  ["8086:37d3", "Intel X722"],
  ["8086:1591", "Intel E810-C"],
  ["8086:1592", "Intel E810-C"],
  ["8086:1593", "Intel E810-C"],
  ["8086:159b", "Intel E810-XXV"],
  // NVIDIA / Mellanox
  ["15b3:1003", "Mellanox ConnectX-3"],
  ["15b3:1007", "Mellanox ConnectX-3 Pro"],
  ["15b3:1013", "Mellanox ConnectX-4"],
  ["15b3:1015", "Mellanox ConnectX-4 Lx"],
  ["15b3:1017", "Mellanox ConnectX-5"],
  ["15b3:1019", "Mellanox ConnectX-5 Ex"],
  ["15b3:101b", "Mellanox ConnectX-6"],
  ["15b3:101d", "Mellanox ConnectX-6 Dx"],
  ["15b3:101f", "Mellanox ConnectX-6 Lx"],
  ["15b3:1021", "Mellanox ConnectX-7"],
  ["15b3:a2d6", "Mellanox BlueField-2"],
  // Broadcom
  ["14e4:16d7", "Broadcom BCM57414"],
  ["14e4:1750", "Broadcom BCM57508"],
]);

/** "0x8086 0x1572" (or "8086:1572") -> "8086:1572"; undefined when it is not a PCI ID pair. */
export function pciId(model: string | undefined): string | undefined {
  if (!model) return undefined;
  const match = /^\s*(?:0x)?([0-9a-f]{4})[\s:]+(?:0x)?([0-9a-f]{4})\s*$/i.exec(model);
  return match ? `${match[1]!.toLowerCase()}:${match[2]!.toLowerCase()}` : undefined;
}

export type CapabilitySource = "label" | "nic" | "none";

export interface Capability {
  value: boolean;
  source: CapabilitySource;
  /** Why: "label bpa.akraino.org/sriov=true", "NIC eth1 is an Intel X710 (0x8086 0x1572)". */
  detail: string;
}

function fromLabel(bmh: BareMetalHost, label: string): Capability | undefined {
  const value = bmh.metadata.labels?.[label]?.toLowerCase();
  if (value === "true") return { value: true, source: "label", detail: `label ${label}=true` };
  if (value === "false") return { value: false, source: "label", detail: `label ${label}=false` };
  return undefined;
}

export function sriovCapability(bmh: BareMetalHost): Capability {
  const label = fromLabel(bmh, LABEL_SRIOV);
  if (label) return label;
  for (const nic of bmh.status?.hardware?.nics ?? []) {
    const id = pciId(nic.model);
    const name = id ? KNOWN_SRIOV_NICS.get(id) : undefined;
    if (name) {
      return { value: true, source: "nic", detail: `NIC ${nic.name ?? nic.mac ?? "?"} is an ${name} (${nic.model})` };
    }
  }
  return { value: false, source: "none", detail: "no label and no SR-IOV capable NIC" };
}

export function qatCapability(bmh: BareMetalHost): Capability {
  return fromLabel(bmh, LABEL_QAT) ?? { value: false, source: "none", detail: `no label ${LABEL_QAT}=true` };
}
