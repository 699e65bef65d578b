/**
 * The group_vars file (group_vars/all/offline.yml) that points every node at the
 * appliance: kubespray's offline variables (docs/operations/offline-environment.md and
 * inventory/sample/group_vars/all/offline.yml), containerd mirrors, SSH login.
 */
import yaml from "js-yaml";
import type { BpaConfig } from "../config/config.js";
import { RUNNER_SSH_KEY_PATH } from "../jobs/contract.js";
import { compareVersions } from "../../common/kubespray-pins.js";

/** The version a cluster gets: the one its spec names, else the newest the appliance serves (else kubespray's default). */
export function clusterVersion(served: readonly string[] | undefined, requested?: string): string | undefined {
  if (requested) return requested;
  return [...(served ?? [])].sort(compareVersions).pop();
}

/** kubespray's variables for a cluster at `version` (clusterVersion; none: kubespray's default). */
export function groupVars(config: BpaConfig, version?: string): Record<string, unknown> {
  const repo = (key: keyof BpaConfig["imageRepos"]) => config.imageRepos[key] ?? config.registryHost;
  return {
    // Where images and files come from.
    registry_host: config.registryHost,
    files_repo: config.filesRepo,
    kube_image_repo: repo("kube_image_repo"),
    gcr_image_repo: repo("gcr_image_repo"),
    github_image_repo: repo("github_image_repo"),
    docker_image_repo: repo("docker_image_repo"),
    quay_image_repo: repo("quay_image_repo"),
    // Whole download hosts mapped into the file server (kubespray's offline.yml, option 1):
    // files_repo/<original host>/<original path>.
    github_url: "{{ files_repo }}/github.com",
    dl_k8s_io_url: "{{ files_repo }}/dl.k8s.io",
    storage_googleapis_url: "{{ files_repo }}/storage.googleapis.com",
    get_helm_url: "{{ files_repo }}/get.helm.sh",
    containerd_registries_mirrors: config.containerdMirrors,
    // The cluster profile the appliance serves everything for (builder/kubespray/pins.ts
    // pins the versions): flannel as the network plugin, CoreDNS without the node-local
    // cache and the autoscaler (their images are not built here), haproxy as the workers'
    // local proxy to the API servers (Debian's nginx lacks the built-in stream module
    // kubespray's nginx configuration needs).
    kube_network_plugin: "flannel",
    enable_nodelocaldns: false,
    enable_dns_autoscaler: false,
    loadbalancer_apiserver_type: "haproxy",
    // kube-proxy in iptables mode: kubespray's default, ipvs, needs ipvsadm on every node,
    // which the compute nodes' OS image does not carry (it has what this profile installs).
    kube_proxy_mode: "iptables",
    // The compute nodes' OS image runs systemd-resolved: /etc/resolv.conf names its stub,
    // 127.0.0.53, which inside CoreDNS's pod is CoreDNS itself (a forwarding loop it exits
    // on). Pods get resolved's own list of upstream servers instead, as kubespray does for Ubuntu.
    kube_resolv_conf: "/run/systemd/resolve/resolv.conf",
    // A node joining later (day 2, scale.yml) waits for the control plane to sign its
    // bootstrap token into cluster-info (kube-controller-manager's bootstrap signer): kubeadm
    // gives up after kubespray's 60 s, which a busy or slow control plane can miss. Five
    // minutes, within the join's own timeout.
    discovery_timeout: "5m0s",
    kubeadm_join_timeout: "600s",
    // How the runner logs in.
    ansible_user: config.sshUser,
    ansible_ssh_private_key_file: RUNNER_SSH_KEY_PATH,
    ansible_become: config.sshUser !== "root",
    ...(version ? { kube_version: version } : {}),
    ...config.extraVars,
  };
}

export function renderGroupVars(config: BpaConfig, provisioning: string, kubernetesVersion?: string): string {
  const header =
    `# kubespray variables written by the BPA operator for Provisioning ${provisioning}:\n` +
    "# every node pulls images from the appliance's registry and files from its file server.\n";
  return `---\n${header}${yaml.dump(groupVars(config, kubernetesVersion), { lineWidth: -1, noRefs: true, sortKeys: false })}`;
}
