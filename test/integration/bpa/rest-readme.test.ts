/**
 * docs/rest-api.md's curl example, run as written (only the appliance's address, the CA
 * download and kubectl replaced by the test's), once straight through and once with the
 * first PATCH cut after a second (curl --max-time): its resume step must finish the upload
 * without sending a byte twice.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { RunningApi } from "../../../bpa/rest/main.js";
import type { UploadRecord } from "../../../common/uploads.js";
import { REPO } from "../../helpers/cli.js";
import { clients, kubeConfig } from "../../helpers/operator-suite.js";
import { ApiClient, startApiFixture, type ApiFixture, sha256, tokenFor, type TestTls } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
let fixture: ApiFixture;
let ns: string;
let work: string;
let tls: TestTls;
let api: RunningApi;
let token: string;
let example: string;

beforeAll(async () => {
  const readme = await readFile(join(REPO, "docs/rest-api.md"), "utf8");
  const match = /<!-- test\/integration\/bpa\/rest-readme\.test\.ts runs this block -->\n```sh\n([\s\S]*?)```/.exec(readme);
  if (!match) throw new Error("docs/rest-api.md lost its tested curl example");
  example = match[1]!;
  fixture = await startApiFixture(kc, c, "rest-readme");
  ({ ns, work, tls, api } = fixture);
  token = await tokenFor(c, ns, "bpa-api-uploader");
  await writeFile(join(work, "ca.crt"), tls.ca);
}, 120_000);

afterAll(async () => {
  await fixture?.stop();
});

function adapt(script: string, cutFirstPatch: boolean): string {
  const lines = script.split("\n");
  const out = lines
    .map((line) => (line.startsWith("API=") ? `API=https://127.0.0.1:${api.port}` : line))
    .filter((line) => !line.includes("-o ca.crt http://"))
    .map((line) => (line.startsWith("TOKEN=$(kubectl") ? `TOKEN=${token}` : line));
  let text = out.join("\n");
  if (cutFirstPatch) {
    const step2 = '  -T "$FILE" "$API$LOCATION"';
    expect(text).toContain(step2);
    text = text.replace(step2, '  --limit-rate 4M --max-time 1 -T "$FILE" "$API$LOCATION"');
  }
  expect(text).not.toMatch(/192\.168\.1\.10|kubectl/);
  return text;
}

for (const cut of [false, true]) {
  it(
    cut ? "the example's resume step finishes an upload whose PATCH was cut" : "the example uploads a file as written",
    async () => {
      const dir = await mkdtemp(join(work, "run-"));
      const data = randomBytes(cut ? 12 * 1024 * 1024 : 1024 * 1024);
      await writeFile(join(dir, "helm-v3.19.0-linux-amd64.tar.gz"), data);
      await writeFile(join(dir, "ca.crt"), tls.ca);
      const viewer = new ApiClient(`https://127.0.0.1:${api.port}`, tls.ca, await tokenFor(c, ns, "bpa-api-viewer"));
      const before = Date.now();
      const run = await execa("bash", ["-c", adapt(example, cut)], { cwd: dir, reject: false });
      const list = (await viewer.json<{ items: UploadRecord[] }>("/api/v1/uploads")).body.items;
      const mine = list.filter((u) => u.name === "tools/helm-v3.19.0-linux-amd64.tar.gz" && Date.parse(u.finished ?? "0") >= before);
      expect(mine, `${run.stdout}\n${run.stderr}`).toHaveLength(1);
      expect(mine[0]).toMatchObject({ state: "published", size: data.length, digest: `sha256:${sha256(data)}`, bytesReceived: data.length });
      if (cut) expect(run.stderr).toMatch(/curl: \(28\)/); // the first PATCH was cut by its time limit
      expect(run.stdout).toContain('"state": "published"'); // the final listing
    },
    60_000,
  );
}
