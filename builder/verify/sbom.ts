/**
 * Checks the SBOM beside the report against the report (its sha256) and against the
 * image: every file it places in the root filesystem (Go binaries in the root, the file
 * server's files) has the sha256 it states, and every container image it lists is one
 * the report's registry holds (which the registry check verifies).
 */
import { readFile } from "node:fs/promises";
import { sha256Text } from "../cache.js";
import { parseManifest } from "../disk/contents.js";
import { FILES_ROOT } from "../stages/files.js";

interface SbomComponent {
  "bom-ref": string;
  type: string;
  name: string;
  purl?: string;
  hashes?: { alg: string; content: string }[];
  properties?: { name: string; value: string }[];
}

export async function checkSbom(
  sbomPath: string,
  expectedSha256: string,
  manifest: string,
  registryDigests: string[],
): Promise<{ problems: string[]; checked: number }> {
  const text = await readFile(sbomPath, "utf8").catch(() => undefined);
  if (text === undefined) return { problems: [`${sbomPath} is missing`], checked: 0 };
  const actual = sha256Text(text);
  if (actual !== expectedSha256) return { problems: [`${sbomPath}: sha256 ${actual}, the build wrote ${expectedSha256}`], checked: 0 };
  const components = (JSON.parse(text) as { components: SbomComponent[] }).components;
  const entries = parseManifest(manifest);
  const problems: string[] = [];
  let checked = 0;
  const expectFile = (path: string, sha256: string, what: string) => {
    checked++;
    const entry = entries.get(path.replace(/^\//, ""));
    if (!entry) problems.push(`${what}: /${path.replace(/^\//, "")} is not in the image`);
    else if (entry.value !== sha256) problems.push(`${what}: /${entry.path} has sha256 ${entry.value}, the SBOM says ${sha256}`);
  };
  for (const c of components) {
    const sha256 = c.hashes?.find((h) => h.alg === "SHA-256")?.content;
    if (!sha256) continue;
    const props = (name: string) => (c.properties ?? []).filter((p) => p.name === `icn-bootstrap:${name}`).map((p) => p.value);
    if (c.type === "file") for (const path of props("file-server:path")) expectFile(`${FILES_ROOT}${path}`, sha256, c.name);
    if (c["bom-ref"].startsWith("go-binary:")) for (const location of props("location").filter((l) => l.startsWith("/"))) expectFile(location, sha256, c.name);
    if (c.type === "container") {
      checked++;
      if (!registryDigests.includes(`sha256:${sha256}`)) problems.push(`${c.name}: sha256:${sha256} is not among the registry's images in the report`);
    }
  }
  return { problems, checked };
}
