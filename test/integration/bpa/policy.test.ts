/**
 * manifests/crds/provisioning-policy.yaml: the ValidatingAdmissionPolicy that checks, at
 * admission, the two fields the CRD schema cannot type. Its binding is applied here with
 * a namespace selector, so that it only acts on this test's namespace (the other tests
 * check the operator's own validation of what the policy would refuse).
 */
import { AdmissionregistrationV1Api, type V1ValidatingAdmissionPolicy, type V1ValidatingAdmissionPolicyBinding } from "@kubernetes/client-node";
import { beforeAll, describe, expect, it } from "vitest";
import { isConflict } from "../../../bpa/runtime/kube.js";
import {
  applyCrds,
  clients,
  createProvisioning,
  kubeConfig,
  loadKubeYaml,
  loadYamlDocuments,
  newNamespace,
  patchProvisioning,
  waitFor,
} from "../../helpers/operator-suite.js";

const kc = kubeConfig();
const c = clients(kc);
let ns: string;

beforeAll(async () => {
  await applyCrds(kc);
  ns = await newNamespace(c, "bpa-policy");
  await c.core.patchNamespace(
    { name: ns, body: { metadata: { labels: { "bpa-policy-test": "yes" } } } },
    (await import("../../../bpa/runtime/kube.js")).mergePatch,
  );
  const adm = kc.makeApiClient(AdmissionregistrationV1Api);
  const [policy, binding] = await loadKubeYaml<V1ValidatingAdmissionPolicy | V1ValidatingAdmissionPolicyBinding>("manifests/crds/provisioning-policy.yaml");
  try {
    await adm.createValidatingAdmissionPolicy({ body: policy as V1ValidatingAdmissionPolicy });
  } catch (error) {
    if (!isConflict(error)) throw error;
  }
  const scoped = binding as V1ValidatingAdmissionPolicyBinding;
  scoped.metadata!.name = `bpa-policy-test-${ns}`.slice(0, 63);
  scoped.spec!.matchResources = { namespaceSelector: { matchLabels: { "bpa-policy-test": "yes" } } };
  await adm.createValidatingAdmissionPolicyBinding({ body: scoped });
  // Policies take effect asynchronously: wait until a bad object is refused.
  await waitFor(
    "the policy to act",
    async () => {
      try {
        await createProvisioning(c, ns, { metadata: { name: "probe" }, spec: { master: 7 } });
        await c.custom.deleteNamespacedCustomObject({ group: "bpa.akraino.org", version: "v1alpha1", namespace: ns, plural: "provisionings", name: "probe" });
        return false;
      } catch (error) {
        return /ValidatingAdmissionPolicy/.test(String((error as { body?: unknown }).body ?? error));
      }
    },
    30_000,
    250,
  );
});

async function refused(name: string, spec: unknown): Promise<string> {
  try {
    await createProvisioning(c, ns, { metadata: { name }, spec });
  } catch (error) {
    return JSON.parse(String((error as { body?: unknown }).body)).message as string;
  }
  throw new Error(`${name} was accepted`);
}

describe("admission policy for Provisioning", () => {
  it("accepts seed 002's sample as written and the list form", async () => {
    const [sample] = await loadYamlDocuments("bpa/samples/provisioning.yaml");
    await createProvisioning(c, ns, sample!);
    const [list] = await loadYamlDocuments("bpa/samples/provisioning-list.yaml");
    await createProvisioning(c, ns, list!);
  });

  it.each([
    ["scalar", { master: 5 }, "spec.master and spec.worker must each be an object or a list of objects"],
    ["no-master", { worker: { cpu: 2 } }, "at least one master is required"],
    ["typo", { master: { cpu: 2, memmory: "4Gi" } }, "spec.master entries accept only cpu, memory and mac"],
    ["gpu", { master: {}, worker: [{ gpu: true }] }, "spec.worker entries accept only cpu, memory, mac, sriov and qat"],
    ["cpu", { master: { cpu: "ten" } }, "cpu must be a whole number of CPUs >= 0"],
    ["negative", { master: { cpu: -1 } }, "cpu must be a whole number of CPUs >= 0"],
    ["memory", { master: { memory: "lots" } }, "memory must be a Kubernetes quantity"],
    ["sriov", { master: {}, worker: { sriov: "yes" } }, "sriov and qat must be true or false"],
    ["mac", { master: { mac: "nope" } }, "mac must be a MAC address"],
    ["twice", { master: { mac: "52:54:00:00:00:01" }, worker: { mac: "52:54:00:00:00:01" } }, "pinned by two entries"],
    ["entry", { master: [{ cpu: 1 }, "big"] }, "every entry of spec.master and spec.worker must be an object"],
  ])("refuses %s", async (name, spec, message) => {
    expect(await refused(name, spec)).toContain(message);
  });

  it("checks updates too", async () => {
    await createProvisioning(c, ns, { metadata: { name: "later" }, spec: { master: { cpu: 2 } } });
    await expect(patchProvisioning(c, ns, "later", { spec: { master: { cpu: 2.5 } } })).rejects.toThrow(/cpu must be a whole number/);
  });
});
