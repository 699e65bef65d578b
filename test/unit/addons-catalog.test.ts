/**
 * The appliance's addons catalog (manifests/bpa/addons.yaml) against what the build seeds
 * (registry-seed/addons.yaml and the chart recipes): every addon the BPA may install is a
 * chart the registry serves at that version, and every seeded chart is in the catalog.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import yaml from "js-yaml";
import { describe, expect, it } from "vitest";
import { ADDONS_CATALOG_CONFIGMAP, ADDONS_CATALOG_KEY, readAddonsCatalog, type CatalogAddon } from "../../common/addons-catalog.js";
import { loadRecipe } from "../../builder/images/recipe.js";
import { loadSeedList } from "../../builder/images/seed.js";
import { REPO } from "../helpers/cli.js";

/** A replacement that names an image (registry host with a dot, a path, a tag), not some other text of a template. */
const IMAGE_REF = /^[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?\/\S+:[\w.-]+$/;

async function catalog(): Promise<CatalogAddon[]> {
  const doc = yaml.load(await readFile(join(REPO, "manifests/bpa/addons.yaml"), "utf8")) as { metadata: { name: string }; data: Record<string, string> };
  expect(doc.metadata.name).toBe(ADDONS_CATALOG_CONFIGMAP);
  const addons = readAddonsCatalog(doc.data[ADDONS_CATALOG_KEY]!);
  if (typeof addons === "string") throw new Error(`manifests/bpa/addons.yaml: ${addons}`);
  return addons;
}

describe("the addons catalog", () => {
  it("names only charts the registry is seeded with, at their versions, and every seeded chart", async () => {
    const seeded = await loadSeedList(join(REPO, "registry-seed/addons.yaml"));
    const charts: string[] = [];
    for (const entry of seeded) {
      const recipe = await loadRecipe(entry.recipe!, entry.ref);
      if (recipe.chart) charts.push(`oci://${entry.ref.split("/")[0]}/${entry.repository} ${entry.tag}`);
    }
    const addons = await catalog();
    expect(addons.map((a) => `${a.chart} ${a.version}`).sort()).toEqual(charts.sort());
    expect(addons.find((a) => a.name === "multus")).toMatchObject({ default: true, namespace: "kube-system" });
  });

  it("seeds every image a chart's templates name, built by the project", async () => {
    const seeded = await loadSeedList(join(REPO, "registry-seed/addons.yaml"));
    let checked = 0;
    for (const entry of seeded) {
      const recipe = await loadRecipe(entry.recipe!, entry.ref);
      const imageReplacements = (recipe.chart?.files.flatMap((f) => f.replace) ?? []).filter((r) => IMAGE_REF.test(r.to.replace(/^image:\s*/, "")));
      for (const replacement of imageReplacements) {
        const image = seeded.find((e) => e.ref === replacement.to.replace(/^image:\s*/, ""));
        expect(image, `${recipe.file}: ${replacement.to}`).toBeDefined();
        expect((await loadRecipe(image!.recipe!, image!.ref)).chart).toBeUndefined();
        checked++;
      }
    }
    // Multus, both SR-IOV charts and QAT pin their image by a replacement (NFD's chart by its appVersion).
    expect(checked).toBeGreaterThanOrEqual(4);
  });
});
