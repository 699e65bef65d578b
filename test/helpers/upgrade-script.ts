import { execa } from "execa";

/** The appliance's icn-upgrade script (Python, no .py suffix). */
export const UPGRADE_SCRIPT = new URL("../../overlays/usr/lib/icn-bootstrap/upgrade", import.meta.url).pathname;

/** Runs Python with icn-upgrade loaded as module `u` (its constants may be overridden first, json and sys imported); returns stdout. */
export async function withUpgradeModule(code: string): Promise<string> {
  const prelude = [
    "import importlib.machinery, importlib.util, json, sys",
    `loader = importlib.machinery.SourceFileLoader("u", ${JSON.stringify(UPGRADE_SCRIPT)})`,
    "spec = importlib.util.spec_from_loader('u', loader)",
    "u = importlib.util.module_from_spec(spec)",
    "loader.exec_module(u)",
  ].join("\n");
  const { stdout } = await execa("python3", ["-c", `${prelude}\n${code}`]);
  return stdout;
}
