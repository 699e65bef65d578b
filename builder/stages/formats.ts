import { stat } from "node:fs/promises";
import { join } from "node:path";
import type { OutputFormat } from "../definition.js";
import type { Stage, StageResult, StageRun } from "../stage.js";
import { DISK_IMAGE } from "./disk.js";

export interface FormatsDeps {
  image: StageResult;
  /** Virtual size of the VM disk in bytes; the image's own size when smaller. */
  virtualBytes: number;
}

const QCOW2 = "image.qcow2";

/** The qcow2 VM image: the same GPT disk, converted and compressed (zstd clusters). */
export const qcow2Stage: Stage<FormatsDeps> = {
  name: "qcow2",
  sources: [import.meta.filename],
  inputs: ({ image, virtualBytes }) => ({ image: image.key, virtualBytes }),
  async build(run, { image, virtualBytes }) {
    run.log("converting the disk to compressed qcow2");
    const raw = join(image.dir, DISK_IMAGE);
    const target = join(run.out, QCOW2);
    await convertToQcow2(run, raw, target);
    if (virtualBytes > (await stat(raw)).size) await run.exec("qemu-img", ["resize", "-q", target, String(virtualBytes)]);
  },
};

/** A raw disk as zstd-compressed qcow2, the same bytes every time. */
export async function convertToQcow2(run: Pick<StageRun, "exec">, raw: string, target: string): Promise<void> {
  // No -W: out-of-order writes would store the compressed clusters in a different order each run.
  await run.exec("qemu-img", ["convert", "-f", "raw", "-O", "qcow2", "-c", "-o", "compression_type=zstd", "-m", "4", raw, target]);
}

export const FORMAT_EXTENSIONS: Record<OutputFormat, string> = { usb: ".img", qcow2: ".qcow2" };

/** Where a format's finished image is in the stage cache: usb is the raw disk itself. */
export function formatSource(format: OutputFormat, image: StageResult, qcow2?: StageResult): string {
  if (format === "usb") return join(image.dir, DISK_IMAGE);
  if (!qcow2) throw new Error("qcow2 stage result missing");
  return join(qcow2.dir, QCOW2);
}
