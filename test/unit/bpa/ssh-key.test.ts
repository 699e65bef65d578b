import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import yaml from "js-yaml";
import { describe, expect, it } from "vitest";
import { cloudInitUserData, generateSshKeyPair } from "../../../bpa/jobs/ssh-key.js";

const run = promisify(execFile);

describe("SSH key pair", () => {
  it("is read by the real ssh-keygen, which derives the same public key", async () => {
    const dir = await mkdtemp(join(tmpdir(), "bpa-ssh-"));
    try {
      const pair = generateSshKeyPair("bpa@test");
      const file = join(dir, "id_ed25519");
      await writeFile(file, pair.privateKey, { mode: 0o600 });
      const { stdout } = await run("ssh-keygen", ["-y", "-f", file]);
      const [type, blob] = pair.publicKey.split(" ");
      expect(stdout.trim().split(" ").slice(0, 2)).toEqual([type, blob]);
      const fingerprint = await run("ssh-keygen", ["-l", "-f", file]);
      expect(fingerprint.stdout).toContain("(ED25519)");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("makes a new key each time", () => {
    expect(generateSshKeyPair("a").publicKey).not.toBe(generateSshKeyPair("a").publicKey);
  });

  it("writes cloud-init user-data that authorises the key", () => {
    const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB bpa@ns";
    const root = yaml.load(cloudInitUserData(key, "root")) as Record<string, unknown>;
    expect(root.ssh_authorized_keys).toEqual([key]);
    expect(cloudInitUserData(key, "root").startsWith("#cloud-config\n")).toBe(true);
    const ubuntu = yaml.load(cloudInitUserData(key, "ubuntu")) as { users: unknown[] };
    expect(ubuntu.users[1]).toMatchObject({ name: "ubuntu", ssh_authorized_keys: [key] });
  });
});
