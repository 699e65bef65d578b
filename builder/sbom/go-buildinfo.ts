/**
 * What a Go binary says it was built from (`go version -m`): the Go version, the main
 * package and module, and every module linked in (replacements applied).
 */
import { execa } from "execa";
import { goBinary } from "../sources/go.js";

export interface GoModule {
  path: string;
  version: string;
  /** go.sum's h1: hash of the module's files. */
  sum?: string;
}

export interface GoBuildInfo {
  goVersion: string;
  /** Import path of the main package (e.g. k8s.io/kubernetes/cmd/kubelet). */
  package: string;
  main: GoModule;
  deps: GoModule[];
}

export function parseBuildInfo(text: string): GoBuildInfo {
  const lines = text.split("\n");
  const goVersion = /:\s+(go\S+)\s*$/.exec(lines[0] ?? "")?.[1];
  if (!goVersion) throw new Error(`not Go build information: ${lines[0]}`);
  let pkg = "";
  let main: GoModule | undefined;
  const deps: GoModule[] = [];
  for (const line of lines.slice(1)) {
    const [kind, path, version, sum] = line.trim().split("\t");
    if (kind === "path") pkg = path!;
    else if (kind === "mod") main = { path: path!, version: version!, sum };
    else if (kind === "dep") deps.push({ path: path!, version: version!, sum });
    else if (kind === "=>" && deps.length > 0) deps[deps.length - 1] = { path: path!, version: version!, sum };
  }
  if (!main) throw new Error(`Go build information without a main module (${pkg})`);
  return { goVersion, package: pkg, main, deps };
}

/** The build information of a Go binary; undefined for a file that is not one (e.g. a tarball). */
export async function readBuildInfo(binary: string): Promise<GoBuildInfo | undefined> {
  const result = await execa(goBinary(), ["version", "-m", binary], { reject: false, all: true });
  if (result.exitCode === 0) return parseBuildInfo(String(result.stdout));
  const output = String(result.all ?? "");
  if (result.exitCode === 1 && (output.trim() === "" || /could not read Go build info|not executable/.test(output))) return undefined;
  throw new Error(`'${goBinary()} version -m ${binary}' failed: ${result.shortMessage ?? output}`);
}
