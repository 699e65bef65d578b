import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { DEFAULT_DEFINITION, loadDefinition, OUTPUT_FORMATS, type OutputFormat } from "../definition.js";
import { UserError } from "../errors.js";
import { loadLock, lockPathFor } from "../lockfile.js";
import { log } from "../log.js";
import { build } from "../pipeline.js";
import { summary, writeReport } from "../report.js";
import type { Command } from "./command.js";

export const buildCommand: Command = {
  name: "build",
  summary: "build the appliance images (USB raw disk and/or qcow2)",
  usage: `usage: icn-bootstrap build [--definition FILE] [--format usb,qcow2] [--out DIR] [--snapshot URL]

Builds the appliance described by an appliance definition. Stages whose inputs did not
change are reused from the cache (~/.cache/icn-bootstrap, or $ICN_BOOTSTRAP_CACHE).

options:
  --definition FILE  appliance definition (default: appliance.yaml in the repository);
                     its lock file is FILE with .lock.yaml (see 'icn-bootstrap lock')
  --format LIST      comma-separated: usb (raw GPT disk, dd to a stick) and/or qcow2
                     (default: the definition's outputs.formats)
  --out DIR          where images and the build report go (default: ./out)
  --snapshot URL     a snapshot archive to fetch pinned .debs from when neither the cache
                     nor the archive's pool has them (default: the lock's debian.snapshot)

Debian packages are fetched as the lock file records them (pool path + sha256): from the
cache, else the archive's pool, else the snapshot archive; the lock is never rewritten.

outputs: DIR/<name>.img, DIR/<name>.qcow2, DIR/<name>.cdx.json (CycloneDX 1.6 SBOM),
DIR/<name>.report.json, DIR/<name>.contents.txt (what 'icn-bootstrap verify' checks),
DIR/infra-local-controller-<version>.tgz (the components' Helm chart, docs/developer-path.md)`,
  async run(argv) {
    const { values } = parseCommandArgs("build", argv, {
      definition: { type: "string" },
      format: { type: "string" },
      out: { type: "string" },
      snapshot: { type: "string" },
    });
    const started = Date.now();
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const definition = await loadDefinition(definitionPath);
    const lockPath = lockPathFor(definitionPath);
    const lock = await loadLock(lockPath);
    const formats = values.format ? parseFormats(values.format) : definition.outputs.formats;
    const outDir = resolve(values.out ?? "out");
    log("build", `${definition.name}: formats ${formats.join(", ")} -> ${outDir}`);
    const result = await build({ definition, definitionPath, lock, lockPath, formats, outDir, snapshot: values.snapshot });
    const seconds = (Date.now() - started) / 1000;
    const paths = await writeReport(outDir, definition.name, result, seconds);
    console.log(summary(result, paths, seconds));
  },
};

export function parseFormats(text: string): OutputFormat[] {
  const formats = text
    .split(",")
    .map((f) => f.trim())
    .filter(Boolean);
  const bad = formats.filter((f) => !(OUTPUT_FORMATS as readonly string[]).includes(f));
  if (bad.length > 0 || formats.length === 0) {
    throw new UserError(
      `--format: unknown format ${bad.map((b) => `'${b}'`).join(", ") || "(empty)"}`,
      `use one or more of ${OUTPUT_FORMATS.join(", ")}, comma-separated`,
    );
  }
  return [...new Set(formats)] as OutputFormat[];
}
