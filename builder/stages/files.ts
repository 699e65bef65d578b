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
 * versions and sha256 of what the appliance serves, and the same as a ConfigMap among the
 * first-boot manifests (common/kubespray-pins.ts), which the BPA copies into its Jobs' inventory.
 * Besides the lock's Kubernetes version it serves the definition's extra ones
 * (kubespray.extraKubernetesVersions, lock entries kubernetes-<version>), so clusters can be
 * installed at one and upgraded to another.
 */
import { chmod, copyFile, link, mkdir, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { sha256File } from "../../common/hash.js";
import { UserError } from "../errors.js";
import { archiveMembers, OFFLINE_ARCHIVES } from "../kubespray/components.js";
import { kubesprayPinsManifest, readServedPins } from "../../common/kubespray-pins.js";
import { kubesprayPins, renderPins, type ArchiveMember, type ServedArchive, type ServedFile, type ServedKubernetes } from "../kubespray/pins.js";
import type { LockFile } from "../lockfile.js";
import { artifactPaths, ensureArtifacts } from "../sources/index.js";
import { extraKubernetesGroup, versionedBinary } from "../sources/lock.js";
import type { Stage, StageRun } from "../stage.js";
import { MANIFESTS_TARGET } from "./overlays.js";

export const FILES_ROOT = "srv/icn-bootstrap/files";
/** files_repo, relative to the file server's root. */
export const FILES_REPO_PATH = "kubespray";
export const FILES_PORT = 8080;
/** The extracted kubespray release (outside tree/: it goes into the runner image, not the disk). */
export const KUBESPRAY_TREE = "kubespray-tree";
export const FILES_JSON = "files.json";
/** The kubespray pins (also in tree/, as the ConfigMap the BPA copies into its Jobs' inventory). */
export const KUBESPRAY_PINS = "kubespray-pins.yml";

const KUBE_BINARIES = ["kubeadm", "kubelet", "kubectl"] as const;

/** The binaries the release archives for the compute nodes are made of (builder/kubespray/components.ts). */
const archiveBinaries = () => OFFLINE_ARCHIVES.flatMap((a) => (a.binary ? [a.binary] : Object.values(a.members ?? {})));

/** A line of files.json: a served file, and for a release archive the built binaries in it (for the SBOM). */
export interface ServedManifestEntry {
  path: string;
  sha256: string;
  from: string;
  contains?: ArchiveMember[];
}

export interface FilesDeps {
  lock: LockFile;
  lockPath: string;
  kubespray: boolean;
  /** The image references the registry will serve (for the kubespray pins). */
  images: string[];
  /**
   * The compute nodes' release archives (default: with kubespray). Off while the lock is
   * resolved: runc's cgo build needs the very toolchain that is being pinned then.
   */
  archives?: boolean;
  /** Kubernetes versions served besides the lock's (definition kubespray.extraKubernetesVersions). */
  extraKubernetesVersions?: string[];
}

/** A Kubernetes version the file server serves, and the artifact each of its binaries is. */
interface ServedVersion {
  version: string;
  artifacts: Record<(typeof KUBE_BINARIES)[number], string>;
}

/** The lock's Kubernetes version (artifacts.kubernetes) and the extra ones (artifacts.kubernetes-<version>). */
function servedVersions(lock: LockFile, lockPath: string, extra: string[] = []): ServedVersion[] {
  const k8s = lock.artifacts.kubernetes;
  if (!k8s || k8s.source !== "gomod")
    throw new UserError(`${lockPath}: no Kubernetes version pinned (artifacts.kubernetes)`, "run 'icn-bootstrap lock-artifacts --kubernetes v1.37.1'");
  const served: ServedVersion[] = [{ version: k8s.version, artifacts: { kubeadm: "kubeadm", kubelet: "kubelet", kubectl: "kubectl" } }];
  for (const version of extra) {
    if (version === k8s.version) continue;
    const group = lock.artifacts[extraKubernetesGroup(version)];
    const artifacts = Object.fromEntries(KUBE_BINARIES.map((b) => [b, versionedBinary(b, version)])) as ServedVersion["artifacts"];
    if (!group || group.source !== "gomod" || group.version !== version || !Object.values(artifacts).every((a) => a in group.binaries)) {
      throw new UserError(
        `the definition's kubespray.extraKubernetesVersions has ${version}, which ${lockPath} does not pin (artifacts.${extraKubernetesGroup(version)})`,
        `run 'icn-bootstrap lock-artifacts --also-kubernetes ${version}', or remove ${version} from the definition`,
      );
    }
    served.push({ version, artifacts });
  }
  return served;
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
  sources: [import.meta.filename, join(import.meta.dirname, "../kubespray/pins.ts"), join(import.meta.dirname, "../kubespray/components.ts")],
  async inputs({ lock, lockPath, kubespray, images, archives = true, extraKubernetesVersions = [] }) {
    const served = servedVersions(lock, lockPath, extraKubernetesVersions);
    const kubeArtifacts = served.flatMap((v) => Object.values(v.artifacts));
    const results = await ensureArtifacts({ lockPath, only: [...kubeArtifacts, ...(kubespray ? ["kubespray", ...(archives ? archiveBinaries() : [])] : [])] });
    return {
      versions: served,
      artifacts: Object.fromEntries(results.map((r) => [r.name, r.sha256])),
      kubespray,
      images: kubespray ? [...images].sort() : [],
      archives,
    };
  },
  async build(run, { lock, lockPath, kubespray, images, archives: withArchives = true, extraKubernetesVersions = [] }) {
    const repo = join(run.out, "tree", FILES_ROOT, FILES_REPO_PATH);
    const manifest: ServedManifestEntry[] = [];
    const kubernetes: ServedKubernetes[] = [];
    for (const { version, artifacts } of servedVersions(lock, lockPath, extraKubernetesVersions)) {
      const paths = await artifactPaths(Object.values(artifacts), { lockPath });
      const binDir = join(repo, "dl.k8s.io", "release", version, "bin", "linux", "amd64");
      await mkdir(binDir, { recursive: true });
      const files: ServedFile[] = [];
      for (const name of KUBE_BINARIES) {
        const path = paths[artifacts[name]]!;
        const sha256 = basename(path);
        files.push({ name, sha256 });
        await linkOrCopy(path, join(binDir, name));
        await writeFile(join(binDir, `${name}.sha256`), `${sha256}\n`);
        manifest.push({ path: `dl.k8s.io/release/${version}/bin/linux/amd64/${name}`, sha256, from: `artifact:${artifacts[name]}` });
      }
      kubernetes.push({ version, files });
    }
    const versions = kubernetes.map((k) => k.version).join(", ");
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
          throw new UserError(
            `kubespray: ${fileName} has no ${entryPoint} at its top directory`,
            "the lock file's artifacts.kubespray must be a kubespray release tarball (one top directory with cluster.yml, scale.yml, upgrade-cluster.yml, inventory/sample)",
          );
        }
      }
      run.log(`kubespray ${entry?.source === "url" ? (entry.version ?? "") : ""} extracted for the runner image`);
      const archives = withArchives ? await writeArchives(run, repo, lock, lockPath) : [];
      for (const a of archives) manifest.push({ path: a.path, sha256: a.sha256, from: `archive:${a.entry}`, contains: a.contains });
      const pins = renderPins(kubesprayPins({ archives, kubernetes, images }), `Kubernetes ${versions}`);
      await writeFile(join(run.out, KUBESPRAY_PINS), pins);
      // On the appliance: a ConfigMap among the first-boot manifests; the BPA copies it into its Jobs' inventory.
      const manifests = join(run.out, "tree", MANIFESTS_TARGET, "bpa");
      await mkdir(manifests, { recursive: true });
      await writeFile(
        join(manifests, "kubespray-pins.yaml"),
        `# Written by the build (stage files): what this appliance serves to kubespray.\n${kubesprayPinsManifest(pins)}`,
      );
      const summary = readServedPins(pins);
      run.log(
        `kubespray pins: Kubernetes ${versions}${
          typeof summary === "string"
            ? ""
            : `, ${Object.entries(summary.components)
                .map(([c, v]) => `${c} ${v}`)
                .join(", ")}`
        }`,
      );
    }
    await writeFile(join(run.out, FILES_JSON), JSON.stringify({ filesRepo: `/${FILES_REPO_PATH}`, files: manifest }, null, 2));
    run.log(`${manifest.length} files under files_repo (/${FILES_REPO_PATH})`);
  },
};

/**
 * The compute nodes' release archives in their upstream layout (members at the paths
 * the upstream archive has them), reproducible: sorted, owner 0, mtime 0, gzip -n.
 */
async function writeArchives(run: StageRun, repo: string, lock: LockFile, lockPath: string): Promise<ServedArchive[]> {
  const paths = await artifactPaths(archiveBinaries(), { lockPath });
  const served: ServedArchive[] = [];
  for (const archive of OFFLINE_ARCHIVES) {
    const entry = lock.artifacts[archive.entry];
    if (!entry || entry.source !== "gomod")
      throw new UserError(
        `${lockPath}: artifacts.${archive.entry} is not pinned`,
        "run 'icn-bootstrap lock-artifacts' (it pins the compute nodes' components with Kubernetes)",
      );
    const version = entry.version.replace(/^v/, "");
    const path = archive.path(version);
    const target = join(repo, path);
    const staging = join(run.out, "archive-staging", archive.entry);
    await mkdir(dirname(target), { recursive: true });
    if (archive.binary) {
      // A bare binary (runc.amd64), as upstream publishes it.
      await copyFile(paths[archive.binary]!, target);
      await chmod(target, 0o755);
      const sha256 = await sha256File(target);
      await writeFile(`${target}.sha256sum`, `${sha256}  ${basename(path)}\n`);
      const contains = [{ path: basename(path), artifact: archive.binary, sha256: basename(paths[archive.binary]!) }];
      served.push({ entry: archive.entry, path, sha256, version, versionVar: archive.versionVar, checksumsVar: archive.checksumsVar, contains });
      run.log(`${path} (sha256 ${sha256.slice(0, 12)})`);
      continue;
    }
    const memberBinaries = archiveMembers(archive, version);
    for (const [member, binary] of Object.entries(memberBinaries)) {
      await mkdir(dirname(join(staging, member)), { recursive: true });
      await copyFile(paths[binary]!, join(staging, member));
      await chmod(join(staging, member), 0o755);
    }
    const members = Object.keys(memberBinaries).sort();
    await run.exec(
      "bash",
      [
        "-o",
        "pipefail",
        "-c",
        'cd "$1" && shift && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu -cf - "$@" | gzip -n -9 > "$TARGET"',
        "tar",
        staging,
        ...members,
      ],
      { env: { TARGET: target } },
    );
    await rm(staging, { recursive: true, force: true });
    const sha256 = await sha256File(target);
    await writeFile(`${target}.sha256sum`, `${sha256}  ${basename(path)}\n`);
    const contains = members.map((member) => ({ path: member, artifact: memberBinaries[member]!, sha256: basename(paths[memberBinaries[member]!]!) }));
    served.push({ entry: archive.entry, path, sha256, version, versionVar: archive.versionVar, checksumsVar: archive.checksumsVar, contains });
    run.log(`${path} (${members.length} file${members.length === 1 ? "" : "s"}, sha256 ${sha256.slice(0, 12)})`);
  }
  await rm(join(run.out, "archive-staging"), { recursive: true, force: true });
  return served;
}
