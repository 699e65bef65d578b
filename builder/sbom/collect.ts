/**
 * Gathers the SBOM's inputs from what the build made: the lock's Debian pins of the sets
 * that went in, the Go binaries (wherever they are: the root, the container images, the
 * file server), the seeded images and the file server's files.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { ContentStore } from "../cache.js";
import { debianSets, type DebianSetName, type LockFile } from "../lockfile.js";
import type { ImagesPlan } from "../images/plan.js";
import type { ArtifactResult } from "../sources/index.js";
import { FILES_JSON, FILES_REPO_PATH, type ServedManifestEntry } from "../stages/files.js";
import { readTarMember } from "../oci/tar.js";
import { rootfsTar } from "../stages/rootfs.js";
import type { SbomContainerImage, SbomDebianPackage, SbomGoBinary, SbomInput, SbomNpmPackage } from "./cyclonedx.js";
import { readBuildInfo } from "./go-buildinfo.js";

/** Host packages whose versions decide the image's bytes (file system and boot loader tools). */
const HOST_PACKAGES = [
  "mmdebstrap",
  "e2fsprogs",
  "dosfstools",
  "mtools",
  "gdisk",
  "grub-common",
  "grub-pc-bin",
  "grub-efi-amd64-bin",
  "fakeroot",
  "qemu-utils",
  "skopeo",
  "docker-registry",
  "gzip",
  "tar",
];

export interface CollectOptions {
  name: string;
  epoch: number;
  lock: LockFile;
  rootfsDir: string;
  /** Which Debian sets went in (base and toolchain only when images were built from recipes; os:<name> per OS image). */
  sets: DebianSetName[];
  nodeBinaries: ArtifactResult[];
  plan: ImagesPlan;
  seeded: { ref: string; repository: string; tag: string; tags: string[]; digest: string; source: string }[];
  filesDir: string;
  images: { format: string; sha256: string }[];
  /** The OS images and ramdisks the file server serves (path under its root), with the PyPI packages they hold. */
  osImages?: { name: string; path: string; sha256: string; pythonPackages?: { name: string; version: string }[] }[];
}

export async function collectSbomInput(opts: CollectOptions): Promise<SbomInput> {
  const store = new ContentStore();
  const debian: SbomDebianPackage[] = debianSets(opts.lock)
    .filter((set) => opts.sets.includes(set.name))
    .flatMap((set) =>
      Object.entries(set.packages).map(([name, pin]) => ({ set: set.name, name, version: pin.version, architecture: pin.architecture, sha256: pin.sha256 })),
    );
  const debianVersion = ((await readTarMember(rootfsTar(opts.rootfsDir), "etc/debian_version")) ?? "").trim();

  // sha256 -> binary; the same binary may be in several places.
  const found = new Map<string, { name: string; path: string; locations: string[] }>();
  const add = (sha256: string, name: string, path: string, location: string) => {
    const entry = found.get(sha256) ?? { name, path, locations: [] };
    entry.locations.push(location);
    found.set(sha256, entry);
  };
  for (const b of opts.nodeBinaries) add(b.sha256, b.name, b.path, `/usr/local/bin/${b.name}`);
  const imageBinaries = new Map<string, string[]>();
  for (const image of opts.plan.images) {
    for (const file of image.recipe?.files ?? []) {
      if (!file.from.startsWith(store.root)) continue; // only artifacts come from the content store
      add(file.sha256, file.to.split("/").pop()!, file.from, `image ${image.ref}:${file.to}`);
      imageBinaries.set(image.ref, [...(imageBinaries.get(image.ref) ?? []), file.sha256]);
    }
  }
  const served = JSON.parse(await readFile(join(opts.filesDir, FILES_JSON), "utf8")) as { files: ServedManifestEntry[] };
  const files = [
    ...served.files.map(({ path, sha256, from }) => ({ path: `/${FILES_REPO_PATH}/${path}`, sha256, from })),
    ...(opts.osImages ?? []).map((o) => ({
      path: `/${o.path}`,
      sha256: o.sha256,
      from: `os-image:${o.name}`,
      debianSet: `os:${o.name}`,
      pythonPackages: o.pythonPackages ?? [],
    })),
  ];
  for (const f of served.files) {
    const location = `file server /${FILES_REPO_PATH}/${f.path}`;
    if (f.from.startsWith("artifact:")) add(f.sha256, f.from.slice("artifact:".length), store.pathOf(f.sha256), location);
    // A release archive's binaries (containerd, nerdctl, …), by the artifact they were copied from; a bare binary (runc.amd64) is the file itself.
    for (const member of f.contains ?? [])
      add(member.sha256, member.artifact, store.pathOf(member.sha256), member.sha256 === f.sha256 ? location : `${location}:${member.path}`);
  }

  const goBinaries: SbomGoBinary[] = [];
  for (const [sha256, { name, path, locations }] of [...found].sort(([a], [b]) => a.localeCompare(b))) {
    const info = await readBuildInfo(path);
    if (info) goBinaries.push({ name, sha256, info, locations: locations.sort() });
  }

  const containerImages: SbomContainerImage[] = await Promise.all(
    opts.seeded.map(async (s) => {
      const planned = opts.plan.images.find((i) => i.ref === s.ref);
      const npmPackages = await bundledNpmPackages(planned?.recipe?.files ?? []);
      return {
        ref: s.ref,
        repository: s.repository,
        tags: [s.tag, ...s.tags],
        digest: s.digest,
        source: s.source,
        ...debianSetOf(planned),
        binaries: imageBinaries.get(s.ref) ?? [],
        npmPackages,
        pythonPackages: planned?.recipe?.pythonPackages ?? [],
        ...(planned?.chart ? { helmChart: true } : {}),
      };
    }),
  );
  return {
    name: opts.name,
    epoch: opts.epoch,
    debianVersion,
    debian,
    goBinaries,
    containerImages,
    files,
    images: opts.images,
    tools: await hostToolVersions(),
  };
}

/** The npm packages listed by a recipe's `sbom: npm-packages` files (scripts/build-bpa.ts writes one). */
async function bundledNpmPackages(files: { from: string; sbom?: string }[]): Promise<SbomNpmPackage[]> {
  const lists = await Promise.all(
    files.filter((f) => f.sbom === "npm-packages").map(async (f) => (JSON.parse(await readFile(f.from, "utf8")) as { packages: SbomNpmPackage[] }).packages),
  );
  return lists.flat();
}

async function hostToolVersions(): Promise<{ name: string; version: string }[]> {
  const { stdout } = await execa("dpkg-query", ["-W", "-f", "${Package} ${Version}\\n", ...HOST_PACKAGES], { reject: false });
  return stdout
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [name, version] = line.split(" ");
      return { name: name!, version: version! };
    })
    .filter((t) => t.version);
}

function debianSetOf(planned: ImagesPlan["images"][number] | undefined): { debianSet?: string } {
  if (planned?.recipe?.base === "debian") return { debianSet: "base" };
  if (planned?.recipe?.base === "own-debian") return { debianSet: `own:${planned.recipe.name}` };
  return {};
}
