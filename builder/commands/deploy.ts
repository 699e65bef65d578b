import { parseCommandArgs } from "../args.js";
import { deploy } from "../deploy.js";
import { UserError } from "../errors.js";
import { log } from "../log.js";
import type { Command } from "./command.js";

export const deployCommand: Command = {
  name: "deploy",
  summary: "install or upgrade the components' Helm chart (BPA, Metal3, Ironic) on a Kubernetes cluster of your own",
  usage: `usage: icn-bootstrap deploy --kubeconfig FILE [--values FILE] [--chart FILE] [--release NAME] [--wait SECONDS]

Installs the infra-local-controller chart (the BPA operator and REST API, Metal3's
baremetal-operator, Ironic) with the pinned Helm, or upgrades it when the release exists.
Before anything is applied it checks that the cluster answers and runs Kubernetes 1.30 or
later, that you may create what the chart holds (CRDs, ClusterRoles, namespaces, ...), and
a dry run of the whole release on the server. Then it waits for the Deployments.

  --kubeconfig FILE  the cluster to install on (required)
  --values FILE      the chart's values: registry.address and nodeFacingAddress at least
                     (docs/developer-path.md, "Values")
  --chart FILE       the packaged chart (default: out/infra-local-controller-<version>.tgz,
                     written by './icn-bootstrap build')
  --release NAME     the Helm release (default: icn)
  --wait SECONDS     how long to wait for the Deployments to be available (default 1800;
                     0: do not wait)

The site CA, the REST API's certificate and the credentials are made at install and kept by
later deploys. 'helm uninstall NAME' removes the release; CRDs and namespaces stay.`,
  async run(argv) {
    const { values } = parseCommandArgs("deploy", argv, {
      kubeconfig: { type: "string" },
      values: { type: "string" },
      chart: { type: "string" },
      release: { type: "string", default: "icn" },
      wait: { type: "string", default: "1800" },
    });
    if (!values.kubeconfig) throw new UserError("deploy: --kubeconfig is required", "pass the kubeconfig of the cluster to install on");
    const waitSeconds = Number(values.wait);
    if (!Number.isInteger(waitSeconds) || waitSeconds < 0) throw new UserError(`deploy: --wait ${values.wait}`, "give whole seconds, 0 or more");
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(values.release!) || values.release!.length > 53)
      throw new UserError(`deploy: --release ${values.release}`, "a Helm release name: lower case letters, digits and dashes, at most 53");
    await deploy({
      kubeconfig: values.kubeconfig,
      values: values.values,
      chart: values.chart,
      release: values.release!,
      waitSeconds,
      log: (message) => log("deploy", message),
    });
  },
};
