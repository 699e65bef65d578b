/**
 * Redfish virtual media, the appliance's half: the boot ISOs Ironic builds from the deploy
 * kernel and ramdisk, made in the built Ironic image's root (bubblewrap) by Ironic's own
 * functions with the image's ironic.conf: ISOLINUX for BIOS, and for UEFI the EFI system
 * partition that ironic-start makes (make-esp). Each ISO then boots a VM from its CD-ROM
 * drive, with nothing else to boot from: the deploy kernel starts with the parameters
 * Ironic wrote into the ISO's boot configuration and runs the initramfs.
 * The BMC's half (InsertMedia, the boot device, Metal3's whole deployment) is
 * `npm run e2e:metal3`'s UEFI host, behind sushy-tools and libvirt.
 */
import { runStages } from "../../builder/pipeline.js";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type Firmware } from "../../builder/boot/qemu.js";
import { ensureLockedDebs } from "../../builder/debian/fetch.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir } from "../../builder/stage.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { readRamdisk } from "../../builder/stages/ramdisk.js";
import { unpackIronic } from "../helpers/ironic-pod.js";
import { inImage } from "../helpers/oci-rootfs.js";

/** What Ironic adds to the kernel command line for a virtual-media boot (an address nobody answers: the agent is not the point here). */
const AGENT_PARAMS = "ipa-api-url=http://192.0.2.1:6385 boot_method=vmedia";

/** Ironic's ISO builder, called as its redfish-virtual-media boot interface calls it (image_utils._prepare_iso_image: the command line parsed into a KernelCommandLine), with the image's configuration. */
const MAKE_ISOS = `
import sys
from ironic.conf import CONF
CONF(["--config-file", "/etc/ironic/ironic.conf"], project="ironic")
CONF.set_override("tempdir", "/tmp")
from ironic.common import images
from ironic.common.kernel_parameters import KernelCommandLine
params = KernelCommandLine.parse(CONF.redfish.kernel_append_params + " " + sys.argv[1])
for mode in ("uefi", "bios"):
    images.create_boot_iso(None, f"/var/lib/ironic/{mode}.iso", "file:///var/lib/ironic/kernel", "file:///var/lib/ironic/initramfs", kernel_cmd_line=params, boot_mode=mode)
`;

let work: string;
let blankDisk: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-vmedia-"));
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  const lock = await loadLock(DEFAULT_LOCK);
  await ensureLockedDebs(lock);
  const [ramdisk] = (await runStages({ definition: { ...definition, osImages: ["ipa-ramdisk"] }, lock, stagesDir: stagesDir(), sections: ["os-images"] }))
    .osImages;
  const files = await readRamdisk(ramdisk!.image!);
  const served = join(ramdisk!.image!.dir, "tree", FILES_ROOT);
  const content = await runStages({ definition, lock, lockPath: DEFAULT_LOCK, stagesDir: stagesDir(), sections: ["content"], stopAfterImages: true });
  const root = await unpackIronic(content.images!.dir, work);

  const out = join(work, "out");
  await mkdir(out);
  // The pod's state volume, as ironic-start and Ironic use it.
  const binds = {
    [out]: "/var/lib/ironic",
    [join(served, files.kernel.path)]: "/var/lib/ironic/kernel",
    [join(served, files.initramfs.path)]: "/var/lib/ironic/initramfs",
  };
  for (const mountPoint of ["kernel", "initramfs"]) await writeFile(join(out, mountPoint), "");
  const esp = await inImage(root, ["/usr/local/bin/make-esp", "/var/lib/ironic/uefi-esp.img"], { binds });
  expect(esp.exitCode, esp.all).toBe(0);
  const isos = await inImage(root, ["/usr/bin/python3", "-c", MAKE_ISOS, AGENT_PARAMS], { binds });
  expect(isos.exitCode, isos.all).toBe(0);
  blankDisk = join(work, "blank.qcow2");
  await execa("qemu-img", ["create", "-q", "-f", "qcow2", blankDisk, "1G"]);
}, 60 * 60_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("Redfish virtual media: Ironic's boot ISOs from the Ironic image", () => {
  it("make-esp makes the same EFI system partition image every time", async () => {
    const first = join(work, "out", "uefi-esp.img");
    const root = join(work, "ironic-root");
    const result = await inImage(root, ["/usr/local/bin/make-esp", "/var/lib/ironic/esp-again.img"], { binds: { [work]: "/var/lib/ironic" } });
    expect(result.exitCode, result.all).toBe(0);
    const esp = await readFile(first);
    expect((await readFile(join(work, "esp-again.img"))).equals(esp)).toBe(true);
    // A FAT file system holding the removable-media boot path every UEFI firmware looks for.
    expect(esp.subarray(54, 62).toString()).toMatch(/^FAT1[26] {3}$/);
    expect(esp.includes("BOOTX64 EFI")).toBe(true);
  });

  for (const [firmware, iso] of [
    ["uefi", "uefi.iso"],
    ["bios", "bios.iso"],
  ] as [Firmware, string][]) {
    it(
      `the ${firmware === "uefi" ? "UEFI (GRUB)" : "BIOS (ISOLINUX)"} ISO boots the deploy kernel and ramdisk from a CD-ROM with Ironic's parameters`,
      { timeout: 20 * 60_000 },
      async () => {
        const file = join(work, "out", iso);
        const size = (await stat(file)).size;
        let commandLine = "";
        const vm = await bootImage({
          image: blankDisk,
          diskSize: "1G",
          firmware,
          cpus: 1,
          memoryMiB: 2048,
          timeoutSeconds: 900,
          cdrom: file,
          onLine: (line) => {
            if (line.includes("Kernel command line:")) commandLine = line;
          },
          // The initramfs's init (systemd) running: kernel and ramdisk both came from the ISO.
          readyPattern: /Run \/init as init process/,
        });
        console.log(
          `${iso} (${(size / 1024 / 1024).toFixed(0)} MiB): ${vm.ready ? `the ramdisk's init after ${vm.seconds} s (${vm.accel})` : "no init"}; ${commandLine.trim()}`,
        );
        expect(vm.ready, vm.lastLines.slice(-30).join("\n")).toBe(true);
        expect(commandLine).toContain(AGENT_PARAMS);
        expect(commandLine).toContain("console=ttyS0,115200n8");
      },
    );
  }
});
