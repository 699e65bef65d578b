/**
 * The objects of an addons Job (docs/addons.md): its plan (immutable ConfigMap,
 * with the registry's CA for Helm's chart pulls), the results ConfigMap the runner fills
 * one addon at a time, and the Job itself: the runner image in `addons` mode with the
 * application cluster's kubeconfig mounted from its Secret. Pure, like objects.ts.
 */
import { createHash } from "node:crypto";
import type { V1ConfigMap, V1Job } from "@kubernetes/client-node";
import { ANNOTATION_ADDONS, ANNOTATION_INSTALL_HASH, LABEL_INSTALL_HASH } from "../api/constants.js";
import type { Provisioning } from "../api/types.js";
import type { BpaConfig } from "../config/config.js";
import type { AddonsPlan } from "./addons-plan.js";
import {
  ADDONS_KEY_PLAN,
  ADDONS_KEY_REGISTRY_CA,
  KUBECONFIG_KEY,
  RUNNER_ADDONS_DIR,
  RUNNER_ADDONS_PLAN_PATH,
  RUNNER_ADDONS_REGISTRY_CA_PATH,
  RUNNER_ENV,
  RUNNER_KUBECONFIG_DIR,
  RUNNER_KUBECONFIG_PATH,
  type AddonsJobPlan,
} from "./contract.js";
import { childLabels, childName, names, ownerReference } from "./names.js";
import { runnerContainerSecurityContext, runnerPodSecurityContext, runnerTmp } from "./pod-security.js";

export const ADDONS_COMPONENT = { job: "addons", plan: "addons-plan", results: "addons-results" } as const;

/** The runner's answer for one addon stays readable in status; Helm's whole output is in the Job's log. */
export const MAX_RESULT_MESSAGE = 1024;

export function addonsNames(p: Provisioning, hash?: string) {
  const name = p.metadata.name!;
  const short = hash?.slice(0, 8);
  return {
    job: short ? childName(name, `addons-${short}`) : undefined,
    plan: short ? childName(name, `addons-plan-${short}`) : undefined,
    results: childName(name, "addons-results"),
  };
}

/** One Job per plan and retry token: the same change asked again after a failure is a new Job only with a new token. */
export function addonsHash(plan: AddonsPlan, retryToken: string, registryCaPem: string): string {
  const what = {
    apply: plan.apply.map((a) => [a.name, a.hash]),
    remove: plan.remove.map((a) => [a.name, a.namespace]),
    retryToken,
    registryCa: createHash("sha256").update(registryCaPem).digest("hex"),
  };
  return createHash("sha256").update(JSON.stringify(what)).digest("hex");
}

/** What an addons Job was started to do (its annotation): the BPA applies its results from the Job alone. */
export interface AddonsJobRecord {
  retryToken: string;
  /** When the operator made it (ms): creationTimestamp has whole seconds, and two Jobs may share one. */
  createdMs?: number;
  entries: { name: string; action: "apply" | "remove"; chart: string; version: string; digest?: string; namespace: string; hash: string }[];
}

export function addonsJobRecord(plan: AddonsPlan, retryToken: string, createdMs?: number): AddonsJobRecord {
  return {
    retryToken,
    ...(createdMs !== undefined ? { createdMs } : {}),
    entries: [
      ...plan.apply.map(({ name, chart, version, digest, namespace, hash }) => ({ name, action: "apply" as const, chart, version, digest, namespace, hash })),
      ...plan.remove.map(({ name, chart, version, digest, namespace, hash }) => ({
        name,
        action: "remove" as const,
        chart,
        version,
        ...(digest ? { digest } : {}),
        namespace,
        hash,
      })),
    ],
  };
}

export function jobPlan(plan: AddonsPlan): AddonsJobPlan {
  return {
    apply: plan.apply.map(({ name, chart, version, digest, namespace, values, hash }) => ({ name, chart, version, digest, namespace, values, hash })),
    remove: plan.remove.map(({ name, namespace }) => ({ name, namespace })),
  };
}

function meta(p: Provisioning, name: string, component: string, hash?: string) {
  return {
    name,
    namespace: p.metadata.namespace!,
    labels: { ...childLabels(p, component), ...(hash ? { [LABEL_INSTALL_HASH]: hash.slice(0, 16) } : {}) },
    ...(hash ? { annotations: { [ANNOTATION_INSTALL_HASH]: hash } } : {}),
    ownerReferences: [ownerReference(p)],
  };
}

export function addonsPlanConfigMap(p: Provisioning, hash: string, plan: AddonsPlan, registryCaPem: string): V1ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: meta(p, addonsNames(p, hash).plan!, ADDONS_COMPONENT.plan, hash),
    immutable: true,
    data: { [ADDONS_KEY_PLAN]: JSON.stringify(jobPlan(plan), null, 2), [ADDONS_KEY_REGISTRY_CA]: registryCaPem },
  };
}

/** Made empty before the first addons Job; the runner's Role may write this one ConfigMap. */
export function addonsResultsConfigMap(p: Provisioning): V1ConfigMap {
  return { apiVersion: "v1", kind: "ConfigMap", metadata: meta(p, addonsNames(p).results, ADDONS_COMPONENT.results), data: {} };
}

/** The registry host names of the plan's chart references (oci://host[:port]/...), names only. */
export function chartHosts(plan: AddonsPlan): string[] {
  const hosts = plan.apply.map((a) => /^oci:\/\/([^/:]+)/.exec(a.chart)?.[1]).filter((h): h is string => !!h && !/^\d+(\.\d+){3}$/.test(h));
  return [...new Set(hosts)].sort();
}

export function addonsJob(p: Provisioning, config: BpaConfig, hash: string, plan: AddonsPlan, record: AddonsJobRecord): V1Job {
  const n = addonsNames(p, hash);
  const hosts = chartHosts(plan);
  const hashLabel = { [LABEL_INSTALL_HASH]: hash.slice(0, 16) };
  const metadata = meta(p, n.job!, ADDONS_COMPONENT.job, hash);
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { ...metadata, annotations: { ...metadata.annotations, [ANNOTATION_ADDONS]: JSON.stringify(record) } },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: config.job.activeDeadlineSeconds,
      template: {
        metadata: { labels: { ...childLabels(p, ADDONS_COMPONENT.job), ...hashLabel } },
        spec: {
          restartPolicy: "Never",
          serviceAccountName: names(p).runner,
          securityContext: runnerPodSecurityContext(),
          containers: [
            {
              name: "helm",
              image: config.runnerImage,
              imagePullPolicy: "IfNotPresent",
              args: ["addons"],
              env: [
                { name: RUNNER_ENV.mode, value: "addons" },
                { name: RUNNER_ENV.provisioning, value: p.metadata.name! },
                { name: RUNNER_ENV.namespace, valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
                { name: RUNNER_ENV.addonsPlan, value: RUNNER_ADDONS_PLAN_PATH },
                { name: RUNNER_ENV.addonsResults, value: n.results },
                { name: RUNNER_ENV.addonsJob, value: n.job! },
                { name: RUNNER_ENV.kubeconfig, value: RUNNER_KUBECONFIG_PATH },
                { name: RUNNER_ENV.registryCA, value: RUNNER_ADDONS_REGISTRY_CA_PATH },
                // Helm keeps its registry login and cache here: a private, writable place in a read-only image.
                { name: "HELM_CACHE_HOME", value: "/tmp/helm/cache" },
                { name: "HELM_CONFIG_HOME", value: "/tmp/helm/config" },
                { name: "HELM_DATA_HOME", value: "/tmp/helm/data" },
                runnerTmp().home,
              ],
              volumeMounts: [
                { name: "plan", mountPath: RUNNER_ADDONS_DIR, readOnly: true },
                { name: "kubeconfig", mountPath: RUNNER_KUBECONFIG_DIR, readOnly: true },
                runnerTmp().mount,
              ],
              securityContext: runnerContainerSecurityContext(),
              resources: config.job.resources,
              terminationMessagePolicy: "FallbackToLogsOnError",
            },
          ],
          // The charts come from the appliance's registry by the name its certificate carries.
          ...(config.addonsRegistryIP && hosts.length ? { hostAliases: [{ ip: config.addonsRegistryIP, hostnames: hosts }] } : {}),
          volumes: [
            { name: "plan", configMap: { name: n.plan! } },
            { name: "kubeconfig", secret: { secretName: names(p).kubeconfig, defaultMode: 0o400, items: [{ key: KUBECONFIG_KEY, path: KUBECONFIG_KEY }] } },
            runnerTmp().volume,
          ],
        },
      },
    },
  };
}
