/**
 * The kubespray pins: the variables that make the pinned kubespray install exactly what
 * this appliance serves, no other version and no upstream checksum. kubespray keeps its
 * version and checksum tables in role vars (roles/kubespray_defaults/vars), which only
 * extra vars override, so the runner passes this file with `-e @` (bpa/README.md).
 *
 * Versions come from what the build made: the Kubernetes binaries on the file server
 * (with their sha256) and the image references seeded in the registry.
 */
import yaml from "js-yaml";
import { compareVersions } from "../../common/kubespray-pins.js";
import { UserError } from "../errors.js";

export interface ServedFile {
  name: "kubeadm" | "kubelet" | "kubectl";
  sha256: string;
}

/** A release archive the file server has for the compute nodes (builder/stages/files.ts). */
export interface ServedArchive {
  entry: string;
  path: string;
  sha256: string;
  version: string;
  versionVar: string;
  checksumsVar: string;
  /** The built binaries in it (files.json and the SBOM list them). */
  contains?: ArchiveMember[];
}

/** A built binary in a served release archive. */
export interface ArchiveMember {
  /** Its path in the archive (the file's own name for a bare binary). */
  path: string;
  artifact: string;
  sha256: string;
}

/** One Kubernetes version the appliance serves: kubeadm, kubelet and kubectl on the file server. */
export interface ServedKubernetes {
  /** e.g. v1.35.4 */
  version: string;
  files: ServedFile[];
}

export interface PinInputs {
  /** Every Kubernetes version served (files and control-plane images), any order. */
  kubernetes: ServedKubernetes[];
  archives?: ServedArchive[];
  /** Every image reference the registry serves. */
  images: string[];
  arch?: string;
}

/** The tag the registry serves `repository` at, if it serves it. */
function servedTag(images: string[], repository: string): string | undefined {
  return images.find((r) => r.startsWith(`${repository}:`))?.slice(repository.length + 1);
}

function tagOf(images: string[], repository: string, what: string): string {
  const tag = servedTag(images, repository);
  if (!tag)
    throw new UserError(
      `kubespray pins: the registry serves no ${repository} image, which kubespray needs for ${what}`,
      `add it to registry-seed/bootstrap.yaml (and its recipe), or disable kubespray`,
    );
  return tag;
}

/** The checksum tables for every served version, newest first (kubespray's default kube_version is the first key). */
function kubernetesChecksums(served: ServedKubernetes[], images: string[], arch: string): Record<string, Record<string, Record<string, string>>> {
  if (served.length === 0)
    throw new UserError(
      "kubespray pins: no Kubernetes version is served",
      "the files stage must serve kubeadm, kubelet and kubectl of the lock's Kubernetes version",
    );
  const newestFirst = [...served].sort((a, b) => compareVersions(b.version.replace(/^v/, ""), a.version.replace(/^v/, "")));
  const tables: Record<string, Record<string, Record<string, string>>> = {};
  for (const { version: tagged, files } of newestFirst) {
    const version = tagged.replace(/^v/, "");
    for (const name of ["kubeadm", "kubelet", "kubectl"] as const) {
      const file = files.find((f) => f.name === name);
      if (!file) throw new UserError(`kubespray pins: the file server has no ${name} ${tagged}`, "the files stage must serve kubeadm, kubelet and kubectl");
      (tables[`${name}_checksums`] ??= { [arch]: {} })[arch]![version] = `sha256:${file.sha256}`;
    }
    for (const repo of ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"]) {
      if (!images.includes(`registry.k8s.io/${repo}:v${version}`)) {
        const served = images.filter((r) => r.startsWith(`registry.k8s.io/${repo}:`)).map((r) => r.split(":").pop());
        throw new UserError(
          `kubespray pins: the file server serves Kubernetes v${version} but the registry has no registry.k8s.io/${repo}:v${version} (it has ${served.length ? served.join(", ") : "none"})`,
          `serve the control-plane images of every Kubernetes version the files are served for: registry-seed/bootstrap.yaml for the lock's version, registry-seed/kubernetes-v${version}.yaml (in the definition's registry.lists) for an extra one`,
        );
      }
    }
  }
  return tables;
}

export function kubesprayPins(inputs: PinInputs): Record<string, unknown> {
  const arch = inputs.arch ?? "amd64";
  const checksums = kubernetesChecksums(inputs.kubernetes, inputs.images, arch);
  const etcdTag = tagOf(inputs.images, "registry.k8s.io/etcd", "etcd");
  const coredns = tagOf(inputs.images, "registry.k8s.io/coredns/coredns", "cluster DNS");
  const pause = tagOf(inputs.images, "registry.k8s.io/pause", "the pod sandbox");
  const archives: Record<string, unknown> = {};
  const etcdVersion = etcdTag.replace(/^v/, "").replace(/-\d+$/, "");
  for (const a of inputs.archives ?? []) {
    if (a.versionVar === "etcd_version" && a.version !== etcdVersion) {
      throw new UserError(
        `kubespray pins: the file server's etcd tarball is ${a.version}, the registry's etcd image ${etcdTag}`,
        "pin one etcd version for both (icn-bootstrap lock-artifacts, lock-images)",
      );
    }
    archives[a.versionVar] = a.version;
    archives[a.checksumsVar] = { [arch]: { [a.version]: `sha256:${a.sha256}` } };
  }
  // The network plugin's images, when the registry has them: their tags are kubespray's versions.
  const images: Record<string, unknown> = {};
  const flannel = servedTag(inputs.images, "docker.io/flannel/flannel");
  const flannelCni = servedTag(inputs.images, "docker.io/flannel/flannel-cni-plugin");
  // The workers' API-server proxy: the haproxy image built here (Debian's haproxy).
  const haproxy = servedTag(inputs.images, "docker.io/library/haproxy");
  if (flannel) images.flannel_version = flannel.replace(/^v/, "");
  if (flannelCni) images.flannel_cni_version = flannelCni.replace(/^v/, "");
  if (haproxy) images.haproxy_image_tag = haproxy;
  // No kube_version: the BPA's group variables choose it (the Provisioning's or the newest
  // served), and extra vars would override them. kubespray's own default is the first key
  // of these checksum tables: the newest version served.
  return {
    ...checksums,
    // etcd as kubeadm runs it (a static pod) from the registry's etcd image; kubespray still
    // takes etcdctl and etcdutl from the release tarball (served, with its checksum, below).
    etcd_deployment_type: "kubeadm",
    etcd_version: etcdVersion,
    etcd_image_repo: "{{ kube_image_repo }}/etcd",
    etcd_image_tag: etcdTag,
    coredns_version: coredns.replace(/^v/, ""),
    pod_infra_version: pause,
    ...archives,
    ...images,
  };
}

export function renderPins(pins: Record<string, unknown>, source: string): string {
  return (
    "# kubespray pins written by icn-bootstrap's build: exactly the versions (and sha256) this\n" +
    `# appliance serves (${source}). The runner passes it with -e @ (role vars need extra vars).\n` +
    yaml.dump(pins, { lineWidth: -1, noRefs: true, sortKeys: false, quotingType: '"' })
  );
}
