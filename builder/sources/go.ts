import { execa } from "execa";
import { UserError } from "../errors.js";
import { goBuildCache, withGoBuildCache } from "./go-cache.js";

/** The Go toolchain the builder uses: `$ICN_BOOTSTRAP_GO`, else `go` on PATH. */
export function goBinary(): string {
  return process.env.ICN_BOOTSTRAP_GO || "go";
}

export interface GoToolchain {
  bin: string;
  /** As `go env GOVERSION` prints it, e.g. "go1.26.8". */
  version: string;
  goos: string;
  goarch: string;
}

export interface GoRunOptions {
  cwd?: string;
  /** Extra environment; GOFLAGS given here is kept and -buildvcs=false added. */
  env?: Record<string, string | undefined>;
  /** Names the artifact in error messages. */
  what: string;
}

/**
 * The environment every go command of the builder runs with: no cgo (static
 * binaries), no automatic toolchain switching (the version check is ours, with a
 * clear message), no VCS stamping (module zips carry no VCS data anyway), the builder's
 * own compile cache unless GOCACHE is set (go-cache.ts).
 */
export function goEnv(extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  const goflags = [extra.GOFLAGS ?? process.env.GOFLAGS ?? "", "-buildvcs=false"].join(" ").trim();
  return { ...process.env, CGO_ENABLED: "0", GOTOOLCHAIN: "local", GOCACHE: goBuildCache().dir, ...extra, GOFLAGS: goflags };
}

export async function goToolchain(opts: { env?: Record<string, string | undefined>; what?: string } = {}): Promise<GoToolchain> {
  const bin = goBinary();
  const result = await execa(bin, ["env", "-json", "GOVERSION", "GOOS", "GOARCH"], { env: goEnv(opts.env), reject: false, extendEnv: false });
  if (result.failed) {
    const reason = result.exitCode === undefined ? "cannot be run" : `failed: ${String(result.stderr).trim()}`;
    throw new UserError(
      `${opts.what ? `${opts.what}: ` : ""}the Go toolchain '${bin}' ${reason}`,
      "install Go (see scripts/setup-host.sh; the pinned modules state the minimum version in go/<group>/go.mod) or point ICN_BOOTSTRAP_GO at a go binary",
    );
  }
  const env = JSON.parse(String(result.stdout)) as { GOVERSION: string; GOOS: string; GOARCH: string };
  return { bin, version: env.GOVERSION, goos: env.GOOS, goarch: env.GOARCH };
}

/** "go1.26.8", "1.26.0", "1.26", "go1.27rc1" -> [1, 26, 8] etc. (pre-release suffixes sort below the release). */
export function parseGoVersion(version: string): number[] {
  const match = /^(?:go)?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:(rc|beta)(\d+))?/.exec(version.trim());
  if (!match) throw new Error(`not a Go version: ${version}`);
  const [, major, minor, patch, pre, preNum] = match;
  // A pre-release sorts below .0 of the same minor: 1.27rc1 -> [1, 27, -1, 1].
  return pre ? [Number(major), Number(minor ?? 0), -1, Number(preNum)] : [Number(major), Number(minor ?? 0), Number(patch ?? 0), 0];
}

export function compareGoVersions(a: string, b: string): number {
  const pa = parseGoVersion(a);
  const pb = parseGoVersion(b);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/** The `go` directive of a go.mod file. */
export function goDirective(goMod: string): string | undefined {
  return /^go\s+(\S+)\s*$/m.exec(goMod)?.[1];
}

/** The version a go.mod `require`s a module at (single-line or block form). */
export function requiredVersion(goMod: string, module: string): string | undefined {
  const escaped = module.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`^(?:require\\s+|\\s+)${escaped}\\s+(v\\S+)`, "m").exec(goMod)?.[1];
}

/** Refuses to start a build the toolchain cannot do, naming both versions and the fix. */
export function checkGoVersion(toolchain: GoToolchain, need: string | undefined, what: string, goModPath: string): void {
  if (!need) return;
  if (compareGoVersions(toolchain.version, need) < 0) {
    throw new UserError(
      `${what}: ${goModPath} needs Go ${need} or newer, but '${toolchain.bin}' is ${toolchain.version}`,
      `install Go ${need} or newer and put it first on PATH (or point ICN_BOOTSTRAP_GO at it); the Go module proxy also serves toolchains: 'GOTOOLCHAIN=go${need} go version'`,
    );
  }
}

/** Runs a go command; a failure becomes a UserError that names the artifact and the likely fix. */
export async function runGo(args: string[], opts: GoRunOptions): Promise<string> {
  const result = await runGoRaw(args, opts);
  if (!result.ok) throw classifyGoFailure(result.all, opts.what, `go ${args.join(" ")}`, result.exitCode);
  return result.stdout;
}

/** Runs a go command and returns its output whether or not it failed. */
export async function runGoRaw(args: string[], opts: Omit<GoRunOptions, "what">): Promise<{ ok: boolean; stdout: string; all: string; exitCode?: number }> {
  const result = await withGoBuildCache(() => execa(goBinary(), args, { cwd: opts.cwd, env: goEnv(opts.env), extendEnv: false, reject: false, all: true }));
  if (result.exitCode === undefined && result.failed) {
    throw new UserError(
      `the Go toolchain '${goBinary()}' cannot be run (${result.shortMessage})`,
      "install Go (scripts/setup-host.sh) or point ICN_BOOTSTRAP_GO at a go binary",
    );
  }
  return { ok: !result.failed, stdout: String(result.stdout ?? ""), all: String(result.all ?? result.stderr ?? ""), exitCode: result.exitCode };
}

export function classifyGoFailure(output: string, what: string, command: string, exitCode?: number): UserError {
  const lines = output.trimEnd().split("\n");
  const tail = lines.slice(-12).join("\n    ");
  const find = (re: RegExp) => lines.find((l) => re.test(l))?.trim();
  const lockFix =
    "pin a published version: fix it in appliance.lock.yaml (or pass it with --kubernetes) and run 'icn-bootstrap lock-artifacts', which regenerates go/<group>/go.mod and go.sum; 'go list -m -versions MODULE' lists the versions";

  const missing = find(
    /unknown revision|invalid version|no matching versions|not available|404 Not Found|410 Gone|no such host|cannot find module providing|reading \S+: no such file or directory/,
  );
  if (missing) {
    const detail = lines
      .map((l) => l.trim())
      .filter((l) => l && !/^go: downloading /.test(l))
      .join(" / ");
    return new UserError(`${what}: the Go module version cannot be found: ${detail.length > 400 ? `${detail.slice(0, 400)}…` : detail}`, lockFix);
  }
  const tooOld = /requires go >= (\S+)/.exec(output);
  if (tooOld) {
    return new UserError(
      `${what}: the module needs Go ${tooOld[1]}: ${find(/requires go >=/)}`,
      `install Go ${tooOld[1]} or newer and put it first on PATH (or point ICN_BOOTSTRAP_GO at it)`,
    );
  }
  const sum = find(/missing go\.sum entry|checksum mismatch|SECURITY ERROR|verifying .*: /);
  if (sum) {
    return new UserError(
      `${what}: module verification against the committed go.sum failed: ${sum}`,
      "a checksum mismatch means the downloaded module differs from the one pinned: check GOPROXY; a missing entry means go.sum is stale: run 'icn-bootstrap lock-artifacts'",
    );
  }
  const stale = find(/updates to go\.mod needed|go: inconsistent vendoring|no required module provides package/);
  if (stale)
    return new UserError(
      `${what}: the wrapper module is out of date: ${stale}`,
      "run 'icn-bootstrap lock-artifacts' to regenerate go/<group>/go.mod and go.sum from the pinned version",
    );
  return new UserError(
    `${what}: '${command}' failed (exit code ${exitCode ?? "?"}):\n    ${tail}`,
    "read the Go output above; rerun with the same command inside the wrapper module to debug",
  );
}
