/**
 * The CRDs the appliance applies at first boot, for tests that run a real API server:
 * the project's Provisioning CRD (manifests/crds/) and Metal3's own CRDs from the pinned
 * baremetal-operator module (the same source as the build's metal3 stage).
 */
import { readFile } from "node:fs/promises";
import { ApiextensionsV1Api, loadAllYaml, type KubeConfig, type V1CustomResourceDefinition } from "@kubernetes/client-node";
import { readMetal3Manifests } from "../../builder/metal3/manifests.js";

const repo = new URL("../../", import.meta.url);
/**
 * Each CRD file's text, the project's first, then every one of Metal3's, as the appliance applies them: the
 * baremetal-operator watches each of its kinds and exits when one has no CRD (its caches never sync, 2 minutes).
 */
export async function applianceCrdTexts(): Promise<string[]> {
  const metal3 = await readMetal3Manifests();
  return [await readFile(new URL("manifests/crds/provisioning.yaml", repo), "utf8"), ...Object.values(metal3.crds)];
}

/** Creates the appliance's CRDs on a fresh API server and waits until each is Established (benchmarks). */
export async function createApplianceCrds(kc: KubeConfig): Promise<void> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  for (const text of await applianceCrdTexts()) {
    for (const body of loadAllYaml(text).filter(Boolean) as V1CustomResourceDefinition[]) {
      await api.createCustomResourceDefinition({ body });
      for (;;) {
        const crd = await api.readCustomResourceDefinition({ name: body.metadata!.name! });
        if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }
}
