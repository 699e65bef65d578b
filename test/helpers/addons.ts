/** What the e2e runs expect of the BPA's addons once an application cluster is Ready. */
import { expect } from "vitest";
import type { Provisioning } from "../../bpa/api/types.js";
import { waitFor } from "./operator-suite.js";

/** The appliance's default addons (manifests/bpa/addons.yaml), each as status.addons shows it installed. */
export const DEFAULT_ADDONS_INSTALLED = [
  "intel-qat-plugin Installed",
  "multus Installed",
  "node-feature-discovery Installed",
  "sriov-cni Installed",
  "sriov-network-device-plugin Installed",
];

/** Waits until AddonsReady is True or AddonsFailed, then expects it True with every default addon installed. */
export async function expectDefaultAddonsInstalled(
  getProvisioning: () => Promise<Provisioning>,
  wait: { timeoutMs: number; intervalMs: number },
): Promise<Provisioning> {
  const p = await waitFor(
    "AddonsReady True or AddonsFailed",
    async () => {
      const current = await getProvisioning();
      const ready = current.status?.conditions?.find((c) => c.type === "AddonsReady");
      return ready?.status === "True" || ready?.reason === "AddonsFailed" ? current : undefined;
    },
    wait.timeoutMs,
    wait.intervalMs,
  );
  expect(
    p.status?.conditions?.find((c) => c.type === "AddonsReady"),
    JSON.stringify(p.status?.addons),
  ).toMatchObject({ status: "True" });
  expect(p.status?.addons?.map((a) => `${a.name} ${a.state}`).sort()).toEqual(DEFAULT_ADDONS_INSTALLED);
  return p;
}
