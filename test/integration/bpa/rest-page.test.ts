/**
 * The status page in a real headless browser (Debian's Chromium): the page served by the
 * API over TLS (the test's certificate pinned by its public key, nothing else trusted),
 * given a viewer's token in the URL fragment, shows Provisionings, hosts and uploads read
 * through the API; the screenshot shows the header and the green and red state badges.
 * Without a token it asks for one and shows no data. BPA_PAGE_SCREENSHOT=FILE keeps the
 * screenshot.
 */
import { execFileSync } from "node:child_process";
import { copyFile, readFile } from "node:fs/promises";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mergePatch } from "../../../bpa/runtime/kube.js";
import type { RunningApi } from "../../../bpa/rest/main.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { countColor, decodePng } from "../../helpers/png.js";
import { applyCrds, clients, createHost, createProvisioning, kubeConfig } from "../../helpers/operator-suite.js";
import { ApiClient, startApiFixture, type ApiFixture, tokenFor, type TestTls } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => {
  try {
    execFileSync(p, ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
});

describe("the status page in Chromium", () => {
  let fixture: ApiFixture;
  let ns: string;
  let work: string;
  let tls: TestTls;
  let api: RunningApi;
  let url: string;
  let viewerToken: string;
  let spki: string;

  beforeAll(async () => {
    if (!chromium) throw new Error("chromium is not installed: run scripts/setup-host.sh (as root) or apt-get install chromium");
    await applyCrds(kc);
    fixture = await startApiFixture(kc, c, "rest-page");
    ({ ns, work, tls, api } = fixture);
    url = `https://127.0.0.1:${api.port}/`;
    viewerToken = await tokenFor(c, ns, "bpa-api-viewer");
    const uploader = new ApiClient(url, tls.ca, await tokenFor(c, ns, "bpa-api-uploader"));
    expect((await uploader.upload("file", "tools/helm-v3.19.0.tar.gz", randomBytes(4096))).status).toBe(200);
    expect((await uploader.upload("os-image", "bad-image.qcow2", randomBytes(4096), "0".repeat(64))).status).toBe(422);
    await createHost(c, ns, bmh({ name: "rack1-node1", cpu: 32, ram: 65536, ip: "10.20.0.5" }));
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    for (const [name, phase, ready] of [
      ["site-ready", "Ready", "True"],
      ["site-broken", "Failed", "False"],
    ] as const) {
      await createProvisioning(c, ns, { metadata: { name }, spec: { master: { cpu: 4, memory: "4Gi" } } });
      await c.custom.patchNamespacedCustomObjectStatus(
        {
          group: "bpa.akraino.org",
          version: "v1alpha1",
          namespace: ns,
          plural: "provisionings",
          name,
          body: { status: { phase, conditions: [{ type: "Ready", status: ready, reason: phase, message: phase, lastTransitionTime: now }] } },
        },
        mergePatch,
      );
    }
    spki = execFileSync("sh", [
      "-c",
      `openssl x509 -in '${tls.certFile}' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64`,
    ])
      .toString()
      .trim();
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  const browse = (extra: string[], target: string) =>
    execa(
      chromium!,
      [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        `--user-data-dir=${join(work, `profile-${randomBytes(4).toString("hex")}`)}`,
        `--ignore-certificate-errors-spki-list=${spki}`,
        "--virtual-time-budget=15000",
        "--window-size=1280,900",
        ...extra,
        target,
      ],
      {
        timeout: 120_000,
        reject: false,
      },
    );

  it("shows Provisionings, hosts and uploads from the API, and the screenshot has the header and the state colours", async () => {
    const dom = await browse(["--dump-dom"], `${url}#token=${viewerToken}`);
    expect(dom.exitCode, dom.stderr.slice(-2000)).toBe(0);
    const html = dom.stdout;
    expect(html).toContain(`${ns}/site-ready`);
    expect(html).toContain(`${ns}/site-broken`);
    expect(html).toContain(`${ns}/rack1-node1`);
    expect(html).toContain("tools/helm-v3.19.0.tar.gz");
    expect(html).toContain("sha256 mismatch");
    expect(html).toMatch(/<span class="state good">Ready<\/span>/);
    expect(html).toMatch(/<span class="state bad">Failed<\/span>/);
    expect(html).toMatch(/<span class="state bad">rejected<\/span>/);
    expect(html).toMatch(/<section id="login" hidden/);
    expect(html).not.toContain(viewerToken); // the fragment is removed from the address bar

    const shot = join(work, "page.png");
    const run = await browse([`--screenshot=${shot}`], `${url}#token=${viewerToken}`);
    expect(run.exitCode, run.stderr.slice(-2000)).toBe(0);
    if (process.env.BPA_PAGE_SCREENSHOT) await copyFile(shot, process.env.BPA_PAGE_SCREENSHOT); // to look at it
    const image = decodePng(await readFile(shot));
    expect([image.width, image.height]).toEqual([1280, 900]);
    expect(countColor(image, "#1f3a5f")).toBeGreaterThan(1280 * 30); // the header bar
    expect(countColor(image, "#1e9e4a")).toBeGreaterThan(200); // green badges: Ready, True, published, provisioned
    expect(countColor(image, "#c62828")).toBeGreaterThan(200); // red badges: Failed, False, rejected
  }, 180_000);

  it("without a token it asks for one and shows no data", async () => {
    const dom = await browse(["--dump-dom"], url);
    expect(dom.exitCode).toBe(0);
    expect(dom.stdout).not.toMatch(/<section id="login" hidden/);
    expect(dom.stdout).toContain("kubectl -n bpa-system create token bpa-api-viewer");
    expect(dom.stdout).not.toContain("site-ready");
    expect(dom.stdout).not.toContain("helm-v3.19.0");
  }, 180_000);
});
