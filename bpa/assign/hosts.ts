/**
 * What role assignment needs to know about a BareMetalHost, read from its status, and
 * whether it may be used at all.
 */
import { isIPv4 } from "node:net";
import type { RoleRequirement } from "../api/spec.js";
import type { AssignedHost, BareMetalHost, BmhNic } from "../api/types.js";
import { qatCapability, sriovCapability, type Capability } from "./capabilities.js";

/** Provisioning states in which a host runs an operating system we can SSH into. */
export const USABLE_STATES: ReadonlySet<string> = new Set(["provisioned", "externally provisioned"]);

export interface HostFacts {
  name: string;
  namespace: string;
  /** namespace/name */
  key: string;
  cpu: number;
  ramMebibytes: number;
  sriov: Capability;
  qat: Capability;
  /** Every MAC of the host (lower case): its NICs and its boot MAC. */
  macs: ReadonlySet<string>;
  /** The address the inventory uses, and the MAC of the NIC that has it. */
  address?: { ip: string; mac: string };
  state: string;
  /** Why the host cannot be used at all, independently of any role; undefined when usable. */
  unusable?: string;
}

/**
 * The NIC whose address goes into the inventory (bpa/README.md, "Host addresses"):
 * the boot NIC (spec.bootMACAddress) when it has an address, else the first PXE NIC with
 * one, else the first NIC with one; IPv4 before IPv6 at each step (Metal3 lists a
 * dual-stack NIC twice, once per address).
 */
export function inventoryAddress(bmh: BareMetalHost, preferMac?: string): { ip: string; mac: string } | undefined {
  const nics = (bmh.status?.hardware?.nics ?? []).filter((n): n is BmhNic & { ip: string; mac: string } => Boolean(n.ip && n.mac));
  const boot = bmh.spec?.bootMACAddress?.toLowerCase();
  const tiers: ((n: BmhNic) => boolean)[] = [
    ...(preferMac ? [(n: BmhNic) => n.mac?.toLowerCase() === preferMac] : []),
    (n) => boot !== undefined && n.mac?.toLowerCase() === boot,
    (n) => n.pxe === true,
    () => true,
  ];
  for (const tier of tiers) {
    const inTier = nics.filter(tier);
    const pick = inTier.find((n) => isIPv4(n.ip)) ?? inTier[0];
    if (pick) return { ip: pick.ip, mac: pick.mac.toLowerCase() };
  }
  return undefined;
}

export function hostFacts(bmh: BareMetalHost): HostFacts {
  const name = bmh.metadata.name ?? "";
  const namespace = bmh.metadata.namespace ?? "";
  const hardware = bmh.status?.hardware;
  const state = bmh.status?.provisioning?.state ?? "";
  const macs = new Set<string>();
  for (const nic of hardware?.nics ?? []) if (nic.mac) macs.add(nic.mac.toLowerCase());
  if (bmh.spec?.bootMACAddress) macs.add(bmh.spec.bootMACAddress.toLowerCase());
  const cpu = hardware?.cpu?.count ?? 0;
  const ramMebibytes = hardware?.ramMebibytes ?? 0;
  const address = inventoryAddress(bmh);

  let unusable: string | undefined;
  if (bmh.metadata.deletionTimestamp) unusable = "being deleted";
  else if (!USABLE_STATES.has(state)) unusable = `state is ${state ? `"${state}"` : "unknown"}, not provisioned`;
  else if (!hardware || !cpu || !ramMebibytes) unusable = "no hardware inventory (status.hardware, HardwareData)";
  else if (!address) unusable = "no NIC with an IP address";
  else if (bmh.spec?.consumerRef?.name && bmh.spec.consumerRef.kind !== "Provisioning") {
    unusable = `in use by ${bmh.spec.consumerRef.kind ?? "?"} ${bmh.spec.consumerRef.name}`;
  }

  return {
    name,
    namespace,
    key: `${namespace}/${name}`,
    cpu,
    ramMebibytes,
    sriov: sriovCapability(bmh),
    qat: qatCapability(bmh),
    macs,
    ...(address ? { address } : {}),
    state,
    ...(unusable ? { unusable } : {}),
  };
}

/**
 * Size of a host, the cost the matching minimises: RAM in MiB plus 1024 per CPU (one
 * CPU weighs as much as 1 GiB of RAM). Smaller is preferred.
 */
export function hostSize(h: Pick<HostFacts, "cpu" | "ramMebibytes">): number {
  return h.ramMebibytes + 1024 * h.cpu;
}

/** A placement as status records it; a role pinned to a MAC uses that NIC's address when it has one. */
export function toAssignedHost(role: RoleRequirement, host: HostFacts, bmh: BareMetalHost): AssignedHost {
  const address = inventoryAddress(bmh, role.mac) ?? host.address!;
  return {
    name: host.name,
    namespace: host.namespace,
    role: role.role,
    index: role.index,
    mac: address.mac,
    ip: address.ip,
    cpu: host.cpu,
    ramMebibytes: host.ramMebibytes,
  };
}
