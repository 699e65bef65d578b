#!/bin/sh
# make-esp OUTPUT: the EFI system partition image Ironic puts on the UEFI boot ISOs it
# builds for Redfish virtual media (ironic.conf: [DEFAULT] esp_image). ironic-start runs it.
#
# It holds one file, EFI/BOOT/BOOTX64.EFI (the removable-media path every UEFI firmware
# boots): Debian's GRUB, unsigned (Secure Boot off), with a built-in configuration that
# finds the ISO by the file only Ironic's ISOs have (the ESP image itself, at
# boot/grub/efiboot.img) and reads the grub.cfg Ironic wrote there (ironic.conf's
# grub_config_path, EFI/BOOT/grub.cfg). Searching for that file, not for any grub.cfg,
# keeps a node's own disk (a deployed OS's ESP) from being taken for the ISO.
set -eu
export PATH="/usr/sbin:/sbin:$PATH"  # mkfs.vfat
out=${1:?usage: make-esp OUTPUT}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# GRUB reads $prefix/grub.cfg after its built-in configuration (which has no "if": it runs
# before the script engine is loaded).
cat >"$tmp/find-iso.cfg" <<'EOF'
search --no-floppy --set=root --file /boot/grub/efiboot.img
set prefix=($root)/EFI/BOOT
EOF
grub-mkimage --format=x86_64-efi --output="$tmp/BOOTX64.EFI" --prefix=/EFI/BOOT --config="$tmp/find-iso.cfg" \
  part_gpt part_msdos fat iso9660 search search_fs_file configfile normal linux echo test all_video efi_gop serial terminal

# The same image at every start: a fixed volume id and times (mkfs --invariant; mtools
# dates what it writes with SOURCE_DATE_EPOCH).
export SOURCE_DATE_EPOCH=0 MTOOLS_SKIP_CHECK=1
mkfs.vfat --invariant -C -n IRONIC-ESP "$tmp/esp.img" 4096 >/dev/null
mmd -i "$tmp/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$tmp/esp.img" "$tmp/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
cp "$tmp/esp.img" "$out.tmp"
mv "$out.tmp" "$out"
