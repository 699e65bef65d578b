/**
 * An Ed25519 SSH key pair in OpenSSH's own formats (the private key as
 * "openssh-key-v1", PROTOCOL.key in OpenSSH's sources; the public key as one
 * authorized_keys line), made with Node's crypto and nothing else.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

function sshString(data: Buffer | string): Buffer {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  return Buffer.concat([u32(bytes.length), bytes]);
}

export interface SshKeyPair {
  /** PEM-like "-----BEGIN OPENSSH PRIVATE KEY-----" text, unencrypted. */
  privateKey: string;
  /** "ssh-ed25519 AAAA... comment" */
  publicKey: string;
}

export function generateSshKeyPair(comment: string): SshKeyPair {
  const { privateKey } = generateKeyPairSync("ed25519");
  const jwk = privateKey.export({ format: "jwk" });
  const seed = Buffer.from(jwk.d!, "base64url");
  const pub = Buffer.from(jwk.x!, "base64url");
  const type = "ssh-ed25519";
  const publicBlob = Buffer.concat([sshString(type), sshString(pub)]);

  const check = randomBytes(4).readUInt32BE();
  let section = Buffer.concat([u32(check), u32(check), sshString(type), sshString(pub), sshString(Buffer.concat([seed, pub])), sshString(comment)]);
  const padding: number[] = [];
  for (let i = 1; (section.length + padding.length) % 8 !== 0; i++) padding.push(i);
  section = Buffer.concat([section, Buffer.from(padding)]);

  const body = Buffer.concat([
    Buffer.from("openssh-key-v1\0"),
    sshString("none"),
    sshString("none"),
    sshString(""),
    u32(1),
    sshString(publicBlob),
    sshString(section),
  ]);
  const base64 = body.toString("base64").replace(/.{1,70}/g, "$&\n");
  return {
    privateKey: `-----BEGIN OPENSSH PRIVATE KEY-----\n${base64}-----END OPENSSH PRIVATE KEY-----\n`,
    publicKey: `${type} ${publicBlob.toString("base64")} ${comment}`,
  };
}

/** cloud-init user-data that authorises the key, for BareMetalHost spec.userData. */
export function cloudInitUserData(publicKey: string, user: string): string {
  const lines = ["#cloud-config", "# Written by the BPA operator: lets the install Job log in over SSH."];
  if (user === "root") {
    lines.push("disable_root: false", "ssh_authorized_keys:", `  - ${publicKey}`);
  } else {
    lines.push(
      "users:",
      "  - default",
      `  - name: ${user}`,
      "    sudo: ALL=(ALL) NOPASSWD:ALL",
      "    shell: /bin/bash",
      "    ssh_authorized_keys:",
      `      - ${publicKey}`,
    );
  }
  return `${lines.join("\n")}\n`;
}
