/**
 * What the next addons Job does to an application cluster: install or upgrade the addons
 * whose chart, version, digest, namespace or values changed (or that never were), uninstall the
 * ones no longer asked for, and leave a failed one alone until it changes or the retry
 * annotation does. Pure: the reconciler gives it spec.addons resolved and status.addons.
 */
import type { PinnedAddon } from "../api/addons.js";
import type { AddonStatus } from "../api/types.js";

export interface AddonsPlan {
  /** helm upgrade --install, by chart digest, in the order of spec.addons. */
  apply: PinnedAddon[];
  /** helm uninstall. */
  remove: AddonStatus[];
  /** Failed and waiting for a change or the retry annotation. */
  failed: AddonStatus[];
}

export function planAddons(desired: readonly PinnedAddon[], current: readonly AddonStatus[] = [], retryToken = ""): AddonsPlan {
  const byName = new Map(current.map((a) => [a.name, a]));
  const wanted = new Set(desired.map((a) => a.name));
  const failedAlready = (a: AddonStatus) => a.state === "Failed" && (a.retryToken ?? "") === retryToken;
  const plan: AddonsPlan = { apply: [], remove: [], failed: [] };
  for (const addon of desired) {
    const now = byName.get(addon.name);
    if (now?.hash === addon.hash && now.state === "Installed") continue;
    if (now?.hash === addon.hash && failedAlready(now)) plan.failed.push(now);
    else plan.apply.push(addon);
  }
  for (const addon of current) {
    if (wanted.has(addon.name)) continue;
    if (failedAlready(addon)) plan.failed.push(addon);
    else plan.remove.push(addon);
  }
  return plan;
}

export const addonsUpToDate = (plan: AddonsPlan) => plan.apply.length === 0 && plan.remove.length === 0;

/** One line for Events and conditions: "install multus 4.3.0, upgrade nfd 0.19.0, uninstall qat". */
export function describeAddonsPlan(plan: AddonsPlan, current: readonly AddonStatus[]): string {
  const names = new Set(current.map((a) => a.name));
  const parts = [
    ...plan.apply.map((a) => `${names.has(a.name) ? "upgrade" : "install"} ${a.name} ${a.version}`),
    ...plan.remove.map((a) => `uninstall ${a.name}`),
  ];
  return parts.join(", ") || "nothing";
}
