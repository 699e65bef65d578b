import { copyFile, mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import yaml from "js-yaml";
import { REPO } from "./cli.js";

/**
 * A definition in a temporary directory: the repository's default one, changed by
 * `patch` (on the parsed YAML), with the default lock file next to it and optional
 * files of an extra overlay directory.
 */
export async function writeDefinition(
  patch: (definition: Record<string, any>) => void = () => undefined,
  extraOverlay: Record<string, string> = {},
): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "icn-def-"));
  const definition = yaml.load(await readFile(join(REPO, "appliance.yaml"), "utf8")) as Record<string, any>;
  if (Object.keys(extraOverlay).length > 0) definition.overlays = ["extra"];
  patch(definition);
  await writeFile(join(dir, "appliance.yaml"), yaml.dump(definition));
  await copyFile(join(REPO, "appliance.lock.yaml"), join(dir, "appliance.lock.yaml"));
  for (const [path, content] of Object.entries(extraOverlay)) {
    await mkdir(dirname(join(dir, "extra", path)), { recursive: true });
    await writeFile(join(dir, "extra", path), content);
  }
  return join(dir, "appliance.yaml");
}

/** The appliance without the Kubernetes cluster (and without the compute nodes' OS image): first boot, network, identity only (fast boots). */
export const withoutKubernetes = (definition: Record<string, any>) => {
  definition.kubernetes = { ...definition.kubernetes, enabled: false };
  definition.osImages = [];
};

/**
 * withoutKubernetes with nothing to serve either: no kubespray, no container images (an
 * empty registry still runs behind its TLS front). Its disk is 1.2 GiB, the lean one's 2.8
 * (an install copies 1.2 GiB instead of 3.5): faster to build and to install, though no
 * faster to boot; it needs no Go build but the nodes' kubeadm, kubelet and kubectl. For
 * tests of first boot, site settings and install to disk.
 */
export const bareAppliance = (definition: Record<string, any>) => {
  withoutKubernetes(definition);
  definition.kubespray = { ...definition.kubespray, enabled: false };
  definition.registry = { ...definition.registry, lists: [] };
};
