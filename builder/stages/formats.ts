import { join } from "node:path";
import type { OutputFormat } from "../definition.js";
import type { Stage, StageResult } from "../stage.js";
import { DISK_IMAGE } from "./disk.js";

export interface FormatsDeps {
  disk: StageResult;
}

const QCOW2 = "image.qcow2";

/** The qcow2 VM image: the same GPT disk, converted and compressed (zstd clusters). */
export const qcow2Stage: Stage<FormatsDeps> = {
  name: "qcow2",
  sources: [import.meta.filename],
  inputs: ({ disk }) => ({ disk: disk.key }),
  async build(run, { disk }) {
    run.log("converting the disk to compressed qcow2");
    await run.exec("qemu-img", ["convert", "-f", "raw", "-O", "qcow2", "-c", "-o", "compression_type=zstd", "-m", "4", "-W", join(disk.dir, DISK_IMAGE), join(run.out, QCOW2)]);
  },
};

export const FORMAT_EXTENSIONS: Record<OutputFormat, string> = { usb: ".img", qcow2: ".qcow2" };

/** Where a format's finished image is in the stage cache: usb is the raw disk itself. */
export function formatSource(format: OutputFormat, disk: StageResult, qcow2?: StageResult): string {
  if (format === "usb") return join(disk.dir, DISK_IMAGE);
  if (!qcow2) throw new Error("qcow2 stage result missing");
  return join(qcow2.dir, QCOW2);
}
