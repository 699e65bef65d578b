/**
 * One reconcile of one Provisioning: validate the spec, make sure the namespace's SSH key
 * exists, bring the operations ledger up to date from its Jobs, plan (or keep) the host
 * assignment, read what the appliance gives every Job (the registry's site CA, the kubespray
 * pins); then, before the cluster exists, write the
 * inventory, run or track the install Job and keep the agents; once it exists, run or
 * track its next day-2 operation (bpa/jobs/operation.ts) one at a time. Everything it
 * decides from is in the API (the Provisioning's status, its Jobs), so a restarted
 * operator continues where the last one stopped.
 */
import type { V1Deployment, V1Job, V1Pod } from "@kubernetes/client-node";
import { ANNOTATION_INSTALL_HASH, ANNOTATION_RETRY, BPA_GROUP, BPA_VERSION, PROVISIONING_PLURAL } from "../api/constants.js";
import { allRoles, normalizeSpec, roleLabel, specHash, type NormalizedSpec } from "../api/spec.js";
import type { AssignedHost, BareMetalHost, ClusterState, Condition, OperationRecord, Phase, Provisioning, ProvisioningStatus } from "../api/types.js";
import { growAssignment } from "../assign/grow.js";
import { hostFacts, toAssignedHost, type HostFacts } from "../assign/hosts.js";
import { fits, planAssignment } from "../assign/plan.js";
import type { BpaConfig } from "../config/config.js";
import { clusterVersion, renderGroupVars } from "../inventory/group-vars.js";
import { renderHostsIni } from "../inventory/hosts-ini.js";
import { podNetwork, podNetworkTooSmall } from "../inventory/pod-network.js";
import { runnerFailure } from "../jobs/failure.js";
import { installHash, operationHash, type ApplianceInputs } from "../jobs/hash.js";
import { names } from "../jobs/names.js";
import { nextOperation, type OperationPlan } from "../jobs/operation.js";
import {
  installJob,
  operationJob,
  inventoryConfigMap,
  kubeconfigSecret,
  type InventoryFiles,
  runnerRole,
  runnerRoleBinding,
  runnerServiceAccount,
} from "../jobs/objects.js";
import { isAddonsJob, reconcileAddons } from "./addons-step.js";
import { reconcileAgents } from "./agents.js";
import { NODES_REFRESH_MS, observeNodes, readKubeconfigSecret } from "./cluster-nodes.js";
import { dayTwoStatus, operationFinishedEvent, operationStartedEvent, type DayTwoState } from "./day-two.js";
import { installStatus, type InstallJobState } from "./install-status.js";
import { recordOf, settle, withRecord, type Ledger } from "./ledger.js";
import { ensureConfigMap, ensureRole, ensureRoleBinding, ensureSecret, ensureServiceAccount } from "../runtime/ensure.js";
import { jobState, ownedBy } from "../runtime/owners.js";
import { recordEvent } from "./events.js";
import { readKubesprayPins, REASON_PINS_MISSING, type KubesprayPins } from "./kubespray-pins.js";
import { readRegistryCA, REASON_REGISTRY_CA_MISSING } from "./registry-ca.js";
import { NAMESPACE_CLUSTER_ROLE, type NamespaceAccess } from "./namespaces.js";
import { ensureSshKey } from "./ssh.js";
import { errorMessage, isConflict, isNotFound, mergePatch, type Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";
import { PlanRegistry, type Plan } from "./plans.js";
import { CONDITION, mergeConditions, statusPatch, statusTime, type ConditionInput } from "./status.js";
import { jsonEqual } from "../runtime/json.js";

/** What the reconciler reads from the informers' caches. */
export interface Caches {
  /** Opens the namespace's caches (its Jobs, Deployments, Pods), or says which rights the operator lacks there. */
  open(namespace: string): Promise<NamespaceAccess>;
  provisioning(namespace: string, name: string): Provisioning | undefined;
  hosts(namespace: string | undefined): readonly BareMetalHost[] | undefined;
  jobs(namespace: string): readonly V1Job[];
  deployment(namespace: string, name: string): V1Deployment | undefined;
  pods(namespace: string): readonly V1Pod[];
}

export interface ReconcileResult {
  /** Reconcile again after this many ms (a safety net; events normally trigger it). */
  requeueAfterMs?: number;
  /** Waiting for something outside the Provisioning: reconcile again after the key's growing backoff. */
  retryWithBackoff?: boolean;
}

/** How often a Provisioning in a namespace without the operator's rights is checked again. */
export const NAMESPACE_RECHECK_MS = 60_000;
export const REASON_NAMESPACE_NOT_PERMITTED = "NamespaceNotPermitted";

/** How often an unsatisfiable Provisioning is re-planned without any event. */
export const UNSATISFIABLE_RECHECK_MS = 60_000;

function created(obj: { metadata?: { creationTimestamp?: Date | string } }): number {
  const t = obj.metadata?.creationTimestamp;
  return t ? new Date(t).getTime() : 0;
}

/** A step's verdict that ends the reconcile with this result. */
class Stop {
  constructor(readonly result: ReconcileResult) {}
}

/** The Kubernetes versions a Provisioning may name: the configuration's, else the pins' (undefined: not checked). */
type Served = readonly string[] | undefined;

/** What the appliance gives this reconcile's Jobs, and the versions it serves. */
interface Appliance extends ApplianceInputs {
  served: Served;
  /** The nodes' other components (kubespray pins): component -> version. */
  components: Record<string, string>;
}

/** What the inventory step prepared for the install. */
interface Inventory {
  hash: string;
  names: { installJob: string; inventory: string; kubeconfig: string };
  data: InventoryFiles;
  status: ProvisioningStatus;
  /** The cluster once the install succeeded. */
  outcome: ClusterState;
}

/** The operation step's outcome: the install Job to report on, or an install that already finished. */
type Operation = { job: V1Job } | { finished: Phase };

/** The cluster a successful install leaves: revision 1; without workers the masters are its nodes. */
function installOutcome(hosts: AssignedHost[], kubernetesVersion: string | undefined, components: Record<string, string>): ClusterState {
  return { hosts, ...(kubernetesVersion ? { kubernetesVersion } : {}), mastersAreNodes: !hosts.some((h) => h.role === "worker"), revision: 1, components };
}

const assignedText = (hosts: AssignedHost[]) => hosts.map((h) => `${roleLabel(h)}=${h.name} (${h.ip})`).join(", ");
const assignedCondition = (hosts: AssignedHost[]): ConditionInput => ({
  type: CONDITION.hostsAssigned,
  status: "True",
  reason: "Assigned",
  message: assignedText(hosts),
});
const reconciledCondition = (p: Provisioning): ConditionInput => ({
  type: CONDITION.reconciled,
  status: "True",
  reason: "Reconciled",
  message: `generation ${p.metadata.generation ?? "?"}`,
});

export class Reconciler {
  /** The last host decision recorded as an Event, by Provisioning (see recordHostDecision). */
  private readonly hostDecisions = new Map<string, string>();
  /** Why a number of nodes does not fit the configuration's pod network (fixed for the operator's life). */
  private readonly nodesTooMany: (count: number) => string | undefined;

  constructor(
    private readonly c: Clients,
    private readonly config: BpaConfig,
    private readonly caches: Caches,
    private readonly plans: PlanRegistry,
    private readonly log: Logger,
    /** Called with released host keys (namespace/name), so that waiting Provisionings can use them. */
    private readonly onHostsReleased: (hosts: string[]) => void = () => {},
    private readonly now: () => Date = () => new Date(),
  ) {
    const network = podNetwork(config.extraVars);
    this.nodesTooMany = (count) => (network ? podNetworkTooSmall(network, count) : undefined);
  }

  /** One reconcile: a short list of named steps; a step that decides the outcome ends it with a Stop. */
  async reconcile(key: string): Promise<ReconcileResult> {
    const [namespace, name] = key.split("/") as [string, string];
    const p = this.caches.provisioning(namespace, name);
    if (!p || p.metadata.deletionTimestamp) return this.releaseHosts(key);
    const access = await this.caches.open(namespace);
    if (!access.ok) return this.namespaceNotPermitted(p, access.missing);
    const pins = await readKubesprayPins(this.c, this.config);
    const served = this.config.kubernetesVersions ?? (pins.ok ? pins.served.kubernetesVersions : undefined);
    const spec = await this.validate(p, served);
    if (spec instanceof Stop) return spec.result;
    const sshKeySecret = await ensureSshKey(this.c, this.config, this.log, namespace);
    const ledger = this.readLedger(p, spec, served);
    const plan = await this.planHosts(key, p, spec, sshKeySecret, ledger);
    if (plan instanceof Stop) return plan.result;
    const appliance = await this.readAppliance(pins, served);
    if (!("pins" in appliance)) return this.waitForAppliance(p, spec, plan, sshKeySecret, appliance);
    if (ledger.cluster) return this.dayTwo(key, p, spec, plan, ledger, appliance, sshKeySecret);
    return this.install(key, p, spec, plan, ledger, appliance, sshKeySecret);
  }

  /** The registry's site CA and the kubespray pins, or why a Job cannot be given them. */
  private async readAppliance(pins: KubesprayPins, served: Served): Promise<Appliance | { reason: string; message: string }> {
    const registryCA = await readRegistryCA(this.c, this.config, this.now());
    if (!registryCA.ok) return { reason: REASON_REGISTRY_CA_MISSING, message: registryCA.message };
    if (!pins.ok) return { reason: REASON_PINS_MISSING, message: pins.message };
    return { registryCaPem: registryCA.pem, pins: pins.text, served, components: pins.served.components };
  }

  /** Before the cluster exists: the inventory, the install Job, the agents, and status from the Job. */
  private async install(
    key: string,
    p: Provisioning,
    spec: NormalizedSpec,
    plan: Plan,
    ledger: Ledger,
    appliance: Appliance,
    sshKeySecret: string,
  ): Promise<ReconcileResult> {
    const inventory = await this.prepareInventory(key, p, spec, plan, appliance);
    const operation = await this.runInstall(key, p, inventory);
    const podAgents = await reconcileAgents(this.c, this.config, this.caches, p, spec, inventory.names.inventory);
    const phase = await this.writeOutcome(
      p,
      operation,
      { ...inventory.status, podAgents, sshKeySecret, operations: ledger.operations },
      plan,
      inventory.outcome,
    );
    // Installed: the next reconcile reads its nodes and starts what the spec asked for meanwhile.
    return phase === "Ready" && !("finished" in operation) ? { requeueAfterMs: 100 } : {};
  }

  /** The operations ledger from status and the Provisioning's Jobs; a cluster installed before it existed gets its version. */
  private readLedger(p: Provisioning, spec: NormalizedSpec, served: Served): Ledger {
    const ledger = settle(p, this.ownedJobs(p), (job) => this.jobPods(p.metadata.namespace!, job));
    if (ledger.cluster && !ledger.cluster.kubernetesVersion) {
      const version = clusterVersion(served, spec.kubernetesVersion);
      if (version) ledger.cluster = { ...ledger.cluster, kubernetesVersion: version };
    }
    return ledger;
  }

  /** The Provisioning's install and day-2 Jobs (its addons Jobs are the addons step's). */
  private ownedJobs(p: Provisioning): V1Job[] {
    return this.allOwnedJobs(p).filter((j) => !isAddonsJob(j));
  }

  private allOwnedJobs(p: Provisioning): V1Job[] {
    return this.caches.jobs(p.metadata.namespace!).filter((j) => ownedBy(j, p.metadata.uid));
  }

  /** Deleted (or being deleted): its children go with it (garbage collector); its hosts are free again. */
  private releaseHosts(key: string): ReconcileResult {
    this.hostDecisions.delete(key);
    const released = this.plans.release(key);
    if (released.length) this.onHostsReleased(released);
    return {};
  }

  /**
   * A Provisioning where the operator holds no rights: said in status and in an Event (once
   * per state), checked again after NAMESPACE_RECHECK_MS, so that a RoleBinding made later is found.
   */
  private async namespaceNotPermitted(p: Provisioning, missing: string[]): Promise<ReconcileResult> {
    const namespace = p.metadata.namespace!;
    const message =
      `the BPA operator has no rights in namespace ${namespace} (it may not ${missing.join(", ")}): ` +
      `bind ClusterRole ${NAMESPACE_CLUSTER_ROLE} to it there, e.g. kubectl -n ${namespace} create rolebinding bpa-operator ` +
      `--clusterrole=${NAMESPACE_CLUSTER_ROLE} --serviceaccount=${this.config.namespace}:bpa-operator`;
    const shown = p.status?.conditions?.find((c) => c.type === CONDITION.ready);
    if (shown?.reason !== REASON_NAMESPACE_NOT_PERMITTED || shown.message !== message) {
      await recordEvent(this.c, this.log, p, { type: "Warning", reason: REASON_NAMESPACE_NOT_PERMITTED, message }, this.now());
    }
    await this.writeStatus(p, "Pending", {}, [
      { type: CONDITION.ready, status: "False", reason: REASON_NAMESPACE_NOT_PERMITTED, message },
      reconciledCondition(p),
    ]);
    return { requeueAfterMs: NAMESPACE_RECHECK_MS };
  }

  /** The spec, normalized; an invalid one gets Invalid and is not retried (the next edit brings the next reconcile). */
  private async validate(p: Provisioning, served: Served): Promise<NormalizedSpec | Stop> {
    const parsed = normalizeSpec(p.spec, { servedVersions: served, nodesTooMany: this.nodesTooMany });
    if (parsed.ok) return parsed.spec;
    const message = `invalid spec: ${parsed.errors.join("; ")}`;
    await this.writeStatus(p, "Invalid", {}, [
      { type: CONDITION.ready, status: "False", reason: "InvalidSpec", message },
      { type: CONDITION.hostsAssigned, status: "False", reason: "InvalidSpec", message },
      { type: CONDITION.failed, status: "True", reason: "InvalidSpec", message },
      reconciledCondition(p),
    ]);
    return new Stop({});
  }

  /** The host assignment; without an inventory, or without fitting hosts, the Provisioning waits (Pending, Unsatisfiable). */
  private async planHosts(key: string, p: Provisioning, spec: NormalizedSpec, sshKeySecret: string, ledger: Ledger): Promise<Plan | Stop> {
    const cluster = ledger.cluster;
    const bmhs = this.caches.hosts(this.config.hostNamespace || p.metadata.namespace!);
    if (!bmhs) {
      const podAgents = await reconcileAgents(this.c, this.config, this.caches, p, spec, undefined);
      await this.writeStatus(p, "Pending", { podAgents, sshKeySecret }, [
        {
          type: CONDITION.ready,
          status: "False",
          reason: "WaitingForHosts",
          message: "the BareMetalHost inventory is not available yet (is the metal3.io BareMetalHost CRD installed?)",
        },
        { type: CONDITION.hostsAssigned, status: "Unknown", reason: "WaitingForHosts", message: "BareMetalHost informer has not synced" },
        reconciledCondition(p),
      ]);
      return new Stop({ requeueAfterMs: 5_000 });
    }
    const plan = cluster
      ? this.growPlan(key, p, specHash(spec), spec, bmhs.map(hostFacts), bmhs, cluster)
      : this.currentPlan(key, p, specHash(spec), spec, bmhs.map(hostFacts), bmhs);
    await this.recordHostDecision(key, p, "unmet" in plan ? { unmet: plan.unmet } : { hosts: plan.hosts });
    if (!("unmet" in plan)) return plan;
    const podAgents = await reconcileAgents(this.c, this.config, this.caches, p, spec, cluster ? p.status?.inventoryConfigMap : undefined);
    // An installed cluster stays usable, and its ledger (an operation that finished meanwhile) is kept current.
    await this.writeStatus(p, "Unsatisfiable", { podAgents, sshKeySecret, ...(cluster ? { cluster, operations: ledger.operations } : {}) }, [
      cluster
        ? {
            type: CONDITION.ready,
            status: "True",
            reason: "Installed",
            message: `the cluster is installed and usable; the change waits for hosts: ${plan.unmet}`,
          }
        : { type: CONDITION.ready, status: "False", reason: "Unsatisfiable", message: plan.unmet },
      { type: CONDITION.hostsAssigned, status: "False", reason: "Unsatisfiable", message: plan.unmet },
      {
        type: CONDITION.failed,
        status: "False",
        reason: "WaitingForHosts",
        message: `the ${cluster ? "change" : "install"} starts when matching hosts appear`,
      },
      reconciledCondition(p),
    ]);
    return new Stop({ requeueAfterMs: UNSATISFIABLE_RECHECK_MS });
  }

  /**
   * An Event for each new host decision (kubectl describe): the hosts chosen, or why none
   * fit (which requirement, which hosts were close). Recorded when the decision differs
   * from the one the status shows, not on every recheck.
   */
  private async recordHostDecision(key: string, p: Provisioning, decision: { hosts: AssignedHost[] } | { unmet: string }): Promise<void> {
    const [reason, text] = "unmet" in decision ? ["Unsatisfiable", decision.unmet] : ["Assigned", assignedText(decision.hosts)];
    const shown = p.status?.conditions?.find((c) => c.type === CONDITION.hostsAssigned);
    // The cached Provisioning may not show the status written a moment ago: what was last recorded counts too.
    const last = this.hostDecisions.get(key);
    this.hostDecisions.set(key, `${reason}\n${text}`);
    if (last === `${reason}\n${text}` || (shown?.reason === reason && shown.message === text)) return;
    const event =
      "unmet" in decision
        ? { type: "Warning" as const, reason: "Unsatisfiable", message: text }
        : { type: "Normal" as const, reason: "HostsAssigned", message: `${text}: for each role the smallest free host that meets it` };
    await recordEvent(this.c, this.log, p, event, this.now());
  }

  /** The install's hash and object names, its rendered inventory, and the runner's identity and kubeconfig Secret. */
  private async prepareInventory(key: string, p: Provisioning, spec: NormalizedSpec, plan: Plan, appliance: Appliance): Promise<Inventory> {
    const { registryCaPem, pins } = appliance;
    const version = clusterVersion(appliance.served, spec.kubernetesVersion);
    const hash = installHash(plan.specHash, plan.hosts, p.metadata.annotations?.[ANNOTATION_RETRY] ?? "", { registryCaPem, pins });
    const n = names(p, hash);
    await ensureSecret(this.c, kubeconfigSecret(p));
    await ensureServiceAccount(this.c, runnerServiceAccount(p));
    await ensureRole(this.c, runnerRole(p));
    await ensureRoleBinding(this.c, runnerRoleBinding(p));
    return {
      hash,
      names: { installJob: n.installJob!, inventory: n.inventory!, kubeconfig: n.kubeconfig },
      data: {
        hostsIni: renderHostsIni(plan.hosts, { provisioning: key, installHash: hash }),
        groupVarsYaml: renderGroupVars(this.config, key, version),
        registryCaPem,
        pins,
      },
      status: {
        assignedHosts: plan.hosts,
        specHash: plan.specHash,
        installHash: hash,
        installJob: n.installJob!,
        inventoryConfigMap: n.inventory!,
        kubeconfigSecret: n.kubeconfig,
      },
      outcome: installOutcome(plan.hosts, version, appliance.components),
    };
  }

  /**
   * The install Job: one per install hash. An install that ran to its end and whose Job is
   * gone (deleted or pruned) keeps its outcome and never runs again.
   */
  private async runInstall(key: string, p: Provisioning, inventory: Inventory): Promise<Operation> {
    const namespace = p.metadata.namespace!;
    const jobs = this.ownedJobs(p);
    let job = jobs.find((j) => j.metadata?.annotations?.[ANNOTATION_INSTALL_HASH] === inventory.hash);
    const finishedBefore = p.status?.installHash === inventory.hash && (p.status.phase === "Ready" || p.status.phase === "Failed");
    if (!job && finishedBefore) return { finished: p.status!.phase! };
    await ensureConfigMap(this.c, inventoryConfigMap(p, inventory.hash, inventory.data));
    if (!job) {
      for (const old of jobs) {
        if (jobState(old).state === "running") {
          this.log.info("deleting superseded install Job", { provisioning: key, job: old.metadata?.name });
          await this.deleteJob(namespace, old.metadata!.name!);
        }
      }
      const hosts = inventory.status.assignedHosts!;
      const made = await this.createJob(p, inventory.hash, undefined, {
        hosts: hosts.map((h) => h.name),
        description: `${this.config.playbook} installs ${hosts.map((h) => `${roleLabel(h)}=${h.name}`).join(", ")}`,
        ...(inventory.outcome.kubernetesVersion ? { kubernetesVersion: inventory.outcome.kubernetesVersion } : {}),
      });
      job = made.job;
      if (made.created) {
        this.log.info("created install Job", { provisioning: key, job: inventory.names.installJob, hosts: assignedText(inventory.status.assignedHosts!) });
        await recordEvent(this.c, this.log, p, operationStartedEvent(recordOf(job, [])), this.now());
      }
    }
    await this.prune(p, jobs, inventory.hash);
    return { job };
  }

  /** Status from the operation: a finished install keeps its phase; a Job's state decides otherwise. An install that just ended says so in an Event. */
  private async writeOutcome(p: Provisioning, operation: Operation, status: ProvisioningStatus, plan: Plan, outcome: ClusterState): Promise<Phase> {
    const conditions: [ConditionInput, ConditionInput] = [assignedCondition(plan.hosts), reconciledCondition(p)];
    if ("finished" in operation) {
      await this.writeStatus(p, operation.finished, status, conditions);
      return operation.finished;
    }
    const phase = await this.reportInstall(p, operation.job, status, conditions, outcome);
    const ended = phase !== "Installing" && (p.status?.phase !== phase || p.status.installJob !== operation.job.metadata?.name);
    if (ended) {
      const record = recordOf(operation.job, this.jobPods(p.metadata.namespace!, operation.job));
      await recordEvent(
        this.c,
        this.log,
        p,
        operationFinishedEvent(phase === "Ready" ? record : { ...record, result: "Failed", message: record.message ?? "no kubeconfig handed back" }),
        this.now(),
      );
    }
    return phase;
  }

  /**
   * Without the registry's site CA no node could pull an image, without the pins kubespray
   * would not know what the appliance serves: no inventory and no Job. The Provisioning says
   * why (condition and Event) and is retried with the key's backoff. An install that
   * already started keeps its phase and Ready: only new Jobs wait.
   */
  private async waitForAppliance(
    p: Provisioning,
    spec: NormalizedSpec,
    plan: Plan,
    sshKeySecret: string,
    { reason, message }: { reason: string; message: string },
  ): Promise<ReconcileResult> {
    await recordEvent(this.c, this.log, p, { type: "Warning", reason, message }, this.now());
    const started = ["Installing", "Ready", "Failed", "Updating", "UpdateFailed"].includes(p.status?.phase ?? "");
    const podAgents = await reconcileAgents(this.c, this.config, this.caches, p, spec, undefined);
    const waiting: ConditionInput = { type: CONDITION.inventoryReady, status: "False", reason, message };
    await this.writeStatus(p, started ? p.status!.phase! : "Pending", { podAgents, sshKeySecret, assignedHosts: plan.hosts, specHash: plan.specHash }, [
      ...(started ? [] : [{ ...waiting, type: CONDITION.ready }]),
      assignedCondition(plan.hosts),
      waiting,
      reconciledCondition(p),
    ]);
    return { retryWithBackoff: true };
  }

  /** Status from the install Job's state: Installing, Failed (Job failed, or no kubeconfig handed back) or Ready. */
  private async reportInstall(
    p: Provisioning,
    job: V1Job,
    base: ProvisioningStatus,
    [assigned, reconciled]: [ConditionInput, ConditionInput],
    outcome: ClusterState,
  ): Promise<Phase> {
    const namespace = p.metadata.namespace!;
    const pods = this.jobPods(namespace, job);
    const record = recordOf(job, pods);
    const n = {
      namespace,
      installJob: base.installJob!,
      inventory: base.inventoryConfigMap!,
      kubeconfig: base.kubeconfigSecret!,
      logs: this.logsHint(namespace, job),
    };
    const { phase, conditions, failure } = installStatus(await this.installJobState(job, pods, namespace, n.kubeconfig), n);
    const operations = withRecord(base.operations ?? [], failure ? { ...record, result: "Failed", message: failure } : record);
    await this.writeStatus(p, phase, { ...base, operations, ...(phase === "Ready" ? { cluster: outcome } : {}) }, [
      conditions[0]!,
      assigned,
      ...conditions.slice(1),
      reconciled,
    ]);
    return phase;
  }

  /** The install Job's state, with what decides the outcome: the runner's cause of a failure, the kubeconfig of a success. */
  private async installJobState(job: V1Job, pods: V1Pod[], namespace: string, kubeconfigSecretName: string): Promise<InstallJobState> {
    const found = jobState(job);
    if (found.state === "running") return { state: "running" };
    if (found.state === "succeeded")
      return { state: "succeeded", kubeconfig: (await readKubeconfigSecret(this.c, namespace, kubeconfigSecretName)) !== undefined };
    const cause = runnerFailure(pods);
    return { state: "failed", reason: found.reason, ...(found.message ? { message: found.message } : {}), ...(cause ? { cause } : {}) };
  }

  /**
   * The assignment to use: the one held when the spec is unchanged, complete, and all its
   * hosts are still there, usable and fitting; otherwise a new plan.
   */
  private currentPlan(
    key: string,
    p: Provisioning,
    sh: string,
    spec: NormalizedSpec,
    facts: HostFacts[],
    bmhs: readonly BareMetalHost[],
  ): Plan | { unmet: string } {
    const roles = allRoles(spec);
    const held =
      this.plans.get(key) ??
      (p.status?.specHash && p.status.assignedHosts?.length ? { specHash: p.status.specHash, hosts: p.status.assignedHosts } : undefined);
    if (held && held.specHash === sh && held.hosts.length === roles.length) {
      const byKey = new Map(facts.map((f) => [f.key, f]));
      const claims = this.plans.claimsExcept(key);
      const stillGood = held.hosts.every((h) => {
        const f = byKey.get(`${h.namespace}/${h.name}`);
        const role = roles.find((r) => r.role === h.role && r.index === h.index);
        return f && role && !f.unusable && !claims.has(f.key) && fits(role, f);
      });
      if (stillGood) {
        if (this.plans.get(key) !== held) this.plans.set(key, held);
        return held;
      }
    }
    const result = planAssignment({ roles, hosts: facts, claimedBy: this.plans.claimsExcept(key) });
    if (!result.ok) return { unmet: result.message };
    const bmhByKey = new Map(bmhs.map((b) => [`${b.metadata.namespace}/${b.metadata.name}`, b]));
    const hosts: AssignedHost[] = result.placements.map(({ role, host }) => toAssignedHost(role, host, bmhByKey.get(host.key)!));
    const plan = { specHash: sh, hosts };
    const released = this.plans.set(key, plan);
    if (released.length) this.onHostsReleased(released);
    this.log.info("assigned hosts", { provisioning: key, hosts: hosts.map((h) => `${roleLabel(h)}=${h.name}`).join(", ") });
    return plan;
  }

  /** The assignment once the cluster is installed (bpa/assign/grow.ts); recorded in the plan registry. */
  private growPlan(
    key: string,
    p: Provisioning,
    sh: string,
    spec: NormalizedSpec,
    facts: HostFacts[],
    bmhs: readonly BareMetalHost[],
    cluster: ClusterState,
  ): Plan | { unmet: string } {
    const grown = growAssignment({
      roles: allRoles(spec),
      installed: cluster.hosts,
      held: this.plans.get(key)?.hosts ?? p.status?.assignedHosts ?? [],
      facts,
      bmhs,
      claimedBy: this.plans.claimsExcept(key),
    });
    if (!grown.ok) return { unmet: grown.unmet };
    const plan: Plan = { specHash: sh, hosts: grown.hosts, ...(grown.retained.length ? { retained: grown.retained } : {}) };
    const before = this.plans.get(key);
    if (before && jsonEqual(before, plan)) return before;
    const released = this.plans.set(key, plan);
    if (released.length) this.onHostsReleased(released);
    if (grown.added.length)
      this.log.info("assigned hosts to new roles", { provisioning: key, hosts: grown.added.map((h) => `${roleLabel(h)}=${h.name}`).join(", ") });
    return plan;
  }

  /**
   * Day 2, on the installed cluster: the running operation is tracked (one at a time);
   * without one, the next the spec asks for starts (bpa/jobs/operation.ts). A failed
   * operation is not run again until the retry annotation changes or the spec moves on;
   * the cluster stays as it was before it.
   */
  private async dayTwo(
    key: string,
    p: Provisioning,
    spec: NormalizedSpec,
    plan: Plan,
    ledger: Ledger,
    appliance: Appliance,
    sshKeySecret: string,
  ): Promise<ReconcileResult> {
    for (const record of ledger.finished) await recordEvent(this.c, this.log, p, operationFinishedEvent(record), this.now());
    const cluster = ledger.cluster!;
    let operations = ledger.operations;
    let inventoryConfigMap = p.status?.inventoryConfigMap;
    let state: DayTwoState = { upToDate: true };
    if (ledger.running) {
      state = { running: ledger.running };
      inventoryConfigMap = names(p, ledger.running.job.metadata!.annotations![ANNOTATION_INSTALL_HASH]).inventory;
    } else {
      const verdict = nextOperation({
        cluster,
        wanted: plan.hosts,
        wantedVersion: clusterVersion(appliance.served, spec.kubernetesVersion),
        servedVersions: appliance.served ?? [],
        servedComponents: appliance.components,
      });
      if ("blocked" in verdict) {
        state = { refused: verdict.blocked };
        await recordEvent(this.c, this.log, p, { type: "Warning", reason: "ChangeRefused", message: verdict.blocked }, this.now());
      }
      if ("operation" in verdict) {
        const op = verdict.operation;
        const hash = operationHash(op, cluster.revision, p.metadata.annotations?.[ANNOTATION_RETRY] ?? "", appliance);
        const failed = operations.find((r) => r.id === hash.slice(0, 16) && r.result !== "Running");
        if (failed) state = { failed };
        else {
          const running = await this.startOperation(key, p, op, hash, appliance);
          state = { running };
          operations = withRecord(operations, running.record);
          inventoryConfigMap = names(p, hash).inventory;
        }
      }
    }
    const podAgents = await reconcileAgents(this.c, this.config, this.caches, p, spec, inventoryConfigMap);
    const nodes = "running" in state ? {} : await observeNodes(this.c, p, this.now(), ledger.finished.length > 0);
    const { phase, conditions } = dayTwoStatus(p, cluster, operations, state);
    const addons = await reconcileAddons({
      c: this.c,
      config: this.config,
      log: this.log,
      p,
      jobs: this.allOwnedJobs(p),
      registryCaPem: appliance.registryCaPem,
      clusterReady: !("running" in state),
      logsHint: (job) => this.logsHint(p.metadata.namespace!, job),
      now: this.now(),
    });
    await this.writeStatus(
      p,
      phase,
      {
        assignedHosts: plan.hosts,
        specHash: plan.specHash,
        sshKeySecret,
        podAgents,
        cluster,
        operations,
        ...(inventoryConfigMap ? { inventoryConfigMap } : {}),
        ...nodes.fields,
        addons: addons.addons,
      },
      [assignedCondition(plan.hosts), reconciledCondition(p), ...(nodes.condition ? [nodes.condition] : []), ...conditions, addons.condition],
    );
    const requeue = Math.min("upToDate" in state ? NODES_REFRESH_MS : Infinity, addons.requeueAfterMs ?? Infinity);
    return requeue < Infinity ? { requeueAfterMs: requeue } : {};
  }

  /** Writes the operation's inventory and creates its Job; one Event says what it does. */
  private async startOperation(
    key: string,
    p: Provisioning,
    op: OperationPlan,
    hash: string,
    { registryCaPem, pins }: ApplianceInputs,
  ): Promise<{ job: V1Job; record: OperationRecord }> {
    const hostsIni = renderHostsIni(op.inventoryHosts, { provisioning: key, installHash: hash }, { mastersAreNodes: op.mastersAreNodes });
    const groupVarsYaml = renderGroupVars(this.config, key, op.kubernetesVersion);
    await ensureConfigMap(this.c, inventoryConfigMap(p, hash, { hostsIni, groupVarsYaml, registryCaPem, pins }));
    const { job, created } = await this.createJob(p, hash, op);
    await this.prune(p, this.ownedJobs(p), hash);
    const record = recordOf(job, []);
    if (created) {
      this.log.info("started a day-2 operation", { provisioning: key, job: job.metadata?.name, operation: op.summary });
      await recordEvent(this.c, this.log, p, operationStartedEvent(record), this.now());
    }
    return { job, record };
  }

  /** The Job, and whether this call created it (an existing one: the informer's cache had not seen it yet). */
  private async createJob(
    p: Provisioning,
    hash: string,
    op?: OperationPlan,
    installRecord?: Parameters<typeof installJob>[3],
  ): Promise<{ job: V1Job; created: boolean }> {
    const body = op ? operationJob(p, this.config, hash, op) : installJob(p, this.config, hash, installRecord);
    const namespace = p.metadata.namespace!;
    try {
      return { job: await this.c.batch.createNamespacedJob({ namespace, body }), created: true };
    } catch (error) {
      if (!isConflict(error)) throw error;
      const existing = await this.c.batch.readNamespacedJob({ namespace, name: body.metadata!.name! });
      if (!ownedBy(existing, p.metadata.uid)) {
        throw new Error(
          `Job ${body.metadata!.name} exists but belongs to another owner (a deleted Provisioning of the same name?); waiting for it to be deleted`,
        );
      }
      return { job: existing, created: false };
    }
  }

  private async deleteJob(namespace: string, name: string): Promise<void> {
    try {
      await this.c.batch.deleteNamespacedJob({ namespace, name, propagationPolicy: "Background" });
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  /** Deletes finished Jobs of other hashes beyond the history limit, and inventories no Job uses. */
  private async prune(p: Provisioning, jobs: readonly V1Job[], current: string): Promise<void> {
    const namespace = p.metadata.namespace!;
    const old = jobs
      .filter((j) => j.metadata?.annotations?.[ANNOTATION_INSTALL_HASH] !== current && jobState(j).state !== "running")
      .sort((a, b) => created(b) - created(a));
    const keep = Math.max(0, this.config.job.historyLimit - 1);
    for (const j of old.slice(keep)) await this.deleteJob(namespace, j.metadata!.name!);
    const keptHashes = new Set([current, ...old.slice(0, keep).map((j) => j.metadata?.annotations?.[ANNOTATION_INSTALL_HASH])]);
    if (old.length === 0) return;
    const cms = await this.c.core.listNamespacedConfigMap({
      namespace,
      labelSelector: `${BPA_GROUP}/component=inventory`,
    });
    for (const cm of cms.items) {
      if (!ownedBy(cm, p.metadata.uid) || keptHashes.has(cm.metadata?.annotations?.[ANNOTATION_INSTALL_HASH])) continue;
      try {
        await this.c.core.deleteNamespacedConfigMap({ namespace, name: cm.metadata!.name! });
      } catch (error) {
        if (!isNotFound(error)) throw error;
      }
    }
  }

  private jobPods(namespace: string, job: V1Job): V1Pod[] {
    return this.caches.pods(namespace).filter((pod) => ownedBy(pod, job.metadata?.uid));
  }

  private logsHint(namespace: string, job: V1Job): string {
    const pods = this.jobPods(namespace, job)
      .map((pod) => pod.metadata!.name!)
      .sort();
    const name = job.metadata!.name!;
    return `logs: kubectl -n ${namespace} logs job/${name}${pods.length ? ` (pods: ${pods.join(", ")})` : ""}`;
  }

  /** Writes status through the status subresource when it changed. */
  private async writeStatus(p: Provisioning, phase: Phase, fields: ProvisioningStatus, conditions: ConditionInput[]): Promise<void> {
    const old = p.status ?? {};
    const next: ProvisioningStatus = {
      ...(p.metadata.generation !== undefined ? { observedGeneration: p.metadata.generation } : {}),
      phase,
      // Unsatisfiable or invalid: the previous assignment stays visible.
      assignedHosts: fields.assignedHosts ?? old.assignedHosts,
      specHash: fields.specHash ?? old.specHash,
      installHash: fields.installHash ?? old.installHash,
      installJob: fields.installJob ?? old.installJob,
      inventoryConfigMap: fields.inventoryConfigMap ?? old.inventoryConfigMap,
      kubeconfigSecret: fields.kubeconfigSecret ?? old.kubeconfigSecret,
      sshKeySecret: fields.sshKeySecret ?? old.sshKeySecret,
      podAgents: fields.podAgents ?? old.podAgents ?? [],
      cluster: fields.cluster ?? old.cluster,
      operations: fields.operations ?? old.operations,
      nodes: fields.nodes ?? old.nodes,
      nodesObservedAt: fields.nodesObservedAt ?? old.nodesObservedAt,
      addons: fields.addons ?? old.addons,
      conditions: mergeConditions(old.conditions, conditions, p.metadata.generation, statusTime(this.now())),
    };
    for (const k of Object.keys(next) as (keyof ProvisioningStatus)[]) if (next[k] === undefined) delete next[k];
    if (jsonEqual(old, next)) return;
    await this.c.custom.patchNamespacedCustomObjectStatus(
      {
        group: BPA_GROUP,
        version: BPA_VERSION,
        namespace: p.metadata.namespace!,
        plural: PROVISIONING_PLURAL,
        name: p.metadata.name!,
        body: statusPatch(old, next),
      },
      mergePatch,
    );
  }

  /** Best effort, after a reconcile error: say so in status, keep everything else. */
  async reportError(key: string, error: unknown, retryInMs: number): Promise<void> {
    const [namespace, name] = key.split("/") as [string, string];
    const p = this.caches.provisioning(namespace, name);
    if (!p || p.metadata.deletionTimestamp) return;
    void retryInMs;
    const message = `${errorMessage(error)} (retrying with backoff)`;
    const old = p.status?.conditions?.find((c) => c.type === CONDITION.reconciled);
    if (old?.status === "False" && old.message === message) return; // said already
    const conditions: Condition[] = mergeConditions(
      p.status?.conditions,
      [{ type: CONDITION.reconciled, status: "False", reason: "ReconcileError", message }],
      p.metadata.generation,
      statusTime(this.now()),
    );
    try {
      await this.c.custom.patchNamespacedCustomObjectStatus(
        {
          group: BPA_GROUP,
          version: BPA_VERSION,
          namespace,
          plural: PROVISIONING_PLURAL,
          name,
          body: { status: { conditions } },
        },
        mergePatch,
      );
    } catch (patchError) {
      this.log.warn("cannot write the error to status", { provisioning: key, error: errorMessage(patchError) });
    }
  }
}
