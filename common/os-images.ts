/**
 * The build's own OS images (the compute nodes' image) as the BPA's REST API lists them
 * beside uploaded ones: the build writes one ConfigMap per image (stage os-image) into
 * the manifests the appliance applies at first boot; the API reads them by label.
 * Shared by the builder and the BPA, which must not import the builder.
 */
export const BUILT_OS_IMAGE_LABEL = "bpa.akraino.org/os-image";
export const BUILT_OS_IMAGE_LABEL_VALUE = "built-in";

export interface BuiltOsImage {
  /** The file's name, as a published upload's name. */
  name: string;
  /** Its path on the file server (port 8080), e.g. /os-images/debian-13-compute-node.qcow2; the checksum file is <path>.sha256sum. */
  path: string;
  sha256: string;
  size: number;
  format: "qcow2";
}

/** The ConfigMap (as YAML) that announces a built OS image to the REST API. */
export function builtOsImageManifest(image: BuiltOsImage, recipe: string, namespace = "bpa-system"): string {
  return [
    `# Written by the build (stage os-image, recipe images/${recipe}): the OS image on the`,
    "# appliance's file server, listed by the REST API's GET /api/v1/os-images.",
    "apiVersion: v1",
    "kind: ConfigMap",
    "metadata:",
    `  name: bpa-os-image-${recipe}`,
    `  namespace: ${namespace}`,
    `  labels: { app.kubernetes.io/name: bpa-api, ${BUILT_OS_IMAGE_LABEL}: ${BUILT_OS_IMAGE_LABEL_VALUE} }`,
    "data:",
    `  name: ${JSON.stringify(image.name)}`,
    `  path: ${JSON.stringify(image.path)}`,
    `  sha256: ${JSON.stringify(image.sha256)}`,
    `  size: ${JSON.stringify(String(image.size))}`,
    `  format: ${JSON.stringify(image.format)}`,
    "",
  ].join("\n");
}

/** A ConfigMap's data as a built OS image, or undefined when a field is missing or malformed. */
export function readBuiltOsImage(data: Record<string, string> | undefined): BuiltOsImage | undefined {
  if (!data) return undefined;
  const { name, path, sha256, size, format } = data;
  if (!name || !path?.startsWith("/") || !/^[0-9a-f]{64}$/.test(sha256 ?? "") || !/^\d+$/.test(size ?? "") || format !== "qcow2") return undefined;
  return { name, path, sha256: sha256!, size: Number(size), format };
}
