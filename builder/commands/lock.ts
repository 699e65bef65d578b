import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { CHECK_EXIT, checkLock, describeAge, exitStatus } from "../debian/check.js";
import { ensureLockedDebs } from "../debian/fetch.js";
import { readIndexes } from "../debian/index.js";
import { describeMoved, movedPackages, newestPin, pinsToAdd, type Moved } from "../debian/pins.js";
import { readArchives, resolveImageSets, resolveRootfs, sourcesFor } from "../debian/resolve.js";
import type { PinnedPackage } from "../debian/schema.js";
import { DEFAULT_DEFINITION, loadDefinition, type ApplianceDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import { requireTools } from "../host-tools.js";
import { debianSets, loadLock, loadPreviousLock, LOCK_VERSION, lockPathFor, saveLock, type LockFile } from "../lockfile.js";
import { log } from "../log.js";
import { stagesDir } from "../pipeline.js";
import { runStage } from "../stage.js";
import { pinsStillNeeded, requestedPackages, rootfsStage } from "../stages/rootfs.js";
import { ContentStore } from "../cache.js";
import { checkComponents } from "../check/components.js";
import { describeFindings, describeStatus, findingsExit } from "../check/findings.js";
import { WARN_DAYS } from "../check/support.js";
import { newestGoVulndb, VULNDB_MODULE } from "../check/vulndb.js";
import { loadArtifacts } from "../sources/index.js";
import type { Command } from "./command.js";
import { osPackagesOf, printImageMoves, recordImageDigests } from "./lock-images.js";

export const lockCommand: Command = {
  name: "lock",
  summary: "pin every Debian package as a file (or --update some, or --check every pin: age, vulnerabilities, support)",
  usage: `usage: icn-bootstrap lock [--definition FILE] [--mirror URL] [--security-mirror URL] [--snapshot URL]
       icn-bootstrap lock --update [NAME...]
       icn-bootstrap lock --check [--offline]
       icn-bootstrap lock --advisories

Resolves every Debian package set of the definition (the root filesystem, the images'
shared base and C toolchain, the compute nodes' OS images) against the archives' signed
indexes: the suite, <suite>-updates and <suite>-security (debian.updates /
debian.security in the definition). Each package is pinned as a file: version,
architecture, pool path, sha256 and size, with the Date of the index it came from.
Builds fetch exactly those files (the cache, then the pool, then the snapshot archive)
and never rewrite the lock. Prints what moved (old -> new); when an image's packages
moved, rebuilds the images and writes their digests into registry-seed/ (as lock-images
does). Other pinned artifacts are kept.

  --update           the same as no option: re-resolve everything
  --update NAME...   re-pin only these packages (wherever they are pinned) to the newest
                     version the indexes list, leaving every other pin alone; a package
                     newly listed in the definition is added to the root filesystem's
                     pins with the dependencies they lack; one the definition no longer
                     lists is dropped with what only it needed (no index read); the changed
                     sets are installed once to prove they still fit together
  --check            every pin checked, without building:
                     Debian: how many pins today's index still lists, how many only
                     the pool, the snapshot archive or this machine's cache still has,
                     how many are gone, and which pinned packages have a newer version
                     in the security archive (the container images' Debian sets too);
                     Go: every module the Go artifacts build with, and the Go
                     toolchain's standard library, against the pinned Go vulnerability
                     database (advisories.goVulndb in the lock file), and newer patch
                     releases of each Go artifact's line (the Go module proxy);
                     PyPI: the image recipes' pins against the vulnerabilities PyPI's
                     JSON API lists for each release, and newer patch releases;
                     support: each pin's upstream support window (the definition's
                     support:), warned about ${WARN_DAYS} days ahead (a warning line,
                     no exit bit), out of support after it.
                     Each line names the component, the pin and the command that moves
                     it. Answers fetched from PyPI and the proxy are kept in the cache
                     with their date and used when the network is not there.
                     Exit status: 0 when all is fine, else the sum of
                       ${CHECK_EXIT.unknown}   unknown: some data was not available (offline and not
                           cached, or a service refused it)
                       ${CHECK_EXIT.notIndexed}   Debian pins only in the pool or snapshot (builds still work)
                       ${CHECK_EXIT.securityUpdates}   updates waiting (security archive, newer patch releases)
                       ${CHECK_EXIT.cacheOnly}  Debian pins only in this machine's cache
                       ${CHECK_EXIT.gone}  Debian pins gone (builds fail)
                       ${CHECK_EXIT.vulnerable}  vulnerable: a pinned version has a known vulnerability
                       ${CHECK_EXIT.outOfSupport} out of support: a pin's upstream support has ended
                     1 when the check itself fails
  --offline          with --check: no network; the caches only (the Debian indexes are
                     not read: that part is unknown)
  --advisories       re-pin the Go vulnerability database (golang.org/x/vulndb) to the
                     newest version the Go module proxy serves; nothing else changes

options:
  --definition FILE      appliance definition (default: appliance.yaml in the repository)
  --mirror URL           the Debian archive (default: the lock's, else http://deb.debian.org/debian)
  --security-mirror URL  the security archive (default: the lock's, else http://security.debian.org/debian-security)
  --snapshot URL         snapshot archive base (default: the lock's, else https://snapshot.debian.org/archive;
                         '' for none)`,
  async run(argv) {
    const { values, positionals } = parseCommandArgs(
      "lock",
      argv,
      {
        definition: { type: "string" },
        mirror: { type: "string" },
        "security-mirror": { type: "string" },
        snapshot: { type: "string" },
        update: { type: "boolean" },
        check: { type: "boolean" },
        offline: { type: "boolean" },
        advisories: { type: "boolean" },
      },
      true,
    );
    if (positionals.length > 0 && !values.update)
      throw new UserError(
        `lock: unexpected argument${positionals.length > 1 ? "s" : ""} ${positionals.join(" ")}`,
        "to re-pin single packages: icn-bootstrap lock --update NAME...",
      );
    if (values.check && (values.update || positionals.length > 0))
      throw new UserError("lock: --check does not go with --update", "run them one after the other");
    if (values.advisories && (values.check || values.update || positionals.length > 0))
      throw new UserError("lock: --advisories re-pins the vulnerability database only", "run it on its own, then 'icn-bootstrap lock --check'");
    if (values.offline && !values.check) throw new UserError("lock: --offline goes with --check only", "icn-bootstrap lock --check --offline");
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const lockPath = lockPathFor(definitionPath);
    const definition = await loadDefinition(definitionPath);
    if (values.advisories) return pinAdvisories(lockPath);
    if (values.check) return checkCommand(lockPath, definition, values.offline ?? false);
    await requireTools(["mmdebstrap", "apt-ftparchive", "gpgv"]);
    if (positionals.length > 0) return updateNamed(definition, lockPath, [...new Set(positionals)]);
    return resolveAll(definition, lockPath, { mirror: values.mirror, securityMirror: values["security-mirror"], snapshot: values.snapshot });
  },
};

async function resolveAll(
  definition: ApplianceDefinition,
  lockPath: string,
  opts: { mirror?: string; securityMirror?: string; snapshot?: string },
): Promise<void> {
  const previous = await loadPreviousLock(lockPath);
  const resolution = await readArchives(sourcesFor(definition, previous, opts));
  const debian = await resolveRootfs(definition, resolution, stagesDir());
  let lock: LockFile = {
    version: LOCK_VERSION,
    debian,
    artifacts: previous?.artifacts ?? {},
    ...(previous?.lock?.advisories ? { advisories: previous.lock.advisories } : {}),
  };
  const images = await resolveImageSets(definition, lock, lockPath, resolution, stagesDir());
  // What was pinned before: files (this format) or versions only (the old one), for the old -> new listing.
  const pinned = previous?.lock;
  const rootfsMoved = movedPackages(pinned?.debian.packages ?? versionRecords(previous?.versions.rootfs), debian.packages);
  console.log(`${lockPath}: root filesystem: ${Object.keys(debian.packages).length} packages pinned, ${rootfsMoved.length} moved`);
  for (const line of describeMoved(rootfsMoved)) console.log(`  ${line}`);
  const imagesMoved = printImageMoves(
    {
      base: pinned?.images?.debian.base.packages ?? versionRecords(previous?.versions.base),
      toolchain: pinned?.images?.debian.toolchain.packages ?? versionRecords(previous?.versions.toolchain),
      os: osPackagesOf(pinned?.images),
    },
    images,
  );
  lock = { ...lock, images };
  // The images first: if they fail to build, neither the lock nor the lists change (the resolutions stay cached).
  if (imagesMoved) {
    log("lock", "the images' packages moved: rebuilding the images to pin their digests");
    await recordImageDigests(definition, lock, lockPath);
  }
  await saveLock(lockPath, lock);
  console.log(
    `${lockPath}: written (index dates: ${Object.entries(debian.indexes)
      .map(([s, d]) => `${s} ${d}`)
      .join("; ")})`,
  );
}

/**
 * Packages the definition no longer lists leave the root filesystem's pins with what only
 * they needed (apt installs the rest from the pinned files; what it did not install goes);
 * every other pin stays as it is. The smaller set is installed once before the lock is written.
 */
async function dropPackages(definition: ApplianceDefinition, lock: LockFile, lockPath: string, names: string[]): Promise<void> {
  const requested = lock.debian.requested.filter((name) => !names.includes(name));
  log("lock", `installing the root filesystem's set without ${names.join(", ")} from the pinned files`);
  const kept = await pinsStillNeeded(definition, { ...lock.debian, requested });
  const updated: LockFile = { ...lock, debian: { ...lock.debian, requested, packages: kept } };
  const gone = movedPackages(lock.debian.packages, kept);
  for (const line of describeMoved(gone)) console.log(`rootfs: ${line}`);
  await runStage(rootfsStage, { definition, lock: updated.debian }, stagesDir());
  await saveLock(lockPath, updated);
  console.log(`${lockPath}: ${names.join(", ")} dropped with ${gone.length - names.filter((n) => n in lock.debian.packages).length} packages only they needed`);
}

/** A v1 lock's versions, shaped like pins for the old -> new listing. */
function versionRecords(versions: Record<string, string> | undefined): Record<string, { version: string }> {
  return Object.fromEntries(Object.entries(versions ?? {}).map(([name, version]) => [name, { version }]));
}

async function updateNamed(definition: ApplianceDefinition, lockPath: string, names: string[]): Promise<void> {
  const lock = await loadLock(lockPath);
  const wanted = requestedPackages(definition);
  const dropped = names.filter((name) => lock.debian.requested.includes(name) && !wanted.includes(name));
  if (dropped.length > 0) {
    if (dropped.length < names.length)
      throw new UserError(
        `lock --update: ${dropped.join(", ")} ${dropped.length > 1 ? "are" : "is"} no longer in the definition, ${names.filter((n) => !dropped.includes(n)).join(", ")} to be moved`,
        `drop first (icn-bootstrap lock --update ${dropped.join(" ")}), then move the rest`,
      );
    return dropPackages(definition, lock, lockPath, dropped);
  }
  const indexes = await readIndexes(lock.debian.archives, lock.debian);
  const sets = debianSets(lock);
  const updated: LockFile = structuredClone(lock);
  const target = Object.fromEntries(debianSets(updated).map((set) => [set.name, set.packages])) as Record<string, Record<string, PinnedPackage>> & {
    rootfs: Record<string, PinnedPackage>;
  };
  const moved: (Moved & { set: string })[] = [];
  for (const name of names) {
    const holders = sets.filter((s) => name in s.packages);
    const newToRootfs = requestedPackages(definition).includes(name) && !(name in target.rootfs);
    if (holders.length === 0 || newToRootfs) {
      if (!newToRootfs)
        throw new UserError(
          `lock --update: ${name} is neither pinned in ${lockPath} nor listed in the definition`,
          "to add a package, list it in the definition (debian.packages), then run 'icn-bootstrap lock --update NAME'",
        );
      for (const [pkg, pin] of Object.entries(await pinsToAdd(indexes, name, target.rootfs))) {
        target.rootfs[pkg] = pin;
        moved.push({ name: pkg, to: pin.version, suite: pin.suite, set: "rootfs" });
      }
      updated.debian.requested = [...new Set([...updated.debian.requested, name])].sort();
      continue;
    }
    const newest = await newestPin(indexes, name);
    if (!newest)
      throw new UserError(
        `lock --update: no suite of ${lock.debian.archives.map((a) => a.url).join(", ")} lists ${name} any more`,
        "run 'icn-bootstrap lock' to re-resolve the whole set",
      );
    const date = indexes.find((i) => i.suite === newest.suite)!.date;
    const pin: PinnedPackage = { ...newest, ...(date !== lock.debian.indexes[newest.suite] ? { date } : {}) };
    for (const holder of holders) {
      const old = holder.packages[name]!;
      if (old.sha256 === pin.sha256) continue;
      target[holder.name]![name] = pin;
      moved.push({ name, from: old.version, to: pin.version, suite: pin.suite, set: holder.name });
    }
  }
  if (moved.length === 0) {
    console.log(`${names.join(", ")}: already pinned at the newest version the indexes list; nothing changed`);
    return;
  }
  for (const m of moved) console.log(`${m.set}: ${describeMoved([m])[0]}`);
  // Prove the changed sets still install together before writing anything.
  await ensureLockedDebs(updated);
  const changedSets = new Set(moved.map((m) => m.set));
  try {
    if (changedSets.has("rootfs")) await runStage(rootfsStage, { definition, lock: updated.debian }, stagesDir());
  } catch (error) {
    throw new UserError(
      `the new version${moved.length > 1 ? "s" : ""} of ${names.join(", ")} do not install with the rest of the pinned set (the lock was not changed):\n  ${(error as Error).message}`,
      "run 'icn-bootstrap lock' to re-resolve the whole set, which takes the dependencies along",
    );
  }
  if (changedSets.has("base") || changedSets.has("toolchain")) {
    log("lock", "the images' packages moved: rebuilding the images to pin their digests");
    await recordImageDigests(definition, updated, lockPath);
  }
  await saveLock(lockPath, updated);
  console.log(`${lockPath}: ${moved.length} pin${moved.length === 1 ? "" : "s"} changed`);
}

async function checkCommand(lockPath: string, definition: ApplianceDefinition, offline: boolean): Promise<number> {
  const lock = await loadLock(lockPath);
  let status = 0;
  console.log("Debian packages (the root filesystem and the container images' sets):");
  if (offline) {
    console.log("  not checked: --offline, and the security archive's index is read from the network");
    status |= CHECK_EXIT.unknown;
  } else {
    await requireTools(["gpgv"]);
    const indexes = await readIndexes(lock.debian.archives, lock.debian);
    const age = await checkLock(lock, indexes);
    for (const line of describeAge(age)) console.log(line ? `  ${line}` : line);
    status |= exitStatus(age);
  }
  const { baseDir } = await loadArtifacts(lockPath);
  const today = new Date().toISOString().slice(0, 10);
  const components = await checkComponents({ lock, baseDir, definition, offline, today });
  console.log("");
  for (const line of components.lines) console.log(line);
  console.log("");
  const lines = describeFindings(components.findings);
  for (const line of lines) console.log(line);
  status |= findingsExit(components.findings);
  console.log(lines.length === 0 ? "every component: fine" : "");
  console.log(`exit status ${status}: ${describeStatus(status)}`);
  return status;
}

async function pinAdvisories(lockPath: string): Promise<void> {
  const lock = await loadLock(lockPath);
  const before = lock.advisories?.goVulndb;
  const pin = await newestGoVulndb(new ContentStore());
  if (before?.sha256 === pin.sha256) {
    console.log(`${VULNDB_MODULE}: already pinned at ${pin.version} (${pin.time}), the newest the proxy serves`);
    return;
  }
  await saveLock(lockPath, { ...lock, advisories: { ...lock.advisories, goVulndb: pin } });
  console.log(`${VULNDB_MODULE}: ${before ? `${before.version} -> ` : ""}${pin.version} (reports up to ${pin.time})`);
  console.log(`${lockPath}: written`);
}
