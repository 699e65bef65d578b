/**
 * The shape of one generated wrapper module, apart from the lock code that makes it: the
 * kubespray and Metal3 component lists declare theirs with it, and lock.ts imports those
 * lists (so they must not import lock.ts).
 */
/** One wrapper module to generate: a Go module at a version and the binaries built from it. */
export interface GroupSpec {
  /** Entry name in the lock file, and the directory go/<name>/. */
  name: string;
  module: string;
  version: string;
  binaries: Record<string, string>;
  /** Other modules of the same project whose commands the group builds too, at the same version. */
  alsoRequires?: string[];
  /** Extra replace directives for the wrapper, computed from the module's own go.mod. */
  replaces?: (moduleGoMod: string) => string[];
  /** Where the module's metadata came from, for the generated go.mod's header. */
  note?: string;
  /**
   * Tidy despite missing test-only dependencies (`go mod tidy -e`): for modules whose tests
   * import a module only their own repository has (a local replace the proxy cannot serve).
   * The build is still -mod=readonly against the go.sum, so anything a binary needs is verified.
   */
  tidyIgnoringTestOnlyErrors?: boolean;
  /**
   * Dependencies `lock-artifacts` leaves where the module has them although a report names
   * them (module -> why: e.g. the raised version does not build with it); named in the header.
   */
  keepDependencies?: Record<string, string>;
}
