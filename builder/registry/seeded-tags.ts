/**
 * The tags the appliance (or the chart's bundle) is shipped with are immutable at the
 * registry's front: nginx refuses a manifest PUT to any of them (403 naming the tag, and
 * its shipped digest when known). The repositories they are in are the build's: the REST
 * API's registry account may write to none of them (icn-bootstrap-registry.conf, the
 * chart's serve/registry/nginx.conf). This writes both as nginx `map`s from exactly what
 * the build ships: the registry stage from what it seeded, the chart from the images listed.
 */
import type { BuiltImage } from "../stages/images.js";

export const SEEDED_TAGS_CONF = "etc/nginx/icn-registry-seeded.conf";

const SAFE = /^[a-z0-9][a-z0-9._/-]*$/;
const SAFE_TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;

export type ShippedImage = Pick<BuiltImage, "repository" | "tag" | "tags"> & { digest?: string };

/** `shippedWith`: what the message says the tag came with ("this appliance", "the chart's bundle"). */
export function seededTagRules(images: ShippedImage[], shippedWith = "this appliance"): string {
  const lines = new Map<string, string>();
  const repositories = new Set<string>();
  for (const image of images) {
    for (const tag of [image.tag, ...image.tags]) {
      if (!SAFE.test(image.repository) || !SAFE_TAG.test(tag) || (image.digest !== undefined && !/^sha256:[0-9a-f]{64}$/.test(image.digest))) {
        throw new Error(`cannot write a registry rule for ${image.repository}:${tag} (${image.digest}): unexpected characters`);
      }
      lines.set(
        `PUT /v2/${image.repository}/manifests/${tag}`,
        `${image.repository}:${tag} is shipped with ${shippedWith}${image.digest ? ` at ${image.digest}` : ""}`,
      );
    }
    repositories.add(image.repository);
  }
  const entries = [...lines].sort(([a], [b]) => a.localeCompare(b)).map(([key, message]) => `    "${key}" "${message}";`);
  // Exactly the repository: /v2/<repository>/ followed by what the registry API names under it.
  const repositoryEntries = [...repositories].sort().map((r) => `    "~^/v2/${r.replaceAll(".", "\\.")}/(manifests|blobs|tags|referrers)/" "${r}";`);
  return [
    "# Written by the build from the images it ships: a push that would change one of these",
    "# tags is refused, and the REST API's account writes to none of these repositories.",
    'map "$request_method $uri" $icn_seeded_tag {',
    '    default "";',
    ...entries,
    "}",
    "map $uri $icn_shipped_repository {",
    '    default "";',
    ...repositoryEntries,
    "}",
    "",
  ].join("\n");
}
