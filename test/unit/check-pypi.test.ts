/**
 * lock --check's PyPI part against a toy PyPI JSON API on 127.0.0.1 (the real HTTP
 * boundary): a vulnerable release, a fine one, a newer patch release waiting, the kept
 * answers used offline and when PyPI is unreachable, and "unknown" with neither.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { answer } from "../../builder/check/answers.js";
import type { ComponentPin } from "../../builder/check/findings.js";
import { pypiVulnFindings } from "../../builder/check/pypi-vulns.js";
import { PYPI_LIST, pypiReleases, updateFinding } from "../../builder/check/updates.js";

const ANSWERS: Record<string, object> = {
  "/pypi/agent/10.2.0/json": {
    info: { name: "agent", version: "10.2.0" },
    vulnerabilities: [
      { id: "PYSEC-2099-1", aliases: ["CVE-2099-44918"], fixed_in: ["10.2.3", "11.0.1"], withdrawn: null },
      { id: "GHSA-aaaa-bbbb-cccc", aliases: ["CVE-2099-54423"], fixed_in: ["10.2.2"] },
      { id: "PYSEC-2099-9", aliases: [], fixed_in: ["10.2.1"], withdrawn: "2099-01-01T00:00:00Z" },
    ],
  },
  "/pypi/agent/json": {
    releases: {
      "10.1.0": [{}],
      "10.2.0": [{}],
      "10.2.3": [{ yanked: false }],
      "10.2.4": [{ yanked: true }],
      "10.3.0rc1": [{}],
      "10.2.5rc1": [{}],
      "11.0.1": [{}],
    },
  },
  // A mirror answering only the project's JSON: the vulnerabilities of its newest release.
  "/pypi/mirrored/json": {
    info: { name: "mirrored", version: "3.0.0" },
    vulnerabilities: [{ id: "PYSEC-2099-3", aliases: ["CVE-2099-0003"], fixed_in: ["3.0.1"] }],
    releases: { "2.9.0": [{}], "3.0.0": [{}] },
  },
  "/pypi/calm/2.0.0/json": { info: { name: "calm", version: "2.0.0" }, vulnerabilities: [] },
  "/pypi/calm/json": { releases: { "1.9.0": [{}], "2.0.0": [{}], "2.1.0": [{}] } },
};

const pin = (name: string, version: string): ComponentPin => ({
  key: `pypi:${name}`,
  component: `toy image: ${name}`,
  version,
  pin: `${name}==${version}`,
  move: (to) => `pin ${name}==${to ?? "X.Y.Z"}`,
});

let root: string;
let server: Server;
let pypi: string;
let requests: string[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-pypi-vulns-"));
  server = createServer((req, res) => {
    requests.push(req.url ?? "");
    if (req.url?.includes("refused")) return void res.writeHead(403).end("This module version is not available.");
    const body = ANSWERS[req.url ?? ""];
    res.writeHead(body ? 200 : 404, { "content-type": "application/json" });
    res.end(body ? JSON.stringify(body) : '{"message": "Not Found"}');
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  pypi = `http://127.0.0.1:${(server.address() as AddressInfo).port}/pypi`;
});

afterAll(async () => {
  await new Promise((done) => server.close(done));
  await rm(root, { recursive: true, force: true });
});

describe("PyPI pins", () => {
  it("a release PyPI lists vulnerabilities for is vulnerable: ids, CVEs, the version fixing all (withdrawn ones left out), the move", async () => {
    const dir = join(root, "a");
    const result = await pypiVulnFindings([pin("agent", "10.2.0"), pin("calm", "2.0.0")], { offline: false, dir, pypi });
    expect(result.findings).toEqual([
      {
        verdict: "vulnerable",
        component: "toy image: agent",
        pin: "agent==10.2.0",
        detail: "PYSEC-2099-1 (CVE-2099-44918), GHSA-aaaa-bbbb-cccc (CVE-2099-54423); fixed in 10.2.3",
        move: "pin agent==10.2.3",
      },
    ]);
    expect(result.cached).toBe(0);
  });

  it("a newer patch release on the pinned line is an update waiting (not yanked, not a pre-release, not another line)", async () => {
    const dir = join(root, "b");
    expect(updateFinding(pin("agent", "10.2.0"), await pypiReleases("agent", { offline: false, dir, pypi }), PYPI_LIST)).toMatchObject({
      verdict: "updates",
      detail: "10.2.3 is released on the same line (PyPI's release list)",
      move: "pin agent==10.2.3",
    });
    expect(updateFinding(pin("calm", "2.0.0"), await pypiReleases("calm", { offline: false, dir, pypi }), PYPI_LIST)).toBeUndefined();
  });

  it("offline, the kept answers are used and said to be from the cache; with none kept, unknown (never fine)", async () => {
    const dir = join(root, "c");
    await pypiVulnFindings([pin("agent", "10.2.0")], { offline: false, dir, pypi });
    requests = [];
    const offline = await pypiVulnFindings([pin("agent", "10.2.0")], { offline: true, dir, pypi });
    expect(requests).toEqual([]);
    expect(offline.cached).toBe(1);
    expect(offline.findings[0]!.verdict).toBe("vulnerable");
    expect(offline.findings[0]!.detail).toMatch(/fixed in 10\.2\.3 \(PyPI's answer of \d{4}-\d{2}-\d{2}\)$/);

    const none = await pypiVulnFindings([pin("calm", "2.0.0")], { offline: true, dir, pypi });
    expect(none.findings).toMatchObject([{ verdict: "unknown", detail: expect.stringMatching(/not reachable and this machine has no earlier answer/) }]);
    const releases = await pypiReleases("calm", { offline: true, dir, pypi });
    expect(updateFinding(pin("calm", "2.0.0"), releases, PYPI_LIST)).toMatchObject({ verdict: "unknown" });
    expect(requests).toEqual([]);
  });

  it("PyPI unreachable: the kept answer, said to be from the cache; a release PyPI does not have: unknown, naming it", async () => {
    const dir = join(root, "d");
    const alone = createServer((_req, res) => res.end(JSON.stringify(ANSWERS["/pypi/calm/2.0.0/json"])));
    await new Promise<void>((done) => alone.listen(0, "127.0.0.1", done));
    const url = `http://127.0.0.1:${(alone.address() as AddressInfo).port}/pypi/calm/2.0.0/json`;
    const fresh = await answer(url, { offline: false, dir });
    expect(fresh?.cached).toBe(false);
    await new Promise((done) => alone.close(done));
    const kept = await answer(url, { offline: false, dir });
    expect(kept).toMatchObject({ cached: true, status: 200, fetchedAt: fresh!.fetchedAt });
    expect(JSON.parse(kept!.body).vulnerabilities).toEqual([]);

    const missing = await pypiVulnFindings([pin("ghost", "0.0.1")], { offline: false, dir, pypi });
    expect(missing.findings).toMatchObject([
      { verdict: "unknown", detail: `PyPI has no release ghost 0.0.1 (HTTP 404 at ${pypi}/ghost/0.0.1/json): its vulnerabilities cannot be read` },
    ]);
  });

  it("a list the service refuses (HTTP 403) is unknown, naming the status; it is not kept", async () => {
    const dir = join(root, "f");
    const list = await pypiReleases("refused", { offline: false, dir, pypi });
    expect(list).toMatchObject({ status: 403, cached: false });
    expect(updateFinding(pin("refused", "1.0.0"), list, PYPI_LIST)).toMatchObject({
      verdict: "unknown",
      detail: "newer releases not known: PyPI's release list answered HTTP 403",
    });
    expect(await answer(`${pypi}/refused/json`, { offline: true, dir })).toBeUndefined();
  });

  it("a PyPI answering only the project's JSON: a pin at its newest release is read from it; an older one is unknown, saying why", async () => {
    const dir = join(root, "e");
    const result = await pypiVulnFindings([pin("mirrored", "3.0.0"), pin("mirrored", "2.9.0")], { offline: false, dir, pypi });
    expect(result.findings).toMatchObject([
      { verdict: "vulnerable", pin: "mirrored==3.0.0", detail: "PYSEC-2099-3 (CVE-2099-0003); fixed in 3.0.1", move: "pin mirrored==3.0.1" },
      {
        verdict: "unknown",
        pin: "mirrored==2.9.0",
        detail: `vulnerabilities not known: PyPI lists the release but answers HTTP 404 at ${pypi}/mirrored/2.9.0/json (this PyPI serves the vulnerabilities of the newest release, 3.0.0, only)`,
      },
    ]);
  });
});
