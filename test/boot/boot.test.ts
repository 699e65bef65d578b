import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { bootImage } from "../../builder/boot/qemu.js";
import { runCli } from "../helpers/cli.js";
import { bareAppliance, writeDefinition } from "../helpers/definition.js";

// Under TCG (no working KVM here) one boot takes 1-3 minutes on 2 cores.
const BOOT_TIMEOUT_S = 900;
const TEST_TIMEOUT = (BOOT_TIMEOUT_S + 120) * 1000;
const READY = /ICN-BOOTSTRAP-READY host=(icn-bootstrap-[0-9a-f]{6}) addresses=(\S+) root_bytes=(\d+)/;

// These boots check the firmware/format matrix and first-boot robustness; the bare
// appliance (no Kubernetes, nothing to serve) keeps each boot to a minute or two under TCG. The full
// appliance (Kubernetes + BPA) is booted in appliance.test.ts.
let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-boot-out-"));
  const build = await runCli(["build", "--definition", await writeDefinition(bareAppliance), "--out", out]);
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
    // First boot grew the root filesystem from the image's size to the 16 GiB stick.
    expect(Number(ready![3])).toBeGreaterThan((await stat(image)).size * 4);
    expect(result.stdout).toMatch(/\(uefi, (tcg|kvm)\)/);
  });

  it("qcow2 image under BIOS firmware (SeaBIOS) reaches the ready marker", { timeout: TEST_TIMEOUT }, async () => {
    const result = await runCli(["boot-test", join(out, "icn-bootstrap.qcow2"), "--firmware", "bios", "--timeout", String(BOOT_TIMEOUT_S)]);
    expect(result.exitCode, result.all).toBe(0);
    expect(result.stdout).toMatch(READY);
    expect(result.stdout).toMatch(/\(bios, (tcg|kvm)\)/);
  });

  it("recovers from a power cut during first boot and keeps its identity across reboots", { timeout: 3 * TEST_TIMEOUT }, async () => {
    const diskDir = await mkdtemp(join(tmpdir(), "icn-reboot-"));
    onTestFinished(() => rm(diskDir, { recursive: true, force: true }));
    const disk = join(diskDir, "disk.qcow2");
    const image = join(out, "icn-bootstrap.qcow2");
    const common = { image, firmware: "bios" as const, timeoutSeconds: BOOT_TIMEOUT_S, disk };

    // Pull the plug while the first-boot identity step runs.
    const cut = await bootImage({ ...common, powerCutOn: /Starting.*icn-identity/ });
    expect(cut.powerCut, cut.lastLines.join("\n")).toBe(true);
    expect(cut.readyLine).toBeUndefined();

    const second = await bootImage(common);
    expect(second.ready, second.lastLines.join("\n")).toBe(true);
    const third = await bootImage(common);
    expect(third.ready, third.lastLines.join("\n")).toBe(true);
    // Same machine: the generated hostname (from machine-id) survives a reboot.
    expect(READY.exec(third.readyLine!)![1]).toBe(READY.exec(second.readyLine!)![1]);
  });
});
