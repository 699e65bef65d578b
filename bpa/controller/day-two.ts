/**
 * What status says about an installed cluster (bpa/README.md, "Day 2"): its phase and
 * conditions while an operation runs, after one failed or was refused, or when nothing is
 * left to do; and the Events of operations. Pure: the reconciler writes them.
 */
import type { V1Job } from "@kubernetes/client-node";
import { ANNOTATION_RETRY } from "../api/constants.js";
import { roleLabel } from "../api/spec.js";
import type { ClusterState, OperationRecord, Phase, Provisioning } from "../api/types.js";
import { names } from "../jobs/names.js";
import { CONDITION, type ConditionInput } from "./status.js";

export type DayTwoState = { running: { job: V1Job; record: OperationRecord } } | { refused: string } | { failed: OperationRecord } | { upToDate: true };

/** "add-control-plane" -> "AddControlPlane", for Event and condition reasons. */
export const reasonWord = (kind: string) => kind.replace(/(^|-)(\w)/g, (_m, _d, c: string) => c.toUpperCase());

const describe = (r: OperationRecord) => r.description ?? `${r.playbook} (${r.kind})`;

export function dayTwoStatus(
  p: Provisioning,
  cluster: ClusterState,
  operations: readonly OperationRecord[],
  state: DayTwoState,
): { phase: Phase; conditions: ConditionInput[] } {
  const namespace = p.metadata.namespace!;
  const usable = `the cluster is installed and usable (Kubernetes ${cluster.kubernetesVersion ?? "?"}; ${cluster.hosts.map((h) => `${roleLabel(h)}=${h.name}`).join(", ")}); its kubeconfig is in Secret ${names(p).kubeconfig}`;
  const ready: ConditionInput = { type: CONDITION.ready, status: "True", reason: "Installed", message: usable };
  if ("running" in state) {
    const { job, record } = state.running;
    const jobName = job.metadata!.name!;
    return {
      phase: "Updating",
      conditions: [
        { ...ready, reason: "Updating", message: `${usable}; ${describe(record)} runs in Job ${jobName}` },
        {
          type: CONDITION.updating,
          status: "True",
          reason: reasonWord(record.kind),
          message: `${describe(record)}; logs: kubectl -n ${namespace} logs -f job/${jobName}`,
        },
        { type: CONDITION.failed, status: "False", reason: "Updating", message: "" },
      ],
    };
  }
  if ("refused" in state) {
    return {
      phase: "UpdateFailed",
      conditions: [
        ready,
        { type: CONDITION.updating, status: "False", reason: "ChangeRefused", message: state.refused },
        { type: CONDITION.failed, status: "True", reason: "ChangeRefused", message: `the spec asks for a change the BPA does not make: ${state.refused}` },
      ],
    };
  }
  if ("failed" in state) {
    const f = state.failed;
    const reason = `${reasonWord(f.kind)}Failed`;
    const message =
      `${describe(f)} failed in Job ${f.job}: ${f.message ?? "see its logs"}. ` +
      `The cluster runs as before it (${cluster.hosts.map((h) => h.name).join(", ")}, Kubernetes ${cluster.kubernetesVersion ?? "?"}). ` +
      `Logs: kubectl -n ${namespace} logs job/${f.job}. To retry, set the annotation ${ANNOTATION_RETRY} to a new value; to give up, change the spec back.`;
    return {
      phase: "UpdateFailed",
      conditions: [
        ready,
        { type: CONDITION.updating, status: "False", reason, message: describe(f) },
        { type: CONDITION.failed, status: "True", reason, message },
      ],
    };
  }
  const last = [...operations].reverse().find((r) => r.result === "Succeeded");
  return {
    phase: "Ready",
    conditions: [
      ready,
      { type: CONDITION.updating, status: "False", reason: "UpToDate", message: last ? `last: ${describe(last)} (Job ${last.job})` : "" },
      { type: CONDITION.failed, status: "False", reason: "UpToDate", message: "" },
    ],
  };
}

export function operationStartedEvent(record: OperationRecord) {
  return { type: "Normal" as const, reason: `${reasonWord(record.kind)}Started`, message: `${describe(record)} (Job ${record.job})` };
}

export function operationFinishedEvent(record: OperationRecord) {
  const ok = record.result === "Succeeded";
  return {
    type: ok ? ("Normal" as const) : ("Warning" as const),
    reason: `${reasonWord(record.kind)}${ok ? "Succeeded" : "Failed"}`,
    message: ok ? `${describe(record)}: done (Job ${record.job})` : `${describe(record)} failed (Job ${record.job}): ${record.message ?? ""}`,
  };
}
