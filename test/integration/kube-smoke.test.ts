/**
 * Proves the integration harness is a real API server: a CRD is created through
 * @kubernetes/client-node, becomes Established, and its schema is enforced on a
 * custom resource that is then read back from etcd.
 */
import { ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, VersionApi, type V1CustomResourceDefinition } from "@kubernetes/client-node";
import { readFile } from "node:fs/promises";
import { describe, expect, inject, it } from "vitest";
import yaml from "js-yaml";

const group = "smoke.icn-bootstrap.test";
const plural = "widgets";

function client(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(inject("kubeconfigPath"));
  return kc;
}

const crd: V1CustomResourceDefinition = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: `${plural}.${group}` },
  spec: {
    group,
    scope: "Namespaced",
    names: { plural, singular: "widget", kind: "Widget", listKind: "WidgetList" },
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: "object",
            properties: {
              spec: {
                type: "object",
                required: ["size"],
                properties: { size: { type: "integer", minimum: 1 }, color: { type: "string", _enum: ["red", "blue"] } },
              },
              status: { type: "object", properties: { phase: { type: "string" } } },
            },
          },
        },
      },
    ],
  },
};

describe("kube test server", () => {
  it("is the pinned Kubernetes version and the admin is authorised", async () => {
    const kc = client();
    const pinned = (
      yaml.load(await readFile(new URL("../../appliance.lock.yaml", import.meta.url), "utf8")) as { artifacts: { kubernetes: { version: string } } }
    ).artifacts.kubernetes.version;
    const version = await kc.makeApiClient(VersionApi).getCode();
    expect(version.gitVersion).toBe(pinned);
    const namespaces = await kc.makeApiClient(CoreV1Api).listNamespace();
    expect(namespaces.items.map((n) => n.metadata?.name)).toContain("default");
  });

  it("creates a CRD, waits for Established, and stores a validated custom resource", async () => {
    const kc = client();
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    const objects = kc.makeApiClient(CustomObjectsApi);

    await ext.createCustomResourceDefinition({ body: crd });
    const deadline = Date.now() + 30_000;
    for (;;) {
      const current = await ext.readCustomResourceDefinition({ name: crd.metadata!.name! });
      if (current.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) break;
      if (Date.now() > deadline) throw new Error(`CRD not Established: ${JSON.stringify(current.status)}`);
      await new Promise((r) => setTimeout(r, 200));
    }

    const namespace = "default";
    const ref = { group, version: "v1alpha1", namespace, plural };
    // The API server validates against the CRD's schema: size must be >= 1.
    await expect(
      objects.createNamespacedCustomObject({ ...ref, body: { apiVersion: `${group}/v1alpha1`, kind: "Widget", metadata: { name: "bad" }, spec: { size: 0 } } }),
    ).rejects.toThrow(/size/);

    const created = await objects.createNamespacedCustomObject({
      ...ref,
      body: { apiVersion: `${group}/v1alpha1`, kind: "Widget", metadata: { name: "first" }, spec: { size: 3, color: "blue" } },
    });
    expect(created.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);

    const read = await objects.getNamespacedCustomObject({ ...ref, name: "first" });
    expect(read.spec).toEqual({ size: 3, color: "blue" });
    expect(read.metadata.resourceVersion).toBe(created.metadata.resourceVersion);

    const list = await objects.listNamespacedCustomObject({ ...ref });
    expect(list.items.map((i: { metadata: { name: string } }) => i.metadata.name)).toEqual(["first"]);

    await ext.deleteCustomResourceDefinition({ name: crd.metadata!.name! });
  });
});
