/**
 * The infra-local-controller chart as the build makes it (its recipe, planned and written
 * by the build's own functions), and the pinned Helm to run on it, for tests.
 */
import { join } from "node:path";
import { execa, type Options } from "execa";
import { planChart, writeChartDir } from "../../builder/images/chart.js";
import { loadRecipe } from "../../builder/images/recipe.js";
import { artifactPaths } from "../../builder/sources/index.js";
import { CONTROLLER_CHART_REPOSITORY } from "../../common/controller-chart.js";

export interface ControllerChart {
  /** The chart's directory. */
  dir: string;
  /** Runs the pinned Helm with its homes under `work` (never the user's). */
  helm(args: string[], options?: Options): ReturnType<typeof execa>;
}

export async function writeControllerChart(work: string): Promise<ControllerChart> {
  const ref = `bootstrap.icn:5000/${CONTROLLER_CHART_REPOSITORY}:0.1.0`;
  const recipe = await loadRecipe("infra-local-controller-chart", ref);
  const dir = await writeChartDir(await planChart(recipe, { ref, repository: CONTROLLER_CHART_REPOSITORY, tag: "0.1.0" }), work);
  const helm = (await artifactPaths(["helm"])).helm;
  const homes = { HELM_CACHE_HOME: join(work, "helm"), HELM_CONFIG_HOME: join(work, "helm"), HELM_DATA_HOME: join(work, "helm") };
  return {
    dir,
    helm: (args, options = {}) => execa(helm, args, { reject: false, ...options, env: { ...homes, ...options.env } }),
  };
}
