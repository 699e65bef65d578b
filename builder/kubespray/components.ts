/**
 * What the compute nodes download through kubespray, built here from Go modules: the
 * lock groups (`icn-bootstrap lock-artifacts` pins them beside Kubernetes), the release
 * archives the files stage lays out where kubespray's `*_download_url` expect them, and
 * the kubespray variables that pin kubespray to them (builder/kubespray/pins.ts).
 *
 * Versions are the ones kubespray v2.31.0 installs with Kubernetes 1.35, except where the
 * Go module proxy refuses that version (crictl 1.35.0): then the nearest served one, or
 * where a newer supported line or patch is needed (containerd's 2.3 long-term line, runc's
 * newest 1.4 patch, flannel's newest 0.28 patch); the pins make kubespray use them. runc and flanneld need cgo: they are linked with the
 * pinned Debian toolchain (builder/sources/cgo.ts), never the build host's gcc.
 */
import type { GroupSpec } from "../sources/group-spec.js";

export interface OfflineArchive {
  /** Lock entry (go/<name>/) and kubespray's download name. */
  entry: string;
  /** The file under files_repo, for a version without its leading v. */
  path: (version: string) => string;
  /** Members: path in the archive -> artifact (binary) name. Absent: the binary itself, not an archive. */
  members?: Record<string, string>;
  /** The directory the members are in, for archives whose top directory names the version (etcd's). */
  memberDir?: (version: string) => string;
  binary?: string;
  /** kubespray's version variable and checksum table. */
  versionVar: string;
  checksumsVar: string;
}

export const OFFLINE_GROUPS: GroupSpec[] = [
  {
    name: "containerd",
    module: "github.com/containerd/containerd/v2",
    version: "v2.3.7",
    binaries: {
      containerd: "github.com/containerd/containerd/v2/cmd/containerd",
      "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
      ctr: "github.com/containerd/containerd/v2/cmd/ctr",
    },
    // kubespray v2.31.0 names 2.2.3, whose line ended 2026-11-06; 2.3 is the long-term
    // line. kubespray's config.toml (version = 3) is migrated by containerd 2.3 on load.
    note: "the compute nodes' containerd: the 2.3 long-term line (kubespray v2.31.0 names 2.2.3; the pins make it use this one)",
  },
  {
    name: "cni-plugins",
    module: "github.com/containernetworking/plugins",
    version: "v1.9.1",
    binaries: Object.fromEntries(
      [
        ["bridge", "main"],
        ["host-device", "main"],
        ["ipvlan", "main"],
        ["loopback", "main"],
        ["macvlan", "main"],
        ["ptp", "main"],
        ["vlan", "main"],
        ["dummy", "main"],
        ["tap", "main"],
        ["dhcp", "ipam"],
        ["host-local", "ipam"],
        ["static", "ipam"],
        ["bandwidth", "meta"],
        ["firewall", "meta"],
        ["portmap", "meta"],
        ["sbr", "meta"],
        ["tuning", "meta"],
        ["vrf", "meta"],
      ].map(([name, kind]) => [`cni-${name}`, `github.com/containernetworking/plugins/plugins/${kind}/${name}`]),
    ),
    note: "what kubespray v2.31.0 installs on the compute nodes",
  },
  {
    name: "runc",
    module: "github.com/opencontainers/runc",
    version: "v1.4.4",
    binaries: { runc: "github.com/opencontainers/runc" },
    note: "the compute nodes' runc: the newest 1.4 patch (kubespray v2.31.0 names 1.4.2; cgo: built with the pinned Debian toolchain)",
  },
  {
    name: "flannel",
    module: "github.com/flannel-io/flannel",
    version: "v0.28.10",
    binaries: { flanneld: "github.com/flannel-io/flannel" },
    note: "the network plugin of application clusters (kubespray's flannel_version); tencentcloud vpc v1.3.188 is refused by the proxy: v1.3.128",
    // flanneld links every backend; the proxy refuses the Tencent Cloud SDK's vpc module
    // at v1.3.188, which flannel v0.28.10 requires (and every later version tried), and
    // serves v1.3.128, what flannel v0.28.7 required: its Tencent backend
    // (pkg/backend/tencentvpc) is the same file in v0.28.7 and v0.28.10, and uses only
    // the route-table calls v1.3.128 has. The SDK's common module is served at v1.3.190.
    replaces: () => ["github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc => github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc v1.3.128"],
  },
  {
    name: "crictl",
    module: "sigs.k8s.io/cri-tools",
    version: "v1.36.0",
    binaries: { crictl: "sigs.k8s.io/cri-tools/cmd/crictl" },
    note: "kubespray v2.31.0 asks for 1.35.0, which the Go module proxy refuses; 1.36.0 speaks the same CRI v1",
  },
  {
    name: "nerdctl",
    module: "github.com/containerd/nerdctl/v2",
    version: "v2.0.4",
    binaries: { nerdctl: "github.com/containerd/nerdctl/v2/cmd/nerdctl" },
    // From v2.1 on, the nerdctl command links pkg/testutil, which imports nerdctl's own
    // mod/tigron: a nested module no proxy serves. v2.0.4 is the newest that builds
    // without it (v2.0.5 is refused), and is a containerd 2.x client.
    note: "kubespray v2.31.0 asks for 2.2.2, whose command needs nerdctl's mod/tigron module (no proxy serves it); 2.0.4 is the newest built without it",
    tidyIgnoringTestOnlyErrors: true, // its tests still import mod/tigron
  },
];

/** An archive's members at their paths in it (under its versioned directory, if it has one) -> artifact name. */
export function archiveMembers(archive: OfflineArchive, version: string): Record<string, string> {
  const dir = archive.memberDir?.(version);
  return Object.fromEntries(Object.entries(archive.members ?? {}).map(([path, binary]) => [dir ? `${dir}/${path}` : path, binary]));
}

const CNI_PLUGINS = Object.keys(OFFLINE_GROUPS.find((g) => g.name === "cni-plugins")!.binaries);

export const OFFLINE_ARCHIVES: OfflineArchive[] = [
  {
    // Fetched by kubespray's etcdctl_etcdutl role for etcdctl and etcdutl, even though kubeadm runs etcd itself.
    entry: "etcd",
    path: (v) => `github.com/etcd-io/etcd/releases/download/v${v}/etcd-v${v}-linux-amd64.tar.gz`,
    memberDir: (v) => `etcd-v${v}-linux-amd64`,
    members: { etcd: "etcd", etcdctl: "etcdctl", etcdutl: "etcdutl" },
    versionVar: "etcd_version",
    checksumsVar: "etcd_binary_checksums",
  },
  {
    entry: "containerd",
    path: (v) => `github.com/containerd/containerd/releases/download/v${v}/containerd-${v}-linux-amd64.tar.gz`,
    members: { "bin/containerd": "containerd", "bin/containerd-shim-runc-v2": "containerd-shim-runc-v2", "bin/ctr": "ctr" },
    versionVar: "containerd_version",
    checksumsVar: "containerd_archive_checksums",
  },
  {
    entry: "cni-plugins",
    path: (v) => `github.com/containernetworking/plugins/releases/download/v${v}/cni-plugins-linux-amd64-v${v}.tgz`,
    members: Object.fromEntries(CNI_PLUGINS.map((b) => [`./${b.replace(/^cni-/, "")}`, b])),
    versionVar: "cni_version",
    checksumsVar: "cni_binary_checksums",
  },
  {
    entry: "runc",
    path: (v) => `github.com/opencontainers/runc/releases/download/v${v}/runc.amd64`,
    binary: "runc",
    versionVar: "runc_version",
    checksumsVar: "runc_checksums",
  },
  {
    entry: "crictl",
    path: (v) => `github.com/kubernetes-sigs/cri-tools/releases/download/v${v}/crictl-v${v}-linux-amd64.tar.gz`,
    members: { crictl: "crictl" },
    versionVar: "crictl_version",
    checksumsVar: "crictl_checksums",
  },
  {
    entry: "nerdctl",
    path: (v) => `github.com/containerd/nerdctl/releases/download/v${v}/nerdctl-${v}-linux-amd64.tar.gz`,
    members: { nerdctl: "nerdctl" },
    versionVar: "nerdctl_version",
    checksumsVar: "nerdctl_archive_checksums",
  },
];

/** How each project's own release build builds it: version variables (so `<tool> --version` tells the pin), tags, cgo. */
export function offlineBuildRecipe(module: string, version: string): { tags: string[]; ldflags: string[]; cgo: boolean } | undefined {
  const v = version;
  switch (module) {
    case "github.com/containerd/containerd/v2":
      return {
        tags: ["no_btrfs"],
        ldflags: [`-X github.com/containerd/containerd/v2/version.Version=${v}`, "-X github.com/containerd/containerd/v2/version.Revision=archive"],
        cgo: false,
      };
    case "github.com/containernetworking/plugins":
      return { tags: [], ldflags: [`-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${v}`], cgo: false };
    case "github.com/containerd/nerdctl/v2":
      return {
        tags: [],
        ldflags: [`-X github.com/containerd/nerdctl/v2/pkg/version.Version=${v}`, "-X github.com/containerd/nerdctl/v2/pkg/version.Revision=archive"],
        cgo: false,
      };
    case "sigs.k8s.io/cri-tools":
      return { tags: [], ldflags: [`-X sigs.k8s.io/cri-tools/pkg/version.Version=${v}`], cgo: false };
    // cgo, linked static with the pinned Debian toolchain (builder/sources/cgo.ts), as their Makefiles' static targets do.
    case "github.com/opencontainers/runc":
      return {
        tags: ["seccomp", "urfave_cli_no_docs", "netgo", "osusergo"],
        ldflags: ["-X main.gitCommit=archive", "-linkmode external", "-extldflags -static"],
        cgo: true,
      };
    case "github.com/flannel-io/flannel":
      return { tags: [], ldflags: [`-X github.com/flannel-io/flannel/pkg/version.Version=${v}`, "-linkmode external", "-extldflags -static"], cgo: true };
    default:
      return undefined;
  }
}
