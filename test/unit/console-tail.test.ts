import { appendFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ConsoleTail, withoutTerminalControls } from "../../builder/boot/console.js";

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

describe("the serial console as QEMU writes it to a file", () => {
  it("yields whole lines as the file grows, a character split across two writes included, and the unterminated last line on stop", async () => {
    const dir = await mkdtemp(join(tmpdir(), "icn-console-"));
    dirs.push(dir);
    const file = join(dir, "console.log");
    const lines: string[] = [];
    const tail = new ConsoleTail(file, (line) => lines.push(line));
    tail.start(10);
    await new Promise((resolve) => setTimeout(resolve, 30)); // the file does not exist yet: no error
    const ellipsis = Buffer.from("…");
    await appendFile(file, Buffer.concat([Buffer.from("[  OK  ] Started docker-registry.service - "), ellipsis.subarray(0, 1)]));
    await new Promise((resolve) => setTimeout(resolve, 50));
    await appendFile(
      file,
      Buffer.concat([ellipsis.subarray(1), Buffer.from(", ship.\r\nICN-BOOTSTRAP-READY host=icn-bootstrap-c5ef92\r\nicn-bootstrap-c5ef92 login: ")]),
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(lines).toEqual(["[  OK  ] Started docker-registry.service - …, ship.", "ICN-BOOTSTRAP-READY host=icn-bootstrap-c5ef92"]);
    await tail.stop();
    expect(lines.at(-1)).toBe("icn-bootstrap-c5ef92 login:");
  });

  it("removes colours, terminal resets and palette resets, keeping the text", () => {
    expect(withoutTerminalControls("\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mgraphical.target\x1b[0m.\r")).toBe(
      "  OK  ] Reached target graphical.target.",
    );
    expect(withoutTerminalControls("\x1b[!p\x1b]104\x07\x1b[!p\x1b]104\x07Debian GNU/Linux 13 icn-bootstrap-c5ef92 ttyS0")).toBe(
      "Debian GNU/Linux 13 icn-bootstrap-c5ef92 ttyS0",
    );
    expect(withoutTerminalControls("\x1b[?25lA start job is running\x1b[K")).toBe("A start job is running");
  });
});
