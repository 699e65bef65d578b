import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../definition.js";
import { buildBundles } from "../images-bundle.js";
import { loadLock, lockPathFor } from "../lockfile.js";
import { formatBytes, log } from "../log.js";
import type { Command } from "./command.js";

export const bundleCommand: Command = {
  name: "bundle",
  summary: "write the build's container images and charts, and the file server's tree, for a Kubernetes of your own",
  usage: `usage: icn-bootstrap bundle [--definition FILE] [--out DIR] [--snapshot URL]

Writes two files for a Kubernetes of your own (docs/developer-path.md):
- DIR/<name>-images.tar: every container image and chart the appliance's registry serves
  (the BPA, Metal3, Ironic, the kubespray runner, Kubernetes' and the addons' images, the
  charts) as one OCI image layout, each named by the path the appliance serves it under
  (icn/bpa:latest, charts/infra-local-controller:0.1.0, ...). 'icn-bootstrap deploy
  --images FILE' copies them into a registry, digests unchanged.
- DIR/<name>-files.tar: the tree the appliance's file server serves (kubespray's files
  under kubespray/, the deploy ramdisk under boot/, the compute nodes' OS images under
  os-images/). 'icn-bootstrap deploy --files FILE' unpacks it into the chart's own file
  server (serve.files).
The build's stages are reused from the cache: after './icn-bootstrap build' nothing is
built again.

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
    const { images, files } = await buildBundles({ definition, lock, lockPath, outDir, snapshot: values.snapshot });
    log("bundle", `${images.images.length} images and charts, ${files.files} served files in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    for (const written of [images, files]) console.log(`${written.path}\n  size ${formatBytes(written.bytes)}  sha256 ${written.sha256}`);
  },
};
