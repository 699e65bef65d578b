import { execa } from "execa";

/** Where a test logs in: a VM whose SSH port QEMU forwards to 127.0.0.1:`port`, or a host on a network the test reaches. */
export type SshTarget = { port: number } | { host: string };

/**
 * ssh's arguments for `command` as root at `target`, logging in with `key`, unattended: no
 * prompt, and the host key (new every boot) neither checked nor recorded.
 */
export function sshArgs(key: string, target: SshTarget, command: string, connectTimeoutSeconds = 20): string[] {
  const options = ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "LogLevel=ERROR", `ConnectTimeout=${connectTimeoutSeconds}`];
  return [
    "-i",
    key,
    ...("port" in target ? ["-p", String(target.port)] : []),
    ...options.flatMap((option) => ["-o", option]),
    `root@${"port" in target ? "127.0.0.1" : target.host}`,
    command,
  ];
}

/** `command` as root on a VM whose SSH port QEMU forwards to 127.0.0.1:`port`; rejects when it fails. */
export function sshToVm(key: string, port: number, command: string) {
  return execa("ssh", sshArgs(key, { port }, command));
}

/** `command` as root at `target`, never rejecting: whether it succeeded, and its output (stdout and stderr). */
export async function sshTry(key: string, target: SshTarget, command: string): Promise<{ ok: boolean; output: string }> {
  const result = await execa("ssh", sshArgs(key, target, command), { reject: false, all: true });
  return { ok: result.exitCode === 0, output: String(result.all ?? "") };
}

/**
 * bootImage's beforeStopOnFailure for a VM whose SSH port QEMU forwards to 127.0.0.1:`port`:
 * prints the failed first-boot unit's journal (named in the ICN-BOOTSTRAP-FAILED line) while
 * the VM still runs.
 */
export function printFailedUnitJournal(key: string, port: number): (failure: string) => Promise<void> {
  return async (failure) => {
    const unit = /unit=(\S+?):/.exec(failure)?.[1] ?? "icn-kubernetes.service";
    const journal = await sshTry(key, { port }, `journalctl -b --no-pager -u ${unit} | tail -n 80`);
    console.log(`${failure}\n--- journalctl -u ${unit}:\n${journal.output}`);
  };
}
