/**
 * Install status, read from the Kubernetes API at each request: the Provisionings (phase,
 * conditions, assigned hosts, what the operator wrote in status), their install Jobs, and
 * the BareMetalHosts. Nothing is kept here: the operator's status is the record.
 */
import type { V1Job } from "@kubernetes/client-node";
import {
  BMH_PLURAL,
  BPA_GROUP,
  BPA_VERSION,
  LABEL_COMPONENT,
  LABEL_MANAGED_BY,
  MANAGED_BY,
  METAL3_GROUP,
  METAL3_VERSION,
  PROVISIONING_PLURAL,
} from "../api/constants.js";
import type { BareMetalHost, Provisioning } from "../api/types.js";
import { statusCode, type Clients } from "../runtime/kube.js";

export interface JobState {
  name: string;
  state: "running" | "succeeded" | "failed" | "pending";
  startTime?: string;
  completionTime?: string;
  message?: string;
}

export interface ProvisioningStatusView {
  namespace: string;
  name: string;
  phase: string;
  ready?: { status: string; reason: string; message: string };
  conditions: { type: string; status: string; reason: string; message: string; lastTransitionTime: string }[];
  hosts: { name: string; namespace: string; role: string; ip: string; mac: string }[];
  installJob?: JobState;
  kubeconfigSecret?: string;
  podAgents: string[];
  created?: string;
}

export interface HostView {
  namespace: string;
  name: string;
  state: string;
  online?: boolean;
  cpu?: number;
  ramMebibytes?: number;
  ip?: string;
  consumer?: string;
}

function jobState(job: V1Job): JobState {
  const c = job.status?.conditions ?? [];
  const is = (type: string) => c.some((x) => x.type === type && x.status === "True");
  const failed = c.find((x) => (x.type === "Failed" || x.type === "FailureTarget") && x.status === "True");
  const state = is("Complete") || is("SuccessCriteriaMet") ? "succeeded" : failed ? "failed" : job.status?.active ? "running" : "pending";
  return {
    name: job.metadata!.name!,
    state,
    ...(job.status?.startTime ? { startTime: new Date(job.status.startTime).toISOString() } : {}),
    ...(job.status?.completionTime ? { completionTime: new Date(job.status.completionTime).toISOString() } : {}),
    ...(failed?.message ? { message: failed.message } : {}),
  };
}

export async function listProvisionings(c: Clients): Promise<ProvisioningStatusView[]> {
  const list = (await c.custom.listCustomObjectForAllNamespaces({ group: BPA_GROUP, version: BPA_VERSION, plural: PROVISIONING_PLURAL })) as {
    items: Provisioning[];
  };
  const jobs = await c.batch.listJobForAllNamespaces({ labelSelector: `${LABEL_MANAGED_BY}=${MANAGED_BY},${LABEL_COMPONENT}=install` });
  const jobByKey = new Map(jobs.items.map((j) => [`${j.metadata!.namespace}/${j.metadata!.name}`, j]));
  return list.items
    .map((p) => {
      const ns = p.metadata.namespace ?? "";
      const s = p.status ?? {};
      const job = s.installJob ? jobByKey.get(`${ns}/${s.installJob}`) : undefined;
      const ready = s.conditions?.find((x) => x.type === "Ready");
      return {
        namespace: ns,
        name: p.metadata.name ?? "",
        phase: s.phase ?? "Pending",
        ...(ready ? { ready: { status: ready.status, reason: ready.reason, message: ready.message } } : {}),
        conditions: (s.conditions ?? []).map(({ type, status, reason, message, lastTransitionTime }) => ({
          type,
          status,
          reason,
          message,
          lastTransitionTime,
        })),
        hosts: (s.assignedHosts ?? []).map(({ name, namespace, role, ip, mac }) => ({ name, namespace, role, ip, mac })),
        ...(job
          ? { installJob: jobState(job) }
          : s.installJob
            ? { installJob: { name: s.installJob, state: "pending" as const, message: "the Job is gone (pruned or not yet seen)" } }
            : {}),
        ...(s.kubeconfigSecret ? { kubeconfigSecret: s.kubeconfigSecret } : {}),
        podAgents: s.podAgents ?? [],
        ...(p.metadata.creationTimestamp ? { created: new Date(p.metadata.creationTimestamp as unknown as string).toISOString() } : {}),
      };
    })
    .sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}

/** BareMetalHosts of every namespace; none when Metal3's CRD is not installed. */
export async function listHosts(c: Clients): Promise<HostView[]> {
  let items: BareMetalHost[];
  try {
    items = (
      (await c.custom.listCustomObjectForAllNamespaces({ group: METAL3_GROUP, version: METAL3_VERSION, plural: BMH_PLURAL })) as { items: BareMetalHost[] }
    ).items;
  } catch (error) {
    if (statusCode(error) === 404) return [];
    throw error;
  }
  return items
    .map((h) => {
      const hw = h.status?.hardware;
      const ip = hw?.nics?.find((n) => n.ip)?.ip;
      const consumer = h.spec?.consumerRef ? `${h.spec.consumerRef.kind ?? ""}/${h.spec.consumerRef.name ?? ""}` : undefined;
      return {
        namespace: h.metadata.namespace ?? "",
        name: h.metadata.name ?? "",
        state: h.status?.provisioning?.state ?? "unknown",
        ...(h.spec?.online !== undefined ? { online: h.spec.online } : {}),
        ...(hw?.cpu?.count !== undefined ? { cpu: hw.cpu.count } : {}),
        ...(hw?.ramMebibytes !== undefined ? { ramMebibytes: hw.ramMebibytes } : {}),
        ...(ip ? { ip } : {}),
        ...(consumer ? { consumer } : {}),
      };
    })
    .sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}
