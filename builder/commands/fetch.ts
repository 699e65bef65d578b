import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { cacheRoot } from "../cache.js";
import { UserError } from "../errors.js";
import { DEFAULT_LOCK } from "../lockfile.js";
import { formatBytes, formatSeconds, log } from "../log.js";
import { ensureArtifacts, type ArtifactResult } from "../sources/index.js";
import { Profile } from "../sources/schema.js";
import type { Command } from "./command.js";

const usage = `usage: icn-bootstrap fetch [--only NAME,...] [--profile default|upstream] [--lock FILE]

Builds (source gomod) or downloads (source url) every artifact pinned in the lock
file into the content-addressed cache, verifying each one, then prints what the
cache has. A second run is all cache hits; a corrupted cache entry is detected,
reported and rebuilt.

options:
  --only NAME,...   only these binaries (or lock entries, e.g. 'kubernetes')
  --profile NAME    'default' builds from Go modules; 'upstream' uses the lock's
                    url entries (official release binaries) where it has them
  --lock FILE       the lock file (default: appliance.lock.yaml)

cache: ${cacheRoot()} (set ICN_BOOTSTRAP_CACHE to move it)`;

export const fetchCommand: Command = {
  name: "fetch",
  summary: "build or download every pinned artifact (Kubernetes, etcd, CoreDNS) into the cache",
  usage,
  async run(argv) {
    const { values } = parseCommandArgs("fetch", argv, {
      only: { type: "string" },
      profile: { type: "string", default: "default" },
      lock: { type: "string" },
    });
    const profile = Profile.safeParse(values.profile);
    if (!profile.success) throw new UserError(`fetch: unknown profile '${values.profile}'`, "use --profile default or --profile upstream");
    const only = values.only
      ?.split(",")
      .map((s) => s.trim())
      .filter(Boolean);
    const started = Date.now();
    const results = await ensureArtifacts({ lockPath: values.lock ? resolve(values.lock) : DEFAULT_LOCK, only, profile: profile.data });
    console.log(formatTable(results));
    const built = results.filter((r) => r.status !== "cached").length;
    log(
      "fetch",
      `${results.length} artifacts, ${results.length - built} from the cache, ${built} built or downloaded, in ${formatSeconds(Date.now() - started)}`,
    );
    for (const r of results.filter((r) => r.repaired)) log("fetch", `${r.name}: repaired (${r.repaired})`);
  },
};

export function formatTable(results: ArtifactResult[]): string {
  const rows = [
    ["NAME", "SOURCE", "VERSION", "SHA256", "SIZE", "STATUS"],
    ...results.map((r) => [
      r.name,
      r.source,
      r.version,
      r.sha256.slice(0, 12),
      formatBytes(r.size),
      r.status === "cached" ? "cached" : `${r.status}${r.repaired ? " (repaired)" : ""} ${formatSeconds(r.seconds * 1000)}`,
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}
