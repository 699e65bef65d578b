/**
 * Who a published name belongs to. A name an upload published belongs to the user who
 * published it (the latest upload that did, from the records); the build's names belong to
 * nobody: its OS images (announced by ConfigMaps, common/os-images.ts), the repositories of
 * its addons catalog (common/addons-catalog.ts), and the repositories in the registry that
 * hold tags no upload of this API made (shipped with the appliance).
 *
 * Names, as the file server and the registry see them: files and OS images by path (two
 * trees), appliance images by path in a tree of their own that nothing serves, container
 * images and charts by repository:tag in the one registry they share.
 */
import { ADDONS_CATALOG_CONFIGMAP, ADDONS_CATALOG_KEY, readAddonsCatalog, type CatalogAddon } from "../../common/addons-catalog.js";
import { chartVersionTag } from "../../common/helm-chart.js";
import { BUILT_OS_IMAGE_LABEL, BUILT_OS_IMAGE_LABEL_VALUE, readBuiltOsImage, type BuiltOsImage } from "../../common/os-images.js";
import { parseImageName, RequestError, type Kind, type UploadRecord } from "../../common/uploads.js";
import { errorMessage, type Clients } from "../runtime/kube.js";
import type { RegistryClient } from "./registry.js";

/** A name as it is published: `key` is the same for every upload that would publish to the same place. */
export interface PublishedName {
  kind: Kind;
  /** As the upload named it. */
  name: string;
  /** file:<path>, os-image:<file>, appliance-image:<path> or registry:<repository>:<tag>; without a tag (a chart named without its version) until the chart is read. */
  key: string;
  repository?: string;
  tag?: string;
}

export type Owner = { user: string; upload: string } | { build: string };

/** States of a record whose upload is still being processed. */
const PROCESSING: readonly string[] = ["verifying", "publishing"];

/** The published name of an upload of `kind` named `name`; a chart's `version` (when read) gives its tag. */
export function publishedName(kind: Kind, name: string, version?: string): PublishedName {
  if (kind === "file" || kind === "os-image" || kind === "appliance-image") return { kind, name, key: `${kind}:${name}` };
  const { repository, tag } = parseImageName(name);
  const known = kind === "chart" && !name.includes(":") ? (version ? chartVersionTag(version) : undefined) : tag;
  return { kind, name, key: `registry:${repository}:${known ?? "?"}`, repository, ...(known ? { tag: known } : {}) };
}

/** The published name of a record (a published chart's record has its version). */
export const recordName = (r: UploadRecord) => publishedName(r.kind, r.name, r.version);

/** The build's OS images, announced by ConfigMaps in the API's namespace. */
export async function listBuiltOsImages(clients: Clients, namespace: string): Promise<BuiltOsImage[]> {
  const list = await clients.core.listNamespacedConfigMap({ namespace, labelSelector: `${BUILT_OS_IMAGE_LABEL}=${BUILT_OS_IMAGE_LABEL_VALUE}` });
  return list.items.flatMap((cm) => readBuiltOsImage(cm.data) ?? []).sort((a, b) => a.name.localeCompare(b.name));
}

/** The appliance's addons catalog (none on an appliance built without addons). */
export async function listCatalog(clients: Clients, namespace: string): Promise<CatalogAddon[]> {
  const list = await clients.core.listNamespacedConfigMap({ namespace, fieldSelector: `metadata.name=${ADDONS_CATALOG_CONFIGMAP}` });
  const text = list.items[0]?.data?.[ADDONS_CATALOG_KEY];
  if (text === undefined) return [];
  const catalog = readAddonsCatalog(text);
  if (typeof catalog === "string") throw new Error(`ConfigMap ${namespace}/${ADDONS_CATALOG_CONFIGMAP}: ${catalog}`);
  return catalog;
}

/** oci://host/repository -> repository */
const chartRepository = (chart: string) => chart.replace(/^oci:\/\/[^/]+\//, "");

export interface OwnersOptions {
  clients: Clients;
  namespace: string;
  records: () => Promise<UploadRecord[]>;
  registry: () => Promise<{ client: RegistryClient }>;
}

export class Owners {
  constructor(private readonly o: OwnersOptions) {}

  /** Who `target` belongs to; undefined when nobody published it. 503 when the build's names cannot be read. */
  async owner(target: PublishedName): Promise<Owner | undefined> {
    try {
      return await this.find(target);
    } catch (error) {
      if (error instanceof RequestError) throw error;
      throw new RequestError(
        503,
        `cannot tell whether ${target.kind} "${target.name}" is the build's or another uploader's (${errorMessage(error)}): nothing was stored; retry when the cluster and the registry answer`,
      );
    }
  }

  private async find(target: PublishedName): Promise<Owner | undefined> {
    const { clients, namespace } = this.o;
    if (target.kind === "os-image" && (await listBuiltOsImages(clients, namespace)).some((b) => b.name === target.name)) {
      return { build: `an OS image of the build (announced by a ConfigMap in ${namespace} labelled ${BUILT_OS_IMAGE_LABEL}=${BUILT_OS_IMAGE_LABEL_VALUE})` };
    }
    if (target.repository) {
      const addon = (await listCatalog(clients, namespace)).find((a) => chartRepository(a.chart) === target.repository);
      if (addon) return { build: `the chart of addon ${addon.name} in the appliance's addons catalog (ConfigMap ${namespace}/${ADDONS_CATALOG_CONFIGMAP})` };
    }
    // Rejected uploads changed nothing; failed ones may have (a push stopped after the tag was set).
    const records = (await this.o.records()).filter((r) => r.state !== "rejected" && !PROCESSING.includes(r.state));
    const ofName = records.filter((r) => recordName(r).key === target.key).sort((a, b) => (a.finished ?? "").localeCompare(b.finished ?? ""));
    let publisher = ofName.filter((r) => r.state === "published").pop();
    if (target.repository) {
      const { client } = await this.o.registry();
      const inRegistry = await client.tags(target.repository);
      const uploaded = new Set(records.filter((r) => recordName(r).repository === target.repository).map((r) => recordName(r).tag));
      const shipped = inRegistry.filter((t) => !uploaded.has(t));
      if (shipped.length) {
        const list = `${shipped.slice(0, 5).join(", ")}${shipped.length > 5 ? ", …" : ""}`;
        return { build: `repository ${target.repository}, shipped with the appliance (its registry holds ${list}, not uploaded through this API)` };
      }
      if (!publisher && target.tag && inRegistry.includes(target.tag)) publisher = ofName.pop();
    }
    return publisher ? { user: publisher.user ?? "an unknown user", upload: publisher.id } : undefined;
  }
}
