/**
 * The appliance's file server (port 8080) as a stranger on the site network meets it: the
 * shipped overlays/etc/nginx/conf.d/icn-bootstrap-files.conf run by the real nginx, with
 * only its paths and port moved (its workers run as root here: the test's scratch directory
 * is private; on the appliance www-data, which can read the registry's htpasswd). It
 * serves exact paths, lists nothing, and follows no symlink that something with write
 * access to the published tree (the REST API's pod) placed there.
 */
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../builder/registry/server.js";
import { REPO } from "../helpers/cli.js";

let work: string;
let base: string;
const SECRET = "icn-push:$6$not-for-strangers";

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-file-server-"));
  const files = join(work, "files");
  const published = join(work, "published");
  await mkdir(join(files, "kubespray"), { recursive: true });
  await writeFile(join(files, "kubespray", "kubeadm.sha256"), "0".repeat(64) + "\n");
  await mkdir(join(files, "os-images"), { recursive: true });
  await writeFile(join(files, "os-images", "built.qcow2"), "built");
  await mkdir(join(published, "uploads", "tools"), { recursive: true });
  await mkdir(join(published, "os-images"), { recursive: true });
  await writeFile(join(published, "uploads", "tools", "tool.bin"), "uploaded");
  // What nginx's workers may read on the appliance but no stranger may: the registry's htpasswd (root:www-data 0640).
  const secrets = join(work, "etc");
  await mkdir(secrets);
  await writeFile(join(secrets, "icn-registry.htpasswd"), SECRET);
  await symlink(join(secrets, "icn-registry.htpasswd"), join(published, "uploads", "tools", "innocent.txt"));
  await symlink(secrets, join(published, "uploads", "etc"));
  await symlink(join(secrets, "icn-registry.htpasswd"), join(published, "os-images", "node.qcow2"));

  const port = await freePort();
  const shipped = await readFile(join(REPO, "overlays/etc/nginx/conf.d/icn-bootstrap-files.conf"), "utf8");
  const site = shipped
    .replaceAll("/srv/icn-bootstrap/files", files)
    .replaceAll("/var/lib/icn-bootstrap/bpa-api/published", published)
    .replace("listen 8080 default_server;", `listen 127.0.0.1:${port} default_server;`)
    .replace("listen [::]:8080 default_server;", "");
  const active = site
    .split("\n")
    .filter((l) => !l.trimStart().startsWith("#"))
    .join("\n");
  if (/\/srv\/|\/var\/lib\/|listen 8080/.test(active))
    throw new Error("the shipped file server configuration changed shape: update test/integration/file-server.test.ts");
  await writeFile(join(work, "site.conf"), site);
  await writeFile(
    join(work, "nginx.conf"),
    `user root;\nworker_processes 1;\npid ${work}/nginx.pid;\nerror_log ${work}/error.log;\nevents {}\nhttp {\n  access_log off;\n  include ${work}/site.conf;\n}\n`,
  );
  await execa("nginx", ["-p", work, "-c", join(work, "nginx.conf")]);
  base = `http://127.0.0.1:${port}`;
});

afterAll(async () => {
  if (work) {
    await execa("nginx", ["-p", work, "-c", join(work, "nginx.conf"), "-s", "stop"], { reject: false });
    await rm(work, { recursive: true, force: true });
  }
});

async function get(path: string): Promise<{ status: number; body: string }> {
  const response = await fetch(base + path);
  return { status: response.status, body: await response.text() };
}

describe("the file server on the site network", () => {
  it("serves exact paths: kubespray's files, published uploads, built and published OS images", async () => {
    expect(await get("/kubespray/kubeadm.sha256")).toEqual({ status: 200, body: "0".repeat(64) + "\n" });
    expect(await get("/uploads/tools/tool.bin")).toEqual({ status: 200, body: "uploaded" });
    expect(await get("/os-images/built.qcow2")).toEqual({ status: 200, body: "built" });
  });

  it("lists no directory: not the root, not the uploads, not the OS images", async () => {
    for (const path of ["/", "/kubespray/", "/uploads/", "/uploads/tools/", "/os-images/"]) {
      const { status, body } = await get(path);
      expect(status, path).toBeGreaterThanOrEqual(400);
      expect(body, path).not.toMatch(/tool\.bin|kubeadm|Index of/);
    }
  });

  it("follows no symlink placed in the published tree (a file, a directory, an OS image's name)", async () => {
    for (const path of ["/uploads/tools/innocent.txt", "/uploads/etc/icn-registry.htpasswd", "/os-images/node.qcow2"]) {
      const { status, body } = await get(path);
      expect(status, path).toBeGreaterThanOrEqual(400);
      expect(body, path).not.toContain(SECRET);
    }
  });
});
