/**
 * Stage `registry`: the appliance registry's storage tree, seeded by a real registry
 * server (Debian's docker-registry) with skopeo, at the path the appliance serves it
 * from (`tree/var/lib/docker-registry`, a content layer of the disk stage).
 *
 * The registry stores every blob once (content-addressed), whatever the number of
 * images that use it. Everything streams: skopeo reads the OCI layout and uploads,
 * the registry writes to disk; nothing holds an image in memory. The stage ends by
 * pulling every image by digest from the seeded tree (skopeo verifies every blob's
 * digest) and checking each tag resolves to the pinned digest.
 */
import { mkdir, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { SEEDED_TAGS_CONF, seededTagRules } from "../registry/seeded-tags.js";
import { dirname, join } from "node:path";
import { UserError } from "../errors.js";
import { findTool } from "../host-tools.js";
import { startRegistry, type RegistryServer } from "../registry/server.js";
import type { Stage, StageResult } from "../stage.js";
import { treeBytes } from "../stage.js";
import { IMAGES_JSON, OCI_DIR, layoutName, type BuiltImage } from "./images.js";

/** Where the appliance's registry keeps its data (Debian's docker-registry default). */
export const REGISTRY_STORAGE = "var/lib/docker-registry";
export const REGISTRY_PORT = 5000;
export const SEEDED_JSON = "seeded.json";

export interface RegistryDeps {
  images: StageResult;
}

export interface SeedStats {
  images: number;
  /** Sum of the sizes of the distinct blobs (layers + configs + manifests) of the images. */
  uniqueBlobBytes: number;
  /** Sum of the distinct layer sizes only. */
  uniqueLayerBytes: number;
  /** Apparent size of every file of the storage tree after seeding. */
  storageBytes: number;
  /** Wall time of the pushes only. */
  seedSeconds: number;
  verifySeconds: number;
  /** Peak resident memory of the largest skopeo process, and of the registry, in KiB. */
  skopeoMaxRssKiB: number;
  registryMaxRssKiB: number;
  /** Node's own peak resident memory when the stage finished (KiB). */
  builderMaxRssKiB: number;
}

export const registryStage: Stage<RegistryDeps> = {
  name: "registry",
  sources: [import.meta.filename, join(import.meta.dirname, "../registry/server.ts"), join(import.meta.dirname, "../registry/seeded-tags.ts")],
  inputs: ({ images }) => ({ images: images.key }),
  async build(run, { images }) {
    const built: BuiltImage[] = JSON.parse(await readFile(join(images.dir, IMAGES_JSON), "utf8"));
    const layout = join(images.dir, OCI_DIR);
    const storage = join(run.out, "tree", REGISTRY_STORAGE);
    const time = await findTool("time");
    let skopeoMaxRss = 0;
    const skopeo = async (args: string[]) => {
      if (!time) return run.exec("skopeo", args);
      const rssFile = join(run.out, ".rss");
      const out = await run.exec(time, ["-o", rssFile, "-f", "%M", "skopeo", ...args]);
      skopeoMaxRss = Math.max(skopeoMaxRss, Number((await readFile(rssFile, "utf8")).trim().split("\n").pop()) || 0);
      await rm(rssFile, { force: true });
      return out;
    };

    const server = await startRegistry(storage);
    let registryMaxRss = 0;
    let seedSeconds = 0;
    let verifySeconds = 0;
    try {
      run.log(`seeding ${built.length} images through docker-registry on ${server.address}`);
      const started = Date.now();
      for (const image of built) {
        const target = `${server.address}/${image.repository}:${image.tag}`;
        await skopeo(["copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", `oci:${layout}:${layoutName(image)}`, `docker://${target}`]);
        for (const tag of image.tags) await tagManifest(server, image, tag);
      }
      seedSeconds = (Date.now() - started) / 1000;
      registryMaxRss = await maxRss(server);
      run.log(`pushed in ${seedSeconds.toFixed(1)} s; pulling every image back by digest`);
      const verifyStarted = Date.now();
      await verify(server, built, run, skopeo);
      verifySeconds = (Date.now() - verifyStarted) / 1000;
      registryMaxRss = Math.max(registryMaxRss, await maxRss(server));
    } catch (error) {
      const log = await server.log();
      await server.stop();
      if (error instanceof UserError) throw error;
      throw new Error(`${(error as Error).message}\nregistry log (tail):\n${log.split("\n").slice(-10).join("\n")}`);
    }
    await server.stop();
    const unfinished = await removeUploads(storage);
    if (unfinished > 0) run.log(`dropped ${unfinished} unfinished upload session${unfinished > 1 ? "s" : ""} (retried pushes) from the storage`);

    const blobs = new Map<string, number>();
    const layers = new Map<string, number>();
    for (const image of built) for (const l of image.layers) layers.set(l.digest, l.size);
    for (const digest of await storedBlobs(storage)) blobs.set(digest, (await stat(join(storage, blobPath(digest)))).size);
    const stats: SeedStats = {
      images: built.length,
      uniqueBlobBytes: [...blobs.values()].reduce((a, b) => a + b, 0),
      uniqueLayerBytes: [...layers.values()].reduce((a, b) => a + b, 0),
      storageBytes: await apparentBytes(storage),
      seedSeconds,
      verifySeconds,
      skopeoMaxRssKiB: skopeoMaxRss,
      registryMaxRssKiB: registryMaxRss,
      builderMaxRssKiB: Math.round(process.resourceUsage().maxRSS),
    };
    await writeFile(join(run.out, SEEDED_JSON), JSON.stringify({ images: built.map(({ layers: _l, ...b }) => b), stats }, null, 2));
    const rules = join(run.out, "tree", SEEDED_TAGS_CONF);
    await mkdir(dirname(rules), { recursive: true });
    await writeFile(rules, seededTagRules(built));
    run.log(
      `${built.length} images, ${blobs.size} blobs, ${(stats.storageBytes / 1024 / 1024).toFixed(1)} MiB stored (${(stats.storageBytes / Math.max(1, stats.uniqueBlobBytes)).toFixed(3)}x the unique blobs); tree ${(await treeBytes(storage)) >> 20} MiB allocated`,
    );
  },
};

async function maxRss(server: RegistryServer): Promise<number> {
  const status = await readFile(`/proc/${server.pid}/status`, "utf8").catch(() => "");
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
}

async function tagManifest(server: RegistryServer, image: BuiltImage, tag: string): Promise<void> {
  const accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json";
  const manifest = await fetch(`${server.url}/v2/${image.repository}/manifests/${image.digest}`, { headers: { Accept: accept } });
  if (!manifest.ok) throw new Error(`cannot read ${image.repository}@${image.digest} back: HTTP ${manifest.status}`);
  const body = Buffer.from(await manifest.arrayBuffer());
  const put = await fetch(`${server.url}/v2/${image.repository}/manifests/${tag}`, {
    method: "PUT",
    headers: { "Content-Type": manifest.headers.get("content-type") ?? "" },
    body,
  });
  if (!put.ok) throw new Error(`cannot tag ${image.repository}@${image.digest} as ${tag}: HTTP ${put.status} ${await put.text()}`);
}

/** Pulls every image by digest (skopeo checks each blob's digest) and checks that every tag names the pinned digest. */
export async function verify(
  server: RegistryServer,
  built: BuiltImage[],
  run: { log(m: string): void; out: string },
  skopeo: (args: string[]) => Promise<string>,
): Promise<void> {
  const scratch = join(run.out, ".verify");
  for (const image of built) {
    await rm(scratch, { recursive: true, force: true });
    await skopeo([
      "copy",
      "--quiet",
      "--preserve-digests",
      "--src-tls-verify=false",
      `docker://${server.address}/${image.repository}@${image.digest}`,
      `dir:${scratch}`,
    ]);
    const { createHash } = await import("node:crypto");
    const manifest = await readFile(join(scratch, "manifest.json"));
    const digest = `sha256:${createHash("sha256").update(manifest).digest("hex")}`;
    if (digest !== image.digest)
      throw new UserError(
        `${image.ref}: the seeded registry serves manifest ${digest}, expected ${image.digest}`,
        "the registry storage is inconsistent: delete the registry stage's cache and build again",
      );
    for (const tag of [image.tag, ...image.tags]) {
      const head = await fetch(`${server.url}/v2/${image.repository}/manifests/${tag}`, {
        method: "HEAD",
        headers: { Accept: "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json" },
      });
      const served = head.headers.get("docker-content-digest");
      if (served !== image.digest)
        throw new UserError(
          `${image.ref}: tag ${tag} resolves to ${served ?? `HTTP ${head.status}`}, expected ${image.digest}`,
          "the registry storage is inconsistent: delete the registry stage's cache and build again",
        );
    }
  }
  await rm(scratch, { recursive: true, force: true });
  run.log(`verified ${built.length} images by digest`);
}

export function blobPath(digest: string): string {
  const hex = digest.replace(/^sha256:/, "");
  return join("docker/registry/v2/blobs/sha256", hex.slice(0, 2), hex, "data");
}

/**
 * The packaged chart (Helm's OCI artifact: its one layer) a registry stage seeded under a
 * repository, and the file name Helm gives it (<name>-<version>.tgz); undefined when the
 * build did not seed it.
 */
export async function seededChartFile(registryStageDir: string, repository: string): Promise<{ source: string; file: string; digest: string } | undefined> {
  const seeded = JSON.parse(await readFile(join(registryStageDir, SEEDED_JSON), "utf8")) as { images: { repository: string; tag: string; digest: string }[] };
  const chart = seeded.images.find((i) => i.repository === repository);
  if (!chart) return undefined;
  const storage = join(registryStageDir, "tree", REGISTRY_STORAGE);
  const manifest = JSON.parse(await readFile(join(storage, blobPath(chart.digest)), "utf8")) as { layers: { digest: string }[] };
  const layer = manifest.layers[0]!.digest;
  return { source: join(storage, blobPath(layer)), file: `${repository.split("/").pop()}-${chart.tag.replace(/_/g, "+")}.tgz`, digest: layer };
}

/** The digests of the blobs in a registry storage tree. */
export async function storedBlobs(storage: string): Promise<string[]> {
  const root = join(storage, "docker/registry/v2/blobs/sha256");
  const digests: string[] = [];
  for (const prefix of await readdir(root).catch(() => [])) {
    for (const hex of await readdir(join(root, prefix))) digests.push(`sha256:${hex}`);
  }
  return digests.sort();
}

async function apparentBytes(path: string): Promise<number> {
  const info = await stat(path);
  if (!info.isDirectory()) return info.size;
  let total = 0;
  for (const name of await readdir(path)) total += await apparentBytes(join(path, name));
  return total;
}

/**
 * Finished uploads leave empty `_uploads` directories behind; an upload the client
 * retried leaves its unfinished session (data and a `startedat` time). Neither is ever
 * read by a seeded registry, and the time would make the image differ from build to build.
 * Returns how many unfinished sessions were dropped.
 */
async function removeUploads(storage: string): Promise<number> {
  const repos = join(storage, "docker/registry/v2/repositories");
  let unfinished = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (!entry.isDirectory()) continue;
      const full = join(dir, entry.name);
      if (entry.name === "_uploads") {
        unfinished += (await readdir(full)).length;
        await rm(full, { recursive: true, force: true });
      } else await walk(full);
    }
  };
  await walk(repos);
  await mkdir(storage, { recursive: true });
  return unfinished;
}
