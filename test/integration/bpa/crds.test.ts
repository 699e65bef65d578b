/**
 * The CRDs the appliance applies, as the API server serves them: Metal3's own BareMetalHost
 * CRD (from the pinned baremetal-operator module) takes hosts as the BPA's fixtures write
 * them; the Provisioning CRD's status is a subresource.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { BMH_PLURAL, METAL3_GROUP, METAL3_VERSION } from "../../../bpa/api/constants.js";
import type { BareMetalHost } from "../../../bpa/api/types.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import {
  applyCrds,
  clients,
  createHost,
  createProvisioning,
  getProvisioning,
  kubeConfig,
  newNamespace,
  patchProvisioning,
} from "../../helpers/operator-suite.js";

const kc = kubeConfig();
const c = clients(kc);
let ns: string;

beforeAll(async () => {
  await applyCrds(kc);
  ns = await newNamespace(c, "bpa-crds");
});

const bmhApi = { group: METAL3_GROUP, version: METAL3_VERSION, plural: BMH_PLURAL };

describe("BareMetalHost CRD", () => {
  it("takes a host as Metal3 writes it, with the fields the BPA reads", async () => {
    const host = bmh({ name: "metal3-shaped", cpu: 32, ram: 65536, nicModel: "0x8086 0x1572" });
    host.spec = {
      ...host.spec,
      bmc: { address: "redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1", credentialsName: "bmc-secret" },
      image: { url: "http://10.0.0.1/images/jammy.qcow2", checksum: "http://10.0.0.1/images/jammy.qcow2.sha256sum", checksumType: "sha256", format: "qcow2" },
      rootDeviceHints: { deviceName: "/dev/sda" },
      userData: { name: "bpa-ssh-key-user-data", namespace: ns },
    };
    host.status!.hardware!.storage = [{ name: "/dev/sda", sizeBytes: 500107862016, type: "SSD" }];
    host.status!.provisioning = { ID: "ironic-uuid", state: "provisioned", image: { url: "http://10.0.0.1/images/jammy.qcow2" }, bootMode: "UEFI" };
    await createHost(c, ns, host);
    const read = (await c.custom.getNamespacedCustomObject({ ...bmhApi, namespace: ns, name: "metal3-shaped" })) as BareMetalHost;
    expect(read.spec).toMatchObject({ bmc: host.spec.bmc, image: host.spec.image, rootDeviceHints: { deviceName: "/dev/sda" } });
    expect(read.status!.hardware!.storage).toEqual(host.status!.hardware!.storage);
    expect(read.status!.provisioning).toMatchObject({ state: "provisioned", bootMode: "UEFI" });
    expect(read.status!.hardware!.nics![0]).toMatchObject({ model: "0x8086 0x1572", pxe: true });
  });

  it("enforces what Metal3's CRD requires", async () => {
    await expect(
      c.custom.createNamespacedCustomObject({
        ...bmhApi,
        namespace: ns,
        body: { apiVersion: "metal3.io/v1alpha1", kind: "BareMetalHost", metadata: { name: "no-online" }, spec: {} },
      }),
    ).rejects.toThrow(/spec.online: Required value/);
    await expect(
      c.custom.createNamespacedCustomObject({
        ...bmhApi,
        namespace: ns,
        body: { apiVersion: "metal3.io/v1alpha1", kind: "BareMetalHost", metadata: { name: "bad-mac" }, spec: { online: true, bootMACAddress: "not-a-mac" } },
      }),
    ).rejects.toThrow(/bootMACAddress/);
    await c.custom.createNamespacedCustomObject({
      ...bmhApi,
      namespace: ns,
      body: { apiVersion: "metal3.io/v1alpha1", kind: "BareMetalHost", metadata: { name: "no-status-id" }, spec: { online: true } },
    });
    await expect(
      c.custom.patchNamespacedCustomObjectStatus(
        {
          ...bmhApi,
          namespace: ns,
          name: "no-status-id",
          body: { status: { operationalStatus: "OK", errorMessage: "", poweredOn: true, provisioning: { state: "provisioned" } } },
        },
        (await import("../../../bpa/runtime/kube.js")).mergePatch,
      ),
    ).rejects.toThrow(/provisioning.ID: Required value/);
  });
});

describe("Provisioning CRD", () => {
  it("keeps status a subresource: a spec update cannot write it", async () => {
    await createProvisioning(c, ns, { metadata: { name: "sub" }, spec: { master: { cpu: 1 } }, status: { phase: "Ready" } });
    await patchProvisioning(c, ns, "sub", { status: { phase: "Ready" } });
    expect((await getProvisioning(c, ns, "sub")).status).toBeUndefined();
  });

  it("has printer columns for phase, readiness and the install Job", async () => {
    const { ApiextensionsV1Api } = await import("@kubernetes/client-node");
    const crd = await kc.makeApiClient(ApiextensionsV1Api).readCustomResourceDefinition({ name: "provisionings.bpa.akraino.org" });
    const columns = crd.spec.versions[0]!.additionalPrinterColumns!.map((col) => `${col.name}=${col.jsonPath}`);
    expect(columns).toEqual(
      expect.arrayContaining([
        "Phase=.status.phase",
        'Ready=.status.conditions[?(@.type=="Ready")].status',
        "Job=.status.installJob",
        "Age=.metadata.creationTimestamp",
      ]),
    );
  });
});
