/**
 * Chart recipes (builder/images/chart.ts): the chart made from a source's own files, its
 * image references rewritten, and the errors a recipe that no longer fits its source gets.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planChart, writeChartDir } from "../../builder/images/chart.js";
import { loadRecipe } from "../../builder/images/recipe.js";
import { UserError } from "../../builder/errors.js";

let dir: string;

async function recipe(name: string, chart: Record<string, unknown>, files: Record<string, string>) {
  await mkdir(join(dir, name, "src", "templates"), { recursive: true });
  for (const [path, text] of Object.entries(files)) await writeFile(join(dir, name, "src", path), text);
  await writeFile(join(dir, name, "recipe.yaml"), yaml.dump({ name, chart }));
  return loadRecipe(name, `bootstrap.icn:5000/charts/${String(chart.name)}:${String(chart.version)}`, dir);
}

const image = (ref: string) => ({ ref, repository: ref.replace(/^[^/]+\//, "").replace(/:[^:]+$/, ""), tag: ref.replace(/^.*:/, "") });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "icn-chart-recipe-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("chart recipes", () => {
  it("makes Chart.yaml from the recipe and the templates from the sources, with the image references rewritten", async () => {
    const r = await recipe(
      "demo-chart",
      {
        name: "demo",
        version: "1.2.0",
        appVersion: "v1.2.0",
        description: "a demo",
        files: [
          { from: "recipe:src/app.yml", to: "templates/app.yml", replace: [{ from: "example.org/demo:snapshot", to: "example.org/demo:v1.2.0" }] },
          { from: "recipe:src/templates", to: "templates/more" },
          { from: "recipe:src/values.yaml", to: "values.yaml" },
        ],
      },
      {
        "app.yml": "image: example.org/demo:snapshot\n---\nimage: example.org/demo:snapshot\n",
        "templates/a.yaml": "kind: ConfigMap\n",
        "values.yaml": "replicas: 1\n",
      },
    );
    const chart = await planChart(r, image("bootstrap.icn:5000/charts/demo:1.2.0"));
    expect(yaml.load(chart.chartYaml)).toEqual({
      apiVersion: "v2",
      name: "demo",
      version: "1.2.0",
      appVersion: "v1.2.0",
      description: "a demo",
      type: "application",
    });
    expect(chart.files).toEqual({
      "templates/app.yml": "image: example.org/demo:v1.2.0\n---\nimage: example.org/demo:v1.2.0\n",
      "templates/more/a.yaml": "kind: ConfigMap\n",
      "values.yaml": "replicas: 1\n",
    });
    const root = await writeChartDir(chart, join(dir, "out"));
    expect(await readFile(join(root, "templates/more/a.yaml"), "utf8")).toBe("kind: ConfigMap\n");
    expect(await readFile(join(root, "Chart.yaml"), "utf8")).toBe(chart.chartYaml);
  });

  it("fails naming the replacement when the source no longer has it (upstream changed)", async () => {
    const r = await recipe(
      "stale-chart",
      {
        name: "stale",
        version: "0.1.0",
        appVersion: "v0.1.0",
        description: "stale",
        files: [{ from: "recipe:src/app.yml", to: "templates/app.yml", replace: [{ from: "example.org/gone:snapshot", to: "example.org/gone:v1" }] }],
      },
      { "app.yml": "image: example.org/other:snapshot\n" },
    );
    const error = await planChart(r, image("bootstrap.icn:5000/charts/stale:0.1.0")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as Error).message).toMatch(/'example\.org\/gone:snapshot' does not occur in recipe:src\/app\.yml/);
  });

  it("refuses a list entry Helm would not find the chart under (its name and version)", async () => {
    const r = await recipe(
      "named-chart",
      { name: "named", version: "2.0.0", appVersion: "v2", description: "named", files: [{ from: "recipe:src/app.yml", to: "templates/app.yml" }] },
      { "app.yml": "kind: ConfigMap\n" },
    );
    const wrongName = (await planChart(r, image("bootstrap.icn:5000/charts/other:2.0.0")).catch((e: unknown) => e)) as UserError;
    expect(wrongName.message).toMatch(/makes chart named 2\.0\.0/);
    expect(wrongName.hint).toBe("list it as bootstrap.icn:5000/charts/named:2.0.0");
    await expect(planChart(r, image("bootstrap.icn:5000/charts/named:1.0.0"))).rejects.toThrow(/makes chart named 2\.0\.0/);
  });
});
