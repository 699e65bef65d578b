/** Owner references and Job states, as the reconciler reads them. */
import type { V1Job } from "@kubernetes/client-node";

export function ownedBy(obj: { metadata?: { ownerReferences?: { uid?: string }[] } }, uid: string | undefined): boolean {
  return Boolean(uid) && (obj.metadata?.ownerReferences ?? []).some((o) => o.uid === uid);
}

export type JobState = { state: "running" | "succeeded" | "failed"; reason: string; message: string };

export function jobState(job: V1Job): JobState {
  const conditions = job.status?.conditions ?? [];
  const is = (type: string) => conditions.find((c) => c.type === type && c.status === "True");
  const failed = is("Failed") ?? is("FailureTarget");
  if (failed) return { state: "failed", reason: failed.reason ?? "Failed", message: failed.message ?? "" };
  const complete = is("Complete") ?? is("SuccessCriteriaMet");
  if (complete) return { state: "succeeded", reason: complete.reason ?? "Complete", message: complete.message ?? "" };
  return { state: "running", reason: "Running", message: "" };
}
