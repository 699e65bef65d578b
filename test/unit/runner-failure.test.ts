/**
 * The runner's reading of ansible-playbook's output (images/kubespray-runner/entrypoint.py,
 * FailureWatch): the first failed task, its host and its message, as the Provisioning's
 * Failed condition shows them. Lines as kubespray v2.31.0 printed them on a compute node.
 */
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { REPO } from "../helpers/cli.js";

async function firstFailure(lines: string[]): Promise<string | null> {
  const script = [
    "import importlib.util, json, sys",
    `spec = importlib.util.spec_from_file_location("entrypoint", ${JSON.stringify(join(REPO, "images/kubespray-runner/entrypoint.py"))})`,
    "entrypoint = importlib.util.module_from_spec(spec); spec.loader.exec_module(entrypoint)",
    "watch = entrypoint.FailureWatch()",
    "for line in sys.stdin.read().split('\\n'): watch.feed(line)",
    "print(json.dumps(watch.describe()))",
  ].join("\n");
  const { stdout } = await execa("python3", ["-c", script], { input: lines.join("\n") });
  return JSON.parse(stdout);
}

describe("the runner's first failed task", () => {
  it("names a failed loop item's task, host and message (no 'FAILED!' on such lines)", async () => {
    const failure = await firstFailure([
      "TASK [system_packages : Manage packages] ***************************************",
      'failed: [compute-a] (item=install) => {"ansible_loop_var": "item", "attempts": 4, "changed": false, "item": {"action_label": "install", "packages": ["conntrack", "ipvsadm"], "state": "present"}, "msg": "No package matching \'ipvsadm\' is available"}',
      "PLAY RECAP *********************************************************************",
    ]);
    expect(failure).toBe(`task "system_packages : Manage packages" failed on host compute-a: No package matching 'ipvsadm' is available`);
  });

  it("names a fatal task's host and message, and an unreachable host as such", async () => {
    expect(
      await firstFailure([
        "TASK [kubernetes/control-plane : Kubeadm | Initialize first control plane node] ***",
        'fatal: [node1]: FAILED! => {"changed": true, "msg": "non-zero return code", "rc": 1}',
      ]),
    ).toBe('task "kubernetes/control-plane : Kubeadm | Initialize first control plane node" failed on host node1: non-zero return code');
    expect(
      await firstFailure([
        "TASK [Gathering Facts] ***",
        'fatal: [node9]: UNREACHABLE! => {"changed": false, "msg": "Failed to connect to the host via ssh", "unreachable": true}',
      ]),
    ).toBe('task "Gathering Facts" unreachable on host node9: Failed to connect to the host via ssh');
  });

  it("is none when nothing failed", async () => {
    expect(await firstFailure(["TASK [x] ***", "ok: [node1]", "failed=0"])).toBeNull();
  });
});
