/**
 * SOURCE_DATE_EPOCH of an image build: the newest Debian index date the lock file was
 * made against (`debian.indexes`, and the per-package dates `lock --update` records).
 * It changes only when the Debian pins change, not with unrelated commits, and no
 * pinned package can be newer than it, so clamping every mtime to it keeps the files'
 * own times from the packages. Every tree the build writes is clamped to it.
 */
import { UserError } from "./errors.js";
import type { DebianLock } from "./lockfile.js";

export function sourceDateEpoch(lock: Pick<DebianLock, "indexes" | "packages">): number {
  const dates = [
    ...Object.entries(lock.indexes ?? {}).map(([suite, date]) => ({ what: `debian.indexes.${suite}`, date })),
    ...Object.entries(lock.packages)
      .filter(([, pin]) => pin.date)
      .map(([name, pin]) => ({ what: `debian.packages.${name}.date`, date: pin.date! })),
  ];
  if (dates.length === 0)
    throw new UserError(
      "the lock file records no Debian index date (debian.indexes), so the build has no SOURCE_DATE_EPOCH",
      "run 'icn-bootstrap lock' to re-pin; it records each suite's index date",
    );
  let newest = 0;
  for (const { what, date } of dates) {
    const ms = Date.parse(date);
    if (!Number.isFinite(ms)) throw new UserError(`the lock file's ${what} is not a date: ${JSON.stringify(date)}`, "run 'icn-bootstrap lock' to re-pin");
    newest = Math.max(newest, Math.floor(ms / 1000));
  }
  return newest;
}

/**
 * What the build writes must not depend on the host's umask, time zone or locale (issue 34):
 * this process and every command it runs (mmdebstrap, tar, mkfs, mtools, pip, …) get umask
 * 022, TZ=UTC and LC_ALL=C.UTF-8. Node's own collation is taken from the locale at startup,
 * and localeCompare() without a locale (ours, and the CycloneDX library's sorting of the
 * SBOM) follows it: "ch" sorts after "h" in Czech. It is pinned to English here.
 */
export function pinHostEnvironment(): void {
  process.umask(0o022);
  process.env.TZ = "UTC";
  process.env.LC_ALL = "C.UTF-8";
  const localeCompare = String.prototype.localeCompare;
  String.prototype.localeCompare = function (this: string, that: string, locales?: string | string[], options?: Intl.CollatorOptions): number {
    return localeCompare.call(this, that, locales ?? "en", options);
  };
}
