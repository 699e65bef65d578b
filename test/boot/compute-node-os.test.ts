/**
 * The compute nodes' OS image (images/compute-node), as the build serves it: booted in
 * QEMU as a node's disk with the BPA's own cloud-init user-data on a NoCloud seed (the
 * config drive Ironic writes is the same data on another medium), then checked over SSH
 * with the BPA's key: identity made at first boot, the root grown to the disk, and every
 * package kubespray's system_packages role installs on Debian already there, with apt
 * able to "update" offline.
 */
import { runStages } from "../../builder/pipeline.js";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cloudInitUserData } from "../../bpa/jobs/ssh-key.js";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { ensureLockedDebs } from "../../builder/debian/fetch.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { loadOsRecipe } from "../../builder/images/os.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { freePort } from "../../builder/registry/server.js";
import { stagesDir } from "../../builder/stage.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { OS_IMAGES_PATH, readOsImage } from "../../builder/stages/os-image.js";
import { sshTry } from "../helpers/ssh.js";

const BOOT_TIMEOUT_S = 900;
const TEST_TIMEOUT = (BOOT_TIMEOUT_S + 120) * 1000;
/** cloud-init's last word on the console (cloud-final.service writes to journal+console). */
const CLOUD_INIT_DONE = /Cloud-init v\. \S+ finished at .*Datasource (\S+)/;
const FAILURES = /Kernel panic.*|Found ordering cycle.*/;
/** What kubespray v2.31.0's system_packages role installs on Debian 13 for the BPA's profile. */
const KUBESPRAY_PACKAGES = [
  "apparmor",
  "apt-transport-https",
  "bash-completion",
  "conntrack",
  "curl",
  "e2fsprogs",
  "ebtables",
  "ipset",
  "iptables",
  "iputils-ping",
  "libseccomp2",
  "openssl",
  "rsync",
  "socat",
  "tar",
  "unzip",
  "xfsprogs",
  "python3",
  "python3-apt",
];

let work: string;
let image: string;
let served: { path: string; sha256: string; size: number };

/** A NoCloud seed: a FAT volume labelled CIDATA with user-data and meta-data. */
async function noCloudSeed(userData: string, hostname: string): Promise<string> {
  const seed = join(work, `seed-${hostname}.img`);
  await writeFile(join(work, "user-data"), userData);
  await writeFile(join(work, "meta-data"), `instance-id: ${hostname}\nlocal-hostname: ${hostname}\n`);
  await execa("mkfs.vfat", ["-n", "CIDATA", "-C", seed, "2048"]);
  await execa("mcopy", ["-i", seed, join(work, "user-data"), join(work, "meta-data"), "::/"]);
  return seed;
}

async function boot(firmware: "bios" | "uefi", hostname: string, userData: string) {
  const sshPort = await freePort();
  const lines: string[] = [];
  const vm: BootResult = await bootImage({
    image,
    firmware,
    timeoutSeconds: BOOT_TIMEOUT_S,
    keepRunning: true,
    hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`],
    extraDisks: [await noCloudSeed(userData, hostname)],
    readyPattern: CLOUD_INIT_DONE,
    failurePattern: FAILURES,
    onLine: (l) => lines.push(l),
  });
  const ssh = (command: string) => sshTry(join(work, "bpa"), { port: sshPort }, command);
  return { ...vm, ssh, console: lines.join("\n") };
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-compute-os-"));
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  expect(definition.osImages).toContain("compute-node");
  const lock = await loadLock(DEFAULT_LOCK);
  await ensureLockedDebs(lock);
  const [built] = (await runStages({ definition: { ...definition, osImages: ["compute-node"] }, lock, stagesDir: stagesDir(), sections: ["os-images"] }))
    .osImages;
  served = await readOsImage(built!.image!);
  image = join(built!.image!.dir, "tree", FILES_ROOT, served.path);
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "bpa", "-f", join(work, "bpa")]);
}, 40 * 60_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("the compute nodes' OS image", () => {
  it("is a qcow2 served with its sha256sum beside it", async () => {
    const recipe = await loadOsRecipe("compute-node");
    expect(served.path).toBe(`${OS_IMAGES_PATH}/${recipe.os!.file}`);
    const info = JSON.parse((await execa("qemu-img", ["info", "--output=json", image])).stdout);
    expect(info.format).toBe("qcow2");
    expect((await stat(image)).size).toBe(served.size);
    expect(await readFile(`${image}.sha256sum`, "utf8")).toBe(`${served.sha256}  ${recipe.os!.file}\n`);
    expect((await execa("sha256sum", [image])).stdout.split(" ")[0]).toBe(served.sha256);
    console.log(`compute node OS image: ${(served.size / 1024 / 1024).toFixed(0)} MiB qcow2, ${(info["virtual-size"] / 1024 / 1024).toFixed(0)} MiB disk`);
  });

  it("boots under BIOS with the BPA's user-data; kubespray can log in and finds every package it installs, offline", { timeout: TEST_TIMEOUT }, async () => {
    const publicKey = (await readFile(join(work, "bpa.pub"), "utf8")).trim();
    const vm = await boot("bios", "compute-a", cloudInitUserData(publicKey, "root"));
    try {
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
      expect(CLOUD_INIT_DONE.exec(vm.readyLine!)![1]).toMatch(/NoCloud/);
      console.log(`compute node (bios, ${vm.accel}): cloud-init finished after ${vm.seconds.toFixed(0)} s`);
      const whoami = await vm.ssh("hostname && id -un");
      expect(whoami.output).toBe("compute-a\nroot");
      // Made at first boot, not baked in: the machine id and the SSH host keys.
      const identity = await vm.ssh("cat /etc/machine-id; ls /etc/ssh/ssh_host_ed25519_key");
      expect(identity.output).toMatch(/^[0-9a-f]{32}\n\/etc\/ssh\/ssh_host_ed25519_key$/);
      // The root filesystem grew from the image's size to the 16 GiB disk.
      const rootBytes = Number((await vm.ssh("df -B1 --output=size / | tail -n1")).output.trim());
      expect(rootBytes).toBeGreaterThan(12 * 1024 ** 3);
      const packages = await vm.ssh(`dpkg-query -W -f '\${Package} \${db:Status-Abbrev}\\n' ${KUBESPRAY_PACKAGES.join(" ")}`);
      expect(packages.ok, packages.output).toBe(true);
      expect(
        packages.output
          .trim()
          .split("\n")
          .map((l) => l.split(" ")[0])
          .sort(),
      ).toEqual([...KUBESPRAY_PACKAGES].sort());
      // No Internet: apt has no sources, so kubespray's cache update succeeds and installs nothing.
      const apt = await vm.ssh("apt-get update && apt-get install --no-download -y -s conntrack socat ipset");
      expect(apt.ok, apt.output).toBe(true);
      expect(apt.output).toMatch(/0 upgraded, 0 newly installed/);
      const failed = await vm.ssh("systemctl --failed --no-legend --plain");
      expect(failed.output.trim()).toBe("");
      expect((await vm.ssh("systemctl is-active systemd-networkd systemd-resolved ssh")).output).toBe("active\nactive\nactive");
    } finally {
      await vm.stop?.();
    }
  });

  it("boots under UEFI firmware too", { timeout: TEST_TIMEOUT }, async () => {
    const publicKey = (await readFile(join(work, "bpa.pub"), "utf8")).trim();
    const vm = await boot("uefi", "compute-b", cloudInitUserData(publicKey, "root"));
    try {
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
      expect((await vm.ssh("hostname")).output).toBe("compute-b");
      console.log(`compute node (uefi, ${vm.accel}): cloud-init finished after ${vm.seconds.toFixed(0)} s`);
    } finally {
      await vm.stop?.();
    }
  });
});
