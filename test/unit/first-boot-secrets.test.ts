/**
 * The first-boot scripts hand secrets to kubectl in files, never on its command line
 * (/proc/PID/cmdline is readable by every process on the appliance, a pod's included), and
 * the REST API's TLS Secret is made of a certificate of its own, never the registry's key.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { BUILTIN_OVERLAYS } from "../../builder/stages/overlays.js";

const SCRIPTS = join(BUILTIN_OVERLAYS, "usr/lib/icn-bootstrap");

/** Each shell command of a script with its continuation lines joined. */
async function commands(): Promise<{ script: string; command: string }[]> {
  const found: { script: string; command: string }[] = [];
  for (const name of await readdir(SCRIPTS)) {
    const text = await readFile(join(SCRIPTS, name), "utf8");
    if (!text.startsWith("#!/bin/sh")) continue;
    for (const command of text.replace(/\\\n\s*/g, " ").split("\n")) found.push({ script: name, command });
  }
  return found;
}

describe("first-boot secrets", () => {
  it("no kubectl call takes a secret value on its command line (a --from-literal made by a command substitution, or one named password/token/key)", async () => {
    const offending = (await commands())
      .filter(({ command }) => /\bkubectl\b/.test(command))
      .flatMap(({ script, command }) =>
        [...command.matchAll(/--from-literal=([\w.-]+)=(\S+)/g)]
          .filter(([, key = "", value = ""]) => value.includes("$(") || /password|token|secret|key/i.test(key))
          .map(([literal]) => `${script}: ${literal}`),
      );
    expect(offending).toEqual([]);
  });

  it("the REST API's TLS Secret is its own certificate and key (icn-registry-pki's bpa-api), not the registry's", async () => {
    // icn-kubernetes writes the Secret's YAML itself (object_head … > file), the files read by base64 from stdin.
    const script = await readFile(join(SCRIPTS, "kubernetes"), "utf8");
    const block = /object_head Secret bpa-system bpa-api-tls\n([\s\S]*?)\n\} >/.exec(script)?.[1];
    expect(block, "the bpa-api-tls Secret block in icn-kubernetes").toBeDefined();
    expect(block).toMatch(/tls\.crt: %s[^\n]*\$\(b64 \/etc\/icn-bootstrap\/pki\/bpa-api\.crt\)/);
    expect(block).toMatch(/tls\.key: %s[^\n]*\$\(b64 \/etc\/icn-bootstrap\/pki\/bpa-api\.key\)/);
    expect(block).not.toMatch(/registry/);
    expect(script).toMatch(/^b64\(\) \{ base64 -w0 < "\$1"; \}$/m); // the file on stdin, never a secret on a command line
    const pki = await readFile(join(SCRIPTS, "registry-pki"), "utf8");
    expect(pki).toMatch(/^issue bpa-api$/m);
  });
});
