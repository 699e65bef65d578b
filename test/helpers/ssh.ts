import { execa } from "execa";

/** `command` as root on a VM whose SSH port QEMU forwards to 127.0.0.1:`port`, logging in with `key` (its host key is new every boot). */
export function sshToVm(key: string, port: number, command: string) {
  return execa("ssh", [
    "-i",
    key,
    "-p",
    String(port),
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=20",
    "root@127.0.0.1",
    command,
  ]);
}
