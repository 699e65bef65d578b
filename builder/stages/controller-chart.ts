import { copyFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Stage } from "../stage.js";
import { LAYER_TREE } from "./disk.js";

/** Where the appliance's first boot finds the chart it installs itself from. */
export const CONTROLLER_CHART_TARGET = "usr/share/icn-bootstrap/infra-local-controller.tgz";

export interface ControllerChartDeps {
  /** The packaged chart, as the registry stage seeded it (its OCI artifact's one layer). */
  file: string;
  digest: string;
}

/**
 * Content layer: the infra-local-controller chart, the same archive the registry serves and
 * the build writes beside the images, for the first boot's `helm upgrade --install`.
 */
export const controllerChartStage: Stage<ControllerChartDeps> = {
  name: "controller-chart",
  sources: [import.meta.filename],
  inputs: ({ digest }) => ({ digest }),
  async build(run, { file, digest }) {
    const target = join(run.out, LAYER_TREE, CONTROLLER_CHART_TARGET);
    await mkdir(dirname(target), { recursive: true });
    await copyFile(file, target);
    run.log(`/${CONTROLLER_CHART_TARGET} (${digest})`);
  },
};
