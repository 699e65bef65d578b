import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Metal3Manifests } from "../metal3/manifests.js";
import type { Stage } from "../stage.js";
import { LAYER_TREE } from "./disk.js";
import { MANIFESTS_TARGET } from "./overlays.js";

export interface Metal3Deps {
  manifests: Metal3Manifests;
}

/**
 * Content layer: Metal3's CRDs beside the project's (manifests/crds/, applied first at
 * boot) and the baremetal-operator's ClusterRole (manifests/metal3/), from the pinned module.
 */
export const metal3Stage: Stage<Metal3Deps> = {
  name: "metal3",
  sources: [import.meta.filename],
  inputs: ({ manifests }) => manifests,
  async build(run, { manifests }) {
    const crds = join(run.out, LAYER_TREE, MANIFESTS_TARGET, "crds");
    const metal3 = join(run.out, LAYER_TREE, MANIFESTS_TARGET, "metal3");
    await mkdir(crds, { recursive: true });
    await mkdir(metal3, { recursive: true });
    for (const [file, text] of Object.entries(manifests.crds)) await writeFile(join(crds, file), text);
    await writeFile(join(metal3, "clusterrole.yaml"), manifests.clusterRole);
    run.log(`${manifests.module} ${manifests.version}: ${Object.keys(manifests.crds).length} CRDs, the operator's ClusterRole`);
  },
};
