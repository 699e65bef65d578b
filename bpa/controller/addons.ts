/**
 * The addons step of a reconcile, as a pure decision: bring status.addons up to date from the
 * newest addons Job and the results its runner wrote, then say whether a new Job must start
 * (spec.addons resolved against the appliance's catalog and pinned to chart digests,
 * addon-digests.ts; bpa/jobs/addons-plan.ts), and what the AddonsReady condition and the
 * Events say. One addons Job at a time, and only on an installed cluster no day-2 operation
 * is changing. A failed addon leaves the cluster Ready.
 */
import type { V1Job } from "@kubernetes/client-node";
import { resolveAddons, type CatalogAddon } from "../api/addons.js";
import { ANNOTATION_ADDONS, ANNOTATION_RETRY } from "../api/constants.js";
import type { AddonStatus, Provisioning } from "../api/types.js";
import { addonsHash, addonsJobRecord, type AddonsJobRecord } from "../jobs/addons-objects.js";
import { addonsUpToDate, describeAddonsPlan, planAddons, type AddonsPlan } from "../jobs/addons-plan.js";
import type { AddonResult } from "../jobs/contract.js";
import { jobState } from "../runtime/owners.js";
import { describeMovedTag, markMovedTags, pinAddons } from "./addon-digests.js";
import { chartRef, type TagLookups } from "./chart-registry.js";
import { capMessage, CONDITION, statusTime, type ConditionInput } from "./status.js";

/** AddonsReady's reason while a chart version's digest cannot be read from the registry. */
export const REASON_CHART_UNRESOLVED = "ChartUnresolved";
/** AddonsReady's reason (status True) and the Event's reason when a tag moved under a recorded digest. */
export const REASON_TAG_MOVED = "AddonTagMoved";

function readRecord(job: V1Job): AddonsJobRecord | undefined {
  try {
    const r = JSON.parse(job.metadata?.annotations?.[ANNOTATION_ADDONS] ?? "") as AddonsJobRecord;
    return Array.isArray(r.entries) ? r : undefined;
  } catch {
    return undefined;
  }
}

function readResult(text: string | undefined, job: string): AddonResult | undefined {
  if (!text) return undefined;
  try {
    const r = JSON.parse(text) as AddonResult;
    return r.job === job && ["Installed", "Uninstalled", "Failed"].includes(r.state) ? r : undefined;
  } catch {
    return undefined;
  }
}

export interface AddonsInput {
  p: Provisioning;
  /** The appliance's catalog, or why there is none (then only charts of the site's own). */
  catalog: CatalogAddon[] | { missing: string };
  registryCaPem: string;
  /** The Provisioning's addons Jobs. */
  jobs: readonly V1Job[];
  /** The results ConfigMap's data (addon name -> AddonResult JSON). */
  results: Readonly<Record<string, string>>;
  /** What the registry's tags name now, for spec.addons' chart versions (chart-registry.ts). */
  tags: TagLookups;
  /** Installed, and no day-2 operation runs. */
  clusterReady: boolean;
  /** Where the Job's logs are, for messages. */
  logsHint: (job: V1Job) => string;
  now: Date;
}

export interface AddonsDecision {
  addons: AddonStatus[];
  condition: ConditionInput;
  /** A Job to start for this plan, when nothing runs and something is to do. */
  start?: { hash: string; plan: AddonsPlan; record: AddonsJobRecord; summary: string };
  events: { type: "Normal" | "Warning"; reason: string; message: string }[];
}

/** When the addons Job was made, to the millisecond when its record says. */
export const addonsJobCreated = (j: V1Job) => readRecord(j)?.createdMs ?? new Date(j.metadata?.creationTimestamp ?? 0).getTime();

/** The decision, with each moved tag shown in status.addons, reported once as an Event and named in AddonsReady. */
export function decideAddons(input: AddonsInput): AddonsDecision {
  const decision = decide(input);
  const before = input.p.status?.addons ?? [];
  const addons = markMovedTags(decision.addons, input.tags);
  const moved = addons.filter((a) => a.tagDigest);
  const events = [...decision.events];
  for (const a of moved) {
    if (before.find((b) => b.name === a.name)?.tagDigest !== a.tagDigest)
      events.push({ type: "Warning", reason: REASON_TAG_MOVED, message: describeMovedTag(a) });
  }
  if (!moved.length) return { ...decision, addons, events };
  const text = `tag moved: ${moved.map(describeMovedTag).join("; ")}`;
  const { condition } = decision;
  return {
    ...decision,
    addons,
    events,
    condition:
      condition.reason === "Installed"
        ? { ...condition, reason: REASON_TAG_MOVED, message: `${condition.message}; ${text}` }
        : { ...condition, message: `${condition.message}; ${text}` },
  };
}

function decide(input: AddonsInput): AddonsDecision {
  const { p, now } = input;
  const time = statusTime(now);
  const before = p.status?.addons ?? [];
  const events: AddonsDecision["events"] = [];
  let addons = [...before];
  const upsert = (next: AddonStatus) => {
    const old = addons.find((a) => a.name === next.name);
    const same = old && old.state === next.state && old.hash === next.hash && old.digest === next.digest && old.message === next.message;
    const entry = same ? old : { ...next, lastTransitionTime: time };
    addons = old ? addons.map((a) => (a.name === next.name ? entry : a)) : [...addons, entry];
  };

  // 1. The newest addons Job: what it did so far, or all it did.
  const latest = [...input.jobs].sort((a, b) => addonsJobCreated(b) - addonsJobCreated(a))[0];
  const record = latest && readRecord(latest);
  const state = latest ? jobState(latest) : undefined;
  if (latest && record) {
    const jobName = latest.metadata!.name!;
    for (const e of record.entries) {
      const result = readResult(input.results[e.name], jobName);
      const base = { name: e.name, chart: e.chart, version: e.version, ...(e.digest ? { digest: e.digest } : {}), namespace: e.namespace, hash: e.hash };
      const old = before.find((a) => a.name === e.name);
      if (result?.state === "Uninstalled") {
        addons = addons.filter((a) => a.name !== e.name);
        if (old) events.push({ type: "Normal", reason: "AddonRemoved", message: `${e.name} uninstalled from namespace ${e.namespace}` });
      } else if (result?.state === "Installed") {
        upsert({ ...base, state: "Installed" });
        if (old?.state !== "Installed" || old.hash !== e.hash)
          events.push({ type: "Normal", reason: "AddonInstalled", message: `${e.name} ${e.version} installed in namespace ${e.namespace}` });
      } else if (result?.state === "Failed" || state?.state !== "running") {
        const message =
          result?.message ?? `the addons Job ${jobName} ended (${state?.reason ?? "failed"}) before it got to ${e.name}; ${input.logsHint(latest)}`;
        upsert({
          ...base,
          ...(e.action === "remove" && old ? { chart: old.chart, version: old.version, digest: old.digest, hash: old.hash } : {}),
          state: "Failed",
          message,
          retryToken: record.retryToken,
        });
        if (old?.state !== "Failed" || old.message !== message)
          events.push({ type: "Warning", reason: "AddonFailed", message: `${e.name}: ${e.action === "remove" ? "uninstall" : "install"} failed: ${message}` });
      } else {
        upsert(e.action === "remove" && old ? { ...old, state: "Removing" } : { ...base, state: "Installing" });
      }
    }
  }

  // 2. What the spec asks for now.
  const catalog = Array.isArray(input.catalog) ? input.catalog : [];
  const resolved = resolveAddons(p.spec?.addons, catalog);
  const order = (list: AddonStatus[]) => {
    const names = resolved.ok ? resolved.addons.map((a) => a.name) : [];
    const rank = (a: AddonStatus) => (names.includes(a.name) ? names.indexOf(a.name) : names.length);
    return [...list].sort((a, b) => rank(a) - rank(b));
  };
  if (state?.state === "running") {
    const doing = addons
      .filter((a) => a.state === "Installing" || a.state === "Removing")
      .map((a) => `${a.state === "Removing" ? "uninstalling" : "installing"} ${a.name}`);
    return {
      addons: order(addons),
      events,
      condition: {
        type: CONDITION.addonsReady,
        status: "False",
        reason: "Installing",
        message: `addons Job ${latest!.metadata!.name}: ${doing.join(", ") || "running"}`,
      },
    };
  }
  if (!resolved.ok) {
    const message = `spec.addons is invalid, nothing was changed: ${resolved.errors.join("; ")}`;
    return {
      addons: order(addons),
      events: [...events, { type: "Warning", reason: "InvalidAddons", message }],
      condition: { type: CONDITION.addonsReady, status: "False", reason: "InvalidAddons", message },
    };
  }
  const { pinned, unresolved } = pinAddons(resolved.addons, addons, input.tags);
  if (unresolved.length) {
    const message =
      `cannot read the digest of ${unresolved.map((u) => `${u.name}'s chart ${chartRef(u.chart, u.version)} (${u.problem})`).join("; ")}; ` +
      "nothing was changed: publish the chart version or correct spec.addons; the BPA looks again every 30 s";
    const previous = p.status?.conditions?.find((c) => c.type === CONDITION.addonsReady);
    const said = previous?.reason === REASON_CHART_UNRESOLVED && previous.message === capMessage(message);
    return {
      addons: order(addons),
      events: said ? events : [...events, { type: "Warning", reason: REASON_CHART_UNRESOLVED, message }],
      condition: { type: CONDITION.addonsReady, status: "False", reason: REASON_CHART_UNRESOLVED, message },
    };
  }
  const retryToken = p.metadata.annotations?.[ANNOTATION_RETRY] ?? "";
  const plan = planAddons(pinned, addons, retryToken);
  const failedText = plan.failed.map((a) => `${a.name}: ${a.message ?? "failed"}`).join("; ");
  const retryHint = `change the addon or set the annotation ${ANNOTATION_RETRY} to a new value to try again`;
  if (addonsUpToDate(plan)) {
    const installed = resolved.addons.map((a) => `${a.name} ${a.version}`).join(", ");
    const none = Array.isArray(input.catalog) ? "no addons asked for" : `no addons asked for (${input.catalog.missing})`;
    return {
      addons: order(addons),
      events,
      condition: plan.failed.length
        ? { type: CONDITION.addonsReady, status: "False", reason: "AddonsFailed", message: `${failedText}; ${retryHint}` }
        : { type: CONDITION.addonsReady, status: "True", reason: "Installed", message: installed ? `installed: ${installed}` : none },
    };
  }
  const summary = describeAddonsPlan(plan, addons);
  if (!input.clusterReady) {
    return {
      addons: order(addons),
      events,
      condition: {
        type: CONDITION.addonsReady,
        status: "Unknown",
        reason: "WaitingForCluster",
        message: `waiting for the installed cluster (no other operation running) to ${summary}`,
      },
    };
  }
  for (const a of plan.apply) {
    upsert({ name: a.name, chart: a.chart, version: a.version, digest: a.digest, namespace: a.namespace, hash: a.hash, state: "Pending" });
  }
  const hash = addonsHash(plan, retryToken, input.registryCaPem);
  return {
    addons: order(addons),
    events,
    start: { hash, plan, record: addonsJobRecord(plan, retryToken, now.getTime()), summary },
    condition: {
      type: CONDITION.addonsReady,
      status: "False",
      reason: "Installing",
      message: `${summary}${plan.failed.length ? `; still failed: ${failedText}` : ""}`,
    },
  };
}
