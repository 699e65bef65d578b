/**
 * Why an install Job failed, in the runner's own words: the termination message of its
 * pod (images/kubespray-runner/entrypoint.py writes the first failed task, its host and
 * its message there; the container's FallbackToLogsOnError policy gives the log's tail
 * when a runner died before writing one).
 */
import type { V1Pod } from "@kubernetes/client-node";

const MAX = 1500;

export function runnerFailure(pods: readonly V1Pod[]): string | undefined {
  const newestFirst = [...pods].sort((a, b) => String(b.metadata?.creationTimestamp ?? "").localeCompare(String(a.metadata?.creationTimestamp ?? "")));
  for (const pod of newestFirst) {
    for (const status of pod.status?.containerStatuses ?? []) {
      const message = (status.state?.terminated ?? status.lastState?.terminated)?.message?.trim();
      if (message) return message.length > MAX ? `${message.slice(0, MAX)}…` : message;
    }
  }
  return undefined;
}
