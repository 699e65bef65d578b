/**
 * Chart recipes (`chart:` in images/<name>/recipe.yaml): a Helm chart made from a pinned
 * source's own deployment files (a Go module's tree, verified by the committed go.sum, or
 * the appliance's own manifests in this repository),
 * with the image references the recipe names rewritten, packaged by the pinned Helm
 * (`helm package`, SOURCE_DATE_EPOCH for a reproducible archive) and seeded into the
 * registry as Helm's OCI artifact (common/helm-chart.ts) like any listed image.
 */
import { lstat, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import yaml from "js-yaml";
import { UserError } from "../errors.js";
import { pinnedModuleDir } from "../sources/index.js";
import { seededTagRules } from "../registry/seeded-tags.js";
import { loadSeedLists, SEED_DIR } from "./seed.js";
import type { Recipe } from "./recipe.js";

export interface PlannedChart {
  name: string;
  version: string;
  /** Chart.yaml's text. */
  chartYaml: string;
  /** Every file of the chart but Chart.yaml: path in the chart -> text. */
  files: Record<string, string>;
}

type ChartRecipe = NonNullable<Recipe["chart"]>;

const REPO_ROOT = resolve(import.meta.dirname, "..", "..");

/** Reads the chart's sources and applies the recipe's replacements; the chart's repository must end in its name and its tag be its version. */
export async function planChart(recipe: Recipe, image: { ref: string; repository: string; tag: string }, lockPath?: string): Promise<PlannedChart> {
  const chart = recipe.chart!;
  if (image.repository.split("/").pop() !== chart.name || image.tag !== chart.version.replace(/\+/g, "_")) {
    throw new UserError(
      `${image.ref}: ${recipe.file} makes chart ${chart.name} ${chart.version}, which Helm pulls as <registry>/…/${chart.name}:${chart.version}`,
      `list it as ${image.ref.replace(/[^/]+$/, "")}${chart.name}:${chart.version}`,
    );
  }
  const files: Record<string, string> = {};
  for (const file of chart.files) {
    if (file.from === "shipped:") {
      files[file.to] = await shippedRules();
      continue;
    }
    const sources = await readTree(await chartSource(file.from, recipe, image.ref, lockPath));
    for (const { from } of file.replace) {
      if (!Object.values(sources).some((text) => text.includes(from)))
        throw new UserError(
          `${recipe.file}: '${from}' does not occur in ${file.from}`,
          "the pinned source changed: update the recipe's replace list to what it names now",
        );
    }
    for (const [path, text] of Object.entries(sources)) {
      files[path === "" ? file.to : join(file.to, path)] = file.replace.reduce((out, { from, to }) => out.split(from).join(to), text);
    }
  }
  return { name: chart.name, version: chart.version, chartYaml: chartYaml(chart), files };
}

/**
 * The registry's rules (nginx maps) for every image the project's lists name, whatever a
 * definition selects: the same chart from every build. Without digests: the chart is one
 * of them, and its own digest depends on this file.
 */
async function shippedRules(): Promise<string> {
  const lists = (await readdir(SEED_DIR)).filter((f) => f.endsWith(".yaml")).sort();
  const images = await loadSeedLists(lists.map((f) => join(SEED_DIR, f)));
  return seededTagRules(
    images.map(({ repository, tag, tags }) => ({ repository, tag, tags })),
    "the chart's bundle",
  );
}

function chartYaml(chart: ChartRecipe): string {
  return yaml.dump({
    apiVersion: "v2",
    name: chart.name,
    version: chart.version,
    appVersion: chart.appVersion,
    description: chart.description,
    type: "application",
  });
}

/** `module:<entry>:<path>` in a pinned Go module, `recipe:<path>` beside the recipe, or a path in this repository (the appliance's own manifests). */
async function chartSource(from: string, recipe: Recipe, ref: string, lockPath?: string): Promise<string> {
  if (from.startsWith("recipe:")) return join(recipe.dir, from.slice("recipe:".length));
  if (!from.startsWith("module:")) return resolve(REPO_ROOT, from);
  const [, entry, path] = /^module:([^:]+):(.+)$/.exec(from)!;
  const module = await pinnedModuleDir(entry!, `${ref}: chart source '${from}'`, lockPath);
  return join(module.dir, path!);
}

/** A file ("" -> text) or every file of a directory (relative path -> text), sorted. */
async function readTree(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (path: string) => {
    let info;
    try {
      info = await lstat(path);
    } catch {
      throw new UserError(`chart source ${root} does not exist`, "fix the path in the recipe's chart.files (the pinned source has no such file)");
    }
    if (info.isDirectory()) for (const name of (await readdir(path)).sort()) await walk(join(path, name));
    else if (info.isFile()) out[relative(root, path)] = await readFile(path, "utf8");
  };
  await walk(root);
  return out;
}

/** Writes the chart's directory (<dir>/<name>/…) for `helm package`. */
export async function writeChartDir(chart: PlannedChart, dir: string): Promise<string> {
  const root = join(dir, chart.name);
  await mkdir(root, { recursive: true });
  await writeFile(join(root, "Chart.yaml"), chart.chartYaml);
  for (const [path, text] of Object.entries(chart.files).sort(([a], [b]) => a.localeCompare(b))) {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, path), text);
  }
  return root;
}
