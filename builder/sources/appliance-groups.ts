/**
 * Go programs the appliance itself runs beside Kubernetes' (builder/stages/kubernetes.ts puts
 * them in /usr/local/bin), pinned by `icn-bootstrap lock-artifacts` (go/<name>/).
 */
import type { GroupSpec } from "./group-spec.js";

export const AGE_MODULE = "filippo.io/age";

export const APPLIANCE_GROUPS: GroupSpec[] = [
  {
    name: "age",
    module: AGE_MODULE,
    version: "v1.3.2",
    binaries: {
      age: `${AGE_MODULE}/cmd/age`,
      "age-keygen": `${AGE_MODULE}/cmd/age-keygen`,
      "age-plugin-batchpass": `${AGE_MODULE}/cmd/age-plugin-batchpass`,
    },
    note: "age with its plugin for a passphrase a program gives (the Secrets' key under 'secrets.key: passphrase'; Debian's age 1.2 cannot run it)",
  },
];
