/**
 * The addons step's reads and writes around decideAddons (./addons.ts): the appliance's
 * catalog, the results ConfigMap, the Provisioning's addons Jobs, what the registry's tags of
 * the charts name (chart-registry.ts); then the plan ConfigMap
 * and the Job when one starts, the Events, and the pruning of old addons Jobs and plans.
 */
import type { V1Job } from "@kubernetes/client-node";
import { readAddonsCatalog, type CatalogAddon } from "../../common/addons-catalog.js";
import { resolveAddons } from "../api/addons.js";
import { ANNOTATION_INSTALL_HASH, LABEL_COMPONENT } from "../api/constants.js";
import type { AddonStatus, Provisioning } from "../api/types.js";
import type { BpaConfig } from "../config/config.js";
import { ADDONS_COMPONENT, addonsJob, addonsNames, addonsPlanConfigMap, addonsResultsConfigMap } from "../jobs/addons-objects.js";
import { runnerRole } from "../jobs/objects.js";
import { ensureConfigMap, ensureRole } from "../runtime/ensure.js";
import { isConflict, isNotFound, type Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";
import { ownedBy } from "../runtime/owners.js";
import { addonsJobCreated, decideAddons, REASON_CHART_UNRESOLVED } from "./addons.js";
import { lookUpChartTags } from "./chart-registry.js";
import { recordEvent } from "./events.js";
import type { ConditionInput } from "./status.js";

export const isAddonsJob = (job: V1Job) => job.metadata?.labels?.[LABEL_COMPONENT] === ADDONS_COMPONENT.job;

export interface AddonsStepInput {
  c: Clients;
  config: BpaConfig;
  log: Logger;
  p: Provisioning;
  /** The Provisioning's own Jobs (all kinds). */
  jobs: readonly V1Job[];
  registryCaPem: string;
  clusterReady: boolean;
  logsHint: (job: V1Job) => string;
  now: Date;
}

/** The catalog ConfigMap, or why there is none (an appliance built without addons has none: not an error). */
async function readCatalog(c: Clients, config: BpaConfig): Promise<CatalogAddon[] | { missing: string }> {
  const { configMap: name, key } = config.addonsCatalog;
  const where = `ConfigMap ${config.namespace}/${name} key "${key}"`;
  try {
    const text = (await c.core.readNamespacedConfigMap({ namespace: config.namespace, name })).data?.[key];
    if (!text) return { missing: `this appliance serves no addons: ${where} is empty` };
    const catalog = readAddonsCatalog(text);
    return typeof catalog === "string" ? { missing: `the appliance's addons catalog is not usable: ${where}: ${catalog}` } : catalog;
  } catch (error) {
    if (!isNotFound(error)) throw error;
    return { missing: `this appliance serves no addons: ${where} not found` };
  }
}

/** How soon a chart version whose digest could not be read is looked up again. */
export const CHART_UNRESOLVED_RECHECK_MS = 30_000;

export async function reconcileAddons(input: AddonsStepInput): Promise<{ addons: AddonStatus[]; condition: ConditionInput; requeueAfterMs?: number }> {
  const { c, config, log, p, now } = input;
  const namespace = p.metadata.namespace!;
  const jobs = input.jobs.filter(isAddonsJob);
  const catalog = await readCatalog(c, config);
  // Absent from clusters installed before addons existed: made (and the runner's Role given it) on first use.
  const results = (await ensureConfigMap(c, addonsResultsConfigMap(p))).object.data ?? {};
  // Every reconcile reads what the tags of spec.addons' chart versions name: a new addon is
  // pinned to it, and a tag moved under a recorded digest is seen.
  const resolved = resolveAddons(p.spec?.addons, Array.isArray(catalog) ? catalog : []);
  const tags = resolved.ok ? await lookUpChartTags(resolved.addons, { ca: input.registryCaPem, registryIP: config.addonsRegistryIP }) : new Map();
  const decision = decideAddons({
    p,
    catalog,
    registryCaPem: input.registryCaPem,
    jobs,
    results,
    tags,
    clusterReady: input.clusterReady,
    logsHint: input.logsHint,
    now,
  });
  for (const event of decision.events) await recordEvent(c, log, p, event, now);
  if (decision.start) {
    const { hash, plan, record, summary } = decision.start;
    await ensureRole(c, runnerRole(p));
    await ensureConfigMap(c, addonsPlanConfigMap(p, hash, plan, input.registryCaPem));
    const body = addonsJob(p, config, hash, plan, record);
    try {
      await c.batch.createNamespacedJob({ namespace, body });
      log.info("started an addons Job", { provisioning: `${namespace}/${p.metadata.name}`, job: body.metadata!.name, addons: summary });
      await recordEvent(c, log, p, { type: "Normal", reason: "AddonsJobStarted", message: `${body.metadata!.name}: ${summary}` }, now);
    } catch (error) {
      // Made already (the informer's cache had not seen it): the next reconcile tracks it.
      if (!isConflict(error)) throw error;
    }
  }
  await prune(c, config, p, jobs);
  return {
    addons: decision.addons,
    condition: decision.condition,
    ...(decision.condition.reason === REASON_CHART_UNRESOLVED ? { requeueAfterMs: CHART_UNRESOLVED_RECHECK_MS } : {}),
  };
}

/** Finished addons Jobs beyond the history limit go, and plans no kept Job uses. */
async function prune(c: Clients, config: BpaConfig, p: Provisioning, jobs: readonly V1Job[]): Promise<void> {
  const namespace = p.metadata.namespace!;
  const newestFirst = [...jobs].sort((a, b) => addonsJobCreated(b) - addonsJobCreated(a));
  const old = newestFirst.slice(config.job.historyLimit);
  for (const job of old) {
    try {
      await c.batch.deleteNamespacedJob({ namespace, name: job.metadata!.name!, propagationPolicy: "Background" });
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
  if (!old.length) return;
  const kept = new Set(newestFirst.slice(0, config.job.historyLimit).map((j) => addonsNames(p, j.metadata?.annotations?.[ANNOTATION_INSTALL_HASH]).plan));
  const plans = await c.core.listNamespacedConfigMap({ namespace, labelSelector: `${LABEL_COMPONENT}=${ADDONS_COMPONENT.plan}` });
  for (const cm of plans.items) {
    if (!ownedBy(cm, p.metadata.uid) || kept.has(cm.metadata?.name)) continue;
    try {
      await c.core.deleteNamespacedConfigMap({ namespace, name: cm.metadata!.name! });
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}
