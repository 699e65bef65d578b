import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { sha256Text } from "../cache.js";
import { UserError } from "../errors.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../definition.js";
import { requireTools } from "../host-tools.js";
import { loadLock, lockPathFor, saveLock, type LockFile } from "../lockfile.js";
import { log } from "../log.js";
import { stagesDir } from "../pipeline.js";
import { runStage } from "../stage.js";
import { PACKAGES_JSON, requestedPackages, rootfsStage } from "../stages/rootfs.js";
import type { Command } from "./command.js";

const DEFAULT_MIRROR = "http://deb.debian.org/debian";

export const lockCommand: Command = {
  name: "lock",
  summary: "resolve the definition's inputs and pin them in its lock file",
  usage: `usage: icn-bootstrap lock [--definition FILE] [--mirror URL]

Resolves the Debian package set of the definition (its packages, their dependencies and
the builder's base set) against the mirror, and writes every package's exact version to
the lock file (FILE with .lock.yaml). Builds install exactly those versions and fail if
the mirror no longer has them. Other pinned artifacts in the lock file are kept.

options:
  --definition FILE  appliance definition (default: appliance.yaml in the repository)
  --mirror URL       Debian mirror (default: the lock file's, else ${DEFAULT_MIRROR});
                     a snapshot.debian.org URL gives a mirror that never moves`,
  async run(argv) {
    const { values } = parseCommandArgs("lock", argv, { definition: { type: "string" }, mirror: { type: "string" } });
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const lockPath = lockPathFor(definitionPath);
    const definition = await loadDefinition(definitionPath);
    await requireTools(["mmdebstrap"]);
    const previous: LockFile | undefined = await loadLock(lockPath).catch(() => undefined);
    const debian: LockFile["debian"] = {
      mirror: values.mirror ?? previous?.debian.mirror ?? DEFAULT_MIRROR,
      suite: definition.debian.suite,
      components: previous?.debian.components ?? ["main"],
      requested: requestedPackages(definition),
      packages: {},
    };
    log("lock", `resolving ${debian.requested.length} requested packages for Debian ${debian.suite}`);
    const mirrorState = await fetchInRelease(debian.mirror, debian.suite);
    const result = await runStage(rootfsStage, { definition, lock: debian, resolve: mirrorState }, stagesDir());
    debian.packages = JSON.parse(await readFile(join(result.dir, PACKAGES_JSON), "utf8"));
    await saveLock(lockPath, { version: 1, debian, artifacts: previous?.artifacts ?? {}, ...(previous?.images ? { images: previous.images } : {}) });
    const changed = previous ? diffPackages(previous.debian.packages, debian.packages) : [];
    console.log(`${lockPath}: ${Object.keys(debian.packages).length} Debian packages pinned${previous ? `, ${changed.length} changed` : ""}`);
    for (const line of changed.slice(0, 50)) console.log(`  ${line}`);
  },
};

/** The sha256 of the suite's signed InRelease file: it changes whenever the mirror's content does. */
async function fetchInRelease(mirror: string, suite: string): Promise<string> {
  const url = `${mirror.replace(/\/$/, "")}/dists/${suite}/InRelease`;
  let response: Response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new UserError(`cannot reach the Debian mirror at ${url}: ${(error as Error).message}`, "check the network, or pass a reachable mirror with --mirror");
  }
  if (!response.ok) throw new UserError(`the Debian mirror answered ${response.status} for ${url}`, `check that suite '${suite}' exists on that mirror, or pass another with --mirror`);
  return sha256Text(await response.text());
}

function diffPackages(before: Record<string, string>, after: Record<string, string>): string[] {
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  return names.filter((n) => before[n] !== after[n]).map((n) => `${n}: ${before[n] ?? "(new)"} -> ${after[n] ?? "(removed)"}`);
}
