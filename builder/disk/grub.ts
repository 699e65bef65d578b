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

export function grubConfig(opts: { rootFsUuid: string; serial: string; title: string }): string {
  const [tty, speed] = opts.serial.split(",") as [string, string];
  const unit = tty.replace("ttyS", "");
  return [
    `serial --unit=${unit} --speed=${speed}`,
    "terminal_input console serial",
    "terminal_output console serial",
    "set timeout=2",
    `menuentry "${opts.title}" {`,
    // The kernel takes the root partition GRUB chose, by its partition GUID (unique: an
    // installed copy gets new ones), and by the filesystem UUID when GRUB cannot tell it.
    `  set rootarg=UUID=${opts.rootFsUuid}`,
    '  probe --set=partuuid --part-uuid "($root)"',
    '  if [ -n "$partuuid" ]; then set rootarg=PARTUUID=$partuuid; fi',
    // console= twice: the kernel and systemd write to both screen and serial; the last one is /dev/console.
    `  linux /vmlinuz root=$rootarg rw console=tty0 console=${tty},${speed}n8`,
    "  initrd /initrd.img",
    "}",
    "",
  ].join("\n");
}
