/**
 * Python packages from PyPI for an image recipe (`python:` in recipe.yaml): a
 * requirements file where every package is pinned to one version with `--hash`
 * lines (so the wheels, and the image digest, cannot change under a pin), installed
 * for the image's own interpreter, not the build host's.
 *
 * The result is a tree in the cache, keyed by the requirements and the target
 * Python: `site-packages/` (for /usr/local/lib/python3.X/dist-packages) and `bin/`
 * (the console scripts, with `#!/usr/bin/python3`). Wheels only: nothing is
 * compiled on the build host.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { cacheRoot } from "../cache.js";
import { lockOutput } from "../cache-sharing.js";
import { UserError } from "../errors.js";

/** The glibc of the images' Debian (trixie: 2.41) runs every manylinux wheel up to that. */
const PLATFORMS = ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"];
const LAYOUT_VERSION = "3";
/**
 * The pip that installs every tree, pinned: the host's own (its python3's ensurepip) writes
 * other console-script wrappers and RECORD lines from one version to the next, so the same
 * requirements made a different tree, and image digest, on another host.
 */
const PIP_REQUIREMENT = "pip==26.3 --hash=sha256:f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13\n";

export interface PythonTree {
  dir: string;
  sitePackages: string;
  bin: string;
  /** The installed distributions (name, version), for the SBOM and the log. */
  packages: { name: string; version: string }[];
}

/** Checks that every requirement is `name==version` with at least one `--hash=sha256:`. */
export function checkPinnedRequirements(text: string, file: string): { name: string; version: string }[] {
  const joined = text.replace(/\\\n/g, " ");
  const pins: { name: string; version: string }[] = [];
  for (const raw of joined.split("\n")) {
    const line = raw.replace(/(^|\s)#.*$/, "").trim();
    if (!line) continue;
    const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)(\s*;[^-]*)?((\s+--hash=sha256:[0-9a-f]{64})+)\s*$/.exec(line);
    if (!m) {
      throw new UserError(
        `${file}: '${line.slice(0, 80)}' is not pinned with its hashes (name==version --hash=sha256:...)`,
        "regenerate the file with 'npm run lock:runner' (uv pip compile --generate-hashes)",
      );
    }
    pins.push({ name: m[1]!.toLowerCase(), version: m[2]! });
  }
  if (pins.length === 0) throw new UserError(`${file}: no requirements`, "regenerate it with 'npm run lock:runner'");
  return pins;
}

async function pipVenv(log: (message: string) => void): Promise<string> {
  const venv = join(cacheRoot(), "python", "pip-venv");
  const pipPath = join(venv, "bin", "pip");
  const complete = join(venv, ".complete");
  if (existsSync(complete) && (await readFile(complete, "utf8")) === PIP_REQUIREMENT) return pipPath;
  log(`creating the build's pip (python3 -m venv ${venv}, ${PIP_REQUIREMENT.split(" ")[0]})`);
  await rm(venv, { recursive: true, force: true });
  const made = await execa("python3", ["-m", "venv", venv], { all: true, reject: false });
  if (made.failed)
    throw new UserError(
      `cannot create a Python venv for pip: ${String(made.all).trim().split("\n").pop()}`,
      "install python3-venv (scripts/setup-host.sh does)",
    );
  const requirement = join(venv, "pip-requirement.txt");
  await writeFile(requirement, PIP_REQUIREMENT);
  await pip(pipPath, ["install", "--require-hashes", "--no-deps", "-r", requirement], "the build's pip");
  await writeFile(complete, PIP_REQUIREMENT);
  return pipPath;
}

async function pip(pipPath: string, args: string[], what: string): Promise<void> {
  const result = await execa(pipPath, ["--disable-pip-version-check", "--no-input", ...args], { all: true, reject: false });
  if (result.failed) {
    const tail = String(result.all ?? "")
      .trimEnd()
      .split("\n")
      .slice(-12)
      .join("\n    ");
    throw new UserError(
      `${what}: pip ${args[0]} failed:\n    ${tail}`,
      "PyPI must be reachable for the first build (wheels are cached afterwards); a hash mismatch means the requirements file and PyPI disagree: regenerate it with 'npm run lock:runner'",
    );
  }
}

/** The tree of a pinned requirements file, installed for `python` (e.g. "3.13"); built once, then cached. */
export async function ensurePythonTree(requirementsFile: string, python: string, what: string, log: (message: string) => void): Promise<PythonTree> {
  const text = await readFile(requirementsFile, "utf8");
  const packages = checkPinnedRequirements(text, requirementsFile);
  const key = createHash("sha256")
    .update(`${LAYOUT_VERSION}\n${python}\n${PLATFORMS.join(",")}\n${text}`)
    .digest("hex");
  const dir = join(cacheRoot(), "python", "trees", key);
  const tree = { dir, sitePackages: join(dir, "site-packages"), bin: join(dir, "bin"), packages };
  if (existsSync(join(dir, ".complete"))) return tree;
  // Builds running at once share pip's venv and the wheels folder: one makes a tree at a
  // time, the others wait, then find theirs made or make it with a finished pip.
  await mkdir(join(cacheRoot(), "python"), { recursive: true });
  const unlock = await lockOutput(
    join(cacheRoot(), "python", "making"),
    async () => !existsSync(join(dir, ".complete")),
    (holder) => log(`waiting for another build (process ${holder}) that is fetching Python packages`),
  );
  if (!unlock) return tree;
  try {
    await makePythonTree(requirementsFile, python, packages, dir, what, log);
  } finally {
    await unlock();
  }
  return tree;
}

async function makePythonTree(
  requirementsFile: string,
  python: string,
  packages: PythonTree["packages"],
  dir: string,
  what: string,
  log: (message: string) => void,
): Promise<void> {
  const pipPath = await pipVenv(log);
  const wheels = join(cacheRoot(), "python", "wheels");
  const work = `${dir}.partial-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(wheels, { recursive: true });
  const abi = `cp${python.replace(".", "")}`;
  const target = [
    "--only-binary=:all:",
    "--python-version",
    python,
    "--implementation",
    "cp",
    "--abi",
    abi,
    "--abi",
    "abi3",
    "--abi",
    "none",
    ...PLATFORMS.flatMap((p) => ["--platform", p]),
  ];
  log(`${packages.length} Python packages for python${python} (${packages.map((p) => `${p.name} ${p.version}`).join(", ")})`);
  await pip(pipPath, ["download", "--require-hashes", "--no-deps", ...target, "-d", wheels, "-r", requirementsFile], what);
  await pip(
    pipPath,
    [
      "install",
      "--no-index",
      "--find-links",
      wheels,
      "--require-hashes",
      "--no-deps",
      "--no-compile",
      ...target,
      "--target",
      join(work, "site-packages"),
      "-r",
      requirementsFile,
    ],
    what,
  );
  await mkdir(join(work, "bin"), { recursive: true });
  const scripts = join(work, "site-packages", "bin");
  const rewritten = new Map<string, string>();
  for (const name of existsSync(scripts) ? (await readdir(scripts)).sort() : []) {
    // pip wrote the build host's interpreter (pip's venv, in the cache) into the shebang: the image runs its own.
    const body = (await readFile(join(scripts, name), "utf8")).replace(/^#!.*\n/, "#!/usr/bin/python3\n");
    await writeFile(join(work, "bin", name), body);
    await chmod(join(work, "bin", name), 0o755);
    rewritten.set(name, body);
  }
  await rm(scripts, { recursive: true, force: true });
  await recordRewrittenScripts(join(work, "site-packages"), rewritten);
  await writeFile(join(work, ".complete"), `${requirementsFile}\n`);
  await rm(dir, { recursive: true, force: true });
  await rename(work, dir);
}

/**
 * pip's RECORD files list each console script with the sha256 and size it wrote, and those
 * depended on where pip's venv was (its path in the shebang, so on the cache's path): they
 * get the script as rewritten, so the tree is the same wherever the cache is.
 */
async function recordRewrittenScripts(sitePackages: string, scripts: Map<string, string>): Promise<void> {
  if (scripts.size === 0) return;
  for (const entry of (await readdir(sitePackages)).filter((e) => e.endsWith(".dist-info")).sort()) {
    const record = join(sitePackages, entry, "RECORD");
    if (!existsSync(record)) continue;
    const lines = (await readFile(record, "utf8")).split("\n").map((line) => {
      const [path, , size, ...rest] = line.split(",");
      const name = path?.split("/").pop() ?? "";
      const body = path?.includes("bin/") ? scripts.get(name) : undefined;
      if (body === undefined || size === undefined || rest.length > 0) return line;
      const bytes = Buffer.from(body, "utf8");
      return `${path},sha256=${createHash("sha256").update(bytes).digest("base64url")},${bytes.length}`;
    });
    await writeFile(record, lines.join("\n"));
  }
}

/** Where a tree goes in an image's root: its site-packages and its console scripts, each named by the tree's key (a pure function of the hash-pinned requirements). */
export function pythonTreeCopies(tree: PythonTree, python: string): { from: string; to: string; sha256: string }[] {
  const key = tree.dir.split("/").pop()!;
  return [
    { from: tree.sitePackages, to: `/usr/local/lib/python${python}/dist-packages`, sha256: `${key}:site-packages` },
    { from: tree.bin, to: "/usr/local/bin", sha256: `${key}:bin` },
  ];
}
