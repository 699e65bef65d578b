/**
 * Site settings without a rebuild: one bare image (no Kubernetes, nothing to serve:
 * minutes per boot under TCG), its site written by `icn-bootstrap site write` into the USB image's own ICN-SITE
 * partition, or given as a second drive made by `site write --new` or `--iso`. Checked inside the
 * booted appliance over SSH: the site's host name, SSH key, provisioning address and
 * settings files; a broken site.yaml still reaches the ready marker with the failure on
 * the console and in /etc/issue, and a corrected one is applied at the next boot.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { runCli } from "../helpers/cli.js";
import { copyImageSparse } from "../helpers/image.js";
import { bareAppliance, writeDefinition } from "../helpers/definition.js";
import { sshTry } from "../helpers/ssh.js";

const BOOT_TIMEOUT_S = 900;
const TEST_TIMEOUT = 3 * (BOOT_TIMEOUT_S + 120) * 1000;
/** The provisioning NIC sits at PCI slot 6: the guest names it enp0s6. */
const PROVISIONING_NIC = { pciSlot: 6 };
/** Only failures of other units end a boot: a bad site is reported and the boot goes on. */
const OTHER_FAILURES = /ICN-BOOTSTRAP-FAILED unit=(?!icn-site:).*|Kernel panic.*|Found ordering cycle.*/;

let out: string;
let work: string;
const key = { definition: "", site: "" };

async function makeKey(name: string): Promise<string> {
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", join(work, name)]);
  return (await readFile(join(work, `${name}.pub`), "utf8")).trim();
}

async function siteFolder(name: string, siteYaml: string): Promise<string> {
  const folder = join(work, name);
  await mkdir(folder, { recursive: true });
  await writeFile(join(folder, "site.yaml"), siteYaml);
  return folder;
}

async function boot(
  image: string,
  opts: { firmware: "bios" | "uefi"; extraDisks?: string[]; disk?: string },
): Promise<BootResult & { ssh: (keyName: string, command: string) => Promise<{ ok: boolean; output: string }> }> {
  const sshPort = await freePort();
  const lines: string[] = [];
  const vm = await bootImage({
    image,
    firmware: opts.firmware,
    timeoutSeconds: BOOT_TIMEOUT_S,
    keepRunning: true,
    hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`],
    extraNics: [PROVISIONING_NIC],
    extraDisks: opts.extraDisks,
    disk: opts.disk,
    failurePattern: OTHER_FAILURES,
    onLine: (l) => lines.push(l),
  });
  const ssh = (keyName: string, command: string) => sshTry(join(work, keyName), { port: sshPort }, command);
  return Object.assign(vm, { lastLines: lines, ssh });
}

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-siteboot-"));
  work = await mkdtemp(join(tmpdir(), "icn-siteboot-work-"));
  key.definition = await makeKey("definition-key");
  key.site = await makeKey("site-key");
  const definition = await writeDefinition((d) => {
    bareAppliance(d);
    d.access = { sshAuthorizedKeys: [key.definition] };
  });
  const build = await runCli(["build", "--definition", definition, "--out", out]);
  expect(build.exitCode, build.all).toBe(0);
}, 60 * 60_000);

afterAll(async () => {
  await rm(out, { recursive: true, force: true });
  await rm(work, { recursive: true, force: true });
});

describe("site settings on the stick", () => {
  it(
    "site write puts a site into the USB image's partition; the booted appliance takes its host name, SSH key and provisioning address",
    { timeout: TEST_TIMEOUT },
    async () => {
      const site = await siteFolder(
        "good",
        [
          "version: 1",
          "hostname: site-a",
          "network:",
          "  dns: [10.0.2.3]",
          "  ntp: [10.0.2.2]",
          "provisioning:",
          "  interface: enp0s6",
          "  address: 172.22.0.1/24",
          "  dhcpRange: 172.22.0.10-172.22.0.100",
          "access:",
          `  sshAuthorizedKeys: ["${key.site}"]`,
          "",
        ].join("\n"),
      );
      const stick = join(work, "stick.img");
      await copyImageSparse(join(out, "icn-bootstrap.img"), stick);
      const written = await runCli(["site", "write", site, stick]);
      expect(written.exitCode, written.all).toBe(0);
      expect(written.stdout).toMatch(/wrote the site partition \(partition 4, ICN-SITE\)/);

      const vm = await boot(stick, { firmware: "uefi" });
      try {
        expect(vm.ready, vm.lastLines.join("\n")).toBe(true);
        expect(vm.readyLine).toMatch(/host=site-a /);
        expect(vm.lastLines.join("\n")).toMatch(/ICN-SITE applied from \/dev\/sd[a-z]4/);
        // The site's key logs in; the definition's key does too (both lists are read).
        const viaSiteKey = await vm.ssh(
          "site-key",
          "hostname; ip -4 -o addr show dev enp0s6; cat /etc/icn-bootstrap/site/site.env /etc/chrony/sources.d/icn-site.sources /etc/systemd/resolved.conf.d/icn-site.conf",
        );
        expect(viaSiteKey.ok, viaSiteKey.output).toBe(true);
        expect(viaSiteKey.output).toMatch(/^site-a$/m);
        expect(viaSiteKey.output).toMatch(/inet 172\.22\.0\.1\/24/);
        expect(viaSiteKey.output).toMatch(/ICN_PROVISIONING_DHCP_RANGE=172\.22\.0\.10-172\.22\.0\.100/);
        expect(viaSiteKey.output).toMatch(/^server 10\.0\.2\.2 iburst$/m);
        expect(viaSiteKey.output).toMatch(/^DNS=10\.0\.2\.3$/m);
        expect((await vm.ssh("definition-key", "true")).ok).toBe(true);
        // GRUB hands the kernel the root partition it chose by its GUID (install to disk relies on it).
        const cmdline = await vm.ssh("site-key", "cat /proc/cmdline; lsblk -n -o PARTUUID $(findmnt -n -o SOURCE /)");
        const [kernelArgs, rootPartUuid] = cmdline.output.trim().split("\n");
        expect(kernelArgs).toContain(`root=PARTUUID=${rootPartUuid}`);
        // No DHCP client on the provisioning port: the appliance will be that network's DHCP server.
        const leases = await vm.ssh("site-key", "networkctl status enp0s6 --no-pager; ls /etc/issue.d");
        expect(leases.output).not.toMatch(/DHCP4 Client/);
        expect(leases.output).not.toMatch(/icn-site\.issue/);
      } finally {
        await vm.stop?.();
      }
    },
  );

  it(
    "a broken site.yaml on a second drive still reaches the ready marker with its errors reported; the corrected file is applied at the next boot",
    { timeout: TEST_TIMEOUT },
    async () => {
      const broken = await siteFolder(
        "broken",
        'version: 1\nnetwork:\n  interfaces:\n    - name: enp0s2\n      address: 10.0.2.300/24\naccess:\n  sshAuthorizedKeys: ["' + key.site + '"]\n',
      );
      const siteDisk = join(work, "site-disk.img");
      // `site write` refuses the broken folder and writes nothing; the test writes it anyway, as a laptop would.
      const refused = await runCli(["site", "write", broken, "--new", siteDisk]);
      expect(refused.exitCode).toBe(3);
      expect(refused.stdout).toMatch(/network\.interfaces\[0\]\.address: expected an IPv4 address|not an IPv4 address/);
      const good = await siteFolder("almost", "version: 1\n");
      expect((await runCli(["site", "write", good, "--new", siteDisk])).exitCode).toBe(0);
      await execa("mcopy", ["-o", "-i", siteDisk, join(broken, "site.yaml"), "::/site.yaml"]);

      const disk = join(work, "persisted.qcow2");
      const first = await boot(join(out, "icn-bootstrap.qcow2"), { firmware: "bios", extraDisks: [siteDisk], disk });
      try {
        expect(first.ready, first.lastLines.join("\n")).toBe(true);
        const console = first.lastLines.join("\n");
        expect(console).toMatch(/ICN-BOOTSTRAP-FAILED unit=icn-site: \/dev\/vdb holds invalid site settings/);
        expect(console).toMatch(/network\.interfaces\[0\]\.address: .*10\.0\.2\.300/);
        expect(first.readyLine).toMatch(/host=icn-bootstrap-[0-9a-f]{6} addresses=10\.0\.2\.15\/24/); // the defaults: DHCP, generated name
        expect((await first.ssh("site-key", "true")).ok).toBe(false); // nothing of the broken site applied
        const issue = await first.ssh("definition-key", "cat /etc/issue.d/icn-site.issue");
        expect(issue.output).toMatch(/ICN-BOOTSTRAP-FAILED unit=icn-site/);
        expect(issue.output).toMatch(/network\.interfaces\[0\]\.address/);
      } finally {
        await first.stop?.();
      }

      // The corrected site, this time on an ISO (what BMC virtual media carries).
      const fixed = await siteFolder("fixed", 'version: 1\naccess:\n  sshAuthorizedKeys: ["' + key.site + '"]\n');
      const siteIso = join(work, "site.iso");
      const iso = await runCli(["site", "write", fixed, "--iso", siteIso]);
      expect(iso.exitCode, iso.all).toBe(0);
      const second = await boot(join(out, "icn-bootstrap.qcow2"), { firmware: "bios", extraDisks: [siteIso], disk });
      try {
        expect(second.ready, second.lastLines.join("\n")).toBe(true);
        expect(second.lastLines.join("\n")).not.toMatch(/ICN-BOOTSTRAP-FAILED/);
        expect(second.lastLines.join("\n")).toMatch(/ICN-SITE applied from \/dev\/vdb/);
        const after = await second.ssh("site-key", "ls /etc/issue.d");
        expect(after.ok, after.output).toBe(true);
        expect(after.output).not.toMatch(/icn-site\.issue/);
      } finally {
        await second.stop?.();
      }
    },
  );
});
