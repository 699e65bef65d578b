/**
 * The operator's control loop: informers on Provisionings, BareMetalHosts, its own Jobs,
 * Deployments and Pods (in each namespace it works in) feed a work queue of Provisioning keys; workers reconcile them,
 * requeueing failures with a per-key exponential backoff.
 */
import type { KubernetesListObject, V1ConfigMap, V1Deployment, V1Job, V1Pod } from "@kubernetes/client-node";
import {
  BMH_PLURAL,
  HARDWARE_DATA_PLURAL,
  BPA_GROUP,
  BPA_VERSION,
  LABEL_COMPONENT,
  LABEL_MANAGED_BY,
  LABEL_PROVISIONING,
  MANAGED_BY,
  METAL3_GROUP,
  METAL3_VERSION,
  PROVISIONING_KIND,
  PROVISIONING_PLURAL,
} from "../api/constants.js";
import type { BareMetalHost, HardwareData, Provisioning } from "../api/types.js";
import { withHardwareData } from "../assign/hardware-data.js";
import type { BpaConfig } from "../config/config.js";
import { ADDONS_COMPONENT } from "../jobs/addons-objects.js";
import { COMPONENT } from "../jobs/objects.js";
import { labelValue } from "../jobs/names.js";
import { ResilientInformer } from "../runtime/informer.js";
import { errorMessage, type Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";
import { NamespaceScopes } from "./namespaces.js";
import { PlanRegistry } from "./plans.js";
import { WorkQueue } from "../runtime/queue.js";
import { Reconciler, type Caches } from "./reconcile.js";

export interface ControllerOptions {
  /** Reconcile every Provisioning this often even without events (ms). */
  resyncMs?: number;
  /** Backoff of failing reconciles. */
  baseBackoffMs?: number;
  maxBackoffMs?: number;
}

const key = (o: { metadata?: { namespace?: string; name?: string } }) => `${o.metadata?.namespace}/${o.metadata?.name}`;

export class Controller {
  readonly queue: WorkQueue;
  readonly plans = new PlanRegistry();
  private readonly provisionings: ResilientInformer<Provisioning & { apiVersion: string; kind: string }>;
  private readonly hosts: ResilientInformer<BareMetalHost & { apiVersion: string; kind: string }>;
  private readonly hardwareData: ResilientInformer<HardwareData & { apiVersion: string; kind: string }>;
  /** The informers of the namespaces opened so far (namespaces.ts). */
  private readonly namespaces: NamespaceScopes;
  private readonly scoped = new Map<string, { jobs: ResilientInformer<V1Job>; deployments: ResilientInformer<V1Deployment>; pods: ResilientInformer<V1Pod> }>();
  /** The registry's site CA ConfigMap: only a trigger (reconciles read it themselves). */
  private readonly registryCA: ResilientInformer<V1ConfigMap>;
  private readonly kubesprayPins: ResilientInformer<V1ConfigMap>;
  private readonly reconciler: Reconciler;
  private workers: Promise<void>[] = [];
  private resyncTimer: NodeJS.Timeout | undefined;
  private running = false;
  /** Reconciles done, for tests and benchmarks. */
  reconciles = 0;

  constructor(
    c: Clients,
    private readonly config: BpaConfig,
    private readonly log: Logger,
    private readonly options: ControllerOptions = {},
  ) {
    this.queue = new WorkQueue({ baseDelayMs: options.baseBackoffMs ?? 500, maxDelayMs: options.maxBackoffMs ?? 5 * 60_000 });
    const ns = config.watchNamespace || undefined;
    const nsPath = (prefix: string, plural: string, namespace = ns) => (namespace ? `${prefix}/namespaces/${namespace}/${plural}` : `${prefix}/${plural}`);
    const owned = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;

    const customList =
      <T>(group: string, version: string, plural: string, namespace: string | undefined) =>
      async () =>
        (namespace
          ? await c.custom.listNamespacedCustomObject({ group, version, namespace, plural })
          : await c.custom.listClusterCustomObject({ group, version, plural })) as KubernetesListObject<T & { apiVersion: string; kind: string }>;

    this.provisionings = new ResilientInformer({
      kc: c.kc,
      name: "provisionings",
      log,
      path: nsPath(`/apis/${BPA_GROUP}/${BPA_VERSION}`, PROVISIONING_PLURAL),
      list: customList<Provisioning>(BPA_GROUP, BPA_VERSION, PROVISIONING_PLURAL, ns),
    });
    const hostNs = config.hostNamespace || ns;
    this.hosts = new ResilientInformer({
      kc: c.kc,
      name: "baremetalhosts",
      log,
      path: nsPath(`/apis/${METAL3_GROUP}/${METAL3_VERSION}`, BMH_PLURAL, hostNs),
      list: customList<BareMetalHost>(METAL3_GROUP, METAL3_VERSION, BMH_PLURAL, hostNs),
    });
    // Hosts' hardware details where their status has none (Metal3 is moving them there).
    this.hardwareData = new ResilientInformer({
      kc: c.kc,
      name: "hardwaredata",
      log,
      path: nsPath(`/apis/${METAL3_GROUP}/${METAL3_VERSION}`, HARDWARE_DATA_PLURAL, hostNs),
      list: customList<HardwareData>(METAL3_GROUP, METAL3_VERSION, HARDWARE_DATA_PLURAL, hostNs),
    });
    // The operator's own Jobs, Deployments and Pods: watched in each namespace it works in,
    // opened by the first reconcile there (its rights are granted per namespace: namespaces.ts).
    const jobSelector = `${owned},${LABEL_COMPONENT} in (${COMPONENT.install},${ADDONS_COMPONENT.job})`;
    this.namespaces = new NamespaceScopes({
      c,
      informers: (namespace) => {
        const informers = {
          jobs: new ResilientInformer<V1Job>({
            kc: c.kc,
            name: `jobs ${namespace}`,
            log,
            path: nsPath("/apis/batch/v1", "jobs", namespace),
            labelSelector: jobSelector,
            list: () => c.batch.listNamespacedJob({ namespace, labelSelector: jobSelector }),
          }),
          deployments: new ResilientInformer<V1Deployment>({
            kc: c.kc,
            name: `deployments ${namespace}`,
            log,
            path: nsPath("/apis/apps/v1", "deployments", namespace),
            labelSelector: owned,
            list: () => c.apps.listNamespacedDeployment({ namespace, labelSelector: owned }),
          }),
          pods: new ResilientInformer<V1Pod>({
            kc: c.kc,
            name: `pods ${namespace}`,
            log,
            path: nsPath("/api/v1", "pods", namespace),
            labelSelector: owned,
            list: () => c.core.listNamespacedPod({ namespace, labelSelector: owned }),
          }),
        };
        for (const verb of ["add", "update", "delete"] as const) {
          informers.jobs.on(verb, (j) => this.enqueueOwner(j));
          informers.deployments.on(verb, (d) => this.enqueueOwner(d));
          informers.pods.on(verb, (pod) => this.enqueueByLabel(pod));
        }
        this.scoped.set(namespace, informers);
        return [informers.jobs, informers.deployments, informers.pods];
      },
    });

    // The appliance's ConfigMaps every Job gets something from, each watched by name in the operator's namespace.
    const applianceConfigMap = (name: string, configMap: string) => {
      const fieldSelector = `metadata.name=${configMap}`;
      return new ResilientInformer<V1ConfigMap>({
        kc: c.kc,
        name,
        log,
        path: `/api/v1/namespaces/${config.namespace}/configmaps`,
        fieldSelector,
        list: () => c.core.listNamespacedConfigMap({ namespace: config.namespace, fieldSelector }),
      });
    };
    this.registryCA = applianceConfigMap("registry-ca", config.registryCA.configMap);
    this.kubesprayPins = applianceConfigMap("kubespray-pins", config.kubesprayPins.configMap);

    const caches: Caches = {
      provisioning: (namespace, name) => this.provisionings.get(name, namespace),
      hosts: (namespace) => (this.hosts.isSynced() ? withHardwareData(this.hosts.list(namespace), this.hardwareData.list(namespace)) : undefined),
      open: (namespace) => this.namespaces.open(namespace),
      jobs: (namespace) => this.scoped.get(namespace)?.jobs.list(namespace) ?? [],
      deployment: (namespace, name) => this.scoped.get(namespace)?.deployments.get(name, namespace),
      pods: (namespace) => this.scoped.get(namespace)?.pods.list(namespace) ?? [],
    };
    this.reconciler = new Reconciler(c, config, caches, this.plans, log, (hosts) => this.enqueueWaiting(hosts));

    // Event wiring. A Provisioning is reconciled when what it asks for changes (spec, via
    // metadata.generation; annotations such as the retry token; deletion), not when only its
    // status changes: the operator's own status writes would otherwise undo the backoff.
    this.provisionings.on("add", (p) => this.onProvisioning(p));
    this.provisionings.on("update", (p) => this.onProvisioning(p));
    this.provisionings.on("delete", (p) => {
      this.seen.delete(key(p));
      this.queue.add(key(p));
    });
    for (const verb of ["add", "update", "delete"] as const) {
      this.hosts.on(verb, (h) => this.enqueueForHost(h));
      this.hardwareData.on(verb, (h) => this.enqueueForHost(h));
      // A new or changed CA: waiting Provisionings can install, installed ones get it (new install hash).
      this.registryCA.on(verb, () => this.enqueueAll());
      // New pins (a new appliance's content): waiting Provisionings can run, installed clusters follow the served versions.
      this.kubesprayPins.on(verb, () => this.enqueueAll());
    }
  }

  private readonly seen = new Map<string, string>();

  private onProvisioning(p: Provisioning): void {
    const k = key(p);
    const signature = JSON.stringify([p.metadata.uid, p.metadata.generation, p.metadata.annotations ?? {}, p.metadata.deletionTimestamp ?? null]);
    if (this.seen.get(k) === signature) return;
    this.seen.set(k, signature);
    this.queue.add(k);
  }

  private enqueueAll(): void {
    for (const p of this.provisionings.list()) this.queue.add(key(p));
  }

  /** A host change may matter to every Provisioning that draws from the host's namespace. */
  private enqueueForHost(h: BareMetalHost): void {
    const all = this.provisionings.list(this.config.hostNamespace ? undefined : h.metadata.namespace);
    for (const p of all) this.queue.add(key(p));
  }

  /** Hosts were released: Provisionings that wait for hosts in their namespace get another try. */
  private enqueueWaiting(hosts: string[]): void {
    const namespaces = new Set(hosts.map((h) => h.split("/")[0]!));
    for (const p of this.provisionings.list()) {
      const scope = this.config.hostNamespace || p.metadata.namespace!;
      const waiting = p.status?.phase === "Unsatisfiable" || p.status?.phase === "Pending" || !p.status?.phase;
      if (waiting && namespaces.has(scope)) this.queue.add(key(p));
    }
  }

  private enqueueOwner(obj: { metadata?: { namespace?: string; ownerReferences?: { kind?: string; name?: string; apiVersion?: string }[] } }): void {
    for (const ref of obj.metadata?.ownerReferences ?? []) {
      if (ref.kind === PROVISIONING_KIND && ref.apiVersion?.startsWith(`${BPA_GROUP}/`)) {
        this.queue.add(`${obj.metadata?.namespace}/${ref.name}`);
      }
    }
  }

  /** Pods belong to ReplicaSets and Jobs; the Provisioning is in their label. */
  private enqueueByLabel(pod: V1Pod): void {
    const value = pod.metadata?.labels?.[LABEL_PROVISIONING];
    if (!value) return;
    for (const p of this.provisionings.list(pod.metadata?.namespace)) {
      if (labelValue(p.metadata.name!) === value) this.queue.add(key(p));
    }
  }

  /** Starts the informers, waits for the caches, then the workers. */
  async start(): Promise<void> {
    this.running = true;
    await Promise.all([this.provisionings, this.hosts, this.hardwareData, this.registryCA, this.kubesprayPins].map((i) => i.start()));
    // Hosts may be missing (no BareMetalHost CRD yet): reconciles then wait for them instead of blocking here.
    await this.provisionings.hasSynced;
    await Promise.race([this.hosts.hasSynced, new Promise((r) => setTimeout(r, 2_000).unref())]);
    if (!this.running) return;
    this.plans.load(this.provisionings.list());
    this.log.info("caches synced; starting workers", {
      workers: this.config.workers,
      provisionings: this.provisionings.list().length,
      hosts: this.hosts.isSynced() ? this.hosts.list().length : "not synced",
    });
    for (let i = 0; i < this.config.workers; i++) this.workers.push(this.work());
    for (const p of this.provisionings.list()) this.queue.add(key(p));
    const resync = this.options.resyncMs ?? 10 * 60_000;
    this.resyncTimer = setInterval(() => {
      for (const p of this.provisionings.list()) this.queue.add(key(p));
    }, resync);
    this.resyncTimer.unref();
  }

  private async work(): Promise<void> {
    for (;;) {
      const k = await this.queue.get();
      if (k === undefined) return;
      try {
        const result = await this.reconciler.reconcile(k);
        this.reconciles += 1;
        if (result.retryWithBackoff) this.queue.addRateLimited(k);
        else this.queue.forget(k);
        if (result.requeueAfterMs) this.queue.addAfter(k, result.requeueAfterMs);
      } catch (error) {
        const delay = this.queue.addRateLimited(k);
        this.log.error("reconcile failed", { provisioning: k, error: errorMessage(error), retryInMs: delay });
        await this.reconciler.reportError(k, error, delay);
      } finally {
        this.queue.done(k);
      }
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.queue.shutdown();
    await Promise.all([this.provisionings, this.hosts, this.hardwareData, this.registryCA, this.kubesprayPins].map((i) => i.stop()));
    await this.namespaces.stop();
    await Promise.all(this.workers);
    this.workers = [];
  }
}
