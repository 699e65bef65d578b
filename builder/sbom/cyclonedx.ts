/**
 * The build's SBOM in CycloneDX 1.6 JSON (read by Trivy, Grype and Dependency-Track):
 * every Debian package (pkg:deb purl, the .deb's sha256), every binary built from Go
 * modules (pkg:golang purl of its module and package, the Go version, the modules linked
 * in, the Go standard library), every container image (pkg:oci purl by digest) with the
 * npm packages bundled into its programs (pkg:npm purl, license) and the PyPI packages
 * installed in it (pkg:pypi purl), and the
 * files the file server gives compute nodes (sha256). Made with the CycloneDX library's
 * models and serializer; lists are sorted and the serial number and timestamp derive from
 * the inputs, so the same build gives the same bytes.
 */
import { Enums, Models, Serialize, Spec, SPDX } from "@cyclonedx/cyclonedx-library";
import { PackageURL } from "packageurl-js";
import { stableUuid } from "../disk/layout.js";
import { sha256Text } from "../cache.js";
import type { GoBuildInfo } from "./go-buildinfo.js";

export const SBOM_SPEC = Spec.Spec1dot6;

export interface SbomDebianPackage {
  /** rootfs: the appliance's root; base: the container images' shared base layer; toolchain: used to compile, not shipped; os:<name>: a compute nodes' OS image. */
  set: "rootfs" | "base" | "toolchain" | `os:${string}` | `own:${string}`;
  name: string;
  version: string;
  architecture: string;
  sha256: string;
}

export interface SbomGoBinary {
  name: string;
  sha256: string;
  info: GoBuildInfo;
  /** Where it is in the appliance (paths in the root, `image <ref>:<path>`, file server paths). */
  locations: string[];
}

export interface SbomContainerImage {
  ref: string;
  repository: string;
  tags: string[];
  digest: string;
  source: string;
  /** The Debian set its root is ("base", shared; "own:<recipe>"), if it has Debian packages. */
  debianSet?: string;
  /** sha256 of the Go binaries it contains. */
  binaries: string[];
  /** npm packages bundled into a program of the image. */
  npmPackages: SbomNpmPackage[];
  /** PyPI distributions installed in the image (a recipe's `python:`). */
  pythonPackages?: { name: string; version: string }[];
  /** Not a container image but a Helm chart stored as an OCI artifact (a recipe's `chart:`). */
  helmChart?: boolean;
}

export interface SbomNpmPackage {
  name: string;
  version: string;
  license?: string;
}

export interface SbomInput {
  name: string;
  epoch: number;
  /** /etc/debian_version of the root, e.g. "13.2". */
  debianVersion: string;
  debian: SbomDebianPackage[];
  goBinaries: SbomGoBinary[];
  containerImages: SbomContainerImage[];
  /** Files served to compute nodes: path under the file server's root. */
  files: { path: string; sha256: string; from: string; debianSet?: string; pythonPackages?: { name: string; version: string }[] }[];
  /** The disk images this SBOM describes. */
  images: { format: string; sha256: string }[];
  /** Host tools that shaped the image bytes, with their Debian versions. */
  tools: { name: string; version: string }[];
}

const prop = (name: string, value: string) => new Models.Property(`icn-bootstrap:${name}`, value);
const sha256Hashes = (hex: string) => new Models.HashDictionary([[Enums.HashAlgorithm["SHA-256"], hex.replace(/^sha256:/, "")]]);

function golangPurl(path: string, version: string, subpath?: string): string {
  const slash = path.lastIndexOf("/");
  return new PackageURL(
    "golang",
    slash > 0 ? path.slice(0, slash) : undefined,
    slash > 0 ? path.slice(slash + 1) : path,
    version,
    undefined,
    subpath,
  ).toString();
}

/** "registry.k8s.io/kube-apiserver:v1.37.1" -> "registry.k8s.io/kube-apiserver" */
const refRepository = (ref: string) => ref.replace(/:[^:/]+$/, "");

export function buildBom(input: SbomInput): Models.Bom {
  const major = input.debianVersion.split(".")[0];
  const distro = `debian-${major}`;
  const appliance = new Models.Component(Enums.ComponentType.OperatingSystem, input.name, {
    bomRef: `appliance:${input.name}`,
    description: "ICN bootstrap appliance disk image",
    properties: new Models.PropertyRepository(input.images.map((i) => prop(`image:${i.format}:sha256`, i.sha256))),
  });
  const bom = new Models.Bom({
    metadata: new Models.Metadata({ timestamp: new Date(input.epoch * 1000), component: appliance }),
  });
  for (const tool of input.tools) {
    bom.metadata.tools.components.add(
      new Models.Component(Enums.ComponentType.Application, tool.name, { version: tool.version, description: "build host's Debian package" }),
    );
  }

  const os = new Models.Component(Enums.ComponentType.OperatingSystem, "debian", {
    bomRef: "os:debian",
    version: input.debianVersion,
    description: "the appliance's root filesystem",
  });
  bom.components.add(os);
  appliance.dependencies.add(os.bomRef);
  const debs = new Map<string, Models.Component>();
  for (const pkg of input.debian) {
    const component = new Models.Component(Enums.ComponentType.Library, pkg.name, {
      bomRef: `deb:${pkg.set}:${pkg.name}`,
      version: pkg.version,
      purl: new PackageURL("deb", "debian", pkg.name, pkg.version, { arch: pkg.architecture, distro }, undefined).toString(),
      hashes: sha256Hashes(pkg.sha256),
      scope: pkg.set === "toolchain" ? Enums.ComponentScope.Excluded : Enums.ComponentScope.Required,
      properties: new Models.PropertyRepository([prop("debian:set", pkg.set)]),
    });
    bom.components.add(component);
    debs.set(`${pkg.set}:${pkg.name}`, component);
    if (pkg.set === "rootfs") os.dependencies.add(component.bomRef);
  }

  const modules = new Map<string, Models.Component>();
  const moduleComponent = (path: string, version: string, sum?: string) => {
    const purl = golangPurl(path, version);
    const key = purl;
    let component = modules.get(key);
    if (!component) {
      component = new Models.Component(Enums.ComponentType.Library, path, {
        bomRef: key,
        version,
        purl,
        properties: new Models.PropertyRepository(sum ? [prop("go:sum", sum)] : []),
      });
      modules.set(key, component);
      bom.components.add(component);
    }
    return component;
  };
  const npm = new Map<string, Models.Component>();
  const npmComponent = (pkg: SbomNpmPackage) => {
    const key = `npm:${pkg.name}@${pkg.version}`;
    let component = npm.get(key);
    if (!component) {
      const [namespace, name] = pkg.name.startsWith("@") ? pkg.name.split("/") : [undefined, pkg.name];
      component = new Models.Component(Enums.ComponentType.Library, pkg.name, {
        bomRef: key,
        version: pkg.version,
        purl: new PackageURL("npm", namespace, name!, pkg.version, undefined, undefined).toString(),
        licenses: new Models.LicenseRepository(pkg.license ? [npmLicense(pkg.license)] : []),
      });
      npm.set(key, component);
      bom.components.add(component);
    }
    return component;
  };
  const pypi = new Map<string, Models.Component>();
  const pypiComponent = (pkg: { name: string; version: string }) => {
    const key = `pypi:${pkg.name}@${pkg.version}`;
    let component = pypi.get(key);
    if (!component) {
      component = new Models.Component(Enums.ComponentType.Library, pkg.name, {
        bomRef: key,
        version: pkg.version,
        purl: new PackageURL("pypi", undefined, pkg.name, pkg.version, undefined, undefined).toString(),
      });
      pypi.set(key, component);
      bom.components.add(component);
    }
    return component;
  };
  const binaries = new Map<string, Models.Component>();
  for (const binary of input.goBinaries) {
    const { info } = binary;
    const subpath = info.package.startsWith(`${info.main.path}/`) ? info.package.slice(info.main.path.length + 1) : undefined;
    const component = new Models.Component(Enums.ComponentType.Application, binary.name, {
      bomRef: `go-binary:${binary.name}`,
      version: info.main.version,
      purl: golangPurl(info.main.path, info.main.version, subpath),
      hashes: sha256Hashes(binary.sha256),
      properties: new Models.PropertyRepository([
        prop("go:version", info.goVersion),
        prop("go:module", info.main.path),
        prop("go:package", info.package),
        ...binary.locations.map((l) => prop("location", l)),
      ]),
    });
    bom.components.add(component);
    binaries.set(binary.sha256, component);
    component.dependencies.add(moduleComponent("stdlib", `v${info.goVersion.replace(/^go/, "")}`).bomRef);
    for (const dep of info.deps) component.dependencies.add(moduleComponent(dep.path, dep.version, dep.sum).bomRef);
    if (binary.locations.some((l) => l.startsWith("/"))) os.dependencies.add(component.bomRef);
  }

  for (const image of input.containerImages) {
    const repository = refRepository(image.ref);
    const component = new Models.Component(Enums.ComponentType.Container, repository, {
      bomRef: `oci:${image.ref}`,
      version: image.tags[0],
      purl: new PackageURL(
        "oci",
        undefined,
        repository.split("/").pop()!.toLowerCase(),
        image.digest,
        { repository_url: repository, tag: image.tags[0]! },
        undefined,
      ).toString(),
      hashes: sha256Hashes(image.digest),
      properties: new Models.PropertyRepository([
        prop("registry:repository", image.repository),
        ...image.tags.map((t) => prop("registry:tag", t)),
        prop("image:source", image.source),
        ...(image.helmChart ? [prop("oci:artifact", "helm-chart")] : []),
      ]),
    });
    bom.components.add(component);
    appliance.dependencies.add(component.bomRef);
    for (const sha of image.binaries) {
      const binary = binaries.get(sha);
      if (binary) component.dependencies.add(binary.bomRef);
    }
    if (image.debianSet) for (const [key, deb] of debs) if (key.startsWith(`${image.debianSet}:`)) component.dependencies.add(deb.bomRef);
    for (const pkg of image.npmPackages) component.dependencies.add(npmComponent(pkg).bomRef);
    for (const pkg of image.pythonPackages ?? []) component.dependencies.add(pypiComponent(pkg).bomRef);
  }

  for (const file of input.files) {
    const component = new Models.Component(Enums.ComponentType.File, file.path, {
      bomRef: `file:${file.path}`,
      hashes: sha256Hashes(file.sha256),
      properties: new Models.PropertyRepository([prop("file-server:path", file.path), prop("file-server:from", file.from)]),
    });
    bom.components.add(component);
    appliance.dependencies.add(component.bomRef);
    // An OS image or ramdisk: what it was made of.
    if (file.debianSet) for (const [key, deb] of debs) if (key.startsWith(`${file.debianSet}:`)) component.dependencies.add(deb.bomRef);
    for (const pkg of file.pythonPackages ?? []) component.dependencies.add(pypiComponent(pkg).bomRef);
  }
  return bom;
}

/** Sorted JSON; the serial number is derived from the document without it, so equal contents get equal serials. */
export function serializeBom(bom: Models.Bom): string {
  const serializer = new Serialize.JsonSerializer(new Serialize.JSON.Normalize.Factory(SBOM_SPEC));
  bom.serialNumber = undefined;
  bom.serialNumber = `urn:uuid:${stableUuid(sha256Text(serializer.serialize(bom, { sortLists: true })), "sbom")}`;
  return `${serializer.serialize(bom, { sortLists: true, space: 2 })}\n`;
}

/** An npm package.json license: an SPDX id, an SPDX expression ("(MIT OR Apache-2.0)"), else a name ("SEE LICENSE IN …"). */
function npmLicense(license: string): Models.License {
  if (SPDX.isSupportedSpdxId(license)) return new Models.SpdxLicense(license);
  if (/^\(?[A-Za-z0-9.+-]+( (OR|AND|WITH) \(?[A-Za-z0-9.+-]+\)?)+\)?$/.test(license)) return new Models.LicenseExpression(license);
  return new Models.NamedLicense(license);
}
