/**
 * The image lists that seed the appliance's registry (`registry-seed/*.yaml`).
 *
 * Every image is named by its upstream reference (what kubeadm, kubespray and the
 * manifests ask for) and pinned by digest:
 * - `recipe` + `digest`: built by the project from `images/<recipe>/recipe.yaml` (the
 *   default profile); `digest` is the manifest digest the build must produce.
 * - `upstreamDigest`: the upstream image's manifest digest, pulled with skopeo in the
 *   `upstream` profile (entries without a recipe exist only there).
 * - A recipe with `chart:` makes a Helm chart instead of an image, stored as Helm's OCI
 *   artifact (builder/images/chart.ts; registry-seed/addons.yaml).
 * - `appliance: true`: the appliance's own cluster runs it (pulled before it starts).
 * In the registry an image lives under its path without the registry host
 * (`registry.k8s.io/kube-apiserver` -> `kube-apiserver`), which is what containerd
 * asks a mirror for and what kubespray's `*_image_repo: <registry>` variables produce.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import yaml from "js-yaml";
import { z } from "zod";
import { UserError } from "../errors.js";

export const SEED_DIR = resolve(import.meta.dirname, "..", "..", "registry-seed");
export const DEFAULT_LISTS = ["bootstrap.yaml", "application.yaml", "addons.yaml"];

const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/, "a manifest digest such as sha256:<64 hex digits>");
/** [host[:port]/]path:tag — a tag is required, a digest is not part of the reference. */
export const IMAGE_REF = /^(?:([a-zA-Z0-9.-]+(?::[0-9]+)?)\/)?([a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*):([\w][\w.-]{0,127})$/;
const Tag = z.string().regex(/^[\w][\w.-]{0,127}$/, "a tag");

export const SeedEntry = z
  .object({
    ref: z.string().regex(IMAGE_REF, "an image reference with a tag, such as registry.k8s.io/pause:3.10.2"),
    recipe: z
      .string()
      .regex(/^[a-z0-9][a-z0-9._-]*$/, "a directory name under images/")
      .optional(),
    digest: Digest.optional(),
    upstreamDigest: Digest.optional(),
    /** More tags for the same image in the appliance's registry (e.g. latest). */
    tags: z.array(Tag).default([]),
    /**
     * For a recipe: build it with other artifacts than its own copies name (recipe artifact
     * -> lock artifact), e.g. the kube-apiserver recipe with kube-apiserver-v1.35.3 for an
     * extra served Kubernetes version.
     */
    artifacts: z
      .record(z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, "an artifact name"), z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, "an artifact name"))
      .optional(),
    /** Only included when the definition enables this feature. */
    requires: z.enum(["kubespray"]).optional(),
    /**
     * The appliance's own cluster runs it (bootstrap.yaml): its first boot pulls it before
     * the cluster starts (applianceImageNames), so no pod waits on a pull beside the API server.
     */
    appliance: z.boolean().optional(),
    note: z.string().optional(),
  })
  .strict();
export type SeedEntry = z.infer<typeof SeedEntry>;

const SeedList = z.object({ images: z.array(SeedEntry) }).strict();

export interface ListedImage extends SeedEntry {
  /** The list file it came from. */
  list: string;
  /** Repository path in the appliance's registry (no host). */
  repository: string;
  tag: string;
}

export function parseRef(ref: string): { host: string; repository: string; tag: string } {
  const m = IMAGE_REF.exec(ref);
  if (!m) throw new UserError(`'${ref}' is not an image reference with a tag`, "write it as [registry/]path:tag");
  // Like docker: a first component without '.' or ':' (and not localhost) is a path on docker.io.
  const host = m[1] ?? "docker.io";
  const repository = host === "docker.io" && !m[2]!.includes("/") ? `library/${m[2]}` : m[2]!;
  return { host, repository, tag: m[3]! };
}

export async function loadSeedList(path: string): Promise<ListedImage[]> {
  let raw: unknown;
  try {
    raw = yaml.load(await readFile(path, "utf8"), { filename: path });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new UserError(
      code ? `image list ${path} cannot be read (${code})` : `${path}: not valid YAML: ${(error as Error).message}`,
      "fix the path in the definition's registry.lists, or the YAML syntax",
    );
  }
  const result = SeedList.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const index = typeof issue.path[1] === "number" ? issue.path[1] : undefined;
    const entries = (raw as { images?: { ref?: string }[] } | undefined)?.images;
    const entry = index !== undefined ? ` (entry ${index + 1}${entries?.[index]?.ref ? `, ${entries[index]!.ref}` : ""})` : "";
    throw new UserError(
      `${path}: ${issue.path.join(".")}${entry}: ${issue.message}`,
      "fix the image list (the fields are described at the top of builder/images/seed.ts)",
    );
  }
  return result.data.images.map((entry) => ({ ...entry, list: path, ...parseRef(entry.ref) }));
}

/** Reads the lists; the same reference in two lists must be pinned the same way. */
export async function loadSeedLists(paths: string[]): Promise<ListedImage[]> {
  const byRef = new Map<string, ListedImage>();
  const byRepoTag = new Map<string, ListedImage>();
  for (const path of paths) {
    for (const image of await loadSeedList(path)) {
      const existing = byRef.get(image.ref);
      if (existing) {
        if (existing.recipe !== image.recipe || existing.digest !== image.digest || existing.upstreamDigest !== image.upstreamDigest) {
          throw new UserError(
            `${image.ref} is listed in ${existing.list} and ${image.list} with different recipes or digests`,
            "pin it the same way in both lists (or list it once)",
          );
        }
        continue;
      }
      const key = `${image.repository}:${image.tag}`;
      const clash = byRepoTag.get(key);
      if (clash)
        throw new UserError(
          `${image.ref} (${image.list}) and ${clash.ref} (${clash.list}) would both be ${key} in the appliance's registry`,
          "the registry stores images without their registry host: list only one of them",
        );
      byRef.set(image.ref, image);
      byRepoTag.set(key, image);
    }
  }
  return [...byRef.values()];
}

export type ImageProfile = "default" | "upstream";

export interface SelectedImage extends ListedImage {
  /** How the images stage gets it. */
  source: "recipe" | "pull";
  /** The digest the result must have. */
  expected: string | undefined;
}

export interface Selection {
  images: SelectedImage[];
  /** Listed but not provided in this profile / with these features: ref -> why. */
  skipped: { ref: string; reason: string }[];
}

/**
 * Every name under which the appliance's own cluster asks for an image marked `appliance`
 * (its reference and its other tags), for the first boot to pull before the cluster starts.
 */
export function applianceImageNames(images: SelectedImage[]): string[] {
  return images
    .filter((image) => image.appliance)
    .flatMap((image) => [image.ref, ...image.tags.map((tag) => `${image.ref.slice(0, -image.tag.length)}${tag}`)]);
}

/**
 * What the images stage produces for a profile. `allowUnpinned` is for lock-images,
 * which computes the digests; a build refuses an entry without one.
 */
export function selectImages(images: ListedImage[], opts: { profile: ImageProfile; kubespray: boolean; allowUnpinned?: boolean }): Selection {
  const selected: SelectedImage[] = [];
  const skipped: Selection["skipped"] = [];
  for (const image of images) {
    if (image.requires === "kubespray" && !opts.kubespray) {
      skipped.push({ ref: image.ref, reason: "needs kubespray (kubespray.enabled: false in the definition)" });
      continue;
    }
    const pull = opts.profile === "upstream" && (image.upstreamDigest || !image.recipe);
    if (pull) {
      if (!image.upstreamDigest && !opts.allowUnpinned) {
        throw new UserError(
          `${image.list}: ${image.ref} has no upstreamDigest (an image list entry must be pinned by digest)`,
          "pin it: 'icn-bootstrap lock-images --upstream' (needs access to the upstream registries), or add upstreamDigest: sha256:... by hand",
        );
      }
      selected.push({ ...image, source: "pull", expected: image.upstreamDigest });
    } else if (image.recipe) {
      if (!image.digest && !opts.allowUnpinned) {
        throw new UserError(
          `${image.list}: ${image.ref} has no digest (an image list entry must be pinned by digest)`,
          "run 'icn-bootstrap lock-images' to build it and write its digest into the list",
        );
      }
      selected.push({ ...image, source: "recipe", expected: image.digest });
    } else {
      skipped.push({ ref: image.ref, reason: "upstream only (no recipe): the default profile cannot build it here" });
    }
  }
  return { images: selected, skipped };
}

/**
 * Writes digests into a list file, keeping its comments and layout: the entry whose
 * `ref:` matches gets its `digest:` (or `upstreamDigest:`) line replaced or added.
 */
export async function writeDigests(path: string, digests: Record<string, string>, field: "digest" | "upstreamDigest" = "digest"): Promise<number> {
  const lines = (await readFile(path, "utf8")).split("\n");
  let changed = 0;
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)- ref:\s*(\S+)\s*$/.exec(lines[i]!);
    if (!m || !(m[2]! in digests)) continue;
    const indent = `${m[1]}  `;
    let end = i + 1;
    while (end < lines.length && lines[end]!.startsWith(indent) && !/^\s*- /.test(lines[end]!)) end++;
    const existing = lines.slice(i + 1, end).findIndex((l) => new RegExp(`^\\s*${field}:`).test(l));
    const line = `${indent}${field}: ${digests[m[2]!]}`;
    if (existing >= 0) {
      if (lines[i + 1 + existing] !== line) changed++;
      lines[i + 1 + existing] = line;
    } else {
      lines.splice(end, 0, line);
      changed++;
    }
  }
  await writeFile(path, lines.join("\n"));
  return changed;
}

export function listPaths(baseDir: string, lists: string[]): string[] {
  return lists.map((l) => resolve(baseDir, l));
}

export const seedListPath = (name: string) => join(SEED_DIR, name);
