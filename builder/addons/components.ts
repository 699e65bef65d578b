/**
 * What the application clusters' addons need from the build, built here from Go modules and
 * pinned by `icn-bootstrap lock-artifacts` beside Kubernetes (go/<name>/): Helm, which the
 * runner image carries for the BPA's addons Jobs (bpa/README.md, "Addons").
 */
import type { GroupSpec } from "../sources/group-spec.js";

export const HELM_MODULE = "helm.sh/helm/v4";

export const ADDON_GROUPS: GroupSpec[] = [
  {
    name: "helm",
    module: HELM_MODULE,
    version: "v4.3.1",
    binaries: { helm: `${HELM_MODULE}/cmd/helm` },
    note: "Helm, the addons Jobs' client (charts as OCI artifacts)",
  },
];

/** Helm's release build (its Makefile's LDFLAGS): `helm version` tells the pin; static, no cgo. */
export function addonsBuildRecipe(module: string, version: string): { tags: string[]; ldflags: string[]; cgo: boolean } | undefined {
  if (module !== HELM_MODULE) return undefined;
  return {
    tags: [],
    ldflags: [`-X ${HELM_MODULE}/internal/version.version=${version}`, `-X ${HELM_MODULE}/internal/version.gitTreeState=archive`],
    cgo: false,
  };
}
