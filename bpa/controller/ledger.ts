/**
 * The operations ledger of one Provisioning: status.operations[] and status.cluster,
 * brought up to date from its Jobs. A day-2 Job carries the cluster it leads to
 * (annotation), so a Job that finished while no operator watched, or before its status
 * was written, is applied from the Job alone; an outcome applies only to the cluster
 * revision it was planned from, so an old Job can never roll the cluster back.
 */
import type { V1Job, V1Pod } from "@kubernetes/client-node";
import { ANNOTATION_INSTALL_HASH, ANNOTATION_OPERATION, ANNOTATION_OUTCOME, ANNOTATION_RECORD } from "../api/constants.js";
import type { ClusterState, OperationKind, OperationRecord, Provisioning } from "../api/types.js";
import { runnerFailure } from "../jobs/failure.js";
import { PLAYBOOK } from "../jobs/operation.js";
import { jobState } from "../runtime/owners.js";
import { statusTime } from "./status.js";

/** How many operations status keeps (more than the Job history limit can be, so every kept Job has its record). */
export const OPERATION_HISTORY = 24;

export interface Ledger {
  cluster?: ClusterState;
  operations: OperationRecord[];
  /** The day-2 operation whose Job runs now (at most one). */
  running?: { job: V1Job; record: OperationRecord };
  /** Operations that finished since status was last written (for Events). */
  finished: OperationRecord[];
}

const iso = (t: Date | string | undefined) => (t ? statusTime(t) : undefined);
const created = (j: V1Job) => new Date(j.metadata?.creationTimestamp ?? 0).getTime();

function operationKind(job: V1Job): OperationKind {
  return (job.metadata?.annotations?.[ANNOTATION_OPERATION] as OperationKind | undefined) ?? "install";
}

/** The record fields the Job was started with (operationRecordFields). */
function startFields(job: V1Job): Partial<OperationRecord> {
  try {
    return JSON.parse(job.metadata?.annotations?.[ANNOTATION_RECORD] ?? "{}") as Partial<OperationRecord>;
  } catch {
    return {};
  }
}

function parseOutcome(job: V1Job): ClusterState | undefined {
  const text = job.metadata?.annotations?.[ANNOTATION_OUTCOME];
  if (!text) return undefined;
  try {
    const value = JSON.parse(text) as ClusterState;
    return Array.isArray(value.hosts) && typeof value.revision === "number" ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The record of a Job as it stands now. */
export function recordOf(job: V1Job, pods: readonly V1Pod[], base?: OperationRecord): OperationRecord {
  const kind = operationKind(job);
  const outcome = parseOutcome(job);
  const state = jobState(job);
  const started = startFields(job);
  const record: OperationRecord = {
    ...started,
    ...base,
    id: job.metadata!.annotations![ANNOTATION_INSTALL_HASH]!.slice(0, 16),
    kind,
    playbook: base?.playbook ?? PLAYBOOK[kind],
    hosts: base?.hosts ?? started.hosts ?? outcome?.hosts.map((h) => h.name) ?? [],
    job: job.metadata!.name!,
    result: state.state === "running" ? "Running" : state.state === "succeeded" ? "Succeeded" : "Failed",
  };
  const version = record.kubernetesVersion ?? outcome?.kubernetesVersion;
  if (version) record.kubernetesVersion = version;
  const start = iso(job.status?.startTime ?? job.metadata?.creationTimestamp);
  if (start) record.startTime = start;
  if (state.state !== "running") {
    const done = iso(
      job.status?.completionTime ??
        job.status?.conditions?.find((c) => c.status === "True" && (c.type === "Failed" || c.type === "Complete"))?.lastTransitionTime,
    );
    if (done) record.completionTime = done;
  }
  if (state.state === "failed") {
    const cause = runnerFailure(pods);
    record.message = `${cause ? `${cause} ` : ""}(${state.reason}${state.message ? `: ${state.message}` : ""})`;
  }
  return record;
}

/**
 * The ledger from status and the Provisioning's Jobs (owned, from the cache). Install Jobs
 * only get their records here; whether an install produced a cluster (it needs the
 * kubeconfig) is the install step's decision.
 */
export function settle(p: Provisioning, jobs: readonly V1Job[], podsOf: (job: V1Job) => V1Pod[]): Ledger {
  const operations = [...(p.status?.operations ?? [])];
  let cluster = p.status?.cluster ?? legacyCluster(p);
  let running: Ledger["running"];
  const finished: OperationRecord[] = [];
  for (const job of [...jobs].sort((a, b) => created(a) - created(b))) {
    const hash = job.metadata?.annotations?.[ANNOTATION_INSTALL_HASH];
    if (!hash) continue;
    const at = operations.findIndex((r) => r.id === hash.slice(0, 16));
    const old = at >= 0 ? operations[at] : undefined;
    if (old && old.result !== "Running") continue; // settled before
    const record = recordOf(job, podsOf(job), old);
    const kind = record.kind;
    if (kind !== "install" && record.result === "Running") running = { job, record };
    if (kind !== "install" && record.result !== "Running") {
      const outcome = parseOutcome(job);
      const applies = outcome && cluster && outcome.revision === cluster.revision + 1;
      if (record.result === "Succeeded" && applies) cluster = outcome;
      if (record.result === "Succeeded" && !applies) {
        record.result = "Failed";
        record.message = `succeeded, but planned for cluster revision ${outcome ? outcome.revision - 1 : "?"} while the cluster is at ${cluster?.revision ?? "none"}: not applied`;
      }
      finished.push(record);
    }
    if (at >= 0) operations[at] = record;
    else operations.push(record);
  }
  return { ...(cluster ? { cluster } : {}), operations: operations.slice(-OPERATION_HISTORY), ...(running ? { running } : {}), finished };
}

/** A cluster installed before status.cluster existed: its Ready install is the cluster. */
function legacyCluster(p: Provisioning): ClusterState | undefined {
  const s = p.status;
  if (s?.phase !== "Ready" || !s.assignedHosts?.length || !s.installHash) return undefined;
  return { hosts: s.assignedHosts, mastersAreNodes: !s.assignedHosts.some((h) => h.role === "worker"), revision: 1 };
}

/** Replaces (or appends) a record, keeping the history's length. */
export function withRecord(operations: readonly OperationRecord[], record: OperationRecord): OperationRecord[] {
  const out = [...operations];
  const at = out.findIndex((r) => r.id === record.id);
  if (at >= 0) out[at] = { ...out[at], ...record };
  else out.push(record);
  return out.slice(-OPERATION_HISTORY);
}
