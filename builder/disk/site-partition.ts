/**
 * The site partition: a small FAT filesystem labelled ICN-SITE that carries the site's
 * settings (site.yaml) and Kubernetes objects (manifests/). The image stage makes it with
 * a documented template; `icn-bootstrap site write` replaces its contents. A second drive
 * or an ISO with the same label works the same way on the appliance.
 */
import { join } from "node:path";

export const SITE_LABEL = "ICN-SITE";
/** The validator the appliance runs at boot; `site check` runs the same file. */
export const SITE_SCRIPT = "usr/lib/icn-bootstrap/site.py";
export const REPO_SITE_SCRIPT = join(import.meta.dirname, "../../overlays", SITE_SCRIPT);

export const MANIFESTS_README = `Kubernetes objects for this site, applied once the appliance's BPA is ready:
BareMetalHosts, their BMC credentials as Secrets, Provisionings. Any number of
objects per file (.yaml, .yml or .json), applied in file-name order. A file is applied
again when it changes. A file that holds a Secret is deleted from this partition after
it was applied (its contents then live only in Kubernetes): keep Secrets in files of
their own. Check the folder on your computer first: icn-bootstrap site check <folder>.
`;

type Exec = (file: string, args: string[], options?: { env?: Record<string, string> }) => Promise<string>;

/** A FAT filesystem of `bytes` labelled ICN-SITE at `file` (created), with a derived serial and no timestamps from the host. */
export async function makeSiteFilesystem(exec: Exec, file: string, bytes: number, volumeId: string, epoch: number): Promise<void> {
  await exec("mkfs.vfat", ["--invariant", "-n", SITE_LABEL, "-i", volumeId, "-C", file, String(Math.floor(bytes / 1024))], {
    env: { SOURCE_DATE_EPOCH: String(epoch) },
  });
}

/**
 * Replaces the contents of the FAT filesystem at `address` (a file, a device, or
 * `image@@offset`) with a site folder's files: site.yaml and manifests/.
 */
export async function writeSiteFiles(exec: Exec, address: string, files: { path: string; source: string }[], epoch?: number): Promise<void> {
  // mtools write FAT times in local time: the build's are the epoch in UTC, whatever the host's zone.
  const env = epoch === undefined ? undefined : { SOURCE_DATE_EPOCH: String(epoch), TZ: "UTC" };
  const existing = (await exec("mdir", ["-b", "-i", address, "::/"], { env }))
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const dirsThere = existing.filter((p) => p.endsWith("/")).map((p) => p.slice(0, -1));
  const filesThere = existing.filter((p) => !p.endsWith("/"));
  if (dirsThere.length > 0) await exec("mdeltree", ["-i", address, ...dirsThere], { env });
  if (filesThere.length > 0) await exec("mdel", ["-i", address, ...filesThere], { env });
  const dirs = [...new Set(files.map((f) => f.path.split("/").slice(0, -1).join("/")).filter(Boolean))].sort();
  if (dirs.length > 0) await exec("mmd", ["-i", address, ...dirs.map((d) => `::/${d}`)], { env });
  for (const file of files) await exec("mcopy", ["-i", address, "-o", file.source, `::/${file.path}`], { env });
}
