import { open } from "node:fs/promises";

/**
 * Installs GRUB's BIOS boot code into a GPT disk image file, as grub-bios-setup does
 * for a core image embedded in a "BIOS boot" partition, without needing a device:
 * grub-bios-setup insists on probing the host's root device, which breaks in
 * containers and CI. Offsets are from GRUB's include/grub/i386/pc/boot.h.
 */
const SECTOR = 512;
const BPB_START = 0x03;
const BPB_END = 0x5a;
const KERNEL_SECTOR = 0x5c;
const DRIVE_CHECK = 0x66;
const WINDOWS_NT_MAGIC = 0x1b8;
const PART_END = 0x1fe;
/** struct grub_boot_blocklist { u64 start; u16 len; u16 segment } at the end of diskboot's sector. */
const FIRST_BLOCKLIST = SECTOR - 12;

export async function installBiosBoot(disk: string, bootImg: Buffer, coreImg: Buffer, partitionStart: number, partitionSectors: number): Promise<void> {
  if (bootImg.length !== SECTOR) throw new Error(`boot.img must be ${SECTOR} bytes, got ${bootImg.length}`);
  const coreSectors = Math.ceil(coreImg.length / SECTOR);
  if (coreSectors > partitionSectors) {
    throw new Error(`core.img needs ${coreSectors} sectors but the BIOS boot partition has ${partitionSectors}`);
  }
  const handle = await open(disk, "r+");
  try {
    const mbr = Buffer.alloc(SECTOR);
    await handle.read(mbr, 0, SECTOR, 0);
    const boot = Buffer.from(bootImg);
    // Keep the disk's BPB, disk signature and (protective) partition table.
    mbr.copy(boot, BPB_START, BPB_START, BPB_END);
    mbr.copy(boot, WINDOWS_NT_MAGIC, WINDOWS_NT_MAGIC, PART_END);
    boot.writeBigUInt64LE(BigInt(partitionStart), KERNEL_SECTOR);
    // A hard disk: trust the drive number the BIOS passes (grub-setup's workaround for buggy BIOSes).
    boot[DRIVE_CHECK] = 0x90;
    boot[DRIVE_CHECK + 1] = 0x90;

    const core = Buffer.alloc(coreSectors * SECTOR);
    coreImg.copy(core);
    // The rest of core.img follows its first sector contiguously (length was filled in by grub-mkimage).
    core.writeBigUInt64LE(BigInt(partitionStart + 1), FIRST_BLOCKLIST);

    await handle.write(core, 0, core.length, partitionStart * SECTOR);
    await handle.write(boot, 0, SECTOR, 0);
  } finally {
    await handle.close();
  }
}
