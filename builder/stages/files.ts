/**
 * Stage `files`: the file server's tree (a content layer, served by nginx on the
 * appliance) and, when kubespray is enabled, its release tree for the runner image.
 *
 * tree/srv/icn-bootstrap/files/kubespray/ is `files_repo` (the BPA writes
 * files_repo: http://<appliance>:8080/kubespray). The download hosts kubespray uses are
 * mapped under it, as kubespray's offline.yml ("option 1") and the BPA's offline
 * variables expect: `{{ files_repo }}/dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubeadm`,
 * `{{ files_repo }}/github.com/...`, and so on. What is included is what the project
 * builds: kubeadm, kubelet and kubectl (with .sha256 files beside them, as dl.k8s.io
 * publishes them), and the kubespray release tarball under `releases/`.
 *
 * With kubespray it also writes KUBESPRAY_PINS (builder/kubespray/pins.ts): the
 * versions and sha256 of what the appliance serves, for the runner image.
 */
import { copyFile, link, mkdir, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { UserError } from "../errors.js";
import { kubesprayPins, renderPins, type ServedFile } from "../kubespray/pins.js";
import type { LockFile } from "../lockfile.js";
import { artifactPaths, ensureArtifacts } from "../sources/index.js";
import type { Stage } from "../stage.js";

export const FILES_ROOT = "srv/icn-bootstrap/files";
/** files_repo, relative to the file server's root. */
export const FILES_REPO_PATH = "kubespray";
export const FILES_PORT = 8080;
/** The extracted kubespray release (outside tree/: it goes into the runner image, not the disk). */
export const KUBESPRAY_TREE = "kubespray-tree";
export const FILES_JSON = "files.json";
/** The kubespray pins (outside tree/: the runner image carries them). */
export const KUBESPRAY_PINS = "kubespray-pins.yml";

const KUBE_BINARIES = ["kubeadm", "kubelet", "kubectl"] as const;

export interface FilesDeps {
  lock: LockFile;
  lockPath: string;
  kubespray: boolean;
  /** The image references the registry will serve (for the kubespray pins). */
  images: string[];
}

async function linkOrCopy(source: string, target: string): Promise<void> {
  try {
    await link(source, target);
  } catch {
    await copyFile(source, target);
  }
}

export const filesStage: Stage<FilesDeps> = {
  name: "files",
  sources: [import.meta.filename, join(import.meta.dirname, "../kubespray/pins.ts")],
  async inputs({ lock, lockPath, kubespray, images }) {
    const k8s = lock.artifacts.kubernetes;
    if (!k8s || k8s.source !== "gomod") throw new UserError(`${lockPath}: no Kubernetes version pinned (artifacts.kubernetes)`, "run 'icn-bootstrap lock-artifacts --kubernetes v1.37.1'");
    const results = await ensureArtifacts({ lockPath, only: [...KUBE_BINARIES, ...(kubespray ? ["kubespray"] : [])] });
    return { version: k8s.version, artifacts: Object.fromEntries(results.map((r) => [r.name, r.sha256])), kubespray, images: kubespray ? [...images].sort() : [] };
  },
  async build(run, { lock, lockPath, kubespray, images }) {
    const version = (lock.artifacts.kubernetes as { version: string }).version;
    const repo = join(run.out, "tree", FILES_ROOT, FILES_REPO_PATH);
    const manifest: { path: string; sha256: string; from: string }[] = [];
    const paths = await artifactPaths([...KUBE_BINARIES], { lockPath });
    const binDir = join(repo, "dl.k8s.io", "release", version, "bin", "linux", "amd64");
    await mkdir(binDir, { recursive: true });
    for (const name of KUBE_BINARIES) {
      const sha256 = basename(paths[name]);
      await linkOrCopy(paths[name], join(binDir, name));
      await writeFile(join(binDir, `${name}.sha256`), `${sha256}\n`);
      manifest.push({ path: `dl.k8s.io/release/${version}/bin/linux/amd64/${name}`, sha256, from: `artifact:${name}` });
    }
    if (kubespray) {
      const [result] = await ensureArtifacts({ lockPath, only: ["kubespray"] });
      const entry = lock.artifacts.kubespray;
      const fileName = entry?.source === "url" ? basename(new URL(entry.url).pathname) : "kubespray.tar.gz";
      const releases = join(repo, "releases");
      await mkdir(releases, { recursive: true });
      await linkOrCopy(result!.path, join(releases, fileName));
      manifest.push({ path: `releases/${fileName}`, sha256: result!.sha256, from: "artifact:kubespray" });
      const tree = join(run.out, KUBESPRAY_TREE);
      await mkdir(tree, { recursive: true });
      await run.exec("tar", ["-xzf", result!.path, "-C", tree, "--strip-components=1", "--no-same-owner"]);
      for (const entryPoint of ["cluster.yml", "scale.yml", "upgrade-cluster.yml", "inventory/sample"]) {
        try {
          await (await import("node:fs/promises")).stat(join(tree, entryPoint));
        } catch {
          throw new UserError(`kubespray: ${fileName} has no ${entryPoint} at its top directory`, "the lock file's artifacts.kubespray must be a kubespray release tarball (one top directory with cluster.yml, scale.yml, upgrade-cluster.yml, inventory/sample)");
        }
      }
      run.log(`kubespray ${entry?.source === "url" ? (entry.version ?? "") : ""} extracted for the runner image`);
      const pins = kubesprayPins({ kubernetesVersion: version, files: manifest.filter((f) => (KUBE_BINARIES as readonly string[]).includes(f.from.slice("artifact:".length))).map((f) => ({ name: f.from.slice("artifact:".length) as ServedFile["name"], sha256: f.sha256 })), images });
      await writeFile(join(run.out, KUBESPRAY_PINS), renderPins(pins, `Kubernetes ${version}`));
      run.log(`kubespray pins: Kubernetes ${pins.kube_version}, etcd ${pins.etcd_image_tag}, CoreDNS ${pins.coredns_version}, pause ${pins.pod_infra_version}`);
    }
    await writeFile(join(run.out, FILES_JSON), JSON.stringify({ filesRepo: `/${FILES_REPO_PATH}`, files: manifest }, null, 2));
    run.log(`${manifest.length} files under files_repo (/${FILES_REPO_PATH})`);
  },
};
