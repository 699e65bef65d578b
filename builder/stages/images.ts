/**
 * Stage `images`: every listed container image as an OCI image layout (`oci/`, one
 * layout for all images so shared blobs are there once), plus `images.json`
 * (reference -> digest, layers, where it came from).
 *
 * Built images (default profile): a shared Debian base layer (from the image-base
 * stage) where the recipe has Debian packages, or its own Debian root (image-root stage,
 * `base: own-debian`), then one layer with the recipe's files.
 * Pulled images (upstream profile): `skopeo copy --preserve-digests docker://ref@digest`.
 * Either way the manifest digest must equal the one the list pins.
 */
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import yaml from "js-yaml";
import { writeChartDir, type PlannedChart } from "../images/chart.js";
import type { ChartMetadata } from "../../common/helm-chart.js";
import { ContentStore } from "../cache.js";
import { UserError } from "../errors.js";
import type { ImagesPlan, PlannedImage } from "../images/plan.js";
import { cachedLayer, fileEntries, type LayerInfo } from "../oci/layer.js";
import { OciLayout, REF_NAME } from "../oci/layout.js";
import { indexTar, normalizeEntries } from "../oci/tar.js";
import type { Stage, StageResult, StageRun } from "../stage.js";
import { BASE_TAR } from "./image-debian.js";

export const OCI_DIR = "oci";
export const IMAGES_JSON = "images.json";

export interface ImagesDeps {
  plan: ImagesPlan;
  base?: StageResult;
  /** Own Debian roots (base: own-debian), by recipe name. */
  roots?: Record<string, StageResult>;
  compiled?: StageResult;
  /** lock-images: record the digests instead of checking them. */
  record?: boolean;
}

export interface BuiltImage {
  ref: string;
  repository: string;
  tag: string;
  tags: string[];
  digest: string;
  source: "recipe" | "pull";
  layers: LayerInfo[];
}

/** The layout reference name of an image: its repository and tag in the appliance's registry. */
export const layoutName = (image: { repository: string; tag: string }) => `${image.repository}:${image.tag}`;

export const imagesStage: Stage<ImagesDeps> = {
  name: "images",
  sources: [
    import.meta.filename,
    join(import.meta.dirname, "../oci/tar.ts"),
    join(import.meta.dirname, "../oci/layer.ts"),
    join(import.meta.dirname, "../oci/layout.ts"),
  ],
  inputs: ({ plan, base, roots, compiled, record }) => ({
    images: plan.images.map(({ list: _list, ...image }) => ({
      ...image,
      recipe: image.recipe && { ...image.recipe, files: image.recipe.files.map(({ from: _from, ...f }) => f) },
      chart: image.chart && { ...image.chart, helm: image.chart.helm.sha256 },
    })),
    base: base?.key,
    roots: Object.fromEntries(Object.entries(roots ?? {}).map(([name, r]) => [name, r.key])),
    compiled: compiled?.key,
    record: Boolean(record),
  }),
  async build(run, { plan, base, roots, compiled, record }) {
    const store = new ContentStore();
    const layout = new OciLayout(join(run.out, OCI_DIR), store);
    const built: BuiltImage[] = [];

    const pulls = plan.images.filter((i) => i.source === "pull");
    for (const image of pulls) {
      run.log(`pulling ${image.ref}@${image.upstreamDigest}`);
      // ICN_BOOTSTRAP_REGISTRIES_CONF: a containers-registries.conf(5) for the pulls (mirrors, a
      // proxy registry); the digests are verified whatever serves them.
      const conf = process.env.ICN_BOOTSTRAP_REGISTRIES_CONF;
      await run.exec("skopeo", [
        ...(conf ? ["--registries-conf", conf] : []),
        "copy",
        "--preserve-digests",
        "--retry-times",
        "3",
        `docker://${image.ref.replace(/:[^:/]+$/, "")}@${image.upstreamDigest}`,
        `oci:${layout.dir}:${layoutName(image)}`,
      ]);
    }
    for (const image of pulls) {
      const descriptor = await layout.adopt(layoutName(image));
      if (!descriptor) throw new Error(`skopeo did not put ${image.ref} into ${layout.dir}`);
      built.push({ ...pick(image), digest: descriptor.digest, layers: [] });
    }

    let baseLayer: LayerInfo | undefined;
    const needsBase = plan.images.some((i) => i.recipe?.base === "debian");
    if (needsBase) {
      if (!base) throw new Error("images with a Debian base need the image-base stage");
      baseLayer = await debianRootLayer(`debian-base:${base.key}`, "debian base", base, store, run.log);
    }
    for (const image of plan.images.filter((i) => i.chart)) {
      const descriptor = await packageChart(run, layout, layoutName(image), image.chart!);
      run.log(`${image.ref} ${descriptor.digest} (Helm chart)`);
      built.push({ ...pick(image), digest: descriptor.digest, layers: [] });
    }
    for (const image of plan.images.filter((i) => i.source === "recipe" && !i.chart)) {
      const recipe = image.recipe!;
      const files = [
        ...recipe.files.map(({ from, to, mode }) => ({ from, to, mode })),
        ...recipe.compiled.map(({ name, to, mode }) => {
          if (!compiled) throw new Error(`${image.ref} needs the image-compile stage`);
          return { from: join(compiled.dir, "bin", name), to, mode: mode ?? 0o755 };
        }),
      ];
      const key = JSON.stringify({
        v: 1,
        files: recipe.files.map(({ to, mode, sha256 }) => ({ to, mode, sha256 })),
        compiled: recipe.compiled,
        compiledKey: recipe.compiled.length ? compiled?.key : undefined,
      });
      const layer = await cachedLayer(key, recipe.name, () => fileEntries(files), store);
      const debianLayer =
        recipe.base === "debian"
          ? baseLayer!
          : recipe.base === "own-debian"
            ? await ownRootLayer(recipe.name, roots?.[recipe.name], store, run.log)
            : undefined;
      const layers = [...(debianLayer ? [debianLayer] : []), layer];
      const descriptor = await layout.addImage(layoutName(image), layers, {
        ...recipe.config,
        labels: { "org.opencontainers.image.ref.name": image.ref, "org.opencontainers.image.source": "icn-bootstrap images/" + recipe.name },
      });
      run.log(`${image.ref} ${descriptor.digest} (${layers.length} layer${layers.length > 1 ? "s" : ""}${layer.reused ? ", layer reused" : ""})`);
      built.push({ ...pick(image), digest: descriptor.digest, layers });
    }
    await layout.writeIndex();

    if (!record) {
      const wrong = built.map((b) => ({ b, planned: plan.images.find((i) => i.ref === b.ref)! })).filter(({ b, planned }) => b.digest !== planned.expected);
      if (wrong.length > 0) {
        throw new UserError(
          `image digest${wrong.length > 1 ? "s" : ""} not as pinned:\n${wrong.map(({ b, planned }) => `    ${planned.list}: ${b.ref}: expected ${planned.expected}, got ${b.digest}`).join("\n")}`,
          wrong.some(({ b }) => b.source === "recipe")
            ? "if a recipe or what it copies (the BPA's bundle from bpa/, the components' chart from manifests/), an artifact or a pinned package changed on purpose, re-pin with 'icn-bootstrap lock-images' and commit the list; otherwise the build differs on this host (its Go toolchain builds the artifacts: see 'icn-bootstrap fetch')"
            : "the registry served a different image for that digest: check the source registry",
        );
      }
    }
    await writeFile(join(run.out, IMAGES_JSON), JSON.stringify(built, null, 2));
    void REF_NAME;
  },
};

/** `helm package` of the chart's directory, at a fixed time (SOURCE_DATE_EPOCH) so the archive is reproducible, into the layout. */
async function packageChart(run: StageRun, layout: OciLayout, name: string, chart: PlannedChart & { helm: { path: string } }) {
  const work = await mkdtemp(join(run.out, ".chart-"));
  try {
    const dir = await writeChartDir(chart, join(work, "src"));
    await run.exec(chart.helm.path, ["package", dir, "--destination", join(work, "out")], {
      env: { SOURCE_DATE_EPOCH: "0", HELM_CACHE_HOME: join(work, "cache"), HELM_CONFIG_HOME: join(work, "config"), HELM_DATA_HOME: join(work, "data") },
    });
    const [tgz] = await readdir(join(work, "out"));
    if (!tgz) throw new Error(`helm package wrote no archive for ${name}`);
    return await layout.addChart(name, yaml.load(chart.chartYaml) as ChartMetadata, join(work, "out", tgz));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

function pick(image: PlannedImage) {
  // No list path: the stage's inputs leave it out so checkouts share the output, so the output must not name one.
  return { ref: image.ref, repository: image.repository, tag: image.tag, tags: image.tags, source: image.source };
}

/** The layer of a recipe's own Debian root (image-root stage), cached by that stage's key. */
async function ownRootLayer(name: string, root: StageResult | undefined, store: ContentStore, log: (message: string) => void): Promise<LayerInfo> {
  if (!root) throw new Error(`${name} has base: own-debian, but its image-root stage did not run`);
  return debianRootLayer(`debian-root:${root.key}`, `${name} debian root`, root, store, log);
}

/** A Debian root stage's tar (image-base, image-root) as one layer, cached under `key`. */
async function debianRootLayer(key: string, what: string, stage: StageResult, store: ContentStore, log: (message: string) => void): Promise<LayerInfo> {
  const layer = await cachedLayer(key, what, async () => normalizeEntries(await indexTar(join(stage.dir, BASE_TAR))), store);
  log(`${what} layer ${layer.digest.slice(7, 19)} (${(layer.size / 1024 / 1024).toFixed(1)} MiB)${layer.reused ? ", reused" : ""}`);
  return layer;
}
