/**
 * A TPM 2.0 for a test machine: swtpm, QEMU's TPM emulator. The appliance seals the key of
 * its cluster's Secrets to the TPM; a machine keeps its TPM (the state folder) across boots.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { requireTools } from "../host-tools.js";

/** The TPM's state in `dir`, made once with a SHA-256 PCR bank (what firmware allocates). */
export async function ensureTpmState(dir: string): Promise<void> {
  await requireTools(["swtpm", "swtpm_setup"]);
  await mkdir(dir, { recursive: true });
  if (!existsSync(join(dir, "tpm2-00.permall"))) await execa("swtpm_setup", ["--tpm2", "--tpmstate", dir, "--pcr-banks", "sha256", "--overwrite"]);
}

export interface QemuTpm {
  /** QEMU's arguments for the TPM (a TIS device on the emulator's control socket). */
  args: string[];
  /** Stops the emulator if QEMU has not ended it. */
  stop(): void;
}

/** Starts swtpm for one QEMU run; it ends by itself when QEMU closes its connection. */
export async function startQemuTpm(stateDir: string, socketDir: string): Promise<QemuTpm> {
  await ensureTpmState(stateDir);
  const socket = join(socketDir, "swtpm.sock");
  await rm(socket, { force: true });
  const child: ChildProcess = spawn("swtpm", ["socket", "--tpm2", "--tpmstate", `dir=${stateDir}`, "--ctrl", `type=unixio,path=${socket}`, "--terminate"], {
    stdio: "ignore",
  });
  for (let i = 0; i < 100 && !existsSync(socket) && child.exitCode === null; i++) await new Promise((resolve) => setTimeout(resolve, 100));
  if (!existsSync(socket)) {
    child.kill("SIGKILL");
    throw new Error(`swtpm did not open ${socket} (state ${stateDir})`);
  }
  return {
    args: ["-chardev", `socket,id=chrtpm,path=${socket}`, "-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0"],
    stop: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    },
  };
}
