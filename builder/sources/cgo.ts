/**
 * cgo with the pinned Debian toolchain: Go programs with C parts (runc, flanneld) are
 * compiled and linked by the gcc, libc and libseccomp of the lock file's
 * images.debian.toolchain set (the cgo-toolchain stage), never the build host's, so their
 * bytes do not depend on the machine that builds them. `go build` gets CC and PKG_CONFIG
 * wrappers that run the tool inside that root with bubblewrap, the host's Go toolchain,
 * module and build caches and temporary files bound at their own paths.
 */
import { chmod, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { cacheRoot } from "../cache.js";
import { UserError } from "../errors.js";
import { requireTools } from "../host-tools.js";
import { TOOLCHAIN_PACKAGES } from "../images/lock.js";
import { loadLock } from "../lockfile.js";
import { runStage, stagesDir } from "../stage.js";
import { CGO_ROOT, cgoToolchainStage, debianSource } from "../stages/image-debian.js";
import { runGo } from "./go.js";

export interface CgoToolchain {
  root: string;
  /** The stage's cache key: stands for the pinned packages (part of each binary's key). */
  key: string;
}

export async function cgoToolchain(lockPath: string): Promise<CgoToolchain> {
  await requireTools(["bwrap", "mmdebstrap"]);
  const lock = await loadLock(lockPath);
  const pins = lock.images?.debian.toolchain;
  const missing = TOOLCHAIN_PACKAGES.filter((p) => !pins?.requested.includes(p));
  if (!pins || missing.length > 0) {
    throw new UserError(
      `${lockPath}: the cgo toolchain (images.debian.toolchain) does not pin ${missing.join(", ") || "anything"}`,
      "run 'icn-bootstrap lock-images --keep-packages' to pin it",
    );
  }
  const result = await runStage(cgoToolchainStage, { debian: debianSource(lock), set: pins }, stagesDir());
  return { root: join(result.dir, CGO_ROOT), key: result.key };
}

/** The environment that makes `go build` use the toolchain: CGO_ENABLED=1, CC and PKG_CONFIG wrappers written to `dir`. */
export async function cgoEnv(toolchain: CgoToolchain, dir: string, goEnv?: Record<string, string | undefined>): Promise<Record<string, string>> {
  const goroot = (await runGo(["env", "GOROOT"], { env: goEnv, what: "cgo" })).trim();
  const binds = [...new Set(["/tmp", homedir(), cacheRoot(), process.env.GOMODCACHE, process.env.GOCACHE].filter((p): p is string => Boolean(p)))];
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const wrapper = (tool: string) =>
    [
      "#!/bin/sh",
      `# ${tool} of the pinned Debian toolchain (icn-bootstrap, builder/sources/cgo.ts)`,
      `exec bwrap --bind ${quote(toolchain.root)} / --dev /dev --proc /proc --ro-bind ${quote(goroot)} ${quote(goroot)} ${binds.map((b) => `--bind-try ${quote(b)} ${quote(b)}`).join(" ")} --bind-try "$PWD" "$PWD" --chdir "$PWD" --setenv PATH /usr/bin:/bin ${tool} "$@"`,
      "",
    ].join("\n");
  const cc = join(dir, "cgo-cc");
  const pkgConfig = join(dir, "cgo-pkg-config");
  await writeFile(cc, wrapper("gcc"));
  await writeFile(pkgConfig, wrapper("pkg-config"));
  await chmod(cc, 0o755);
  await chmod(pkgConfig, 0o755);
  return { CGO_ENABLED: "1", CC: cc, PKG_CONFIG: pkgConfig };
}
