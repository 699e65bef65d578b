import { mkdir, readFile, writeFile } from "node:fs/promises";
import { access, constants } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { cacheRoot } from "../cache.js";
import { log } from "../log.js";

export type Accel = "kvm" | "tcg";

/**
 * KVM is used only when a probe shows it really runs a guest: /dev/kvm can exist and
 * open while nested virtualisation never gets a kernel past its first instructions.
 * The probe boots the image under KVM and waits for the kernel's first console line;
 * the answer is cached for this host boot.
 */
export async function chooseAccel(probeArgs: string[], override?: Accel): Promise<Accel> {
  if (override) return override;
  if (process.env.ICN_BOOTSTRAP_ACCEL === "kvm" || process.env.ICN_BOOTSTRAP_ACCEL === "tcg") return process.env.ICN_BOOTSTRAP_ACCEL;
  try {
    await access("/dev/kvm", constants.R_OK | constants.W_OK);
  } catch {
    return "tcg";
  }
  const bootId = (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
  const cacheFile = join(cacheRoot(), "kvm-probe.json");
  const cached = await readFile(cacheFile, "utf8")
    .then(JSON.parse)
    .catch(() => undefined);
  if (cached?.bootId === bootId) return cached.accel;

  log("boot-test", "probing KVM (booting the image for up to 30 s)");
  const child = execa("qemu-system-x86_64", ["-accel", "kvm", "-cpu", "host", ...probeMachine(probeArgs)], { reject: false, timeout: 30_000, all: true });
  let works = false;
  child.all?.on("data", (chunk: Buffer) => {
    if (/Linux version \d/.test(chunk.toString())) {
      works = true;
      child.kill("SIGTERM");
    }
  });
  await child;
  const accel: Accel = works ? "kvm" : "tcg";
  log("boot-test", works ? "KVM works: using it" : "KVM does not boot a kernel here: using TCG (software emulation, slow)");
  await mkdir(cacheRoot(), { recursive: true });
  await writeFile(cacheFile, JSON.stringify({ bootId, accel }));
  return accel;
}

/**
 * The machine to probe with: the console on stdout (where the probe looks for the kernel's
 * first line; the boot itself writes it to a file) and no NIC (a tap device can be opened
 * by one QEMU at a time).
 */
export function probeMachine(args: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const [option, value] = [args[i]!, args[i + 1] ?? ""];
    const dropped =
      option === "-chardev" || option === "-serial" || option === "-netdev" || option === "-nic" || (option === "-device" && /^virtio-net-pci\b/.test(value));
    if (dropped) i++;
    else out.push(option);
  }
  return [...out, "-serial", "stdio"];
}
