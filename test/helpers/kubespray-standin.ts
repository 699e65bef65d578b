/**
 * A STAND-IN for the kubespray release tarball, for tests only: kubespray cannot be
 * downloaded in this environment (DESIGN.md "Testing, honestly"). It has kubespray's
 * layout and entry points (cluster.yml, scale.yml, upgrade-cluster.yml, reset.yml,
 * inventory/sample) and a README saying what it is. Its cluster.yml does, through the
 * real ansible-playbook over real SSH, what the offline install needs from the
 * appliance: it checks that the registry's site CA is on the node where the containerd
 * mirror configuration (containerd_registries_mirrors[].mirrors[].ca) says, pulls an image
 * by digest from the registry named by the BPA's offline variables over TLS verified with
 * that CA (every blob verified), fetches kubeadm from files_repo (sha256 verified), and
 * leaves an admin kubeconfig in artifacts_dir like kubeconfig_localhost does.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";

export const STANDIN_VERSION = "v2.31.0";

const README = `# kubespray STAND-IN ${STANDIN_VERSION}

This is NOT kubespray. It is a stand-in made by icn-bootstrap's tests
(test/helpers/kubespray-standin.ts), because the real release cannot be downloaded
in the build environment. It has kubespray's layout and entry points; its playbooks
only exercise the appliance's registry and file server and hand back a stand-in
kubeconfig. It installs no Kubernetes.
`;

const CLUSTER_YML = `---
# STAND-IN for kubespray's cluster.yml (see README.md): no Kubernetes is installed.
- name: Stand-in cluster.yml - use the appliance's registry and file server
  hosts: kube_control_plane
  gather_facts: false
  vars:
    standin_dir: "{{ standin_node_dir | default('/tmp/kubespray-standin') }}"
    registry_mirror: "{{ (containerd_registries_mirrors | selectattr('prefix', 'equalto', registry_host) | first).mirrors[0] }}"
  tasks:
    - name: The registry's mirror is TLS, verified with a CA file (what containerd's hosts.toml gets)
      ansible.builtin.assert:
        that:
          - registry_mirror.host == 'https://' + registry_host
          - not (registry_mirror.skip_verify | bool)
          - registry_mirror.ca is defined
    - name: Look at the CA file on the node
      ansible.builtin.stat: { path: "{{ registry_mirror.ca }}" }
      register: registry_ca
    - name: The CA is already on the node (put there before this playbook), 0644, owned by root
      ansible.builtin.assert:
        that:
          - registry_ca.stat.exists
          - registry_ca.stat.mode == '0644'
          - registry_ca.stat.pw_name == 'root'
        fail_msg: "{{ registry_mirror.ca }} is not on the node as expected: {{ registry_ca.stat }}"
    - name: The BPA's offline variables are there
      ansible.builtin.assert:
        that:
          - registry_host is defined
          - files_repo is defined
          - kube_image_repo == registry_host
          - dl_k8s_io_url == files_repo + '/dl.k8s.io'
    - name: Work directory on the node
      ansible.builtin.file: { path: "{{ standin_dir }}", state: directory, mode: "0700" }
    - name: Resolve (TLS, verified with the site CA) {{ kube_image_repo }}/pause:{{ pod_infra_version }} in the appliance's registry
      ansible.builtin.uri:
        url: "https://{{ kube_image_repo }}/v2/pause/manifests/{{ pod_infra_version }}"
        ca_path: "{{ registry_mirror.ca }}"
        headers: { Accept: "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json" }
        return_content: true
      register: pause_manifest
    - name: Pull every blob of the image by digest (TLS verified with the site CA; uri, as get_url of ansible-core 2.14 has no ca_path)
      ansible.builtin.uri:
        url: "https://{{ registry_host }}/v2/pause/blobs/{{ item.digest }}"
        ca_path: "{{ registry_mirror.ca }}"
        dest: "{{ standin_dir }}/{{ item.digest | replace(':', '-') }}"
        mode: "0600"
      loop: "{{ [(pause_manifest.content | from_json).config] + (pause_manifest.content | from_json).layers }}"
    - name: Each blob's sha256
      ansible.builtin.stat:
        path: "{{ standin_dir }}/{{ item.digest | replace(':', '-') }}"
        checksum_algorithm: sha256
      register: blobs
      loop: "{{ [(pause_manifest.content | from_json).config] + (pause_manifest.content | from_json).layers }}"
    - name: Every blob is the bytes its digest names
      ansible.builtin.assert:
        that: "'sha256:' + item.stat.checksum == item.item.digest"
      loop: "{{ blobs.results }}"
      loop_control: { label: "{{ item.item.digest }}" }
    - name: Record the pulled image's digest
      ansible.builtin.copy:
        content: "{{ pause_manifest.docker_content_digest }}\\n"
        dest: "{{ standin_dir }}/pause.digest"
        mode: "0600"
    - name: Fetch kubeadm from files_repo
      ansible.builtin.get_url:
        url: "{{ dl_k8s_io_url }}/release/v{{ kube_version }}/bin/linux/amd64/kubeadm"
        dest: "{{ standin_dir }}/kubeadm"
        checksum: "sha256:{{ kubeadm_sha256 }}"
        mode: "0755"
    - name: Stand-in admin kubeconfig (a real install has /etc/kubernetes/admin.conf)
      ansible.builtin.copy:
        dest: "{{ standin_dir }}/admin.conf"
        mode: "0600"
        content: |
          # STAND-IN kubeconfig written by the kubespray stand-in's cluster.yml
          apiVersion: v1
          kind: Config
          clusters:
            - name: cluster.local
              cluster:
                server: https://127.0.0.1:6443
                insecure-skip-tls-verify: true
          contexts:
            - name: kubernetes-admin@cluster.local
              context: { cluster: cluster.local, user: kubernetes-admin }
          current-context: kubernetes-admin@cluster.local
          users:
            - name: kubernetes-admin
              user: { token: stand-in }
    - name: Copy it to artifacts_dir (kubeconfig_localhost)
      ansible.builtin.fetch:
        src: "{{ standin_dir }}/admin.conf"
        dest: "{{ artifacts_dir }}/admin.conf"
        flat: true
      when: kubeconfig_localhost | default(false) | bool
`;

const OTHER = (name: string) => `---
# STAND-IN for kubespray's ${name} (see README.md).
- name: Stand-in ${name}
  hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.ping:
`;

/** Writes kubespray-STAND-IN-<version>.tar.gz into `dir`; returns its path. */
export async function buildKubesprayStandIn(dir: string): Promise<string> {
  const top = `kubespray-${STANDIN_VERSION.slice(1)}`;
  const root = join(dir, "standin-src", top);
  await mkdir(join(root, "inventory/sample/group_vars/all"), { recursive: true });
  await writeFile(join(root, "README.md"), README);
  await writeFile(join(root, "ansible.cfg"), "[defaults]\nhost_key_checking = False\nstdout_callback = default\n");
  await writeFile(join(root, "cluster.yml"), CLUSTER_YML);
  for (const name of ["scale.yml", "upgrade-cluster.yml", "reset.yml", "remove-node.yml"]) await writeFile(join(root, name), OTHER(name));
  await writeFile(join(root, "inventory/sample/inventory.ini"), "[kube_control_plane]\n\n[etcd]\n\n[kube_node]\n");
  await writeFile(
    join(root, "inventory/sample/group_vars/all/offline.yml"),
    '---\n# registry_host: "myprivateregisry.com"\n# files_repo: "http://myprivatehttpd"\n',
  );
  const tarball = join(dir, `kubespray-STAND-IN-${STANDIN_VERSION}.tar.gz`);
  await execa("tar", ["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "-czf", tarball, "-C", join(dir, "standin-src"), top]);
  return tarball;
}
