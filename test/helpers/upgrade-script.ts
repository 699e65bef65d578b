import { execa } from "execa";

/** The appliance's icn-upgrade script (Python, no .py suffix). */
export const UPGRADE_SCRIPT = new URL("../../overlays/usr/lib/icn-bootstrap/upgrade", import.meta.url).pathname;

/** The appliance's icn-backup script. */
export const BACKUP_SCRIPT = new URL("../../overlays/usr/lib/icn-bootstrap/backup", import.meta.url).pathname;

/** Runs Python with icn-upgrade loaded as module `u` (its constants may be overridden first, json and sys imported); returns stdout. */
export async function withUpgradeModule(code: string): Promise<string> {
  return withScriptModule(UPGRADE_SCRIPT, "u", code);
}

/** Runs Python with the appliance script `script` loaded as module `name` (json and sys imported); returns stdout. */
export async function withScriptModule(script: string, name: string, code: string): Promise<string> {
  const prelude = [
    "import importlib.machinery, importlib.util, json, sys",
    `loader = importlib.machinery.SourceFileLoader(${JSON.stringify(name)}, ${JSON.stringify(script)})`,
    `spec = importlib.util.spec_from_loader(${JSON.stringify(name)}, loader)`,
    `${name} = importlib.util.module_from_spec(spec)`,
    `loader.exec_module(${name})`,
  ].join("\n");
  const { stdout } = await execa("python3", ["-c", `${prelude}\n${code}`]);
  return stdout;
}
