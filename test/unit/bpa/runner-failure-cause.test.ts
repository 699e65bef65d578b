import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { runnerFailure } from "../../../bpa/jobs/failure.js";

const pod = (terminated: Record<string, unknown>): V1Pod => ({
  metadata: { name: "install-x" },
  status: { containerStatuses: [{ name: "kubespray", image: "r", imageID: "", ready: false, restartCount: 0, state: { terminated: terminated as never } }] },
});

describe("why an install Job failed, as the Provisioning says it", () => {
  it("the runner's termination message when it wrote one", () => {
    expect(runnerFailure([pod({ exitCode: 2, reason: "Error", message: 'task "x" failed on host node-0: boom' })])).toBe(
      'task "x" failed on host node-0: boom',
    );
  });

  it("a container the kubelet lost (the appliance's power cut mid-run) is said so, not the log's tail at that moment", () => {
    // As the appliance showed it after a power cut (2026-11-27): reason Unknown, exit 255, the log tail as message.
    const cause = runnerFailure([pod({ exitCode: 255, reason: "Unknown", message: "TASK [bootstrap_os : Check if bootstrap is needed] ***\nok: [node-0]\n" })]);
    expect(cause).toMatch(/cut off mid-run.*exit code 255.*loses power or restarts/);
    expect(cause).not.toContain("bootstrap_os");
  });
});
