/**
 * The tags the appliance is shipped with are immutable on the appliance: nginx refuses a
 * manifest PUT to any of them (403 naming the tag and its shipped digest), whoever asks.
 * This writes that rule as an nginx `map` from exactly what the registry stage seeded.
 */
import type { BuiltImage } from "../stages/images.js";

export const SEEDED_TAGS_CONF = "etc/nginx/icn-registry-seeded.conf";

const SAFE = /^[a-z0-9][a-z0-9._/-]*$/;
const SAFE_TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;

export function seededTagRules(images: Pick<BuiltImage, "repository" | "tag" | "tags" | "digest">[]): string {
  const lines = new Map<string, string>();
  for (const image of images) {
    for (const tag of [image.tag, ...image.tags]) {
      if (!SAFE.test(image.repository) || !SAFE_TAG.test(tag) || !/^sha256:[0-9a-f]{64}$/.test(image.digest)) {
        throw new Error(`cannot write a registry rule for ${image.repository}:${tag} (${image.digest}): unexpected characters`);
      }
      lines.set(`PUT /v2/${image.repository}/manifests/${tag}`, `${image.repository}:${tag} is shipped with this appliance at ${image.digest}`);
    }
  }
  const entries = [...lines].sort(([a], [b]) => a.localeCompare(b)).map(([key, message]) => `    "${key}" "${message}";`);
  return [
    "# Written by the build (registry stage) from the images it seeded: a push that would",
    "# change one of these tags is refused (icn-bootstrap-registry.conf).",
    'map "$request_method $uri" $icn_seeded_tag {',
    '    default "";',
    ...entries,
    "}",
    "",
  ].join("\n");
}
