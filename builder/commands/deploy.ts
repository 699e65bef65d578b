import { parseCommandArgs } from "../args.js";
import { deploy, HISTORY_MAX } from "../deploy.js";
import { UserError } from "../errors.js";
import { log } from "../log.js";
import type { Command } from "./command.js";

export const deployCommand: Command = {
  name: "deploy",
  summary: "install or upgrade the components' Helm chart (BPA, Metal3, Ironic) on a Kubernetes cluster of your own",
  usage: `usage: icn-bootstrap deploy --kubeconfig FILE [--values FILE] [--chart FILE] [--release NAME] [--wait SECONDS] [--ca-namespace NS]
                            [--images FILE --push-to REGISTRY [--push-insecure] [--push-authfile FILE] [--push-cert-dir DIR]]
                            [--images FILE [--registry-at HOST:PORT]] [--files FILE]

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
  --ca-namespace NS  the namespace a CA of your own (values secrets.caFrom) may be copied
                     from, when not bpa-system: named here on purpose, never by values alone

Offline, with the images in a registry of yours (the cluster's nodes must pull from it):
  --images FILE      the images bundle ('icn-bootstrap bundle': out/<name>-images.tar)
  --push-to HOST[:PORT]
                     the registry to push them into, under the same paths and digests;
                     sets the chart's images.registry to it. Pushed after the dry run,
                     before anything is installed
  --push-insecure    the registry speaks plain HTTP or has a certificate not to verify
  --push-authfile FILE
                     its credentials, as 'skopeo login --authfile FILE' writes them
  --push-cert-dir DIR
                     a directory with the registry's CA as ca.crt

Offline, with the chart's own registry and file server (values serve.registry.enabled,
serve.files.enabled), filled once they run:
  --images FILE      without --push-to: pushed into the chart's registry, with the push
                     account and the site CA the release made
  --registry-at HOST:PORT
                     where this machine reaches that registry (default: as the compute
                     nodes do, nodeFacingAddress and serve.registry.port); its
                     certificate must name it (serve.registry.certificateNames/Addresses)
  --files FILE       the files bundle ('icn-bootstrap bundle': out/<name>-files.tar),
                     unpacked into the chart's file server through the Kubernetes API

The site CA, the REST API's certificate and the credentials are made by deploy with the
Kubernetes API before Helm runs (never in Helm's release history) and kept by later
deploys. The release lives in bpa-system with its last ${HISTORY_MAX} revisions;
'helm -n bpa-system uninstall NAME' removes it; CRDs, namespaces and Secrets stay.`,
  async run(argv) {
    const { values } = parseCommandArgs("deploy", argv, {
      kubeconfig: { type: "string" },
      values: { type: "string" },
      chart: { type: "string" },
      release: { type: "string", default: "icn" },
      wait: { type: "string", default: "1800" },
      images: { type: "string" },
      "push-to": { type: "string" },
      "push-insecure": { type: "boolean" },
      "push-authfile": { type: "string" },
      "push-cert-dir": { type: "string" },
      "registry-at": { type: "string" },
      files: { type: "string" },
      "ca-namespace": { type: "string" },
    });
    if (values["push-to"] && !values.images) throw new UserError("deploy: --push-to without --images", "give the images bundle to push (--images FILE)");
    if (values["registry-at"] && (!values.images || values["push-to"]))
      throw new UserError("deploy: --registry-at is where the chart's own registry is reached", "give it with --images FILE and without --push-to");
    for (const option of ["push-to", "registry-at"] as const)
      if (values[option] && !/^[a-zA-Z0-9.-]+(:\d+)?$/.test(values[option]))
        throw new UserError(`deploy: --${option} ${values[option]}`, "a registry's host or host:port, without a scheme or path (e.g. registry.lab:5000)");
    if (values["ca-namespace"] && !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(values["ca-namespace"]))
      throw new UserError(`deploy: --ca-namespace ${values["ca-namespace"]}`, "a namespace's name: lower case letters, digits and dashes");
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
      images: values.images,
      files: values.files,
      registryAt: values["registry-at"],
      caNamespace: values["ca-namespace"],
      push: values["push-to"]
        ? { registry: values["push-to"], insecure: values["push-insecure"], authfile: values["push-authfile"], certDir: values["push-cert-dir"] }
        : undefined,
      log: (message) => log("deploy", message),
    });
  },
};
