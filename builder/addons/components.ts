/**
 * What the application clusters' addons need from the build, built here from Go modules and
 * pinned by `icn-bootstrap lock-artifacts` beside Kubernetes (go/<name>/): Helm, which the
 * runner image carries for the BPA's addons Jobs, and the addons' own programs, which their
 * images carry (docs/addons.md).
 */
import type { GroupSpec } from "../sources/group-spec.js";

export const HELM_MODULE = "helm.sh/helm/v4";
export const MULTUS_MODULE = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4";
export const NFD_MODULE = "sigs.k8s.io/node-feature-discovery";
export const INTEL_DEVICE_PLUGINS_MODULE = "github.com/intel/intel-device-plugins-for-kubernetes";
/** Where NFD's container sees the host's /proc, /sys, … (upstream's image build: HOSTMOUNT_PREFIX=/host-). */
const NFD_HOSTMOUNT_PREFIX = "/host-";

export const ADDON_GROUPS: GroupSpec[] = [
  {
    name: "helm",
    module: HELM_MODULE,
    version: "v4.3.1",
    binaries: { helm: `${HELM_MODULE}/cmd/helm` },
    note: "Helm, the addons Jobs' client (charts as OCI artifacts)",
  },
  {
    name: "multus",
    module: MULTUS_MODULE,
    version: "v4.3.0",
    // The thick plugin: the node daemon, the shim kubelet's CNI calls run, and the installer
    // that copies the shim onto the node (deployments/multus-daemonset-thick.yml).
    binaries: {
      "multus-daemon": `${MULTUS_MODULE}/cmd/multus-daemon`,
      "multus-shim": `${MULTUS_MODULE}/cmd/multus-shim`,
      install_multus: `${MULTUS_MODULE}/cmd/install_multus`,
      // The thick installer copies it beside the shim: upstream builds cmd/passthru-cni as "passthru".
      passthru: `${MULTUS_MODULE}/cmd/passthru-cni`,
    },
    note: "Multus CNI (thick plugin), the addon giving pods more than one network interface",
  },
  {
    name: "node-feature-discovery",
    module: NFD_MODULE,
    version: "v0.19.0",
    // What the chart runs by default (the topology updater is off in its values).
    binaries: {
      "nfd-master": `${NFD_MODULE}/cmd/nfd-master`,
      "nfd-worker": `${NFD_MODULE}/cmd/nfd-worker`,
      "nfd-gc": `${NFD_MODULE}/cmd/nfd-gc`,
    },
    alsoRequires: [`${NFD_MODULE}/api/nfd`],
    // NFD's own go.mod pins the k8s.io staging modules by replace directives, which a
    // requiring module does not inherit; its api/nfd replace points into its own tree, which
    // the wrapper requires from the proxy at the same version instead.
    replaces: kubernetesReplaces,
    note: "Node Feature Discovery, the addon labelling nodes with their hardware features",
  },
  {
    name: "intel-device-plugins",
    module: INTEL_DEVICE_PLUGINS_MODULE,
    version: "v0.36.0",
    binaries: { intel_qat_device_plugin: `${INTEL_DEVICE_PLUGINS_MODULE}/cmd/qat_plugin` },
    replaces: kubernetesReplaces,
    note: "Intel's device plugins: the QAT one, the addon advertising QuickAssist devices to the kubelet",
  },
];

/**
 * The k8s.io staging modules' replace directives of a module's own go.mod, which a module
 * requiring it does not inherit (NFD's and Intel's plugins pin them so).
 */
function kubernetesReplaces(moduleGoMod: string): string[] {
  return [...moduleGoMod.matchAll(/^(?:replace)?\s*(k8s\.io\/\S+) => (k8s\.io\/\S+) (v\S+)\s*$/gm)].map((m) => `${m[1]} => ${m[2]} ${m[3]}`);
}

/** The release builds' LDFLAGS (Helm's Makefile, Multus's hack/build-go.sh, NFD's and Intel's Dockerfiles): each tells its pin; static, no cgo (NFD's cpuid is pure Go on amd64). */
export function addonsBuildRecipe(module: string, version: string): { tags: string[]; ldflags: string[]; cgo: boolean } | undefined {
  switch (module) {
    case HELM_MODULE:
      return {
        tags: [],
        ldflags: [`-X ${HELM_MODULE}/internal/version.version=${version}`, `-X ${HELM_MODULE}/internal/version.gitTreeState=archive`],
        cgo: false,
      };
    case NFD_MODULE:
      return {
        tags: ["osusergo", "netgo"],
        ldflags: ["-s", "-w", `-X ${NFD_MODULE}/pkg/version.version=${version}`, `-X ${NFD_MODULE}/pkg/utils/hostpath.pathPrefix=${NFD_HOSTMOUNT_PREFIX}`],
        cgo: false,
      };
    case INTEL_DEVICE_PLUGINS_MODULE:
      return { tags: [], ldflags: ["-s", "-w"], cgo: false };
    case MULTUS_MODULE:
      return {
        tags: [],
        ldflags: [`-X ${MULTUS_MODULE}/pkg/multus.version=${version}`, `-X ${MULTUS_MODULE}/pkg/multus.releaseStatus=,released`],
        cgo: false,
      };
    default:
      return undefined;
  }
}
