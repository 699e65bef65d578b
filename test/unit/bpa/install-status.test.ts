/** What status says about an install (bpa/controller/install-status.ts), state by state. */
import { describe, expect, it } from "vitest";
import { installStatus } from "../../../bpa/controller/install-status.js";

const n = {
  namespace: "site",
  installJob: "edge-install-0123abcd",
  inventory: "edge-inventory-0123abcd",
  kubeconfig: "edge-kubeconfig",
  logs: "logs: kubectl -n site logs job/edge-install-0123abcd (pods: edge-install-0123abcd-x7k2p)",
};
const byType = (conditions: { type: string; status: string; reason: string; message: string }[]) => Object.fromEntries(conditions.map((c) => [c.type, c]));

describe("install status", () => {
  it("running: Installing, with where the logs are", () => {
    const s = installStatus({ state: "running" }, n);
    expect(s.phase).toBe("Installing");
    expect(byType(s.conditions).Installing).toMatchObject({
      status: "True",
      reason: "JobRunning",
      message: "Job edge-install-0123abcd; logs: kubectl -n site logs -f job/edge-install-0123abcd",
    });
    expect(byType(s.conditions).InventoryReady!.message).toBe(
      "ConfigMap edge-inventory-0123abcd (hosts.ini, offline.yml, registry-ca.crt, kubespray-pins.yml)",
    );
  });

  it("failed: the runner's cause, the Job's reason, the logs and how to retry", () => {
    const s = installStatus(
      {
        state: "failed",
        reason: "BackoffLimitExceeded",
        message: "Job has reached the specified backoff limit",
        cause: "TASK [download] on node1: checksum mismatch",
      },
      n,
    );
    expect(s.phase).toBe("Failed");
    expect(byType(s.conditions).Failed).toMatchObject({
      status: "True",
      reason: "InstallFailed",
      message: `install Job edge-install-0123abcd failed: TASK [download] on node1: checksum mismatch (BackoffLimitExceeded: Job has reached the specified backoff limit); ${n.logs}. To retry with the same spec, set the annotation bpa.akraino.org/retry to a new value.`,
    });
    expect(s.failure).toBeUndefined();
  });

  it("succeeded without a kubeconfig: Failed (NoKubeconfig), the operation recorded as failed", () => {
    const s = installStatus({ state: "succeeded", kubeconfig: false }, n);
    expect(s).toMatchObject({ phase: "Failed", failure: "no kubeconfig handed back" });
    expect(byType(s.conditions).Ready).toMatchObject({ status: "False", reason: "NoKubeconfig" });
    expect(byType(s.conditions).Ready!.message).toContain('Secret edge-kubeconfig has no "kubeconfig" data');
  });

  it("succeeded with the kubeconfig: Ready, naming the Secret", () => {
    const s = installStatus({ state: "succeeded", kubeconfig: true }, n);
    expect(s.phase).toBe("Ready");
    expect(byType(s.conditions).Ready).toMatchObject({
      status: "True",
      reason: "Installed",
      message: 'the cluster is installed; its kubeconfig is in Secret edge-kubeconfig (key "kubeconfig")',
    });
    expect(byType(s.conditions).Failed).toMatchObject({ status: "False" });
  });
});
