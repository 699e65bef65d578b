import { SLOT_A, SLOT_B } from "./layout.js";

/** GRUB images built with grub-mkimage: every module embedded, so no /boot/grub/<platform> is needed. */
export const GRUB_COMMON_MODULES = [
  "part_gpt",
  "part_msdos",
  "ext2",
  "fat",
  "search",
  "search_fs_uuid",
  "normal",
  "linux",
  "configfile",
  "echo",
  "serial",
  "terminal",
  "gzio",
  "test",
  "ls",
  "cat",
  "halt",
  "reboot",
  "sleep",
  "regexp",
  "probe",
];
export const GRUB_EFI_MODULES = [...GRUB_COMMON_MODULES, "efi_gop", "efi_uga", "all_video"];
export const GRUB_BIOS_MODULES = [...GRUB_COMMON_MODULES, "biosdisk", "vga"];
/** What the slot selector needs besides: load_env and save_env. */
export const GRUB_SLOT_MODULES = ["loadenv"];

/** On the ESP of an image with system slots: the slot selector and its environment block. */
export const ESP_SLOT_DIR = "icn-bootstrap";
export const SLOT_SELECTOR = `${ESP_SLOT_DIR}/grub.cfg`;
export const SLOT_GRUBENV = `${ESP_SLOT_DIR}/grubenv`;
export const SLOTS = ["a", "b"] as const;
export type Slot = (typeof SLOTS)[number];
const SLOT_PARTITIONS: Record<Slot, number> = { a: SLOT_A.number, b: SLOT_B.number };
const GRUBENV_BYTES = 1024;

/**
 * Embedded in both images: find the root filesystem by UUID, on the disk GRUB was loaded
 * from first (an appliance installed to a disk has the stick's filesystem UUIDs: with the
 * stick still plugged in, each boots its own root), and load its grub.cfg.
 */
export function earlyConfig(rootFsUuid: string): string {
  return [
    `regexp --set=1:bootdisk '^\\(?([^,)]+)' "$root"`,
    // The embedded config runs in GRUB's rescue parser: commands only, no `if`.
    `search --no-floppy --fs-uuid --set=root --hint="$bootdisk," ${rootFsUuid}`,
    "set prefix=($root)/boot/grub",
    "configfile ($root)/boot/grub/grub.cfg",
    "",
  ].join("\n");
}

/**
 * Embedded in both images of a disk with system slots: find the EFI system partition by
 * its FAT volume id, on the boot disk first (as earlyConfig), and load the slot selector
 * from it. The ESP stays where it is when a slot is rewritten; a slot's filesystem UUID
 * does not.
 */
export function slotsEarlyConfig(espFsUuid: string): string {
  return [
    `regexp --set=1:bootdisk '^\\(?([^,)]+)' "$root"`,
    `search --no-floppy --fs-uuid --set=root --hint="$bootdisk," ${espFsUuid}`,
    `set prefix=($root)/${ESP_SLOT_DIR}`,
    `configfile ($root)/${SLOT_SELECTOR}`,
    "",
  ].join("\n");
}

/**
 * The slot selector (ESP, `icn-bootstrap/grub.cfg`): boots slot `default_slot` of the grubenv
 * beside it (a when unset or unreadable), or once the slot in `try_slot`, which is
 * cleared before that slot boots: a try that does not come back healthy falls back to
 * the default by itself at the next reset. A slot without a grub.cfg (slot B before its
 * first upgrade) is never booted, and the console says so. The slot's own grub.cfg
 * boots its kernel with icn.slot=<slot>.
 */
export function slotSelectorConfig(serial: string): string {
  const partOf = (slot: Slot) => `gpt${SLOT_PARTITIONS[slot]}`;
  return [
    ...serialConsole(serial),
    `regexp --set=1:icn_disk '^\\(?([^,)]+)' "$root"`,
    `set icn_env=($root)/${SLOT_GRUBENV}`,
    "load_env --file $icn_env default_slot try_slot",
    "set icn_slot=a",
    'if [ "$default_slot" = b ]; then set icn_slot=b; fi',
    'if [ "$try_slot" = a -o "$try_slot" = b ]; then',
    "  set icn_slot=$try_slot",
    "  set try_slot=",
    "  save_env --file $icn_env try_slot",
    "fi",
    `set icn_part=${partOf("a")}`,
    `if [ "$icn_slot" = b ]; then set icn_part=${partOf("b")}; fi`,
    "if [ ! -f ($icn_disk,$icn_part)/boot/grub/grub.cfg ]; then",
    '  echo "system slot $icn_slot holds no system: booting slot a"',
    "  set icn_slot=a",
    `  set icn_part=${partOf("a")}`,
    "fi",
    "set root=($icn_disk,$icn_part)",
    "export icn_slot",
    "configfile /boot/grub/grub.cfg",
    "",
  ].join("\n");
}

/** A GRUB environment block (what grub-editenv writes): 1024 bytes, the variables, then '#' padding. */
export function grubenvBlock(variables: Record<string, string>): Buffer {
  const text = ["# GRUB Environment Block", ...Object.entries(variables).map(([k, v]) => `${k}=${v}`)].join("\n") + "\n";
  if (Buffer.byteLength(text) > GRUBENV_BYTES) throw new Error("GRUB environment block: the variables take more than 1024 bytes");
  return Buffer.concat([Buffer.from(text), Buffer.alloc(GRUBENV_BYTES - Buffer.byteLength(text), "#")]);
}

/** GRUB's console on the screen and the serial port (e.g. ttyS0,115200). */
function serialConsole(serial: string): string[] {
  const [tty, speed] = serial.split(",") as [string, string];
  return [`serial --unit=${tty.replace("ttyS", "")} --speed=${speed}`, "terminal_input console serial", "terminal_output console serial"];
}

export function grubConfig(opts: { rootFsUuid: string; serial: string; title: string; slots?: boolean }): string {
  const [tty, speed] = opts.serial.split(",") as [string, string];
  return [
    ...serialConsole(opts.serial),
    "set timeout=2",
    `menuentry "${opts.title}" {`,
    // The kernel takes the root partition GRUB chose, by its partition GUID (unique: an
    // installed copy gets new ones), and by the filesystem UUID when GRUB cannot tell it.
    `  set rootarg=UUID=${opts.rootFsUuid}`,
    '  probe --set=partuuid --part-uuid "($root)"',
    '  if [ -n "$partuuid" ]; then set rootarg=PARTUUID=$partuuid; fi',
    // console= twice: the kernel and systemd write to both screen and serial; the last one is /dev/console.
    // icn.slot: the slot the selector chose (slotSelectorConfig), for the running system to read.
    `  linux /vmlinuz root=$rootarg rw${opts.slots ? " icn.slot=$icn_slot" : ""} console=tty0 console=${tty},${speed}n8`,
    "  initrd /initrd.img",
    "}",
    "",
  ].join("\n");
}
