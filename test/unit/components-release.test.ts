/**
 * overlays/usr/lib/icn-bootstrap/components-release, one try at the components' Helm
 * release that icn-kubernetes retries: a release an earlier try left pending is repaired
 * before the next try (removed when it was being installed, rolled back when upgraded), so
 * a retry does not fail at once with "another operation is in progress". A fake `helm` on
 * PATH stands in for the real one and records its calls.
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const RELEASE = new URL("../../overlays/usr/lib/icn-bootstrap/components-release", import.meta.url).pathname;
let work: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-components-release-"));
  // helm status prints the release's status from $work/status; upgrade fails while $work/fail exists, leaving the release pending.
  await writeFile(
    join(work, "helm"),
    [
      "#!/bin/sh",
      `echo "$*" >> ${work}/calls`,
      'case "$1" in',
      `  status) [ -s ${work}/status ] || exit 1; printf '{"info":{"status":"%s"}}' "$(cat ${work}/status)" ;;`,
      `  uninstall) rm -f ${work}/status ;;`,
      `  rollback) echo deployed > ${work}/status ;;`,
      `  upgrade) if [ -e ${work}/fail ]; then echo "\${PENDING:-pending-install}" > ${work}/status; rm -f ${work}/fail; exit 1; fi; echo deployed > ${work}/status ;;`,
      "esac",
      "",
    ].join("\n"),
  );
  await chmod(join(work, "helm"), 0o755);
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

const run = (env: Record<string, string> = {}) =>
  execa(RELEASE, ["/usr/share/icn-bootstrap/chart.tgz", "/run/values.yaml"], { reject: false, env: { ...env, PATH: `${work}:${process.env.PATH}` } });
const calls = async () =>
  (await readFile(join(work, "calls"), "utf8"))
    .trim()
    .split("\n")
    .map((c) => c.split(" ")[0]);

describe("the components' release", () => {
  it("after a try cut off while installing, removes the pending release and installs", async () => {
    await writeFile(join(work, "fail"), "");
    expect((await run()).exitCode).toBe(1);
    const second = await run();
    expect(second.exitCode, second.all).toBe(0);
    expect(second.stdout).toContain("cut off while installing: removing it first");
    expect(await calls()).toEqual(["status", "upgrade", "status", "uninstall", "upgrade"]);
    expect(await readFile(join(work, "status"), "utf8")).toBe("deployed\n");
  });

  it("after a try cut off while upgrading, rolls back and upgrades; a deployed release is upgraded as it is", async () => {
    await rm(join(work, "calls"));
    await writeFile(join(work, "fail"), "");
    expect((await run({ PENDING: "pending-upgrade" })).exitCode).toBe(1);
    expect((await run()).exitCode).toBe(0);
    expect((await run()).exitCode).toBe(0);
    expect(await calls()).toEqual(["status", "upgrade", "status", "rollback", "upgrade", "status", "upgrade"]);
    const upgrade = (await readFile(join(work, "calls"), "utf8")).trim().split("\n").at(-1)!;
    expect(upgrade).toBe(
      "upgrade --install icn /usr/share/icn-bootstrap/chart.tgz --namespace default --values /run/values.yaml --take-ownership --force-conflicts --history-max 3 --timeout 30m --disable-openapi-validation",
    );
  });
});
