import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { bootImage } from "../../builder/boot/qemu.js";
import { grubenvBlock } from "../../builder/disk/grub.js";
import { freePort } from "../../builder/registry/server.js";
import { runCli } from "../helpers/cli.js";
import { bareAppliance, writeDefinition } from "../helpers/definition.js";
import { sshToVm } from "../helpers/ssh.js";

// Under TCG (no working KVM here) one boot takes 1-3 minutes on 2 cores.
const BOOT_TIMEOUT_S = 900;
const TEST_TIMEOUT = (BOOT_TIMEOUT_S + 120) * 1000;
const READY = /ICN-BOOTSTRAP-READY host=(icn-bootstrap-[0-9a-f]{6}) addresses=(\S+) root_bytes=(\d+) slot=(\S+) data_bytes=(\d+)/;
const GIB = 1024 ** 3;
/** The state the data partition holds (overlays/usr/lib/icn-bootstrap/data-partition), each a mount from it. */
const STATE_PATHS = [
  "/var/lib/icn-bootstrap",
  "/var/lib/etcd",
  "/etc/kubernetes",
  "/var/lib/kubelet",
  "/var/lib/containerd",
  "/etc/icn-bootstrap/pki",
  "/etc/icn-bootstrap/site",
];

// These boots check the firmware/format matrix and first-boot robustness; the bare
// appliance (no Kubernetes, nothing to serve) keeps each boot to a minute or two under TCG. The full
// appliance (Kubernetes + BPA) is booted in appliance.test.ts.
let out: string;
let key: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-boot-out-"));
  key = join(out, "id");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
  const definition = await writeDefinition((d) => {
    bareAppliance(d);
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  const build = await runCli(["build", "--definition", definition, "--out", out]);
  expect(build.exitCode, build.all).toBe(0);
}, 40 * 60_000);
afterAll(async () => {
  if (out) await rm(out, { recursive: true, force: true });
});

describe("the appliance boots with no user action", () => {
  it("USB image under UEFI firmware (OVMF), attached as a USB stick, reaches the ready marker", { timeout: TEST_TIMEOUT }, async () => {
    const image = join(out, "icn-bootstrap.img");
    const result = await runCli(["boot-test", image, "--firmware", "uefi", "--timeout", String(BOOT_TIMEOUT_S)]);
    expect(result.exitCode, result.all).toBe(0);
    const ready = READY.exec(result.stdout);
    expect(ready, result.stdout).not.toBeNull();
    expect(ready![2]).toMatch(/^10\.0\.2\.15\/24$/); // DHCP on the wired port
    // A 16 GiB stick has no room for two 8 GiB slots and a data partition: first boot grew
    // the root filesystem from the image's size to the stick, and the state stays on it.
    expect(Number(ready![3])).toBeGreaterThan((await stat(image)).size * 4);
    expect([ready![4], ready![5]]).toEqual(["a", "0"]);
    expect(result.stdout).toMatch(/\(uefi, (tcg|kvm)\)/);
  });

  it("qcow2 image under BIOS firmware (SeaBIOS) reaches the ready marker", { timeout: TEST_TIMEOUT }, async () => {
    const result = await runCli(["boot-test", join(out, "icn-bootstrap.qcow2"), "--firmware", "bios", "--timeout", String(BOOT_TIMEOUT_S)]);
    expect(result.exitCode, result.all).toBe(0);
    expect(result.stdout).toMatch(READY);
    expect(result.stdout).toMatch(/\(bios, (tcg|kvm)\)/);
  });

  it(
    "on a 32 GiB disk: system slots and the data partition with the state on it, made again after a power cut; identity kept across reboots; a one-shot try of the empty slot B boots slot A",
    { timeout: 3 * TEST_TIMEOUT },
    async () => {
      const diskDir = await mkdtemp(join(tmpdir(), "icn-reboot-"));
      onTestFinished(() => rm(diskDir, { recursive: true, force: true }));
      const disk = join(diskDir, "disk.qcow2");
      const image = join(out, "icn-bootstrap.qcow2");
      const common = { image, firmware: "bios" as const, timeoutSeconds: BOOT_TIMEOUT_S, disk, diskSize: "32G" };
      const lines: string[] = [];
      const sshPort = await freePort();
      const ssh = async (command: string) => (await sshToVm(key, sshPort, command)).stdout;

      // Pull the plug while the first-boot identity step runs: the layout is made by then.
      const cut = await bootImage({ ...common, powerCutOn: /Starting.*icn-identity/, onLine: (l) => lines.push(l) });
      expect(cut.powerCut, cut.lastLines.join("\n")).toBe(true);
      expect(cut.readyLine).toBeUndefined();
      expect(lines.join("\n")).toMatch(/ICN-BOOTSTRAP-LAYOUT slots on \/dev\/vda: root-a 8192 MiB \(running\), root-b 8192 MiB, ICN-DATA \d+ MiB/);

      const second = await bootImage({ ...common, keepRunning: true, hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`] });
      try {
        expect(second.ready, second.lastLines.join("\n")).toBe(true);
        const ready = READY.exec(second.readyLine!)!;
        expect(ready[4]).toBe("a");
        expect(Number(ready[3])).toBeGreaterThan(7.5 * GIB); // slot A grown to the slot size
        expect(Number(ready[3])).toBeLessThanOrEqual(8 * GIB);
        expect(Number(ready[5])).toBeGreaterThan(14 * GIB); // the rest of the disk
        // One try of slot B, as an upgrade will ask for it; slot B holds no system yet.
        const env = grubenvBlock({ default_slot: "a", try_slot: "b" }).toString("base64");
        await ssh(`mount /dev/vda2 /mnt && echo ${env} | base64 -d | dd of=/mnt/icn-bootstrap/grubenv conv=notrunc,fsync status=none && umount /mnt && sync`);
      } finally {
        await second.stop?.();
      }

      const thirdLines: string[] = [];
      const third = await bootImage({ ...common, keepRunning: true, hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`], onLine: (l) => thirdLines.push(l) });
      try {
        expect(third.ready, third.lastLines.join("\n")).toBe(true);
        // Same machine: the generated hostname (from machine-id) survives a reboot.
        expect(READY.exec(third.readyLine!)![1]).toBe(READY.exec(second.readyLine!)![1]);
        // GRUB cleared the try before booting it, found slot B empty and booted slot A.
        expect(thirdLines.join("\n")).toContain("system slot b holds no system: booting slot a");
        expect(READY.exec(third.readyLine!)![4]).toBe("a");
        const facts = await ssh(
          [
            "findmnt -n -o SOURCE /",
            "lsblk -b -n -l -o PARTN,PARTLABEL,SIZE /dev/vda | sort -n",
            "findmnt -n -o SOURCE,FSTYPE /var/lib/icn-data",
            "blkid -s LABEL -o value /dev/vda6",
            "stat -c %d /var/lib/icn-data",
            ...STATE_PATHS.map((p) => `echo "${p} $(stat -c %d ${p}) $(findmnt -n -o SOURCE ${p})"`),
            "findmnt -n -o FSTYPE,OPTIONS /var/lib/docker-registry",
            "ls /var/lib/icn-data/state/var/lib/icn-bootstrap",
            "mount /dev/vda2 /mnt && cat /mnt/icn-bootstrap/grubenv | tr -d '#' && umount /mnt",
          ].join("; echo ---; "),
        );
        console.log(`the booted disk:\n${facts}`);
        const [root, table, data, label, dataDevice, ...rest] = facts.split("\n---\n");
        expect(root).toBe("/dev/vda3");
        const sizes = Object.fromEntries(
          table!.split("\n").map((l) => {
            const [n, name, bytes] = l.trim().split(/\s+/);
            return [n, { name, bytes: Number(bytes) }];
          }),
        );
        expect(sizes["3"]).toEqual({ name: "root-a", bytes: 8 * GIB });
        expect(sizes["5"]).toEqual({ name: "root-b", bytes: 8 * GIB });
        expect(sizes["6"]!.name).toBe("ICN-DATA");
        expect(sizes["6"]!.bytes).toBeGreaterThan(15 * GIB);
        expect(sizes["4"]!.name).toBe("ICN-SITE");
        expect(data).toBe("/dev/vda6 ext4");
        expect(label).toBe("ICN-DATA");
        const stateLines = rest.slice(0, STATE_PATHS.length);
        for (const [i, path] of STATE_PATHS.entries()) {
          // On the data partition: its device, mounted from its state/ tree.
          expect(stateLines[i], path).toBe(`${path} ${dataDevice} /dev/vda6[/state${path}]`);
        }
        const [registry, stamps, grubenv] = rest.slice(STATE_PATHS.length);
        expect(registry).toMatch(/^overlay .*lowerdir=\/var\/lib\/docker-registry,upperdir=\/var\/lib\/icn-data\/registry\/pushed/);
        expect(stamps!.split("\n")).toEqual(expect.arrayContaining(["identity.done", "registry-ca.done"]));
        expect(grubenv).toMatch(/^default_slot=a$/m);
        expect(grubenv).toMatch(/^try_slot=$/m);
      } finally {
        await third.stop?.();
      }
    },
  );
});
