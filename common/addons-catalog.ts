/**
 * The addons an appliance serves: Helm charts stored as OCI artifacts in its registry, each
 * with its version, the namespace it goes to and whether a Provisioning without spec.addons
 * gets it. manifests/bpa/addons.yaml carries it as a ConfigMap among the first-boot manifests; the
 * BPA reads it to resolve spec.addons (bpa/api/addons.ts). An appliance built without
 * addons has no catalog: spec.addons can still name charts of the site's own.
 * Shared by the builder and the BPA, which must not import the builder.
 */
import yaml from "js-yaml";

export const ADDONS_CATALOG_CONFIGMAP = "bpa-addons";
export const ADDONS_CATALOG_KEY = "addons.yaml";

/** One addon the appliance serves. */
export interface CatalogAddon {
  name: string;
  /** oci://<registry>/<repository> */
  chart: string;
  version: string;
  namespace: string;
  /** Installed when a Provisioning has no spec.addons. */
  default: boolean;
  /** One line: what it is for. */
  description?: string;
}

/** The ConfigMap (as YAML) that carries the catalog onto the appliance. */
export function addonsCatalogManifest(addons: readonly CatalogAddon[], namespace = "bpa-system"): string {
  return yaml.dump(
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: ADDONS_CATALOG_CONFIGMAP, namespace, labels: { "app.kubernetes.io/name": "bpa-operator" } },
      data: { [ADDONS_CATALOG_KEY]: yaml.dump({ addons }, { lineWidth: -1, noRefs: true }) },
    },
    { lineWidth: -1, noRefs: true, sortKeys: false },
  );
}

/** The catalog from the ConfigMap's text, or what is wrong with it. */
export function readAddonsCatalog(text: string): CatalogAddon[] | string {
  let doc: unknown;
  try {
    doc = yaml.load(text);
  } catch (error) {
    return `not YAML: ${(error as Error).message.split("\n")[0]}`;
  }
  const list = (doc as { addons?: unknown } | null)?.addons;
  if (!Array.isArray(list)) return "expected a map with a list 'addons'";
  const out: CatalogAddon[] = [];
  for (const [i, a] of list.entries()) {
    const e = a as Partial<CatalogAddon> | null;
    if (!e || typeof e.name !== "string" || typeof e.chart !== "string" || typeof e.version !== "string" || typeof e.namespace !== "string") {
      return `addons[${i}]: needs name, chart, version and namespace`;
    }
    out.push({
      name: e.name,
      chart: e.chart,
      version: e.version,
      namespace: e.namespace,
      default: e.default === true,
      ...(e.description ? { description: e.description } : {}),
    });
  }
  return out;
}
