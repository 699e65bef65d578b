/**
 * Go programs pinned for the host's tests, not for the image: built like the image's
 * (go/<name>/, `icn-bootstrap fetch --only NAME`) and pinned by `icn-bootstrap lock-artifacts`.
 */
import type { GroupSpec } from "./group-spec.js";

export const COSIGN_MODULE = "github.com/sigstore/cosign/v3";

export const TOOL_GROUPS: GroupSpec[] = [
  {
    name: "cosign",
    module: COSIGN_MODULE,
    version: "v3.1.3",
    binaries: { cosign: `${COSIGN_MODULE}/cmd/cosign` },
    note: "the real cosign, with which the tests check the Sigstore bundles 'build --sign-key' writes",
  },
];
