/**
 * Host facts from Metal3's HardwareData where a BareMetalHost has no status.hardware:
 * Metal3 is moving inspected hardware details from the host's status to a HardwareData
 * object of the same name and namespace. The host's own status wins when it has one.
 */
import type { BareMetalHost, HardwareData } from "../api/types.js";

export function withHardwareData(hosts: readonly BareMetalHost[], hardwareData: readonly HardwareData[]): BareMetalHost[] {
  const byKey = new Map(hardwareData.map((h) => [`${h.metadata.namespace}/${h.metadata.name}`, h.spec?.hardware]));
  return hosts.map((host) => {
    if (host.status?.hardware) return host;
    const hardware = byKey.get(`${host.metadata.namespace}/${host.metadata.name}`);
    if (!hardware) return host;
    return { ...host, status: { ...(host.status ?? {}), hardware } } as BareMetalHost;
  });
}
