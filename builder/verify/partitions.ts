/** Reads a disk's GPT with sgdisk and compares it with the layout the build made. */
import { execa } from "execa";
import { SECTOR, partitionsOf, type DiskLayout, type Partition } from "../disk/layout.js";

interface GptRow {
  number: number;
  start: number;
  end: number;
  code: string;
  name: string;
  guid: string;
}

export async function readGpt(disk: string): Promise<{ diskGuid: string; rows: GptRow[] }> {
  const { stdout } = await execa("sgdisk", ["-p", disk]);
  const diskGuid = /Disk identifier \(GUID\): (\S+)/.exec(stdout)?.[1] ?? "";
  const rows: GptRow[] = [];
  for (const m of stdout.matchAll(/^\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+ \S+\s+([0-9A-F]{4})\s+(.*)$/gm)) {
    const info = (await execa("sgdisk", ["-i", m[1]!, disk])).stdout;
    rows.push({
      number: Number(m[1]),
      start: Number(m[2]),
      end: Number(m[3]),
      code: m[4]!,
      name: m[5]!.trim(),
      guid: /Partition unique GUID: (\S+)/.exec(info)?.[1] ?? "",
    });
  }
  return { diskGuid, rows };
}

/** Differences between the disk's GPT (and root filesystem UUID) and the layout; empty when they match. */
export async function compareGpt(disk: string, layout: DiskLayout): Promise<string[]> {
  const gpt = await readGpt(disk);
  const problems: string[] = [];
  if (gpt.diskGuid.toLowerCase() !== layout.diskGuid.toLowerCase()) problems.push(`disk GUID is ${gpt.diskGuid}, expected ${layout.diskGuid}`);
  const expected: Partition[] = partitionsOf(layout);
  for (const p of expected) {
    const row = gpt.rows.find((r) => r.number === p.number);
    if (!row) {
      problems.push(`partition ${p.number} (${p.name}) is missing`);
      continue;
    }
    const want = { start: p.start, end: p.start + p.sectors - 1, code: p.type, name: p.name, guid: p.guid.toUpperCase() };
    for (const key of Object.keys(want) as (keyof typeof want)[]) {
      if (String(row[key]).toUpperCase() !== String(want[key]).toUpperCase())
        problems.push(`partition ${p.number} (${p.name}): ${key} is ${row[key]}, expected ${want[key]}`);
    }
  }
  for (const row of gpt.rows) if (!expected.some((p) => p.number === row.number)) problems.push(`unexpected partition ${row.number} (${row.name})`);
  const { stdout } = await execa("dumpe2fs", ["-h", `${disk}?offset=${layout.root.start * SECTOR}`], { reject: false, stderr: "ignore" });
  const uuid = /Filesystem UUID:\s+(\S+)/.exec(stdout)?.[1];
  if (uuid !== layout.rootFsUuid)
    problems.push(`root filesystem UUID is ${uuid ?? "unreadable"}, expected ${layout.rootFsUuid} (GRUB and fstab find the root by it)`);
  return problems;
}
