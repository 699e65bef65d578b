import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { UserError } from "../errors.js";
import { DEFAULT_LOCK } from "../lockfile.js";
import { log } from "../log.js";
import { KUBERNETES_RELEASE_BASE, lockArtifacts, lockUpstreamKubernetes } from "../sources/lock.js";
import type { Command } from "./command.js";

const usage = `usage: icn-bootstrap lock-artifacts [--kubernetes vX.Y.Z] [--etcd vX.Y.Z] [--coredns vX.Y.Z] [--only GROUP ...] [--no-raise] [--lock FILE]
       icn-bootstrap lock-artifacts --also-kubernetes vX.Y.Z [...] [--lock FILE]
       icn-bootstrap lock-artifacts --upstream [--release-base URL] [--lock FILE]

Pins the Go-module artifacts in the lock file. The Kubernetes version is the one
pin; etcd and CoreDNS follow it (the versions kubeadm of that release deploys,
read from its cmd/kubeadm/app/constants) unless overridden. The compute nodes'
components kubespray downloads (containerd, nerdctl, CNI plugins, crictl, flannel:
builder/kubespray/components.ts), Metal3's baremetal-operator
(builder/metal3/components.ts) and Helm for the addons Jobs (builder/addons/components.ts)
are pinned with them. For each group it
generates go/<group>/go.mod (with Kubernetes' staging replace directives turned
into published versions) and go/<group>/go.sum with 'go mod tidy', and records
the go.sum digest in the lock file. Commit go/ and the lock file afterwards.

Dependencies with known vulnerabilities are raised: where the lock's Go
vulnerability database (advisories.goVulndb, 'icn-bootstrap lock --advisories')
reports a module a group builds with at a version a later one fixes, the wrapper
requires the first release the proxy serves with the fix (the pinned module itself
stays as released). go.mod's header names each raise and each reported module
kept, with why. A raise that does not build is kept back with the group's
keepDependencies (its components.ts).

Needs the Go module proxy. Checksums are verified against the checksum database
as configured in Go (GOSUMDB); where it is unreachable, run with GOSUMDB=off and
review the generated go.sum before committing it.

options:
  --kubernetes V   Kubernetes release to pin (default: the one already pinned)
  --etcd V         override the etcd version derived from kubeadm
  --coredns V      override the CoreDNS version derived from kubeadm
  --only GROUP     generate only this group's wrapper (e.g. --only age); every
                   other entry stays as pinned; repeatable
  --no-raise       leave every dependency at the version the module requires
  --lock FILE      the lock file (default: appliance.lock.yaml)
  --also-kubernetes V
                   instead: pin Kubernetes V as an extra entry, kubernetes-V (its
                   binaries named <binary>-V), leaving every other pin as it is. A
                   definition serves it to application clusters with
                   kubespray.extraKubernetesVersions (and its control-plane images
                   with registry-seed/kubernetes-V.yaml in registry.lists); repeatable
  --upstream       instead: pin the official release binaries of the pinned
                   Kubernetes version as url entries of the 'upstream' profile
                   (digests from the release's <binary>.sha256 files; needs
                   access to ${KUBERNETES_RELEASE_BASE})
  --release-base U the release base URL for --upstream`;

export const lockArtifactsCommand: Command = {
  name: "lock-artifacts",
  summary: "pin Kubernetes (and the etcd/CoreDNS it expects) and generate go/<group>/go.mod + go.sum",
  usage,
  async run(argv) {
    const { values } = parseCommandArgs("lock-artifacts", argv, {
      kubernetes: { type: "string" },
      "also-kubernetes": { type: "string", multiple: true },
      etcd: { type: "string" },
      coredns: { type: "string" },
      lock: { type: "string" },
      upstream: { type: "boolean", default: false },
      "release-base": { type: "string" },
      only: { type: "string", multiple: true },
      "no-raise": { type: "boolean", default: false },
    });
    const lockPath = values.lock ? resolve(values.lock) : DEFAULT_LOCK;
    if (values.upstream) {
      await lockUpstreamKubernetes({ lockPath, baseUrl: values["release-base"] });
      log("lock", `wrote ${lockPath}`);
      return;
    }
    const also = values["also-kubernetes"] ?? [];
    const bad = also.find((v) => !/^v\d+\.\d+\.\d+$/.test(v));
    if (bad) throw new UserError(`--also-kubernetes: '${bad}' is not a Kubernetes release`, "write it as vMAJOR.MINOR.PATCH, e.g. --also-kubernetes v1.35.3");
    if (also.length && (values.kubernetes || values.etcd || values.coredns))
      throw new UserError("--also-kubernetes pins extra versions only", "run it separately from --kubernetes, --etcd and --coredns");
    const artifacts = await lockArtifacts({
      lockPath,
      kubernetes: values.kubernetes,
      etcd: values.etcd,
      coredns: values.coredns,
      ...(also.length ? { alsoKubernetes: also } : {}),
      ...(values.only?.length ? { only: values.only } : {}),
      raise: !values["no-raise"],
    });
    for (const [name, entry] of Object.entries(artifacts)) {
      log("lock", `${name}: ${entry.source === "gomod" ? `${entry.module} ${entry.version}` : entry.url}`);
    }
    log("lock", `wrote ${lockPath}`);
  },
};
