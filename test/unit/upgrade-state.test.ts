/**
 * overlays/usr/lib/icn-bootstrap/upgrade (icn-upgrade), the parts that need no booted
 * appliance: the GRUB environment block it writes is the one the build writes and GRUB's
 * slot selector reads; the registry tags each version ships are listed from a storage
 * tree; the running version's shipped files that the new slot lacks are carried into the
 * registry (and nothing the new slot or the pushed layer has is touched); a bad image
 * argument is refused naming the fix. The boot-time halves run in `npm run e2e:upgrade`.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grubenvBlock } from "../../builder/disk/grub.js";
import { withUpgradeModule } from "../helpers/upgrade-script.js";
import { parseDefinition } from "../../builder/definition.js";
import { BUILTIN_OVERLAYS, renderOverlayTemplate } from "../../builder/stages/overlays.js";

let work: string;
const py = withUpgradeModule;

async function tree(root: string, files: Record<string, string>): Promise<void> {
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(root, path, ".."), { recursive: true });
    await writeFile(join(root, path), content);
  }
}

const REPOS = "docker/registry/v2/repositories";
const BLOBS = "docker/registry/v2/blobs/sha256";

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-upgrade-state-"));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe("icn-upgrade", () => {
  it("writes the GRUB environment block byte for byte as the build does, and reads it back", async () => {
    const variables = { default_slot: "a", try_slot: "b" };
    const written = await py(`sys.stdout.write(u.grubenv_block(${JSON.stringify(variables)}).hex())`);
    expect(Buffer.from(written, "hex").equals(grubenvBlock(variables))).toBe(true);
    const read = await py(
      `print(json.dumps(u.parse_grubenv(bytes.fromhex(${JSON.stringify(grubenvBlock({ default_slot: "b", try_slot: "" }).toString("hex"))}))))`,
    );
    expect(JSON.parse(read)).toEqual({ default_slot: "b", try_slot: "" });
  });

  it("lists the tags a registry storage tree ships, nested repositories included", async () => {
    const storage = join(work, "shipped");
    await tree(storage, {
      [`${REPOS}/pause/_manifests/tags/3.10/current/link`]: "sha256:aaa",
      [`${REPOS}/metal3-io/baremetal-operator/_manifests/tags/v1/current/link`]: "sha256:bbb",
      [`${REPOS}/metal3-io/baremetal-operator/_layers/sha256/ccc/link`]: "sha256:ccc",
    });
    const tags = JSON.parse(await py(`print(json.dumps(u.shipped_tags(${JSON.stringify(storage)})))`));
    expect(tags).toEqual([
      ["metal3-io/baremetal-operator", "v1", "sha256:bbb"],
      ["pause", "3.10", "sha256:aaa"],
    ]);
  });

  it("carries the running version's shipped files that the new slot lacks, and nothing else", async () => {
    const running = join(work, "running");
    const next = join(work, "next");
    const registry = join(work, "registry");
    const pushed = join(work, "pushed");
    const old = {
      [`${REPOS}/bpa/_manifests/tags/1.0/current/link`]: "sha256:old",
      [`${BLOBS}/ol/old/data`]: "old image",
      [`${BLOBS}/sh/shared/data`]: "shared",
    };
    await tree(running, old);
    await tree(next, { [`${REPOS}/bpa/_manifests/tags/2.0/current/link`]: "sha256:new", [`${BLOBS}/sh/shared/data`]: "shared" });
    // The registry as it is seen while the old slot runs: its own tree (the overlay's lower layer).
    await tree(registry, old);
    await tree(pushed, { [`${BLOBS}/pu/pushed/data`]: "pushed" });
    await writeFile(join(registry, BLOBS, "sh/shared/data"), "must stay as it is");
    const carried = JSON.parse(
      await py(
        [
          `u.REGISTRY = ${JSON.stringify(registry)}`,
          `u.REGISTRY_PUSHED = ${JSON.stringify(pushed)}`,
          `u.run = lambda args, check=True, **kw: None`,
          `print(json.dumps(u.carry_shipped_content(${JSON.stringify(running)}, ${JSON.stringify(next)})))`,
        ].join("\n"),
      ),
    );
    expect(carried).toEqual([2, "sha256:old".length + "old image".length]);
    expect(await readFile(join(registry, BLOBS, "ol/old/data"), "utf8")).toBe("old image");
    expect(await readFile(join(registry, BLOBS, "sh/shared/data"), "utf8")).toBe("must stay as it is");
    const { stdout } = await execa("find", [registry, "-name", ".icn-carry-*"]);
    expect(stdout).toBe("");
  });

  it("gets the definition's trusted keys one PEM after another, and the health bound in seconds", async () => {
    const pem = (body: string) => `-----BEGIN PUBLIC KEY-----\n${body}\n-----END PUBLIC KEY-----\n`;
    const definition = parseDefinition(
      `name: t\ndebian:\n  suite: trixie\nupgrade:\n  trustedKeys: [${JSON.stringify(pem("AAAA"))}, ${JSON.stringify(pem("BBBB"))}]\n  healthTimeout: 45m\n`,
      "t.yaml",
    );
    const keys = await renderOverlayTemplate(join(BUILTIN_OVERLAYS, "etc/icn-bootstrap/upgrade/trusted-keys.pem.hbs"), definition);
    const env = await renderOverlayTemplate(join(BUILTIN_OVERLAYS, "etc/icn-bootstrap/appliance.env.hbs"), definition);
    expect(env).toMatch(/^ICN_UPGRADE_HEALTH_TIMEOUT_S=2700$/m);
    // The script splits them into a file per key (openssl reads only the first key of a file).
    const bundle = join(work, "trusted-keys.pem");
    await writeFile(bundle, keys);
    const files = JSON.parse(
      await py(
        `u.TRUSTED_KEYS = ${JSON.stringify(bundle)}\nu.WORK = ${JSON.stringify(join(work, "run"))}\nprint(json.dumps([open(p).read() for p in u.trusted_keys()]))`,
      ),
    );
    expect(files).toEqual([pem("AAAA"), pem("BBBB")]);
  });

  it("takes a REST API request once: copies the files out of the pod's reach (no symlink), then applies; a bad request is refused and recorded", async () => {
    const root = join(work, "request");
    const uploaded = join(root, "store", "appliance-images");
    const api = join(root, "store", "appliance-upgrade");
    await tree(uploaded, {
      "2026.12/icn-bootstrap.img": "image bytes",
      "2026.12/icn-bootstrap.report.json": "{}",
      "2026.12/icn-bootstrap.report.json.sigstore.json": "{}",
    });
    await mkdir(api, { recursive: true });
    const run = (request: unknown) =>
      writeFile(join(api, "request.json"), JSON.stringify(request)).then(() =>
        py(
          [
            `u.UPLOADED = ${JSON.stringify(uploaded)}`,
            `u.API_UPGRADE = ${JSON.stringify(api)}`,
            `u.STATE_DIR = ${JSON.stringify(join(root, "state"))}`,
            `u.STATE = ${JSON.stringify(join(root, "state", "state.json"))}`,
            `u.INCOMING = ${JSON.stringify(join(root, "state", "incoming"))}`,
            "u.say = lambda m: None",
            "u.event = lambda *a, **k: None",
            "seen = {}",
            "def fake_apply(args):",
            "    seen['image'] = open(args.image).read()",
            "    seen['report'] = args.report",
            "    seen['by'] = args.requested_by",
            "u.apply = fake_apply",
            "try:",
            "    u.request(None)",
            "except u.Refused as e:",
            "    seen['refused'] = str(e)",
            "print(json.dumps(seen))",
          ].join("\n"),
        ),
      );
    const taken = JSON.parse(await run({ image: "2026.12/icn-bootstrap.img", requestedBy: "ops" }));
    expect(taken).toEqual({ image: "image bytes", report: join(root, "state", "incoming", "icn-bootstrap.report.json"), by: "ops" });
    expect(await readdir(api)).not.toContain("request.json");
    expect(await readdir(join(root, "state"))).not.toContain("incoming");

    // The pod swapped the image for a link to a host file: refused, recorded, nothing read through it.
    await rm(join(uploaded, "2026.12/icn-bootstrap.img"));
    await symlink("/etc/hostname", join(uploaded, "2026.12/icn-bootstrap.img"));
    const linked = JSON.parse(await run({ image: "2026.12/icn-bootstrap.img", requestedBy: "ops" }));
    expect(linked.refused).toMatch(/the uploaded 2026\.12\/icn-bootstrap\.img cannot be read as a regular file/);
    expect(linked.image).toBeUndefined();
    const mirrored = JSON.parse(await readFile(join(api, "state.json"), "utf8"));
    expect(mirrored).toMatchObject({ phase: "refused", requestedBy: "ops" });
    // A FIFO for the request: not read (the open does not block), removed.
    await execa("mkfifo", [join(api, "request.json")]);
    await py([`u.API_UPGRADE = ${JSON.stringify(api)}`, "u.say = lambda m: None", "u.apply = lambda a: print('applied')", "u.request(None)"].join("\n"));
    expect(await readdir(api)).not.toContain("request.json");
    const named = JSON.parse(await run({ image: "../../etc/shadow.img" }));
    expect(named.refused).toMatch(/the request names no USB image of a build/);
    expect(await readdir(api)).not.toContain("request.json");
  });

  it("refuses an image that changes the bootstrap cluster's Kubernetes version or etcd's minor version, naming both", async () => {
    const verdict = async (kubernetes: string, etcd: string) => {
      const report = {
        verification: {
          registry: {
            images: [
              { ref: `registry.k8s.io/kube-apiserver:${kubernetes}`, tags: [kubernetes] },
              { ref: `registry.k8s.io/etcd:${etcd}`, tags: [etcd] },
            ],
          },
        },
      };
      return (
        await py(
          [
            "u.running_versions = lambda: ('v1.35.4', '3.6.16-0')",
            "try:",
            `    u.refuse_version_changes(json.loads(${JSON.stringify(JSON.stringify(report))}))`,
            "    print('accepted')",
            "except u.Refused as e:",
            "    print(e)",
          ].join("\n"),
        )
      ).trim();
    };
    expect(await verdict("v1.35.4", "3.6.17-0")).toBe("accepted");
    expect(await verdict("v1.35.9", "3.6.16-0")).toMatch(/the image runs Kubernetes v1\.35\.9, this appliance v1\.35\.4: .*not supported yet/);
    expect(await verdict("v1.35.4", "3.7.0-0")).toMatch(
      /the image runs etcd 3\.7\.0-0, this appliance 3\.6\.16-0: a new etcd minor version could not be rolled back/,
    );
  });

  it("writes etcd's snapshot from its gateway's stream of base64 chunks, whatever the reads' boundaries", async () => {
    const stream = ['{"result":{"blob":"aGVs"}}', '\n{"result":{"remaining_bytes":"0","blob":"bG8="}}\n'].join("");
    const target = join(work, "etcd.db");
    const result = JSON.parse(
      await py(
        [
          "import io",
          "class Ctx:",
          "    def load_cert_chain(self, *a): pass",
          "u.ssl.create_default_context = lambda **k: Ctx()",
          "class Stream(io.BytesIO):",
          "    def read(self, n=-1): return super().read(min(n, 7) if n and n > 0 else 7)",
          "    def __enter__(self): return self",
          "    def __exit__(self, *a): pass",
          `u.urllib.request.urlopen = lambda *a, **k: Stream(${JSON.stringify(stream)}.encode())`,
          `print(json.dumps(u.etcd_snapshot(${JSON.stringify(target)})))`,
        ].join("\n"),
      ),
    );
    expect(await readFile(target, "utf8")).toBe("hello");
    expect(result).toEqual([5, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"]);
  });

  it("refuses an image that is not a build's USB image, or has no report beside it, naming the fix", async () => {
    const qcow2 = join(work, "icn-bootstrap.qcow2");
    await writeFile(qcow2, "");
    const img = join(work, "icn-bootstrap.img");
    await writeFile(img, "");
    const refusal = async (image: string) =>
      (await py(`try:\n    u.locate(${JSON.stringify(image)}, None)\n    print("accepted")\nexcept u.Refused as e:\n    print(e)`)).trim();
    expect(await refusal(qcow2)).toMatch(/give the USB image \(\.img\) of a build/);
    expect(await refusal(img)).toMatch(/icn-bootstrap\.report\.json: no such file; the build report vouches for the image/);
    expect(await refusal("not-uploaded.img")).toMatch(/no appliance image of that name was uploaded .*upload it \(kind appliance-image\)/);
    await writeFile(join(work, "icn-bootstrap.report.json"), "{}");
    expect(await refusal(img)).toBe("accepted");
  });
});
