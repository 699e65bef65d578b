/**
 * Helpers for the BPA integration tests: a real kube-apiserver (the integration
 * project's global setup), the project's CRDs, one namespace and one in-process operator
 * per test. There is no kube-controller-manager: Jobs never run and the garbage collector
 * never deletes anything, so tests write Job status through the API themselves.
 */
import { readFile } from "node:fs/promises";
import { ApiextensionsV1Api, KubeConfig, loadAllYaml, type V1CustomResourceDefinition, type V1Job } from "@kubernetes/client-node";
import yaml from "js-yaml";
import { afterEach, beforeAll, inject } from "vitest";
import { BPA_GROUP, BPA_VERSION, PROVISIONING_PLURAL } from "../../bpa/api/constants.js";
import type { Provisioning } from "../../bpa/api/types.js";
import type { BpaConfig } from "../../bpa/config/config.js";
import { isConflict, isNotFound, makeClients, mergePatch, type Clients } from "../../bpa/runtime/kube.js";
import { silentLogger, makeLogger, type Logger } from "../../bpa/runtime/log.js";
import { Operator } from "../../bpa/operator.js";
import { testConfig } from "./fixtures/bpa/config.js";
import { makeTestCA } from "./fixtures/bpa/registry-ca.js";
import { testPins } from "./fixtures/bpa/pins.js";
import { applianceCrdTexts } from "./crds.js";
import { writeBareMetalHost } from "./bare-metal-hosts.js";

export const repo = new URL("../../", import.meta.url);

export function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(inject("kubeconfigPath"));
  return kc;
}

export function clients(kc = kubeConfig()): Clients {
  return makeClients(kc);
}

/** YAML documents as written (for custom resources, whose bodies are sent as they are). */
export async function loadYamlDocuments<T = Record<string, unknown>>(relative: string): Promise<T[]> {
  const text = await readFile(new URL(relative, repo), "utf8");
  return yaml.loadAll(text).filter(Boolean) as T[];
}

/**
 * YAML documents of built-in kinds as client-node's typed models: their property names
 * differ from the JSON names in places (x-kubernetes-preserve-unknown-fields is
 * x_kubernetes_preserve_unknown_fields), and the typed API calls serialize by model.
 */
export async function loadKubeYaml<T>(relative: string): Promise<T[]> {
  const text = await readFile(new URL(relative, repo), "utf8");
  return loadAllYaml(text).filter(Boolean) as T[];
}

/** Creates (or updates) the appliance's CRDs (the Provisioning CRD, Metal3's) and waits until they are Established. */
export async function applyCrds(kc: KubeConfig): Promise<void> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  for (const text of await applianceCrdTexts()) {
    for (const body of loadAllYaml(text).filter(Boolean) as V1CustomResourceDefinition[]) {
      const name = body.metadata!.name!;
      try {
        await api.createCustomResourceDefinition({ body });
      } catch (error) {
        if (!isConflict(error)) throw error;
        const existing = await api.readCustomResourceDefinition({ name });
        body.metadata!.resourceVersion = existing.metadata!.resourceVersion;
        try {
          await api.replaceCustomResourceDefinition({ name, body });
        } catch (replaceError) {
          if (!isConflict(replaceError)) throw replaceError; // another test file won the race
        }
      }
      await waitFor(`CRD ${name} established`, async () => {
        const crd = await api.readCustomResourceDefinition({ name });
        return crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True") || undefined;
      });
    }
  }
}

let namespaceCounter = 0;

export async function newNamespace(c: Clients, prefix: string): Promise<string> {
  namespaceCounter += 1;
  const name = `${prefix}-${process.pid}-${namespaceCounter}-${Math.random().toString(36).slice(2, 6)}`.slice(0, 63);
  await c.core.createNamespace({ body: { metadata: { name } } });
  // What kube-controller-manager's ServiceAccount controller would do: pods need it to be admitted.
  await c.core.createNamespacedServiceAccount({ namespace: name, body: { metadata: { name: "default" } } });
  return name;
}

/** Polls until `probe` returns something truthy; fails with the last value seen. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false | null>, timeoutMs = 20_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      last = await probe();
      if (last) return last as T;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)?.slice(0, 2000)}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export function operatorConfig(namespace: string, overrides: Record<string, unknown> = {}): BpaConfig {
  return testConfig({
    namespace,
    watchNamespace: namespace,
    leaderElection: { enabled: true, leaseName: "bpa-leader", leaseDurationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 0.25 },
    ...overrides,
  });
}

export function testLogger(name: string): Logger {
  return process.env.BPA_TEST_LOG ? makeLogger({ level: "debug", fields: { op: name } }) : silentLogger;
}

let sharedCA: string | undefined;
/** One site CA for the tests that do not look at it. */
export function testRegistryCaPem(): string {
  sharedCA ??= makeTestCA().pem;
  return sharedCA;
}

/**
 * What the appliance's first boot does: the registry's site CA in ConfigMap
 * `config.registryCA.configMap` (key `config.registryCA.key`) of the operator's namespace.
 * Replaces the CA when the ConfigMap exists. Uses the test's admin credentials.
 */
export async function putRegistryCA(config: BpaConfig, pem: string): Promise<void> {
  await putConfigMap(config.namespace, config.registryCA.configMap, { [config.registryCA.key]: pem });
}

/** Creates the ConfigMap, or replaces its data when it exists (the test's admin credentials). */
async function putConfigMap(namespace: string, name: string, data: Record<string, string>): Promise<void> {
  const c = clients();
  const body = { metadata: { name, namespace }, data };
  try {
    await c.core.createNamespacedConfigMap({ namespace, body });
  } catch (error) {
    if (!isConflict(error)) throw error;
    await c.core.replaceNamespacedConfigMap({ namespace, name, body });
  }
}

/**
 * What the appliance's first boot applies from the build's manifests: the kubespray pins in
 * ConfigMap `config.kubesprayPins.configMap` of the operator's namespace (replaced when it exists).
 */
export async function putKubesprayPins(config: BpaConfig, text: string): Promise<void> {
  await putConfigMap(config.namespace, config.kubesprayPins.configMap, { [config.kubesprayPins.key]: text });
}

/**
 * Starts an operator in this process and waits until it leads (unless told not to wait).
 * The registry's site CA and the kubespray pins (of the configuration's kubernetesVersions,
 * else 1.35.4) are put in place first, as the appliance's first boot does (`registryCA:
 * false`, `pins: false` leave them out).
 */
export async function startOperator(
  kc: KubeConfig,
  config: BpaConfig,
  options: { identity?: string; waitForLeadership?: boolean; registryCA?: false; pins?: false } = {},
): Promise<Operator> {
  if (options.registryCA !== false) await putRegistryCA(config, testRegistryCaPem());
  if (options.pins !== false) await putKubesprayPins(config, testPins(config.kubernetesVersions ?? ["1.35.4"]));
  const operator = new Operator({
    kc,
    config,
    log: testLogger(options.identity ?? "bpa"),
    ...(options.identity ? { identity: options.identity } : {}),
    baseBackoffMs: 100,
    maxBackoffMs: 2_000,
  });
  await operator.start();
  if (options.waitForLeadership !== false) await waitFor("the operator to lead", async () => operator.controller !== undefined);
  return operator;
}

/**
 * What every operator test file sets up: the clients, the CRDs applied once (beforeAll),
 * and every operator a test starts stopped after it (afterEach). `start` is startOperator
 * with its stop registered; `stopAll` stops them in the middle of a test. An operator a
 * test stops itself is started with startOperator.
 */
export function operatorSuite(kc = kubeConfig()) {
  const running: Operator[] = [];
  const track = (operator: Operator) => {
    running.push(operator);
    return operator;
  };
  const stopAll = async () => {
    await Promise.all(running.splice(0).map((operator) => operator.stop()));
  };
  beforeAll(async () => {
    await applyCrds(kc);
  });
  afterEach(stopAll);
  return {
    kc,
    c: clients(kc),
    start: async (config: BpaConfig, options: Parameters<typeof startOperator>[2] = {}, on = kc): Promise<Operator> =>
      track(await startOperator(on, config, options)),
    /** An operator made another way, stopped after the test like the others. */
    track,
    stopAll,
  };
}

// ------------------------------------------------------------------ objects

/** status is a subresource: it is written on its own, as the baremetal-operator does. */
export const createHost = writeBareMetalHost;

export async function createProvisioning(c: Clients, namespace: string, body: Record<string, unknown>): Promise<Provisioning> {
  const metadata = { ...(body.metadata as object), namespace };
  return (await c.custom.createNamespacedCustomObject({
    group: BPA_GROUP,
    version: BPA_VERSION,
    namespace,
    plural: PROVISIONING_PLURAL,
    body: { apiVersion: `${BPA_GROUP}/${BPA_VERSION}`, kind: "Provisioning", ...body, metadata },
  })) as Provisioning;
}

export async function getProvisioning(c: Clients, namespace: string, name: string): Promise<Provisioning> {
  return (await c.custom.getNamespacedCustomObject({ group: BPA_GROUP, version: BPA_VERSION, namespace, plural: PROVISIONING_PLURAL, name })) as Provisioning;
}

export async function patchProvisioning(c: Clients, namespace: string, name: string, body: Record<string, unknown>): Promise<void> {
  await c.custom.patchNamespacedCustomObject({ group: BPA_GROUP, version: BPA_VERSION, namespace, plural: PROVISIONING_PLURAL, name, body }, mergePatch);
}

export function condition(p: Provisioning, type: string) {
  return p.status?.conditions?.find((c) => c.type === type);
}

/** Waits until the Provisioning's status satisfies `test`; returns it. */
export function waitForStatus(
  c: Clients,
  namespace: string,
  name: string,
  what: string,
  test: (p: Provisioning) => boolean,
  timeoutMs = 20_000,
): Promise<Provisioning> {
  return waitFor(
    what,
    async () => {
      const p = await getProvisioning(c, namespace, name);
      return test(p) ? p : undefined;
    },
    timeoutMs,
  );
}

export async function listInstallJobs(c: Clients, namespace: string): Promise<V1Job[]> {
  const list = await c.batch.listNamespacedJob({ namespace, labelSelector: "bpa.akraino.org/component=install" });
  return list.items;
}

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");

/**
 * Writes a Job's status as the Job controller would, valid for the API server's Job
 * status rules (startTime before finishing; SuccessCriteriaMet before Complete;
 * FailureTarget before Failed).
 */
export async function setJobStatus(c: Clients, namespace: string, name: string, state: "running" | "succeeded" | "failed"): Promise<void> {
  const job = await c.batch.readNamespacedJob({ namespace, name });
  const start = job.status?.startTime ? new Date(job.status.startTime).getTime() : Date.now() - 60_000;
  const now = Date.now();
  let status: Record<string, unknown>;
  if (state === "running") {
    status = { startTime: iso(start), active: 1, ready: 0 };
  } else if (state === "succeeded") {
    status = {
      startTime: iso(start),
      completionTime: iso(now),
      active: 0,
      ready: 0,
      succeeded: 1,
      conditions: [
        {
          type: "SuccessCriteriaMet",
          status: "True",
          reason: "CompletionsReached",
          message: "Reached expected number of succeeded pods",
          lastProbeTime: iso(now),
          lastTransitionTime: iso(now),
        },
        {
          type: "Complete",
          status: "True",
          reason: "CompletionsReached",
          message: "Reached expected number of succeeded pods",
          lastProbeTime: iso(now),
          lastTransitionTime: iso(now),
        },
      ],
    };
  } else {
    status = {
      startTime: iso(start),
      active: 0,
      ready: 0,
      failed: 1,
      conditions: [
        {
          type: "FailureTarget",
          status: "True",
          reason: "BackoffLimitExceeded",
          message: "Job has reached the specified backoff limit",
          lastProbeTime: iso(now),
          lastTransitionTime: iso(now),
        },
        {
          type: "Failed",
          status: "True",
          reason: "BackoffLimitExceeded",
          message: "Job has reached the specified backoff limit",
          lastProbeTime: iso(now),
          lastTransitionTime: iso(now),
        },
      ],
    };
  }
  await c.batch.patchNamespacedJobStatus({ namespace, name, body: { status } }, mergePatch);
}

/** What the runner does at the end of a good install: write the kubeconfig into its Secret. */
export async function handBackKubeconfig(
  c: Clients,
  namespace: string,
  secret: string,
  kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n",
): Promise<void> {
  await c.core.patchNamespacedSecret({ namespace, name: secret, body: { data: { kubeconfig: Buffer.from(kubeconfig).toString("base64") } } }, mergePatch);
}

export async function deleteNamespace(c: Clients, namespace: string): Promise<void> {
  try {
    await c.core.deleteNamespace({ name: namespace });
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
}
