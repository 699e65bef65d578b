/**
 * The kubespray pins as the appliance ships them: the versions and sha256 of everything its
 * registry and file server hold for application clusters (builder/kubespray/pins.ts makes
 * them). The build writes them as a ConfigMap among the first-boot manifests; the BPA copies
 * it into every kubespray Job's inventory (the runner passes the file with `-e @`) and reads from it
 * which Kubernetes versions, and which versions of the nodes' other components, it can
 * install. They are appliance content, not runner code: the runner image is the same for
 * every set of served versions.
 * Shared by the builder and the BPA, which must not import the builder.
 */
import yaml from "js-yaml";

export const KUBESPRAY_PINS_CONFIGMAP = "bpa-kubespray-pins";
export const KUBESPRAY_PINS_KEY = "kubespray-pins.yml";

/** The ConfigMap (as YAML) that carries the pins onto the appliance. */
export function kubesprayPinsManifest(pinsYaml: string, namespace = "bpa-system"): string {
  return yaml.dump(
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: KUBESPRAY_PINS_CONFIGMAP, namespace, labels: { "app.kubernetes.io/name": "bpa-operator" } },
      data: { [KUBESPRAY_PINS_KEY]: pinsYaml },
    },
    { lineWidth: -1, noRefs: true, sortKeys: false },
  );
}

/** The node components whose served version a running cluster follows (kubespray variable -> name). */
export const COMPONENT_VERSION_VARS: Readonly<Record<string, string>> = {
  containerd_version: "containerd",
  runc_version: "runc",
  cni_version: "cni-plugins",
  crictl_version: "crictl",
  nerdctl_version: "nerdctl",
  etcd_version: "etcd",
  coredns_version: "coredns",
  flannel_version: "flannel",
  flannel_cni_version: "flannel-cni-plugin",
  pod_infra_version: "pause",
};

export interface ServedPins {
  /** The Kubernetes versions kubeadm, kubelet and kubectl are all served for, oldest first. */
  kubernetesVersions: string[];
  /** Component name -> the version served. */
  components: Record<string, string>;
}

/** What the pins say is served; a message naming what is wrong when they are not pins. */
export function readServedPins(text: string): ServedPins | string {
  let pins: unknown;
  try {
    pins = yaml.load(text);
  } catch (error) {
    return `not YAML: ${(error as Error).message.split("\n")[0]}`;
  }
  if (!pins || typeof pins !== "object" || Array.isArray(pins)) return "not a mapping of kubespray variables";
  const vars = pins as Record<string, unknown>;
  const versionsOf = (name: string): string[] | undefined => {
    const table = vars[`${name}_checksums`];
    const amd64 = table && typeof table === "object" ? (table as Record<string, unknown>).amd64 : undefined;
    return amd64 && typeof amd64 === "object" ? Object.keys(amd64 as object) : undefined;
  };
  const kubeadm = versionsOf("kubeadm");
  if (!kubeadm?.length) return "no kubeadm_checksums.amd64: no Kubernetes version is served";
  const kubernetesVersions = kubeadm.filter((v) => /^\d+\.\d+\.\d+$/.test(v) && versionsOf("kubelet")?.includes(v) && versionsOf("kubectl")?.includes(v));
  if (kubernetesVersions.length === 0) return "no Kubernetes version has kubeadm, kubelet and kubectl checksums";
  const components: Record<string, string> = {};
  for (const [variable, name] of Object.entries(COMPONENT_VERSION_VARS)) {
    const value = vars[variable];
    if (typeof value === "string" || typeof value === "number") components[name] = String(value);
  }
  return { kubernetesVersions: kubernetesVersions.sort(compareVersions), components };
}

/** Orders dotted numeric versions ("1.35.10" after "1.35.9"). */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
