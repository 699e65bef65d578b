/**
 * Install to disk (site.yaml `install:`), in QEMU under UEFI and BIOS, with the bare
 * appliance (no Kubernetes, nothing to serve: a small copy): the stick copies itself onto the internal disk at its first
 * boot and reboots; the disk then boots without the stick, and with it still plugged in
 * takes its own root. A disk that is not empty is refused unless `wipe: true`, and the
 * refusal is reported while the appliance runs on from the stick.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type BootOptions } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { runCli } from "../helpers/cli.js";
import { copyImageSparse } from "../helpers/image.js";
import { bareAppliance, writeDefinition } from "../helpers/definition.js";
import { sshToVm } from "../helpers/ssh.js";

const BOOT_TIMEOUT_S = 1800;
const TEST_TIMEOUT = 4 * (BOOT_TIMEOUT_S + 120) * 1000;
const INSTALLED = /ICN-INSTALL-DONE target=\S+/;
const OTHER_FAILURES = /ICN-BOOTSTRAP-FAILED unit=(?!icn-install:).*|Kernel panic.*|Found ordering cycle.*/;

let out: string;
let work: string;
let key: string;

/** A copy of the USB image with `install:` (and these manifests) in its site partition. */
async function stickWith(name: string, install: string, manifests: Record<string, string> = {}): Promise<string> {
  const site = join(work, `${name}-site`);
  await mkdir(join(site, "manifests"), { recursive: true });
  await writeFile(join(site, "site.yaml"), `version: 1\ninstall:\n${install}`);
  for (const [file, text] of Object.entries(manifests)) await writeFile(join(site, "manifests", file), text);
  const stick = join(work, `${name}-stick.img`);
  await copyImageSparse(join(out, "icn-bootstrap.img"), stick);
  const written = await runCli(["site", "write", site, stick]);
  expect(written.exitCode, written.all).toBe(0);
  return stick;
}

async function emptyDisk(name: string): Promise<string> {
  const disk = join(work, `${name}.qcow2`);
  await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, "8G"]);
  return disk;
}

async function boot(options: Omit<BootOptions, "timeoutSeconds">) {
  const lines: string[] = [];
  const result = await bootImage({ timeoutSeconds: BOOT_TIMEOUT_S, failurePattern: OTHER_FAILURES, ...options, onLine: (l) => lines.push(l) });
  return { ...result, console: lines.join("\n") };
}

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-install-out-"));
  work = await mkdtemp(join(tmpdir(), "icn-install-"));
  key = join(work, "id");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
  const definition = await writeDefinition((d) => {
    bareAppliance(d);
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  const build = await runCli(["build", "--definition", definition, "--format", "usb", "--out", out]);
  expect(build.exitCode, build.all).toBe(0);
}, 60 * 60_000);

afterAll(async () => {
  await rm(out, { recursive: true, force: true });
  await rm(work, { recursive: true, force: true });
});

describe("install to disk", () => {
  it(
    "UEFI: the stick installs itself onto the empty disk named by path, which then boots without the stick; the copy holds none of the stick's Secrets",
    { timeout: TEST_TIMEOUT },
    async () => {
      const password = "icn-install-test-bmc-password-5f2c9a";
      const secret = `apiVersion: v1\nkind: Secret\nmetadata:\n  name: node-0-bmc\n  namespace: site-a\nstringData:\n  username: admin\n  password: ${password}\n`;
      const stick = await stickWith("uefi", "  disk: /dev/vda\n", { "10-bmc.yaml": secret });
      const disk = await emptyDisk("uefi-disk");
      const install = await boot({ image: stick, firmware: "uefi", extraDisks: [disk], readyPattern: INSTALLED });
      console.log(
        `UEFI install: ${install.seconds.toFixed(0)} s; ${install.console
          .split("\n")
          .filter((l) => l.includes("ICN-INSTALL"))
          .join(" | ")}`,
      );
      expect(install.ready, install.console.split("\n").slice(-30).join("\n")).toBe(true);
      expect(install.readyLine).toBe("ICN-INSTALL-DONE target=/dev/vda");
      expect(install.console).toMatch(/ICN-INSTALL-DONE target=\/dev\/vda \(rebooting from it; keep the stick plugged in/);
      expect(install.console).toMatch(/\/dev\/vda's site partition holds no Secrets \(left out: manifests\/10-bmc\.yaml\)/);
      // Not in the copy's bytes at all (the stick, its source, still holds it until Kubernetes has it).
      const raw = join(work, "uefi-disk.raw");
      await execa("qemu-img", ["convert", "-f", "qcow2", "-O", "raw", disk, raw]);
      expect((await execa("grep", ["-c", "-a", "-F", password, raw], { reject: false })).stdout.trim()).toBe("0");
      await rm(raw);

      const alone = await boot({ image: disk, firmware: "uefi", diskSize: "8G" });
      console.log(`UEFI boot from the installed disk: ${alone.seconds.toFixed(0)} s`);
      expect(alone.ready, alone.console.split("\n").slice(-30).join("\n")).toBe(true);
      // The root grew to the internal disk (8 GiB), far beyond the image.
      expect(Number(/root_bytes=(\d+)/.exec(alone.readyLine!)![1])).toBeGreaterThan(6 * 1024 ** 3);
      expect(alone.console).not.toMatch(/ICN-INSTALL copying/);
    },
  );

  it(
    "BIOS: a disk that is not empty is refused, the appliance runs on from the stick; with wipe it installs, and boots its own root with the stick still in",
    { timeout: TEST_TIMEOUT },
    async () => {
      const disk = await emptyDisk("bios-disk");
      // A disk with something on it: a filesystem written by another machine.
      const raw = join(work, "used.raw");
      await execa("truncate", ["-s", "64M", raw]);
      await execa("mkfs.ext4", ["-q", "-L", "old-data", raw]);
      await execa("qemu-img", ["convert", "-n", "-f", "raw", "-O", "qcow2", raw, disk]);

      // Named by a part of its /dev/disk/by-id name (virtio-SERIAL), as a server's NVMe disk would be.
      const internal = { file: disk, serial: "ICN-INTERNAL-0042" };
      const keep = await stickWith("bios-keep", "  disk: INTERNAL-0042\n");
      const refused = await boot({ image: keep, firmware: "bios", extraDisks: [internal] });
      expect(refused.ready, refused.console.split("\n").slice(-30).join("\n")).toBe(true);
      expect(refused.console).toMatch(
        /ICN-BOOTSTRAP-FAILED unit=icn-install: \/dev\/vda is not empty \(it holds: ext4 \): set install.wipe: true in site.yaml to overwrite it; the appliance runs from the stick/,
      );
      expect((await execa("qemu-img", ["compare", "-q", "-f", "qcow2", "-F", "raw", disk, raw], { reject: false })).exitCode).toBe(0); // not a byte written

      const wipe = await stickWith("bios-wipe", "  disk: INTERNAL-0042\n  wipe: true\n");
      const install = await boot({ image: wipe, firmware: "bios", extraDisks: [internal], readyPattern: INSTALLED });
      console.log(`BIOS install: ${install.seconds.toFixed(0)} s`);
      expect(install.ready, install.console.split("\n").slice(-30).join("\n")).toBe(true);

      // The installed disk first in the boot order, the stick still plugged in: each has the same filesystem UUIDs.
      const sshPort = await freePort();
      const both = await bootImage({
        image: disk,
        serial: internal.serial,
        firmware: "bios",
        timeoutSeconds: BOOT_TIMEOUT_S,
        diskSize: "8G",
        extraDisks: [wipe],
        keepRunning: true,
        hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`],
      });
      try {
        expect(both.ready, both.lastLines.join("\n")).toBe(true);
        const ssh = await sshToVm(key, sshPort, "findmnt -n -o SOURCE /; lsblk -n -o NAME,SIZE,PARTUUID");
        console.log(`BIOS boot from the installed disk with the stick in:\n${ssh.stdout}`);
        expect(ssh.stdout.split("\n")[0]).toBe("/dev/vda3");
      } finally {
        await both.stop?.();
      }
    },
  );
});
