import { chmod, lstat, mkdir, readdir, readFile, readlink, symlink, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import Handlebars from "handlebars";
import { sha256Text } from "../cache.js";
import { parseSize, type ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import type { Stage } from "../stage.js";

export const BUILTIN_OVERLAYS = resolve(import.meta.dirname, "..", "..", "overlays");
/** Kubernetes manifests applied at first boot; they go into the image under MANIFESTS_TARGET. */
export const MANIFESTS = resolve(import.meta.dirname, "..", "..", "manifests");
export const MANIFESTS_TARGET = "usr/share/icn-bootstrap/manifests";

/** A directory whose files are written into the root under `target` ("" for the root itself). */
export interface OverlaySource {
  dir: string;
  target: string;
}
export const UNITS_JSON = "units.json";
export const TREE = "tree";
const EXTRA_UNITS = "etc/icn-bootstrap/enable-units";

export interface OverlaysDeps {
  definition: ApplianceDefinition;
  /** Overlay directories in the order they are applied (later ones win). */
  directories: OverlaySource[];
  /** Every image reference the appliance's registry serves: the bootstrap cluster's kubeadm names its etcd and CoreDNS tags. */
  images?: string[];
  /** The names of the images the appliance's own cluster runs (applianceImageNames): its first boot pulls them first. */
  applianceImages?: string[];
}

/** The etcd and CoreDNS images kubeadm deploys on the appliance: repository and where it says which tag. */
const KUBEADM_IMAGES = { etcd: "registry.k8s.io/etcd", coredns: "registry.k8s.io/coredns/coredns" } as const;

/**
 * The etcd and CoreDNS tags the registry serves, for the bootstrap cluster's kubeadm
 * configuration (`etcd.local.imageTag`, `dns.imageTag`): kubeadm's own defaults are the
 * versions of its release, and the lock may pin newer patches (lock-artifacts --etcd,
 * --coredns). Both must be served when the appliance runs Kubernetes.
 */
export function kubeadmImageTags(images: string[]): { etcd: string; coredns: string } {
  const tag = (repository: string) => {
    const tags = images.filter((r) => r.startsWith(`${repository}:`)).map((r) => r.slice(repository.length + 1));
    if (tags.length !== 1)
      throw new UserError(
        `the bootstrap cluster's kubeadm needs exactly one ${repository} image in the registry, the lists have ${tags.length ? tags.join(", ") : "none"}`,
        "keep registry-seed/bootstrap.yaml (one etcd and one CoreDNS image, at the lock's versions) in the definition's registry.lists",
      );
    return tags[0]!;
  };
  return { etcd: tag(KUBEADM_IMAGES.etcd), coredns: tag(KUBEADM_IMAGES.coredns) };
}

interface OverlayEntry {
  dir: string;
  path: string; // relative to dir
  target: string; // relative to the root
  kind: "file" | "symlink";
  mode: number;
  digest: string;
}

/**
 * An overlay file is installed 0755 when executable, else 0644: what git records, not
 * what the checkout's umask made of it (a checkout under umask 077 has 0600 files).
 */
const fileMode = (mode: number) => (mode & 0o111 ? 0o755 : 0o644);

async function listOverlay({ dir, target }: OverlaySource): Promise<OverlayEntry[]> {
  const entries: OverlayEntry[] = [];
  async function walk(current: string): Promise<void> {
    let names;
    try {
      names = await readdir(current, { withFileTypes: true });
    } catch (error) {
      throw new UserError(`overlay directory ${current} cannot be read: ${(error as NodeJS.ErrnoException).code}`, "fix the 'overlays' list in the definition");
    }
    for (const entry of names.sort((a, b) => a.name.localeCompare(b.name))) {
      const full = join(current, entry.name);
      const info = await lstat(full);
      if (info.isDirectory()) await walk(full);
      const path = relative(dir, full);
      const into = join(target, path);
      if (info.isSymbolicLink()) entries.push({ dir, path, target: into, kind: "symlink", mode: 0o777, digest: sha256Text(await readlink(full)) });
      else if (info.isFile())
        entries.push({ dir, path, target: into, kind: "file", mode: fileMode(info.mode), digest: sha256Text(await readFile(full, "utf8")) });
    }
  }
  await walk(dir);
  return entries;
}

/**
 * What templates may use: the definition without the output formats and the support
 * windows (lock --check's policy, not image content), the slot size in MiB, and, when the appliance runs
 * Kubernetes and the registry's images are known, the etcd and CoreDNS tags its kubeadm
 * names (kubeadmImages.etcd, kubeadmImages.coredns).
 */
/** "90s", "30m", "1h" in seconds (the definition's durations). */
function durationSeconds(duration: string): number {
  const unit = { s: 1, m: 60, h: 3600 }[duration.slice(-1) as "s" | "m" | "h"];
  return Number(duration.slice(0, -1)) * unit;
}

function templateValues(definition: ApplianceDefinition, images?: string[], applianceImages: string[] = []) {
  const { outputs: _outputs, support: _support, ...values } = definition;
  // The first boot's shell reads the slot size as a number.
  const withSlots = {
    ...values,
    disk: { ...values.disk, slotMiB: Math.floor(parseSize(values.disk.slotSize) / 1024 ** 2) },
    upgrade: { ...values.upgrade, healthTimeoutSeconds: durationSeconds(values.upgrade.healthTimeout) },
  };
  return definition.kubernetes.enabled && images ? { ...withSlots, kubeadmImages: kubeadmImageTags(images), applianceImages } : withSlots;
}

export const overlaysStage: Stage<OverlaysDeps> = {
  name: "overlays",
  sources: [import.meta.filename],
  inputs: async ({ definition, directories, images, applianceImages }) => ({
    values: templateValues(definition, images, applianceImages),
    files: (await Promise.all(directories.map(listOverlay))).flat().map(({ target, kind, mode, digest }) => ({ target, kind, mode, digest })),
  }),
  async build(run, { definition, directories, images, applianceImages }) {
    const tree = join(run.out, TREE);
    const values = templateValues(definition, images, applianceImages);
    await mkdir(tree, { recursive: true });
    const units = new Set<string>();
    let count = 0;
    for (const dir of directories) {
      for (const entry of await listOverlay(dir)) {
        const source = join(entry.dir, entry.path);
        const targetPath = entry.target.endsWith(".hbs") ? entry.target.slice(0, -4) : entry.target;
        const target = join(tree, targetPath);
        await mkdir(dirname(target), { recursive: true });
        if (entry.kind === "symlink") {
          await symlink(await readlink(source), target);
        } else {
          const text = await readFile(source, "utf8");
          const content = entry.path.endsWith(".hbs") ? render(text, values, source) : text;
          // A template that renders to nothing (e.g. a disabled static network) is not installed.
          if (entry.path.endsWith(".hbs") && content.trim() === "") continue;
          await writeFile(target, content);
          await chmod(target, entry.mode);
          if (/^etc\/systemd\/system\/[^/]+\.(service|timer|socket|path)$/.test(targetPath) && /^\[Install\]/m.test(text)) {
            units.add(targetPath.split("/").pop()!);
          }
        }
        count++;
      }
    }
    // Units shipped by packages (e.g. systemd-networkd) are enabled by listing them here.
    const extra = await readFile(join(tree, EXTRA_UNITS), "utf8").catch(() => "");
    for (const unit of extra
      .split("\n")
      .map((l) => l.replace(/#.*/, "").trim())
      .filter(Boolean))
      units.add(unit);
    await writeFile(join(run.out, UNITS_JSON), JSON.stringify([...units].sort()));
    run.log(`${count} files from ${directories.length} overlay director${directories.length === 1 ? "y" : "ies"}, ${units.size} units to enable`);
  },
};

/** One overlay template rendered as the build renders it for this definition (tests read the shipped result). */
export async function renderOverlayTemplate(source: string, definition: ApplianceDefinition, images?: string[], applianceImages?: string[]): Promise<string> {
  return render(await readFile(source, "utf8"), templateValues(definition, images, applianceImages), source);
}

function render(template: string, values: unknown, source: string): string {
  try {
    return Handlebars.compile(template, { strict: true, noEscape: true })(values);
  } catch (error) {
    throw new UserError(`overlay template ${source}: ${(error as Error).message}`, "fix the template, or add the missing value to the definition");
  }
}
