import { access } from "node:fs/promises";
import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { bootImage, type Firmware } from "../boot/qemu.js";
import type { Accel } from "../boot/accel.js";
import { UserError } from "../errors.js";
import { log } from "../log.js";
import type { Command } from "./command.js";

export const bootTestCommand: Command = {
  name: "boot-test",
  summary: "boot an image in QEMU and wait until the appliance reports ready",
  usage: `usage: icn-bootstrap boot-test IMAGE [--firmware bios|uefi] [--timeout SECONDS] [--accel kvm|tcg] [--no-tpm]

Boots IMAGE (out/<name>.img is attached as a USB stick, out/<name>.qcow2 as a virtio
disk) on a throw-away overlay, watches the serial console and succeeds when the
appliance prints its ready marker. On failure it prints the console's last lines.
KVM is used when a probe shows it works, else TCG (software emulation: slow).
The machine has a TPM 2.0 (swtpm), as servers have: the appliance seals the key of its
cluster's Secrets to it.

options:
  --firmware bios|uefi  SeaBIOS or OVMF (default: uefi for .img, bios for .qcow2)
  --timeout SECONDS     give up after this long (default: 900)
  --memory MIB          guest memory (default: 2048)
  --accel kvm|tcg       skip the KVM probe
  --no-tpm              a machine without a TPM (the appliance then needs site.yaml's
                        secrets.key: disk to start its cluster)`,
  async run(argv) {
    const { values, positionals } = parseCommandArgs(
      "boot-test",
      argv,
      {
        firmware: { type: "string" },
        timeout: { type: "string" },
        memory: { type: "string" },
        accel: { type: "string" },
        "no-tpm": { type: "boolean" },
      },
      true,
    );
    if (positionals.length !== 1) throw new UserError("boot-test needs exactly one IMAGE", "e.g. icn-bootstrap boot-test out/icn-bootstrap.qcow2");
    const image = resolve(positionals[0]!);
    await access(image).catch(() => {
      throw new UserError(`image ${image} does not exist`, "build it first with 'icn-bootstrap build'");
    });
    const firmware = (values.firmware ?? (image.endsWith(".qcow2") ? "bios" : "uefi")) as Firmware;
    if (firmware !== "bios" && firmware !== "uefi")
      throw new UserError(`--firmware: '${firmware}' is not bios or uefi`, "use --firmware bios or --firmware uefi");
    const accel = values.accel as Accel | undefined;
    if (accel && accel !== "kvm" && accel !== "tcg") throw new UserError(`--accel: '${accel}' is not kvm or tcg`, "use --accel kvm or --accel tcg");
    const timeoutSeconds = positiveNumber(values.timeout ?? "900", "--timeout");
    const memoryMiB = positiveNumber(values.memory ?? "2048", "--memory");
    log("boot-test", `booting ${image} (${firmware}), timeout ${timeoutSeconds}s`);
    const result = await bootImage({ image, firmware, timeoutSeconds, memoryMiB, accel, tpm: !values["no-tpm"] });
    if (!result.ready) {
      throw new UserError(
        `${image} did not become ready (${firmware}, ${result.accel}): ${result.failure}\nlast console lines:\n  ${result.lastLines.slice(-20).join("\n  ")}`,
        "read the console lines above; 'journalctl -b -u <unit>' inside the appliance names the failed step",
      );
    }
    console.log(`ready after ${result.seconds.toFixed(1)}s (${firmware}, ${result.accel}): ${result.readyLine}`);
  },
};

function positiveNumber(text: string, flag: string): number {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new UserError(`${flag}: '${text}' is not a positive number`, `e.g. ${flag} 600`);
  return value;
}
