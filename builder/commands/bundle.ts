import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../definition.js";
import { buildImagesBundle } from "../images-bundle.js";
import { loadLock, lockPathFor } from "../lockfile.js";
import { formatBytes, log } from "../log.js";
import type { Command } from "./command.js";

export const bundleCommand: Command = {
  name: "bundle",
  summary: "write the build's container images and charts as one file, for a registry of your own",
  usage: `usage: icn-bootstrap bundle [--definition FILE] [--out DIR] [--snapshot URL]

Writes every container image and chart the appliance's registry serves (the BPA, Metal3,
Ironic, the kubespray runner, Kubernetes' and the addons' images, the charts) as one OCI
image layout in a tar: DIR/<name>-images.tar. Each is named by the path the appliance
serves it under (icn/bpa:latest, charts/infra-local-controller:0.1.0, ...).
'icn-bootstrap deploy --images FILE --push-to REGISTRY' copies them into a registry of
yours, digests unchanged (docs/developer-path.md). The build's stages are reused from the
cache: after './icn-bootstrap build' nothing is built again.

options:
  --definition FILE  appliance definition (default: appliance.yaml in the repository)
  --out DIR          where the bundle goes (default: ./out)
  --snapshot URL     as for 'build'`,
  async run(argv) {
    const { values } = parseCommandArgs("bundle", argv, {
      definition: { type: "string" },
      out: { type: "string" },
      snapshot: { type: "string" },
    });
    const started = Date.now();
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const definition = await loadDefinition(definitionPath);
    const lockPath = lockPathFor(definitionPath);
    const lock = await loadLock(lockPath);
    const outDir = resolve(values.out ?? "out");
    const bundle = await buildImagesBundle({ definition, lock, lockPath, outDir, snapshot: values.snapshot });
    log("bundle", `${bundle.images.length} images and charts in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    console.log(`${bundle.path}\n  size ${formatBytes(bundle.bytes)}  sha256 ${bundle.sha256}`);
  },
};
