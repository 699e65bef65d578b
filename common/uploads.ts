/**
 * The upload contract, shared by the CLI (builder/upload-client.ts) and the REST API
 * (bpa/rest/): what a client may upload (tus Upload-Metadata), checked before a single byte
 * is stored (the kind, the name it is published under, and the sha256 the client states),
 * and the record of an upload that the server answers with.
 */

export const KINDS = ["file", "container-image", "os-image", "chart", "appliance-image"] as const;
export type Kind = (typeof KINDS)[number];

export interface UploadRequest {
  kind: Kind;
  /**
   * file: a relative path; os-image: a file name; container-image: repository[:tag]; chart: repository[:version], its last segment the chart's name;
   * appliance-image: a relative path ending like one of the build's outputs (APPLIANCE_IMAGE_SUFFIXES), e.g. 2026.12/icn-bootstrap.img.
   */
  name: string;
  /** 64 lowercase hex digits: the sha256 of the bytes the client sends. */
  sha256: string;
}

export type UploadState = "uploading" | "verifying" | "publishing" | "published" | "replaced" | "rejected" | "failed";

export interface UploadRecord {
  id: string;
  kind: Kind;
  name: string;
  /** The sha256 the client stated (of the uploaded bytes). */
  sha256: string;
  size: number;
  state: UploadState;
  /** Bytes stored so far (uploads in progress). */
  offset?: number;
  /** Who uploaded it (the authenticated user). */
  user?: string;
  created?: string;
  finished?: string;
  /** file and os-image: the path on the file server (port 8080), e.g. /uploads/tools/helm.tar.gz (an appliance-image is not served: none) */
  path?: string;
  /** file and os-image: path + the file server's address as the caller reaches the appliance; container-image: the pull reference by digest; chart: oci://host/repository (with version: what spec.addons names). */
  url?: string;
  /** container-image and chart: the manifest digest in the registry; file, os-image and appliance-image: sha256:<hex> of the file. */
  digest?: string;
  /** chart: the chart's version (its tag in the registry). */
  version?: string;
  /** os-image: qcow2 or raw (BareMetalHost spec.image.format). */
  format?: string;
  /** os-image: the sha256 of the image and its type, as BareMetalHost spec.image.checksum and checksumType take them. */
  checksum?: string;
  checksumType?: "sha256";
  /** os-image: the checksum file's path, and URL (<hex>  <name>, as sha256sum writes it). */
  checksumPath?: string;
  checksumUrl?: string;
  error?: string;
  /** Bytes this server process received for the upload: more than size means bytes were sent twice. */
  bytesReceived?: number;
}

/**
 * What an appliance-image upload may be: the build's outputs that an upgrade reads (the USB
 * image or the qcow2, the build report, their signatures, the SBOM). Kept apart from
 * everything the file server serves, and uploaded only by an administrator's binding.
 */
export const APPLIANCE_IMAGE_SUFFIXES = [".img", ".qcow2", ".report.json", ".cdx.json", ".sigstore.json"] as const;

const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$/;
const REPOSITORY = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const SHA256 = /^[a-f0-9]{64}$/;

/** An error the client caused: its HTTP status and a message naming the input and the fix. */
export class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "RequestError";
  }
}

/** Splits "site/app:1.0" into repository and tag (default "latest"). */
export function parseImageName(name: string): { repository: string; tag: string } {
  const colon = name.lastIndexOf(":");
  const slash = name.lastIndexOf("/");
  if (colon > slash) return { repository: name.slice(0, colon), tag: name.slice(colon + 1) };
  return { repository: name, tag: "latest" };
}

function relativePathProblem(name: string, example: string): string | undefined {
  if (name.length > 1024 || !name.split("/").every((s) => SEGMENT.test(s))) {
    return `name "${name}" is not a relative file path: use segments of letters, digits and . _ + - separated by /, none starting with a dot (e.g. ${example})`;
  }
  return undefined;
}

function nameProblem(kind: Kind, name: string): string | undefined {
  if (kind === "appliance-image") {
    const problem = relativePathProblem(name, "2026.12/icn-bootstrap.img");
    if (problem) return problem;
    if (!APPLIANCE_IMAGE_SUFFIXES.some((suffix) => name.endsWith(suffix)))
      return `name "${name}" is not one of the build's outputs an upgrade reads: end it in ${APPLIANCE_IMAGE_SUFFIXES.join(", ")} (e.g. 2026.12/icn-bootstrap.img, 2026.12/icn-bootstrap.img.sigstore.json)`;
    return undefined;
  }
  if (kind === "file") {
    const segments = name.split("/");
    const problem = relativePathProblem(name, "kubespray/v2.31.0/calicoctl");
    if (problem) return problem;
    if (name.endsWith(".sha256")) return `name "${name}" ends like a checksum file: those are written by the server`;
    // A directory x.sha256/ would stand where a file x's checksum goes (publishing x would then fail half-way).
    const checksumDir = segments.slice(0, -1).find((s) => s.endsWith(".sha256"));
    if (checksumDir)
      return `name "${name}": directory "${checksumDir}" is named like the checksum file of "${checksumDir.slice(0, -7)}", which the server writes: choose another directory name`;
    return undefined;
  }
  if (kind === "os-image") {
    if (!SEGMENT.test(name)) return `name "${name}" is not a file name: use letters, digits and . _ + - (e.g. ubuntu-22.04.qcow2)`;
    if (/\.(sha256sum|sha256)$/.test(name)) return `name "${name}" ends like a checksum file: those are written by the server`;
    return undefined;
  }
  const { repository, tag } = parseImageName(name);
  if (!REPOSITORY.test(repository) || repository.length > 255) {
    return `name "${name}" is not an image name: use repository[:tag] with a lowercase repository such as site/my-app:1.0`;
  }
  if (!TAG.test(tag)) return `name "${name}": tag "${tag}" is not a tag (letters, digits, _ . -, at most 128)`;
  return undefined;
}

/** Validates tus metadata; throws a RequestError (400) naming every bad key. */
export function parseUploadRequest(metadata: Record<string, string | null> | undefined): UploadRequest {
  const m = metadata ?? {};
  const problems: string[] = [];
  const kind = m.kind ?? "";
  if (!(KINDS as readonly string[]).includes(kind)) {
    problems.push(`metadata "kind" is ${kind ? `"${kind}"` : "missing"}: use one of ${KINDS.join(", ")}`);
  }
  const name = m.name ?? "";
  if (!name) problems.push('metadata "name" is missing: the name to publish under');
  else if ((KINDS as readonly string[]).includes(kind)) {
    const problem = nameProblem(kind as Kind, name);
    if (problem) problems.push(`metadata ${problem}`);
  }
  const sha256 = (m.sha256 ?? "").replace(/^sha256:/, "").toLowerCase();
  if (!SHA256.test(sha256)) {
    problems.push(`metadata "sha256" is ${m.sha256 ? `"${m.sha256}"` : "missing"}: state the sha256 of the file (64 hex digits, e.g. from sha256sum)`);
  }
  if (problems.length) throw new RequestError(400, problems.join("; "));
  return { kind: kind as Kind, name, sha256 };
}
