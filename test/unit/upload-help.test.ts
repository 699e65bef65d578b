/**
 * `icn-bootstrap upload`'s help names every kind the REST API takes (common/uploads.ts),
 * in the command list of `icn-bootstrap --help` and in `upload --help`.
 */
import { describe, expect, it } from "vitest";
import { KINDS } from "../../common/uploads.js";
import { runCli } from "../helpers/cli.js";

const SPOKEN: Record<(typeof KINDS)[number], RegExp> = {
  file: /\bfile\b/,
  "container-image": /\bcontainer image\b/,
  "os-image": /\bOS image\b/,
  chart: /\bchart\b/,
  "appliance-image": /\bappliance image\b/,
};

describe("upload's help", () => {
  it("icn-bootstrap --help names every kind in upload's line", async () => {
    const result = await runCli(["--help"]);
    expect(result.exitCode).toBe(0);
    const line = result.stdout.split("\n").find((l) => /^\s+upload\s/.test(l));
    expect(line).toBeDefined();
    for (const kind of KINDS) expect(line, kind).toMatch(SPOKEN[kind]);
  });

  it("upload --help lists every kind for --kind", async () => {
    const result = await runCli(["upload", "--help"]);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain(`--kind ${KINDS.join("|")}`);
    const option = result.stdout.split("\n").find((l) => l.trimStart().startsWith("--kind KIND"));
    for (const kind of KINDS) expect(option, kind).toContain(kind);
  });
});
