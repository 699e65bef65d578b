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
      const terminated = status.state?.terminated ?? status.lastState?.terminated;
      // The kubelet lost the container (the appliance lost power or restarted while the runner
      // ran): its "message" is only the log's tail at that moment, not a reason.
      if (terminated?.reason === "Unknown")
        return `the runner was cut off mid-run: its container was lost (exit code ${terminated.exitCode}), as when the appliance loses power or restarts`;
      const message = terminated?.message?.trim();
      if (message) return message.length > MAX ? `${message.slice(0, MAX)}…` : message;
    }
  }
  return undefined;
}
