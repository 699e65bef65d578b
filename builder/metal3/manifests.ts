/**
 * Metal3's own Kubernetes objects, taken from the pinned baremetal-operator module (its
 * `config/` tree, verified by go/baremetal-operator/go.sum), never copied into this
 * repository: the CRDs (BareMetalHost, HardwareData, PreprovisioningImage, ...) and the
 * ClusterRole its controllers need (controller-gen's output, config/base/rbac/role.yaml).
 * The rest of the deployment (namespace, account, Deployment, Ironic) is the project's
 * own, in manifests/metal3/.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import yaml from "js-yaml";
import { UserError } from "../errors.js";
import { pinnedModuleDir } from "../sources/index.js";

export const BMO_ENTRY = "baremetal-operator";
const CRD_DIR = "config/base/crds/bases";
const ROLE_FILE = "config/base/rbac/role.yaml";
/** The upstream ClusterRole is named manager-role (kustomize prefixes it); the appliance's name says whose it is. */
export const BMO_CLUSTER_ROLE = "metal3-baremetal-operator";

export interface Metal3Manifests {
  module: string;
  version: string;
  /** CRD file name -> its text, as upstream wrote it. */
  crds: Record<string, string>;
  /** The controllers' ClusterRole, renamed. */
  clusterRole: string;
}

export async function readMetal3Manifests(lockPath?: string): Promise<Metal3Manifests> {
  const source = await pinnedModuleDir(BMO_ENTRY, "metal3 manifests", lockPath);
  const crdDir = join(source.dir, CRD_DIR);
  const files = (await readdir(crdDir)).filter((f) => f.endsWith(".yaml")).sort();
  if (!files.includes("metal3.io_baremetalhosts.yaml")) {
    throw new UserError(
      `${source.module} ${source.version} has no BareMetalHost CRD under ${CRD_DIR}`,
      "pin a baremetal-operator release with the config/ layout of v0.13 (icn-bootstrap lock-artifacts)",
    );
  }
  const crds: Record<string, string> = {};
  for (const file of files) crds[file] = await readFile(join(crdDir, file), "utf8");
  const role = yaml.loadAll(await readFile(join(source.dir, ROLE_FILE), "utf8")).find((d) => (d as { kind?: string } | null)?.kind === "ClusterRole") as
    { metadata: { name: string } } | undefined;
  if (!role)
    throw new UserError(
      `${source.module} ${source.version}: ${ROLE_FILE} has no ClusterRole`,
      "pin a baremetal-operator release with the config/ layout of v0.13",
    );
  role.metadata.name = BMO_CLUSTER_ROLE;
  const clusterRole = `# From ${source.module} ${source.version} ${ROLE_FILE} (controller-gen), renamed.\n${yaml.dump(role, { lineWidth: -1 })}`;
  return { module: source.module, version: source.version, crds, clusterRole };
}
