/**
 * The CRDs the appliance applies at first boot, for tests that run a real API server:
 * the project's Provisioning CRD (manifests/crds/) and Metal3's own CRDs from the pinned
 * baremetal-operator module (the same source as the build's metal3 stage).
 */
import { readFile } from "node:fs/promises";
import { readMetal3Manifests } from "../../builder/metal3/manifests.js";

const repo = new URL("../../", import.meta.url);
/** Metal3 CRDs the BPA reads; the others are not needed by any test. */
const METAL3_CRDS = ["metal3.io_baremetalhosts.yaml", "metal3.io_hardwaredata.yaml"];

/** Each CRD file's text, the project's first. */
export async function applianceCrdTexts(): Promise<string[]> {
  const metal3 = await readMetal3Manifests();
  return [await readFile(new URL("manifests/crds/provisioning.yaml", repo), "utf8"), ...METAL3_CRDS.map((f) => metal3.crds[f]!)];
}
