/**
 * GRUB with system slots: the early config embedded in the GRUB images, the slot selector
 * on the ESP (checked by GRUB's own grub-script-check), the grubenv beside it (read back
 * by grub-editenv), the slot's own grub.cfg, and the ESP's volume id GRUB searches for.
 */
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { earlyConfig, grubConfig, grubenvBlock, slotSelectorConfig, slotsEarlyConfig } from "../../builder/disk/grub.js";
import { espFsUuid, planLayout } from "../../builder/disk/layout.js";

async function scratch(): Promise<string> {
  return mkdtemp(join(tmpdir(), "icn-grub-slots-"));
}

describe("GRUB and the system slots", () => {
  it("the grubenv is a 1024-byte environment block that grub-editenv reads and edits", async () => {
    const env = join(await scratch(), "grubenv");
    const block = grubenvBlock({ default_slot: "a" });
    expect(block.length).toBe(1024);
    await writeFile(env, block);
    expect((await execa("grub-editenv", [env, "list"])).stdout).toBe("default_slot=a");
    // What the upgrade will do: a one-shot try of slot B; GRUB's save_env writes in place, so the size must stay.
    await execa("grub-editenv", [env, "set", "try_slot=b"]);
    expect((await execa("grub-editenv", [env, "list"])).stdout.split("\n").sort()).toEqual(["default_slot=a", "try_slot=b"]);
    expect(() => grubenvBlock({ x: "y".repeat(1024) })).toThrow(/more than 1024 bytes/);
  });

  it("the slot selector is valid GRUB script: default_slot, try_slot cleared and saved before the slot boots, slot B only when it holds a system", async () => {
    const cfg = slotSelectorConfig("ttyS0,115200");
    const file = join(await scratch(), "grub.cfg");
    await writeFile(file, cfg);
    await execa("grub-script-check", [file]);
    const lines = cfg.split("\n").map((l) => l.trim());
    expect(lines).toContain("load_env --file $icn_env default_slot try_slot");
    const clear = lines.indexOf("set try_slot=");
    const save = lines.indexOf("save_env --file $icn_env try_slot");
    const boot = lines.indexOf("configfile /boot/grub/grub.cfg");
    expect(clear).toBeGreaterThan(0);
    expect(save).toBe(clear + 1);
    expect(boot).toBeGreaterThan(save);
    expect(cfg).toMatch(/set icn_part=gpt3\n.*"\$icn_slot" = b \]; then set icn_part=gpt5/);
    expect(cfg).toMatch(/if \[ ! -f \(\$icn_disk,\$icn_part\)\/boot\/grub\/grub\.cfg \]; then[\s\S]*set icn_part=gpt3\nfi/);
    expect(lines).toContain("export icn_slot");
    expect(lines[0]).toBe("serial --unit=0 --speed=115200"); // what it says reaches the serial console
  });

  it("the embedded config finds the ESP by its volume id on the boot disk first and loads the selector (commands only: GRUB's rescue parser)", () => {
    const early = slotsEarlyConfig("1a2b-3c4d");
    expect(early).toContain('search --no-floppy --fs-uuid --set=root --hint="$bootdisk," 1a2b-3c4d');
    expect(early).toContain("configfile ($root)/icn-bootstrap/grub.cfg");
    expect(early).not.toMatch(/\bif\b/);
    expect(earlyConfig("u-u-i-d")).toContain("configfile ($root)/boot/grub/grub.cfg"); // disks without slots: as before
  });

  it("the slot's grub.cfg names the slot on the kernel command line; a disk without slots does not", async () => {
    const withSlots = grubConfig({ rootFsUuid: "u", serial: "ttyS0,115200", title: "t", slots: true });
    expect(withSlots).toMatch(/linux \/vmlinuz root=\$rootarg rw icn\.slot=\$icn_slot console=/);
    const file = join(await scratch(), "grub.cfg");
    await writeFile(file, withSlots);
    await execa("grub-script-check", [file]);
    expect(grubConfig({ rootFsUuid: "u", serial: "ttyS0,115200", title: "t" })).not.toContain("icn.slot");
  });

  it("espFsUuid is the volume id mkfs.vfat gives the ESP (-i), as blkid reads it", async () => {
    const layout = planLayout("some-seed", 64 * 1024 * 1024, 1024 ** 3);
    const esp = join(await scratch(), "esp.vfat");
    await execa("mkfs.vfat", ["-F", "32", "-i", layout.esp.guid.slice(0, 8), "-C", esp, String(64 * 1024)]);
    const uuid = (await execa("blkid", ["-p", "-s", "UUID", "-o", "value", esp])).stdout.trim();
    expect(espFsUuid(layout)).toMatch(/^[0-9a-f]{4}-[0-9a-f]{4}$/);
    expect(uuid.toLowerCase()).toBe(espFsUuid(layout));
  });
});
