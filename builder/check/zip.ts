/**
 * Reads the files of a zip archive (a Go module zip) with Python's standard zipfile
 * module (python3 is a host tool already): nothing extracted on disk, no unzip tool.
 */
import { execa } from "execa";
import { UserError } from "../errors.js";

const READ_ENTRIES = `
import base64, json, re, sys, zipfile
pattern = re.compile(sys.argv[2])
with zipfile.ZipFile(sys.argv[1]) as archive:
    for info in archive.infolist():
        if pattern.search(info.filename):
            print(json.dumps([info.filename, base64.b64encode(archive.read(info)).decode()]))
`;

/** The entries whose names match `wanted`, by name. */
export async function readZipEntries(zipPath: string, wanted: RegExp, what: string): Promise<Map<string, Buffer>> {
  const result = await execa("python3", ["-c", READ_ENTRIES, zipPath, wanted.source], { reject: false, maxBuffer: 1024 ** 3 });
  if (result.exitCode !== 0) {
    const reason = String(result.stderr).trim().split("\n").pop() ?? `python3 exited with ${result.exitCode}`;
    throw new UserError(`${what}: not a readable zip archive (${reason})`, "remove it from the cache and fetch it again");
  }
  const files = new Map<string, Buffer>();
  for (const line of String(result.stdout).split("\n").filter(Boolean)) {
    const [name, data] = JSON.parse(line) as [string, string];
    files.set(name, Buffer.from(data, "base64"));
  }
  return files;
}
