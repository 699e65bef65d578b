import { chmod, copyFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { ArtifactResult } from "../sources/index.js";
import type { Stage } from "../stage.js";
import { LAYER_TREE } from "./disk.js";

/** Binaries the bootstrap node runs itself; the control plane runs as images (registry layer). */
export const NODE_BINARIES = ["kubelet", "kubeadm", "kubectl"] as const;
/**
 * Beside them: the container runtime (containerd's 2.3 long-term line with its shim and
 * ctr, and runc: the compute nodes' pins, not Debian's out-of-support 1.7 and 1.1) and what
 * the first boot installs the components with (helm, the infra-local-controller chart), and
 * age 1.3 with its passphrase plugin (the Secrets' key when the site opens it with a passphrase).
 */
export const APPLIANCE_TOOLS = ["containerd", "runc", "helm", "age", "age-keygen", "age-plugin-batchpass"] as const;

export interface KubernetesDeps {
  /** The verified artifacts (built from Go modules or downloaded), see builder/sources. */
  binaries: ArtifactResult[];
}

/** Content layer: the pinned kubelet, kubeadm, kubectl, containerd, runc and helm in /usr/local/bin. */
export const kubernetesStage: Stage<KubernetesDeps> = {
  name: "kubernetes",
  sources: [import.meta.filename],
  inputs: ({ binaries }) => binaries.map(({ name, version, sha256 }) => ({ name, version, sha256 })),
  async build(run, { binaries }) {
    const bin = join(run.out, LAYER_TREE, "usr/local/bin");
    await mkdir(bin, { recursive: true });
    for (const binary of binaries) {
      await copyFile(binary.path, join(bin, binary.name));
      await chmod(join(bin, binary.name), 0o755);
    }
    run.log(`${binaries.map((b) => `${b.name} ${b.version}`).join(", ")}`);
  },
};
