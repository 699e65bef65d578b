/**
 * What status says about an install (bpa/README.md, "Status"): its phase and conditions
 * while the install Job runs, after it failed, and after it succeeded with or without the
 * kubeconfig handed back. Pure: the reconciler reads the Job and the Secret, and writes them.
 */
import { ANNOTATION_RETRY } from "../api/constants.js";
import type { Phase } from "../api/types.js";
import { KUBECONFIG_KEY } from "../jobs/contract.js";
import { CONDITION, type ConditionInput } from "./status.js";

/** The install Job as the reconciler found it. */
export type InstallJobState =
  { state: "running" } | { state: "failed"; reason: string; message?: string; cause?: string } | { state: "succeeded"; kubeconfig: boolean };

export interface InstallNames {
  namespace: string;
  installJob: string;
  inventory: string;
  kubeconfig: string;
  /** "logs: kubectl -n ns logs job/x (pods: …)" */
  logs: string;
}

export function installStatus(job: InstallJobState, n: InstallNames): { phase: Phase; conditions: ConditionInput[]; failure?: string } {
  const inventory: ConditionInput = {
    type: CONDITION.inventoryReady,
    status: "True",
    reason: "Written",
    message: `ConfigMap ${n.inventory} (hosts.ini, offline.yml, registry-ca.crt, kubespray-pins.yml)`,
  };
  if (job.state === "running") {
    return {
      phase: "Installing",
      conditions: [
        { type: CONDITION.ready, status: "False", reason: "Installing", message: `kubespray is running in Job ${n.installJob}` },
        inventory,
        {
          type: CONDITION.installing,
          status: "True",
          reason: "JobRunning",
          message: `Job ${n.installJob}; logs: kubectl -n ${n.namespace} logs -f job/${n.installJob}`,
        },
        { type: CONDITION.failed, status: "False", reason: "Installing", message: "" },
      ],
    };
  }
  if (job.state === "failed") {
    const message = `install Job ${n.installJob} failed${job.cause ? `: ${job.cause}` : ""} (${job.reason}${job.message ? `: ${job.message}` : ""}); ${n.logs}. To retry with the same spec, set the annotation ${ANNOTATION_RETRY} to a new value.`;
    return {
      phase: "Failed",
      conditions: [
        { type: CONDITION.ready, status: "False", reason: "InstallFailed", message },
        inventory,
        { type: CONDITION.installing, status: "False", reason: "JobFailed", message: `Job ${n.installJob} failed` },
        { type: CONDITION.failed, status: "True", reason: "InstallFailed", message },
      ],
    };
  }
  const succeeded: ConditionInput = { type: CONDITION.installing, status: "False", reason: "JobSucceeded", message: `Job ${n.installJob} succeeded` };
  if (!job.kubeconfig) {
    const message = `install Job ${n.installJob} succeeded but the runner handed back no kubeconfig: Secret ${n.kubeconfig} has no "${KUBECONFIG_KEY}" data; ${n.logs}`;
    return {
      phase: "Failed",
      failure: "no kubeconfig handed back",
      conditions: [
        { type: CONDITION.ready, status: "False", reason: "NoKubeconfig", message },
        inventory,
        succeeded,
        { type: CONDITION.failed, status: "True", reason: "NoKubeconfig", message },
      ],
    };
  }
  return {
    phase: "Ready",
    conditions: [
      {
        type: CONDITION.ready,
        status: "True",
        reason: "Installed",
        message: `the cluster is installed; its kubeconfig is in Secret ${n.kubeconfig} (key "${KUBECONFIG_KEY}")`,
      },
      inventory,
      succeeded,
      { type: CONDITION.failed, status: "False", reason: "Installed", message: "" },
    ],
  };
}
