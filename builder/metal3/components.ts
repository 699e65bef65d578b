/**
 * Metal3 on the appliance, built here from Go modules: baremetal-operator (BMO), pinned by
 * `icn-bootstrap lock-artifacts` beside Kubernetes (go/baremetal-operator/).
 *
 * The Go module proxy serves BMO and its `apis` module at v0.13.2 when asked for that
 * exact version, but refuses the ironic-standalone-operator `api` module v0.8.2 that BMO
 * requires, and serves v0.10.0. BMO's own go.mod points `apis` at its subdirectory, and a
 * dependency's replace directives do not apply to the wrapper: it requires `apis` at the
 * same version explicitly (else the module graph picks an old `apis` that does not build).
 * What the binary links is what `go version -m` reports, and the SBOM records it.
 */
import type { GroupSpec } from "../sources/group-spec.js";

export const BMO_MODULE = "github.com/metal3-io/baremetal-operator";

export const METAL3_GROUPS: GroupSpec[] = [
  {
    name: "baremetal-operator",
    module: BMO_MODULE,
    version: "v0.13.2",
    alsoRequires: [`${BMO_MODULE}/apis`],
    binaries: { "baremetal-operator": BMO_MODULE },
    replaces: () => ["github.com/metal3-io/ironic-standalone-operator/api => github.com/metal3-io/ironic-standalone-operator/api v0.10.0"],
    note: "Metal3's baremetal-operator; ironic-standalone-operator/api v0.8.2 is refused by the proxy: v0.10.0",
  },
];

/** BMO's release build sets its version variables (Makefile LDFLAGS), so its log's "Component:" line tells the pin. */
export function metal3BuildRecipe(module: string, version: string): { tags: string[]; ldflags: string[]; cgo: boolean } | undefined {
  if (module !== BMO_MODULE) return undefined;
  return { tags: [], ldflags: [`-X ${BMO_MODULE}/pkg/version.Raw=${version}`, `-X ${BMO_MODULE}/pkg/version.Commit=archive`], cgo: false };
}
