import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkChart, readChartYaml } from "../../../bpa/rest/push-chart.js";
import { aliasBombChartYaml } from "../../helpers/fixtures/bpa/alias-bomb.js";

let work: string;

/** A .tgz laid out as helm package makes it: <name>/Chart.yaml and the rest. */
async function chartTgz(file: string, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(work, "src-"));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, ".."), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  const out = join(work, file);
  await execa("tar", [
    "-czf",
    out,
    "-C",
    dir,
    ...Object.keys(files)
      .map((p) => p.split("/")[0]!)
      .filter((v, i, a) => a.indexOf(v) === i),
  ]);
  return out;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-chart-"));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe("a chart upload", () => {
  it("reads Chart.yaml of a packaged chart", async () => {
    const tgz = await chartTgz("app-0.2.0.tgz", {
      "app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.2.0\ndescription: x\n",
      "app/templates/cm.yaml": "kind: ConfigMap\n",
    });
    expect(await readChartYaml(tgz)).toEqual({ apiVersion: "v2", name: "app", version: "0.2.0", description: "x" });
  });

  it("refuses what is not a chart, naming why", async () => {
    const plain = join(work, "plain.tgz");
    await writeFile(plain, "not gzip at all");
    await expect(readChartYaml(plain)).rejects.toThrow(/not a packaged Helm chart \(a \.tgz from helm package\)/);
    const noChart = await chartTgz("nochart.tgz", { "app/values.yaml": "a: 1\n" });
    await expect(readChartYaml(noChart)).rejects.toThrow("no <name>/Chart.yaml in the archive");
    const noVersion = await chartTgz("noversion.tgz", { "app/Chart.yaml": "apiVersion: v2\nname: app\n" });
    await expect(readChartYaml(noVersion)).rejects.toThrow("needs apiVersion, name and version");
  });

  it("must be published under its own name and version (Helm pulls by them)", async () => {
    const tgz = await chartTgz("app.tgz", { "app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.2.0+build.1\n" });
    await expect(checkChart(tgz, "charts/other:0.2.0_build.1")).rejects.toThrow(
      'the chart is named "app" but would be published as charts/other: Helm pulls a chart by its name, so the name\'s last segment must be it (e.g. --name charts/app:0.2.0+build.1)',
    );
    await expect(checkChart(tgz, "charts/app:0.3.0")).rejects.toThrow(
      "the chart's version is 0.2.0+build.1, but the name asks for tag 0.3.0: name it charts/app:0.2.0_build.1",
    );
    expect(await checkChart(tgz, "charts/app")).toMatchObject({ repository: "charts/app", tag: "0.2.0_build.1" });
  });

  it("keeps only the fields of Chart.yaml that describe the chart, as strings", async () => {
    const tgz = await chartTgz("fields.tgz", {
      "app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.0.0\nappVersion: '2.1'\nannotations: { a: b }\ndependencies: [{ name: x }]\nextra: 1\n",
    });
    expect(await readChartYaml(tgz)).toEqual({ apiVersion: "v2", name: "app", version: "1.0.0", appVersion: "2.1" });
  });

  it("refuses YAML aliases (billion laughs in 349 bytes of Chart.yaml), in milliseconds, naming them", async () => {
    const tgz = await chartTgz("laughs.tgz", { "laughs/Chart.yaml": aliasBombChartYaml("laughs") });
    const started = Date.now();
    await expect(checkChart(tgz, "charts/laughs:1.0.0")).rejects.toThrow(
      "the chart's Chart.yaml uses YAML aliases (&anchor and *alias): this API does not expand them; write the values out",
    );
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it("refuses a chart that unpacks to more than Helm's 100 MiB, at once, naming the limit", async () => {
    const src = await mkdtemp(join(work, "big-"));
    await mkdir(join(src, "big"));
    await writeFile(join(src, "big", "Chart.yaml"), "apiVersion: v2\nname: big\nversion: 1.0.0\n");
    await writeFile(join(src, "big", "zeros"), Buffer.alloc(120 * 1024 * 1024));
    const tgz = join(work, "big.tgz");
    await execa("tar", ["-czf", tgz, "-C", src, "big"]);
    await rm(src, { recursive: true });
    await expect(readChartYaml(tgz)).rejects.toThrow("the chart unpacks to more than 100 MiB (Helm's own limit on a chart): not a Helm chart");
  });
});
